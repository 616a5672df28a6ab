"""The ipybox MCP server over streamable HTTP: one kernel per client session, none left behind."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from mcp import ClientSession
from mcp.types import CallToolResult
from servers.launch import describe, eventually

from .conftest import EVERYTHING, http_session, requires_node, sigterm_survivors, start_http_ipybox, text_of

pytestmark = pytest.mark.timeout(60)


@dataclass
class HttpIpybox:
    process: subprocess.Popen[bytes]
    url: str
    workspace: Path
    log_file: Path

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
    server = HttpIpybox(process, url, workspace, log_file)
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


async def test_each_client_session_has_its_own_kernel(http_server: HttpIpybox) -> None:
    both_set = asyncio.Event()
    count = 0

    async def client(value: int) -> tuple[str, str, str]:
        nonlocal count
        async with http_session(http_server.url) as session:
            pid = await run(session, f"import os\nx = {value}\nprint(os.getpid())")
            count += 1
            if count == 2:
                both_set.set()
            await asyncio.wait_for(both_set.wait(), 30)  # both kernels hold their x now
            first = await run(session, "print(x)")
            second = await run(session, "x += 10\nprint(x)")
            return pid, first, second

    (pid1, a1, b1), (pid2, a2, b2) = await asyncio.gather(client(1), client(2))

    assert pid1 != pid2
    assert (a1, b1) == ("1", "11")
    assert (a2, b2) == ("2", "12")


async def test_kernel_stops_when_its_session_closes(http_server: HttpIpybox) -> None:
    async with http_session(http_server.url) as session:
        pid = int(await run(session, "import os\nprint(os.getpid())"))
        assert psutil.pid_exists(pid)
        reset = await session.call_tool("reset", {})
        assert not reset.is_error  # type: ignore[union-attr]
        fresh_pid = int(await run(session, "import os\nprint(os.getpid())"))
        assert fresh_pid != pid
        assert http_server.kernels(), "the session's kernels are not found: the check below would be empty"

    assert await eventually(lambda: not http_server.kernels()), "the closed session's kernels still run"

    async with http_session(http_server.url) as session:  # the server keeps serving new sessions
        assert await run(session, "print('new session')") == "new session"


@requires_node
async def test_registered_api_is_shared_by_sessions(http_server: HttpIpybox) -> None:
    async with http_session(http_server.url) as first:
        result = await first.call_tool(
            "register_mcp_server", {"server_name": "everything", "server_params": EVERYTHING}
        )
        assert not result.is_error, text_of(result)  # type: ignore[union-attr, arg-type]
        async with http_session(http_server.url) as second:
            code = "from mcptools.everything import echo\nprint(echo.run(echo.Params(message='shared')))"
            assert await run(second, code) == "Echo: shared"
    assert (http_server.workspace / "mcptools" / "everything" / "echo.py").is_file()


async def test_sigterm_stops_the_kernels_of_open_sessions(http_server: HttpIpybox) -> None:
    kernels: list[psutil.Process] = []
    with contextlib.suppress(Exception):  # the client's own teardown fails once the server is gone
        async with http_session(http_server.url) as session:
            await run(session, "x = 1")
            kernels = http_server.kernels()
            http_server.process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(http_server.process.wait, 15)
    assert kernels, "no kernel was found while the session was open"
    _, alive = await asyncio.to_thread(psutil.wait_procs, kernels, 5)
    assert not alive, "kernels outlived the server"
