"""Installs a requirement into ipybox's environment without reading anything the kernel wrote.

The install runs on the host, outside any sandbox, so everything a kernel can write is hostile
input here: the requirement string (checked with `packaging`, never handed to a shell or read
as a path), the working directory (a fresh private one, so no `uv.toml`, `pyproject.toml`,
`pip/` or `sitecustomize.py` there is ever discovered), installer configuration files
(ignored) and environment variables that could point the installer at kernel-written files.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Mapping
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement

from ipybox._programs import absolute_path, which
from ipybox.errors import IpyboxError

#: URL schemes a requirement may fetch from: remote sources only, never the file system.
_REMOTE_SCHEMES = frozenset({"https", "git+https"})
#: Names that installers read as a file in the working directory rather than a project name.
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".egg")
#: Installer settings of ipybox's own environment that are kept: how to reach an index. Every
#: other `PIP_*`/`UV_*` variable (find-links, constraints, config files, ...) is dropped.
_NETWORK_SETTINGS = frozenset(
    {
        "UV_INDEX",
        "UV_INDEX_URL",
        "UV_DEFAULT_INDEX",
        "UV_EXTRA_INDEX_URL",
        "UV_NATIVE_TLS",
        "UV_HTTP_TIMEOUT",
        "UV_CACHE_DIR",
        "UV_OFFLINE",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_CERT",
        "PIP_DEFAULT_TIMEOUT",
        "PIP_TRUSTED_HOST",
        "PIP_NO_INDEX",
    }
)
TIMEOUT = 600.0


class RequirementError(IpyboxError, ValueError):
    """A package requirement that `install` refuses; the message says why and what to give instead."""


def check_requirement(text: str) -> str:
    """The requirement `text` in normal form, or `RequirementError` if it is not one ipybox installs.

    Accepted: a project name with optional extras, version specifiers and markers
    (`"numpy[extra]>=1.26; python_version>='3.11'"`), `NAME @ https://…` or `NAME @ git+https://…`,
    and a bare `git+https://…` URL. Refused: local paths, archives, `file:` and other schemes,
    options and anything that is not one requirement.
    """
    spec = text.strip()
    if not spec:
        raise _refused(text, "it is empty")
    if any(not c.isprintable() for c in spec):
        raise _refused(text, "it contains a line break or control character")
    if spec.startswith("-"):
        raise _refused(text, "it is an installer option; options are not accepted")
    if spec.lower().startswith("git+"):
        if any(c.isspace() for c in spec):
            raise _refused(text, "its URL contains whitespace")
        _check_url(spec, text)
        return spec
    try:
        requirement = Requirement(spec)
    except InvalidRequirement as e:
        raise _refused(text, str(e).splitlines()[0]) from None
    if requirement.name.lower().endswith(_ARCHIVE_SUFFIXES):
        raise _refused(text, "it names an archive file, and local files are never installed")
    if requirement.url is not None:
        _check_url(requirement.url, text)
    return str(requirement)


def _check_url(url: str, text: str) -> None:
    parts = urlsplit(url)
    if parts.scheme.lower() not in _REMOTE_SCHEMES or not parts.hostname:
        raise _refused(
            text, f"it points at {url!r}; only https:// and git+https:// URLs with a host are installed"
        )


def _refused(text: str, reason: str) -> RequirementError:
    return RequirementError(
        f"Not a package requirement: {text!r} ({reason}). Give one requirement: a name with optional "
        "extras and version (e.g. 'numpy>=1.26'), 'NAME @ https://…' or a git+https:// URL. Local "
        "paths, file: URLs and installer options are refused: code in the workspace could have written them."
    )


def installer_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment an installer runs with: ipybox's, minus anything that steers Python or
    the installer to files, plus the switches that make it ignore configuration files."""
    environ = os.environ if environ is None else environ
    env = {
        key: value
        for key, value in environ.items()
        if not key.startswith(("PYTHON", "PIP_", "UV_", "VIRTUAL_ENV", "CONDA")) or key in _NETWORK_SETTINGS
    }
    env |= {
        "UV_NO_CONFIG": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONNOUSERSITE": "1",
        "PATH": absolute_path(env.get("PATH", os.defpath)),
    }
    return env


def _installer_argv(requirement: str, python: str, env: Mapping[str, str]) -> list[str]:
    """uv if present (environments made by uvx have no pip), else the interpreter's pip in isolated mode."""
    uv = which("uv", env.get("PATH"))
    if uv:
        return [uv, "pip", "install", "--no-config", "--python", python, requirement]
    return [python, "-I", "-m", "pip", "install", "--no-input", requirement]


async def install(
    text: str,
    *,
    python: str = sys.executable,
    environ: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> str:
    """Install the requirement `text` into `python`'s environment; the installer's report.

    `environ` (default: ipybox's environment) is filtered by `installer_env`. Raises
    `RequirementError` for what is not a requirement ipybox installs, `RuntimeError` (with the
    installer's output) if the install fails, and `TimeoutError` after `timeout` seconds.
    """
    requirement = check_requirement(text)
    env = installer_env(environ)
    with tempfile.TemporaryDirectory(prefix="ipybox-install-") as private:
        env |= {"TMPDIR": private, "GIT_CEILING_DIRECTORIES": os.path.dirname(private)}
        process = await asyncio.create_subprocess_exec(
            *_installer_argv(requirement, python, env),
            cwd=private,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(), timeout)
        except BaseException:
            process.kill()
            await process.wait()
            raise
    text_out = out.decode(errors="replace").strip()
    if process.returncode != 0:
        raise RuntimeError(f"Installing {requirement!r} failed:\n{text_out[-3000:]}")
    return f"Installed {requirement!r}.\n{text_out[-1000:]}"
