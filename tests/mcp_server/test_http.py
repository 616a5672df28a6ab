"""The ipybox MCP server over streamable HTTP: only clients with its token get in (another local
user gets 401), kernels per name shared by the sessions of the one user, a bounded pool of warm
spares, none left behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import psutil
import pytest
from mcp import ClientSession
from mcp.types import CallToolResult
from plugins.conftest import claude
from servers.launch import NODE_BIN, REPO, describe, eventually

from .conftest import (
    EVERYTHING,
    http_session,
    http_token,
    requires_node,
    sigterm_survivors,
    start_http_ipybox,
    text_of,
)
from .test_clients import MODES, connect, output

pytestmark = pytest.mark.timeout(60)


@dataclass
class HttpIpybox:
    process: subprocess.Popen[bytes]
    url: str
    workspace: Path
    log_file: Path
    token: str  # what ipybox made and printed

    def kernels(self) -> list[psutil.Process]:
        """The kernel processes the server currently runs."""
        found = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                if "ipybox.kernel_mgr.launch" in " ".join(child.cmdline()):
                    found.append(child)
            except psutil.Error:
                continue
        return found


@pytest.fixture
def http_server(workspace: Path, state_dir: Path, tmp_path: Path) -> Iterator[HttpIpybox]:
    log_file = tmp_path / "ipybox-http.log"
    process, url = start_http_ipybox(workspace, state_dir, log_file)
    server = HttpIpybox(process, url, workspace, log_file, http_token(state_dir))
    try:
        yield server
        if process.poll() is None:  # the test may have stopped it itself
            left = sigterm_survivors(process)
            assert not left, f"left running after SIGTERM: {[describe(p) for p in left]}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def run(session: ClientSession, code: str) -> str:
    result = await session.call_tool("execute_ipython_cell", {"code": code})
    assert isinstance(result, CallToolResult) and not result.is_error, text_of(result)  # type: ignore[union-attr]
    return text_of(result)


async def test_sessions_of_one_user_share_kernels_by_name(http_server: HttpIpybox) -> None:
    """Without authentication there is one principal: its sessions reach the same named kernels."""
    async with http_session(http_server.url, http_server.token) as first:
        await run(first, "x = 1")
        await first.call_tool("execute_ipython_cell", {"code": "x = 2", "kernel": "second"})
    async with http_session(http_server.url, http_server.token) as again:
        assert await run(again, "print(x)") == "1"
        result = await again.call_tool("execute_ipython_cell", {"code": "print(x)", "kernel": "second"})
        assert text_of(result) == "2"  # type: ignore[arg-type]


async def test_idle_kernels_stop_and_the_next_call_says_so(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> None:
    process, url = start_http_ipybox(
        workspace, state_dir, tmp_path / "log", args=["--kernel-idle-timeout", "1"]
    )
    server = HttpIpybox(process, url, workspace, tmp_path / "log", http_token(state_dir))
    try:
        async with http_session(url, server.token) as session:
            pid = int(await run(session, "import os\nx = 1\nprint(os.getpid())"))
            assert server.kernels()
            assert await eventually(lambda: not psutil.pid_exists(pid), timeout=30), (
                "the idle kernel still runs"
            )
            result = await session.call_tool("execute_ipython_cell", {"code": "print('fresh')"})
            text = text_of(result)  # type: ignore[arg-type]
            assert "was stopped (unused for 1 s)" in text and text.endswith("fresh")
            again = await session.call_tool("execute_ipython_cell", {"code": "print('quiet')"})
            assert text_of(again) == "quiet"  # type: ignore[arg-type]  # said once
    finally:
        left = sigterm_survivors(process)
        assert not left, f"left running after SIGTERM: {[describe(p) for p in left]}"


@requires_node
async def test_registered_api_is_shared_by_sessions(http_server: HttpIpybox) -> None:
    async with http_session(http_server.url, http_server.token) as first:
        result = await first.call_tool(
            "register_mcp_server", {"server_name": "everything", "server_params": EVERYTHING}
        )
        assert not result.is_error, text_of(result)  # type: ignore[union-attr, arg-type]
        async with http_session(http_server.url, http_server.token) as second:
            code = "from mcptools.everything import echo\nprint(echo.run(echo.Params(message='shared')))"
            assert await run(second, code) == "Echo: shared"
    assert (http_server.workspace / "mcptools" / "everything" / "echo.py").is_file()


async def test_sigterm_stops_the_kernels_of_open_sessions(http_server: HttpIpybox) -> None:
    kernels: list[psutil.Process] = []
    with contextlib.suppress(Exception):  # the client's own teardown fails once the server is gone
        async with http_session(http_server.url, http_server.token) as session:
            await run(session, "x = 1")
            kernels = http_server.kernels()
            http_server.process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(http_server.process.wait, 15)
    assert kernels, "no kernel was found while the session was open"
    _, alive = await asyncio.to_thread(psutil.wait_procs, kernels, 5)
    assert not alive, "kernels outlived the server"


# --- the server's own token ------------------------------------------------------------------------


async def _post(url: str, headers: dict[str, str]) -> httpx.Response:
    """A tools/list request with `headers`, as any HTTP client sends it."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient() as http:
        accept = {"Accept": "application/json, text/event-stream"}
        return await http.post(url, json=body, headers=accept | headers)


async def test_requests_without_the_token_get_401_with_a_challenge(http_server: HttpIpybox) -> None:
    token = http_server.token
    refused = {
        "none": ({}, http_server.url),
        "wrong": ({"Authorization": "Bearer " + "x" * len(token)}, http_server.url),
        "truncated": ({"Authorization": f"Bearer {token[:-1]}"}, http_server.url),
        "basic scheme": ({"Authorization": f"Basic {token}"}, http_server.url),
        "in the query": ({}, f"{http_server.url}?token={token}"),
        "as a cookie": ({"Cookie": f"token={token}"}, http_server.url),
    }
    for variant, (headers, url) in refused.items():
        response = await _post(url, headers)
        assert response.status_code == 401, variant
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer") and "resource_metadata=" in challenge, variant


def test_token_is_printed_and_kept_where_only_this_user_reads_it(
    http_server: HttpIpybox, state_dir: Path
) -> None:
    path = state_dir / "http-token"
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    assert not path.resolve().is_relative_to(http_server.workspace.resolve())
    log = http_server.log_file.read_text()
    url, header = http_server.url, f"Authorization: Bearer {http_server.token}"
    assert f'claude mcp add --transport http ipybox {url} --header "{header}"' in log, log
    assert str(path) in log
    files = [p for p in http_server.workspace.rglob("*") if p.is_file()]
    assert not [p for p in files if http_server.token in p.read_text("latin-1")]
    # nor in a command line or environment that `ps` or /proc shows: the server's, or its kernel's
    for process in [psutil.Process(http_server.process.pid), *http_server.kernels()]:
        assert http_server.token not in " ".join(process.cmdline()), process
        assert http_server.token not in str(process.environ()), process


async def test_printed_token_lets_both_protocol_eras_in(http_server: HttpIpybox) -> None:
    """The user path: the `claude mcp add ... --header` line ipybox printed, with the real `Client`."""
    printed = re.search(r'--header "Authorization: Bearer (\S+)"', http_server.log_file.read_text())
    assert printed is not None
    for mode in MODES:
        async with connect(http_server.url, printed[1], mode) as client:
            assert await output(client, f"x = {mode!r}\nprint(x)") == mode
            # the token's holder is the local user: its kernel works in the workspace itself,
            # not in a home of a user named like the local principal
            assert await output(client, "import os\nprint(os.getcwd())") == str(http_server.workspace)
    users = http_server.workspace / "users"
    assert not users.exists() or not list(users.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="running a client as another user (uid 65534) needs root")
def test_another_local_user_gets_401_and_cannot_read_the_token(workspace: Path, tmp_path: Path) -> None:
    """uid 65534 on the same machine reaches the port and sees the token file, but gets neither in."""
    state = Path(tempfile.mkdtemp(dir="/tmp"))  # a place other users can walk to: the file's mode protects it
    try:
        state.chmod(0o755)
        process, url = start_http_ipybox(workspace, state, tmp_path / "log")
        try:
            probe = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c"]
                + [_OTHER_USER, url, str(state / "http-token"), str(state)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                cwd="/",
            )
            assert probe.stdout.splitlines() == [
                "token file exists: True",
                "read: PermissionError",
                "no token: 401",
                "guessed token: 401",
            ], probe.stdout + probe.stderr
        finally:
            left = sigterm_survivors(process)
            assert not left, [describe(p) for p in left]
    finally:
        shutil.rmtree(state, ignore_errors=True)


#: What another local user tries: read the token, then POST without it and with a guess.
_OTHER_USER = """
import json, os, sys, urllib.error, urllib.request
url, path, state = sys.argv[1:4]
print("token file exists:", os.path.exists(path))
try:
    open(path).read()
    print("read: ok")
except OSError as e:
    print("read:", type(e).__name__)
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
for label, headers in [("no token", {}), ("guessed token", {"Authorization": "Bearer local"})]:
    headers |= {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    try:
        urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"), timeout=20)
        print(label + ": 200")
    except urllib.error.HTTPError as e:
        print(f"{label}: {e.code}")
"""


# --- warm spares: one bounded pool -------------------------------------------------------------------


async def test_spare_kernels_are_one_bounded_pool_across_named_kernels(http_server: HttpIpybox) -> None:
    """Three named kernels keep one warm spare between them (--spare-kernels 1, the default), across
    resets of the kernel that holds it and of one that does not."""

    def four() -> bool:  # three kernels and the spare
        return len(http_server.kernels()) == 4

    async with http_session(http_server.url, http_server.token) as session:
        for name in ("default", "a", "b"):
            result = await session.call_tool("execute_ipython_cell", {"code": "x = 1", "kernel": name})
            assert not result.is_error, text_of(result)  # type: ignore[arg-type]
        assert await eventually(four, timeout=60), http_server.kernels()
        for name in ("default", "b", "default"):
            reset = await session.call_tool("reset", {"kernel": name})
            assert not reset.is_error, text_of(reset)  # type: ignore[arg-type]
            missing = await session.call_tool("execute_ipython_cell", {"code": "x", "kernel": name})
            assert missing.is_error and "NameError" in text_of(missing)  # type: ignore[arg-type]
            assert await eventually(four, timeout=60), http_server.kernels()


def _documented_claude_command() -> str:
    """The `claude mcp add` block of docs/mcp-server.md, as a user copies it."""
    doc = (REPO / "docs" / "mcp-server.md").read_text()
    found = re.search(
        r"test_claude_code_connects_with_the_documented_command -->\n```bash\n(.*?)```", doc, re.S
    )
    assert found is not None
    return found[1]


@requires_node
def test_claude_code_connects_with_the_documented_command(tmp_path: Path) -> None:
    """Claude Code's own health check (`claude mcp list`) connects with the header the docs give,
    reading the token from the default state dir under HOME; without the header it does not."""
    home = tmp_path / "home"
    (tmp_path / "ws").mkdir()
    home.mkdir()
    process, url = start_http_ipybox(tmp_path / "ws", home / ".local" / "state" / "ipybox", tmp_path / "log")
    try:
        command = _documented_claude_command().replace("http://127.0.0.1:8000/mcp", url)
        env = {"HOME": str(home), "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}"}
        env |= {
            "XDG_CONFIG_HOME": str(home / ".config"),
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        added = subprocess.run(
            ["bash", "-e", "-c", command], env=env, cwd=home, capture_output=True, text=True, timeout=120
        )
        assert added.returncode == 0, added.stdout + added.stderr
        listed = claude(home, "mcp", "list")
        assert f"ipybox: {url} (HTTP) - ✔ Connected" in listed.stdout, listed.stdout + listed.stderr
        claude(home, "mcp", "remove", "ipybox")
        bare = claude(home, "mcp", "add", "--transport", "http", "ipybox", url)
        assert bare.returncode == 0, bare.stderr
        listed = claude(home, "mcp", "list")
        assert f"ipybox: {url} (HTTP)" in listed.stdout and "✔ Connected" not in listed.stdout, listed.stdout
    finally:
        left = sigterm_survivors(process)
        assert not left, [describe(p) for p in left]
