"""The ipybox MCP server over streamable HTTP: one kernel per client session, none left behind."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from .conftest import EVERYTHING, IPYBOX_COMMAND, requires_node, server_env, text_of

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
                if "ipybox.kernel_mgr.launch" in child.cmdline():
                    found.append(child)
            except psutil.Error:
                continue
        return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until_listening(
    process: subprocess.Popen[bytes], port: int, log_file: Path, timeout: float = 20
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"ipybox exited with {process.returncode}:\n{log_file.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"ipybox did not listen on port {port} within {timeout} s")


@pytest.fixture
def http_server(workspace: Path, state_dir: Path, tmp_path: Path) -> Iterator[HttpIpybox]:
    port = _free_port()
    log_file = tmp_path / "ipybox-http.log"
    with log_file.open("w") as log:
        process = subprocess.Popen(
            [*IPYBOX_COMMAND, "--workspace", str(workspace), "--transport", "streamable-http"]
            + ["--host", "127.0.0.1", "--port", str(port)],
            env=server_env(state_dir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = HttpIpybox(process, f"http://127.0.0.1:{port}/mcp", workspace, log_file)
    try:
        _wait_until_listening(process, port, log_file)
        yield server
        if process.poll() is None:  # the test may have stopped it itself
            descendants = psutil.Process(process.pid).children(recursive=True)
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)
            _, alive = psutil.wait_procs(descendants, timeout=5)
            assert not alive, f"left running after SIGTERM: {[' '.join(p.cmdline()) for p in alive]}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def run(session: ClientSession, code: str) -> str:
    result = await session.call_tool("execute_ipython_cell", {"code": code})
    assert isinstance(result, CallToolResult) and not result.is_error, text_of(result)  # type: ignore[union-attr]
    return text_of(result)


async def test_each_client_session_has_its_own_kernel(http_server: HttpIpybox) -> None:
    both_set = asyncio.Event()
    count = 0

    async def client(value: int) -> tuple[str, str, str]:
        nonlocal count
        async with connect(http_server.url) as session:
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
    async with connect(http_server.url) as session:
        pid = int(await run(session, "import os\nprint(os.getpid())"))
        assert psutil.pid_exists(pid)
        reset = await session.call_tool("reset", {})
        assert not reset.is_error  # type: ignore[union-attr]
        fresh_pid = int(await run(session, "import os\nprint(os.getpid())"))
        assert fresh_pid != pid
        assert http_server.kernels(), "the session's kernels are not found: the check below would be empty"

    for _ in range(50):  # up to 10 s
        if not http_server.kernels():
            break
        await asyncio.sleep(0.2)
    assert not http_server.kernels(), "the closed session's kernels are still running"

    async with connect(http_server.url) as session:  # the server keeps serving new sessions
        assert await run(session, "print('new session')") == "new session"


@requires_node
async def test_registered_api_is_shared_by_sessions(http_server: HttpIpybox) -> None:
    async with connect(http_server.url) as first:
        result = await first.call_tool(
            "register_mcp_server", {"server_name": "everything", "server_params": EVERYTHING}
        )
        assert not result.is_error, text_of(result)  # type: ignore[union-attr, arg-type]
        async with connect(http_server.url) as second:
            code = "from mcptools.everything import echo\nprint(echo.run(echo.Params(message='shared')))"
            assert await run(second, code) == "Echo: shared"
    assert (http_server.workspace / "mcptools" / "everything" / "echo.py").is_file()


async def test_sigterm_stops_the_kernels_of_open_sessions(http_server: HttpIpybox) -> None:
    kernels: list[psutil.Process] = []
    with contextlib.suppress(Exception):  # the client's own teardown fails once the server is gone
        async with connect(http_server.url) as session:
            await run(session, "x = 1")
            kernels = http_server.kernels()
            http_server.process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(http_server.process.wait, 15)
    assert kernels, "no kernel was found while the session was open"
    _, alive = await asyncio.to_thread(psutil.wait_procs, kernels, 5)
    assert not alive, "kernels outlived the server"
