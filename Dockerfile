# ipybox MCP server in a container: the container is the sandbox. Build with ./docker-build.sh so
# files ipybox writes to the mounted workspace belong to you on the host.
FROM python:3.11-slim-bookworm

ARG UID=1000
ARG GID=1000

# Node.js lets registered stdio MCP servers run with npx; git lets install_package take git+ URLs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs=18.* npm=9.* git=1:2.39.* \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --gid "${GID}" ipybox \
    && useradd --uid "${UID}" --gid "${GID}" --create-home --shell /bin/bash ipybox

WORKDIR /app
COPY --chown=ipybox:ipybox pyproject.toml README.md ./
COPY --chown=ipybox:ipybox ipybox ./ipybox
COPY --chown=ipybox:ipybox gentools_template ./gentools_template

# A venv owned by the container user, so install_package works at run time.
ENV VIRTUAL_ENV=/app/venv PATH=/app/venv/bin:$PATH
RUN python -m venv /app/venv \
    && pip install --no-cache-dir /app \
    && chown -R ipybox:ipybox /app/venv \
    && mkdir -p /app/workspace \
    && chown ipybox:ipybox /app/workspace

USER ${UID}:${GID}
WORKDIR /app/workspace
ENTRYPOINT ["ipybox", "--workspace", "/app/workspace"]
