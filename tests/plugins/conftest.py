"""Helpers for the plugin tests: the Claude Code CLI in a throwaway HOME, our wheel, MCP clients."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, TextContent
from servers.launch import build_wheel

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / "node_modules" / ".bin"
CLAUDE = NODE_BIN / "claude"
EVERYTHING = NODE_BIN / "mcp-server-everything"
SKILL = REPO / "skills" / "codeact"
PLUGINS = ("codeact-default", "codeact-sandbox", "codeact-docker")
UV_PLUGINS = ("codeact-default", "codeact-sandbox")  # plugins that run ipybox with uv (not docker)
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


def claude(
    home: Path,
    *args: str,
    timeout: float = 120,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the Claude Code CLI with `home` as HOME, so nothing touches the real ~/.claude.

    `cwd` is the project Claude Code runs in (default: `home`); `env` adds to its environment
    (and so to that of the MCP servers it starts).
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE_", "ANTHROPIC_"))}
    base |= {
        "HOME": str(home),
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return subprocess.run(
        [str(CLAUDE), *args],
        env=base | (env or {}),
        cwd=cwd or home,
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


def tracked_files(*paths: str) -> list[str]:
    """Files of the checkout that git tracks or would track (not ignored), below `paths`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", *paths],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name]


def snapshot_repository(root: Path) -> Path:
    """A bare git repository holding the checkout's working tree as one commit.

    It is what a user's `git clone` of this repository gets (tracked files, symlinks kept as
    symlinks), uncommitted edits included, so the tests see the code under test.
    """
    tree_dir = root / "tree"
    for name in tracked_files():
        source = REPO / name
        if not os.path.lexists(source):  # deleted but not yet committed
            continue
        target = tree_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    git = ["git", "-c", "user.name=ipybox tests", "-c", "user.email=tests@ipybox.invalid"]
    for step in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run([*git, *step], cwd=tree_dir, check=True, capture_output=True, timeout=60)
    bare = root / "ipybox.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(tree_dir), str(bare)], check=True, timeout=60)
    return bare


#: The URL the tests give Claude Code for this repository; the fresh HOME's git config sends it
#: to the local snapshot, so `claude plugin marketplace add` runs a real `git clone`.
GIT_URL = "https://git.ipybox.invalid/ipybox.git"


def route_git_url(home: Path, bare: Path) -> None:
    (home / ".gitconfig").write_text(f'[url "{bare}"]\n\tinsteadOf = {GIT_URL}\n')


@dataclass
class InstalledPlugin:
    """A plugin as Claude Code installed it, and how Claude Code starts its MCP server."""

    name: str
    root: Path  # what ${CLAUDE_PLUGIN_ROOT} expands to
    data: Path  # ${CLAUDE_PLUGIN_DATA}: the plugin's Python environment lives here

    @property
    def entry(self) -> dict[str, Any]:
        servers = json.loads((self.root / ".mcp.json").read_text())["mcpServers"]
        entry: dict[str, Any] = servers["ipybox"]
        return entry

    @property
    def command(self) -> str:
        return str(self.entry["command"]).replace("${CLAUDE_PLUGIN_ROOT}", str(self.root))

    @property
    def args(self) -> list[str]:
        return list(self.entry["args"])

    def env(self, project: Path, **extra: str) -> dict[str, str]:
        """The environment Claude Code gives a plugin's MCP server (less its session ids)."""
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env |= {
            "PATH": os.pathsep.join([str(NODE_BIN), env.get("PATH", "")]),
            "CLAUDE_PLUGIN_ROOT": str(self.root),
            "CLAUDE_PLUGIN_DATA": str(self.data),
            "CLAUDE_PROJECT_DIR": str(project),
            "PWD": str(project),
        }
        return env | extra


def run_launcher(
    plugin: InstalledPlugin, project: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Start a plugin's server command that is expected to fail at once, and return how it ended."""
    started = time.monotonic()
    done = subprocess.run(
        [plugin.command, *plugin.args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert time.monotonic() - started < 10, "a missing tool must be reported at once"
    return done


@dataclass
class Marketplace:
    """A fresh HOME in which Claude Code added this repository (by git URL) and installed plugins."""

    home: Path
    plugins: dict[str, InstalledPlugin]


def install_plugins(home: Path, source: str, plugins: tuple[str, ...]) -> dict[str, InstalledPlugin]:
    added = claude(home, "plugin", "marketplace", "add", source)
    assert added.returncode == 0, added.stdout + added.stderr
    installed = {}
    for plugin in plugins:
        done = claude(home, "plugin", "install", f"{plugin}@ipybox")
        assert done.returncode == 0, done.stdout + done.stderr
        listed = json.loads(claude(home, "plugin", "list", "--json").stdout)
        (entry,) = [p for p in listed if p["id"] == f"{plugin}@ipybox"]
        installed[plugin] = InstalledPlugin(
            plugin, Path(entry["installPath"]), home / ".claude" / "plugins" / "data" / f"{plugin}-ipybox"
        )
    return installed


@pytest.fixture(scope="session")
def git_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return snapshot_repository(tmp_path_factory.mktemp("snapshot"))


@pytest.fixture(scope="session")
def marketplace(git_snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Marketplace:
    """This repository added by git URL in a fresh HOME, with every plugin installed (once per run)."""
    if not CLAUDE.exists():
        pytest.skip("Claude Code CLI not installed (npm ci)")
    home = tmp_path_factory.mktemp("claude-home")
    route_git_url(home, git_snapshot)
    return Marketplace(home, install_plugins(home, GIT_URL, PLUGINS))


@asynccontextmanager
async def mcp_session(
    command: str, args: list[str], cwd: Path, env: dict[str, str], log: Path, asked: list[str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with a server started over stdio; its stderr goes to `log`.

    Like Claude Code, the client supports elicitation: the plugins run ipybox with `--approval
    ask`, and this user approves every tool call put to them (each question is added to `asked`).
    """

    async def approve(context: Any, request: ElicitRequestParams) -> ElicitResult:
        if asked is not None:
            asked.append(request.message)
        return ElicitResult(action="accept", content={})

    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, elicitation_callback=approve) as session:
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
