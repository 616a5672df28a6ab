# ipybox MCP server in a container: the container is the sandbox. Build with ./docker-build.sh so
# files ipybox writes to the mounted workspace belong to you on the host.
# BASE_IMAGE: any Debian bookworm image with python3 (>= 3.11) and python3-venv.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG UID=1000
ARG GID=1000

# Node.js lets registered stdio MCP servers run with npx; git lets install_package take git+ URLs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs=18.* npm=9.* git=1:2.39.* \
    && rm -rf /var/lib/apt/lists/*

# The container user has the builder's IDs, which may already exist in the image (0 for root,
# 20 for macOS's staff group): reuse them instead of failing.
RUN (getent group "${GID}" >/dev/null || groupadd --gid "${GID}" ipybox) \
    && (getent passwd "${UID}" >/dev/null \
        || useradd --uid "${UID}" --gid "${GID}" --create-home --shell /bin/bash ipybox)

WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
COPY ipybox ./ipybox
COPY gentools_template ./gentools_template

# The locked dependencies, in a venv owned by the container user so install_package works at
# run time. uv installs them and is then removed; pip stays for install_package.
ENV VIRTUAL_ENV=/app/venv PATH=/app/venv/bin:$PATH
RUN python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --no-cache-dir --quiet uv==0.13.9 \
    && python3 -m venv /app/venv \
    && UV_PROJECT_ENVIRONMENT=/app/venv /opt/uv/bin/uv sync --frozen --no-dev --no-editable --inexact \
        --no-cache --quiet \
    && rm -rf /opt/uv \
    && chown -R "${UID}:${GID}" /app/venv \
    && mkdir -p /app/workspace \
    && chown "${UID}:${GID}" /app/workspace

USER ${UID}:${GID}
WORKDIR /app/workspace
ENTRYPOINT ["ipybox", "--workspace", "/app/workspace"]
