"""Start the real `ipybox` command as an MCP server and talk to it with the real MCP client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.session import LoggingFnT
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, ImageContent, TextContent
from servers.launch import NASTY_SERVER, NODE_BIN, free_port, wait_for_port

#: The console script of the project's environment; `python -m ipybox.mcp_server` is the same.
IPYBOX = Path(sys.executable).parent / "ipybox"
IPYBOX_COMMAND = [str(IPYBOX)] if IPYBOX.exists() else [sys.executable, "-m", "ipybox.mcp_server"]

#: server_params of server-everything, found on the PATH ipybox is started with.
EVERYTHING = {"command": "mcp-server-everything", "args": ["stdio"]}
NASTY = {"command": sys.executable, "args": [str(NASTY_SERVER)]}

requires_node = pytest.mark.skipif(
    not (NODE_BIN / "mcp-server-everything").exists(), reason="node MCP test servers not installed"
)

TRUNCATION_MARKER = re.compile(
    r"\[\.\.\. (\d+) of (\d+) characters cut; (?:full output|the output as kept \(past the output limit\)) "
    r"saved to (\S+) \.\.\.\]"
)


#: The stdio servers of these tests keep no warm spare kernel (one kernel start less each, as the
#: suite's time is mostly kernel starts); the HTTP ones keep the default, and tests/mcp_server
#: test_http.py and test_clients.py check the spares. A test's own `--spare-kernels` wins.
NO_SPARE = ("--spare-kernels", "0")


def server_env(state_dir: Path, **extra: str) -> dict[str, str]:
    """The environment ipybox runs with: node servers on PATH, registry state outside the workspace."""
    env = {
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": os.environ["HOME"],
        "IPYBOX_STATE_DIR": str(state_dir),
    }
    return env | extra


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """ipybox's registry of trusted servers, outside the workspace (as in real use)."""
    return tmp_path / "state"


@dataclass
class Ipybox:
    """A client session with an `ipybox` process, plus where that process writes its stderr."""

    session: ClientSession
    workspace: Path
    log_file: Path

    async def call(self, tool: str, arguments: dict[str, Any], **kwargs: Any) -> CallToolResult:
        result = await self.session.call_tool(tool, arguments, **kwargs)
        assert isinstance(result, CallToolResult), result
        return result

    async def run(
        self, code: str, progress_callback: ProgressFnT | None = None, **kwargs: Any
    ) -> CallToolResult:
        """Call execute_ipython_cell; `kwargs` are its other arguments (timeout, max_output_chars)."""
        arguments = {"code": code, **kwargs}
        return await self.call("execute_ipython_cell", arguments, progress_callback=progress_callback)

    async def output(self, code: str, **kwargs: Any) -> str:
        """The text of a cell that must succeed."""
        result = await self.run(code, **kwargs)
        assert not result.is_error, f"{text_of(result)}\n--- ipybox stderr ---\n{self.stderr()}"
        return text_of(result)

    async def register(self, name: str, params: dict[str, Any]) -> str:
        result = await self.call("register_mcp_server", {"server_name": name, "server_params": params})
        assert not result.is_error, f"{text_of(result)}\n--- ipybox stderr ---\n{self.stderr()}"
        return text_of(result)

    def stderr(self) -> str:
        return self.log_file.read_text(errors="replace")[-5000:]


async def accept_all(context: Any, params: ElicitRequestParams) -> ElicitResult:
    """A user who approves every tool call the server asks about."""
    return ElicitResult(action="accept", content={})


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def images_of(result: CallToolResult) -> list[ImageContent]:
    return [c for c in result.content if isinstance(c, ImageContent)]


@contextlib.asynccontextmanager
async def open_ipybox(
    workspace: Path,
    state_dir: Path,
    *,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    command: Sequence[str] = IPYBOX_COMMAND,
    logging_callback: LoggingFnT | None = None,
) -> AsyncIterator[Ipybox]:
    """Start `ipybox --workspace WORKSPACE ARGS` over stdio and yield an initialized session."""
    log_file = state_dir.parent / f"ipybox-stderr-{os.urandom(4).hex()}.log"
    params = StdioServerParameters(
        command=command[0],
        args=[*command[1:], "--workspace", str(workspace), *NO_SPARE, *args],
        env=server_env(state_dir) | (env or {}),
    )
    with log_file.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(
                read, write, logging_callback=logging_callback, elicitation_callback=accept_all
            ) as session,
        ):
            await session.initialize()
            yield Ipybox(session, workspace, log_file)


def start_http_ipybox(
    workspace: Path,
    state_dir: Path,
    log_file: Path,
    timeout: float = 30,
    args: Sequence[str] = (),
    *,
    command: Sequence[str] = IPYBOX_COMMAND,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start `ipybox --transport streamable-http` on a free port (output to `log_file`) and wait
    until it listens; the process and its MCP URL. The caller stops the process."""
    port = free_port()
    with log_file.open("w") as log:
        process = subprocess.Popen(
            [*command, "--workspace", str(workspace), "--transport", "streamable-http"]
            + ["--host", "127.0.0.1", "--port", str(port), *args],
            env=server_env(state_dir) | (env or {}),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if (problem := wait_for_port(process, port, timeout)) is not None:
        process.kill()
        process.wait()
        pytest.fail(f"ipybox {problem}:\n{log_file.read_text()[-3000:]}")
    return process, f"http://127.0.0.1:{port}/mcp"


def http_token(state_dir: Path) -> str:
    """The token an HTTP ipybox without `--auth-tokens` made, from the file it keeps it in."""
    return (state_dir / "http-token").read_text().strip()


@contextlib.contextmanager
def running_http_ipybox(
    workspace: Path,
    state_dir: Path,
    log_file: Path,
    args: Sequence[str] = (),
    *,
    command: Sequence[str] = IPYBOX_COMMAND,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`start_http_ipybox`, stopped (SIGTERM, then SIGKILL after 15 s) when the block ends."""
    process, url = start_http_ipybox(workspace, state_dir, log_file, args=args, command=command, env=env)
    try:
        yield process, url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def sigterm_survivors(
    process: subprocess.Popen[bytes], timeout: float = 15, grace: float = 5
) -> list[psutil.Process]:
    """Stop `process` with SIGTERM (waiting up to `timeout` s); what it started that outlives it
    by `grace` s."""
    started = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=timeout)
    _, alive = psutil.wait_procs(started, timeout=grace)
    return list(alive)


@contextlib.asynccontextmanager
async def http_session(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session over streamable HTTP (with a bearer `token`, if given)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, elicitation_callback=accept_all) as session,
    ):
        await session.initialize()
        yield session


def ipybox_processes(workspace: Path) -> list[psutil.Process]:
    """The ipybox server(s) of `workspace` started by this test process, and everything they started."""
    found: list[psutil.Process] = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if str(workspace) in child.cmdline():
                found += [child, *child.children(recursive=True)]
    return found


class RawIpybox:
    """`ipybox` over stdio without a client library: JSON-RPC lines in, every stdout line checked."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.received: list[dict[str, Any]] = []
        self._next_id = 0

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request; return its response, keeping the notifications that came before it."""
        self._next_id += 1
        await self.notify(method, params, id=self._next_id)
        assert self.process.stdout is not None
        while True:
            raw = await asyncio.wait_for(self.process.stdout.readline(), 30)
            assert raw, "ipybox closed stdout"
            message = json.loads(raw)  # fails on anything but JSON
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
            self.received.append(message)
            if message.get("id") == self._next_id:
                return message

    async def notify(self, method: str, params: dict[str, Any] | None = None, **extra: Any) -> None:
        assert self.process.stdin is not None
        message = {"jsonrpc": "2.0", "method": method, **extra} | ({"params": params} if params else {})
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        response = await self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in response, response
        result: dict[str, Any] = response["result"]
        return result


@contextlib.asynccontextmanager
async def raw_ipybox(workspace: Path, state_dir: Path, *args: str) -> AsyncIterator[RawIpybox]:
    """Start `ipybox` over stdio and complete the handshake (protocol version 2025-06-18)."""
    process = await asyncio.create_subprocess_exec(
        *IPYBOX_COMMAND,
        "--workspace",
        str(workspace),
        "--approval",
        "auto",  # this client cannot answer approval requests
        *NO_SPARE,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=server_env(state_dir),
    )
    raw = RawIpybox(process)
    try:
        client = {"name": "raw", "version": "0"}
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
        assert "result" in await raw.request("initialize", init)
        await raw.notify("notifications/initialized")
        yield raw
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
