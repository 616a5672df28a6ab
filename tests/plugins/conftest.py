"""Helpers for the plugin tests: the Claude Code CLI in a throwaway HOME, our wheel, MCP clients."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent
from servers.launch import build_wheel

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / "node_modules" / ".bin"
CLAUDE = NODE_BIN / "claude"
EVERYTHING = NODE_BIN / "mcp-server-everything"
SKILL = REPO / "skills" / "codeact"
PLUGINS = ("codeact-default", "codeact-sandbox", "codeact-docker")
UVX_PLUGINS = ("codeact-default", "codeact-sandbox")  # plugins whose MCP server is `uvx ipybox ...`
IPYBOX_TOOLS = {"register_mcp_server", "execute_ipython_cell", "install_package", "reset"}

requires_claude = pytest.mark.skipif(not CLAUDE.exists(), reason="Claude Code CLI not installed (npm ci)")
requires_everything = pytest.mark.skipif(not EVERYTHING.exists(), reason="server-everything not installed")


def project_version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError("no version in pyproject.toml")


def mcp_config(plugin: str) -> dict[str, Any]:
    """The `ipybox` entry of a plugin's `.mcp.json`."""
    config = json.loads((REPO / "plugins" / plugin / ".mcp.json").read_text())
    servers: dict[str, Any] = config["mcpServers"]
    assert set(servers) == {"ipybox"}, servers
    entry: dict[str, Any] = servers["ipybox"]
    return entry


def tree(root: Path) -> dict[str, bytes]:
    """Every file below `root` (following symlinks) by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def claude(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the Claude Code CLI with `home` as HOME, so nothing touches the real ~/.claude."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE_", "ANTHROPIC_"))}
    env |= {
        "HOME": str(home),
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return subprocess.run(
        [str(CLAUDE), *args],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def claude_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture(scope="session")
def ipybox_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our wheel, built once per session (also used by tests/gentools)."""
    # one directory for the session: the fixture may be imported by several test modules
    wheel = build_wheel(REPO, tmp_path_factory.getbasetemp() / "ipybox-wheel")
    assert wheel.name.startswith(f"ipybox-{project_version()}-"), wheel
    return wheel


@dataclass
class UvxEnv:
    """An environment in which `uvx ipybox` runs our wheel, in a cache of its own."""

    env: dict[str, str]
    cache: Path
    wheel: Path


@pytest.fixture(scope="session")
def uvx_env(ipybox_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> UvxEnv:
    """Env for the plugins' `uvx ipybox ...` commands; resolves (and caches) the tool env once.

    Our version is higher than any ipybox on PyPI, so with the wheel's folder in UV_FIND_LINKS
    uvx picks it; the session's own cache means no stale ipybox of the same version is used.
    Dependencies come from PyPI.
    """
    if shutil.which("uvx") is None:
        pytest.skip("uvx is not installed")
    root = tmp_path_factory.mktemp("uvx")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {
        "UV_FIND_LINKS": str(ipybox_wheel.parent),
        "UV_CACHE_DIR": str(root / "cache"),
        "UV_TOOL_DIR": str(root / "tools"),  # no installed `ipybox` tool takes precedence
        "UV_TOOL_BIN_DIR": str(root / "bin"),
        "PATH": os.pathsep.join([str(NODE_BIN), str(Path.home() / ".local" / "bin"), env.get("PATH", "")]),
    }
    warm = subprocess.run(
        ["uvx", "ipybox", "--help"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert warm.returncode == 0, warm.stderr
    assert "--workspace" in warm.stdout
    return UvxEnv(env=env, cache=root / "cache", wheel=ipybox_wheel)


@asynccontextmanager
async def mcp_session(
    command: str, args: list[str], cwd: Path, env: dict[str, str], log: Path
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with a server started over stdio; its stderr goes to `log`."""
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def text_of(result: Any) -> str:
    assert isinstance(result, CallToolResult), result
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call an ipybox tool and return its text; fails the test on a tool error."""
    result = await session.call_tool(tool, arguments, read_timeout_seconds=120)
    text = text_of(result)
    assert not result.is_error, f"{tool} failed: {text}"
    return text


async def cell(session: ClientSession, code: str) -> str:
    return await call(session, "execute_ipython_cell", code=code)


def wheel_file(wheel: Path, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(name)
