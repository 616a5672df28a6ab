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


async def test_sessions_of_one_user_share_kernels_by_name(http_server: HttpIpybox) -> None:
    """Without authentication there is one principal: its sessions reach the same named kernels."""
    async with http_session(http_server.url) as first:
        await run(first, "x = 1")
        await first.call_tool("execute_ipython_cell", {"code": "x = 2", "kernel": "second"})
    async with http_session(http_server.url) as again:
        assert await run(again, "print(x)") == "1"
        result = await again.call_tool("execute_ipython_cell", {"code": "print(x)", "kernel": "second"})
        assert text_of(result) == "2"  # type: ignore[arg-type]


async def test_idle_kernels_stop_and_the_next_call_says_so(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> None:
    process, url = start_http_ipybox(
        workspace, state_dir, tmp_path / "log", args=["--kernel-idle-timeout", "1"]
    )
    server = HttpIpybox(process, url, workspace, tmp_path / "log")
    try:
        async with http_session(url) as session:
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
