"""Kernel-side client of the tool server; standard library only, so it imports fast in a kernel."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from ipybox.errors import IpyboxError

#: Set in the kernel's environment by `CodeExecutor`: the tool server's unix socket, or
#: `tcp://HOST:PORT` for a kernel on another machine (a kernel gateway).
ENDPOINT_VAR = "IPYBOX_TOOL_SERVER"
#: The secret a caller must send with each request to the tool server's TCP listener.
TOKEN_VAR = "IPYBOX_TOOL_SERVER_TOKEN"
_TCP = "tcp://"


class ToolRunnerError(IpyboxError):
    """A tool call failed: rejected, not approved in time, unregistered server, or a tool error."""


@dataclass
class ToolImage:
    """An image a tool returned."""

    data: bytes
    mime_type: str

    def _repr_png_(self) -> bytes | None:
        return self.data if self.mime_type == "image/png" else None

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, "wb") as f:
            f.write(self.data)


@dataclass
class ToolResource:
    """A resource a tool returned (embedded or linked)."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: bytes | None = None


class ToolOutput(str):
    """A tool's text output, with every non-text content block kept in `images` and `resources`."""

    images: list[ToolImage]
    resources: list[ToolResource]
    content: list[dict[str, Any]]

    def __new__(cls, encoded: dict[str, Any]) -> ToolOutput:
        output = super().__new__(cls, encoded.get("text", ""))
        output.content = encoded.get("content", [])
        output.images, output.resources = [], []
        for block in output.content:
            kind = block.get("type")
            if kind in ("image", "audio"):
                output.images.append(ToolImage(base64.b64decode(block["data"]), block.get("mime_type", "")))
            elif kind == "resource":
                res = block["resource"]
                blob = base64.b64decode(res["blob"]) if "blob" in res else None
                output.resources.append(ToolResource(res["uri"], res.get("mime_type"), res.get("text"), blob))
            elif kind == "resource_link":
                output.resources.append(ToolResource(block["uri"], block.get("mime_type")))
        return output


class ToolRunner:
    """Calls tools of one MCP server through a `ToolServer`.

    Without `host`/`port` it connects to the tool server of the executor the code runs
    under (its endpoint is in the kernel's environment), falling back to localhost:8900.
    Requests over TCP carry `token` (default: the kernel's `IPYBOX_TOOL_SERVER_TOKEN`), the
    secret the tool server's TCP listener checks (`ToolServer.token`).
    """

    def __init__(
        self,
        server_name: str,
        server_params: dict[str, Any],
        host: str | None = None,
        port: int | None = None,
        token: str | None = None,
    ) -> None:
        self.server_name = server_name
        self.server_params = server_params
        endpoint = os.environ.get(ENDPOINT_VAR, "") if host is None and port is None else ""
        self._path: str | None = None
        self._address = (host or "localhost", port or 8900)
        if endpoint.startswith(_TCP):
            tcp_host, _, tcp_port = endpoint[len(_TCP) :].rpartition(":")
            self._address = (tcp_host.strip("[]"), int(tcp_port))
        elif endpoint:
            self._path = endpoint
        self._token = token if token is not None else os.environ.get(TOKEN_VAR)

    def run_sync(self, tool_name: str, tool_args: dict[str, Any]) -> dict[str, Any] | str | None:
        """Call a tool and wait for its result (structured content as dict, else text)."""
        __tracebackhide__ = True  # IPython shows the caller's frame, not ours
        return _unwrap(self._call_raw(tool_name, tool_args))

    async def run(self, tool_name: str, tool_args: dict[str, Any]) -> dict[str, Any] | str | None:
        """Async version of `run_sync`; the blocking call runs in a worker thread."""
        return _unwrap(await asyncio.to_thread(self._call_raw, tool_name, tool_args))

    @property
    def _endpoint(self) -> str:
        return self._path or f"{self._address[0]}:{self._address[1]}"

    def _socket(self) -> tuple[socket.socket, bool]:
        """A connection to the tool server, reused per thread; also says whether it is reused."""
        cache: dict[str, socket.socket] = _local.__dict__.setdefault("sockets", {})
        if (sock := cache.get(self._endpoint)) is not None:
            return sock, True
        if self._path:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self._path)
        else:
            sock = socket.create_connection(self._address)
        cache[self._endpoint] = sock
        return sock, False

    def _drop_socket(self) -> None:
        cache: dict[str, socket.socket] = _local.__dict__.setdefault("sockets", {})
        if (sock := cache.pop(self._endpoint, None)) is not None:
            sock.close()

    def _exchange(self, payload: bytes) -> bytes:
        sock, reused = self._socket()
        try:
            try:
                sock.sendall(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed by the server, which may have said why first (a limit): read on
            return _read_line(sock, _local.__dict__)
        except _StaleConnection:
            self._drop_socket()
            if not reused:
                raise
        return self._exchange(payload)  # the server closed an idle connection: once more, fresh

    def _call_raw(self, tool_name: str, tool_args: dict[str, Any]) -> dict[str, Any]:
        __tracebackhide__ = True
        request = {
            "op": "run",
            "server_name": self.server_name,
            "server_params": self.server_params,
            "tool_name": tool_name,
            "tool_args": tool_args,
        }
        result: dict[str, Any] = self._request(request)["result"]
        return result

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request to the tool server and return its reply; raises if it failed."""
        __tracebackhide__ = True
        if self._token and not self._path:
            request = request | {"token": self._token}
        request |= _execution_tags()
        _flush_pending_output()  # so output printed before the call is shown before its approval
        try:
            line = self._exchange(json.dumps(request).encode() + b"\n")
        except OSError as e:
            self._drop_socket()
            raise ToolRunnerError(f"Cannot reach the ipybox tool server ({self._endpoint}): {e}") from None
        except BaseException:
            self._drop_socket()  # interrupted mid-call: a late reply would belong to a dead request
            raise
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            error = reply.get("error", "tool call failed")
            raise ApprovalRejectedError(error) if reply.get("rejected") else ToolRunnerError(error)
        return reply


class ApprovalRejectedError(ToolRunnerError):
    """The application rejected a tool call or shell command."""


def approve_shell_command(kind: str, cmd: str) -> None:
    """Ask the application to approve a shell command (`kind`: "shell" or "shell_magic").

    Returns once it is approved; raises `ApprovalRejectedError` if it is rejected and
    `ToolRunnerError` if no decision comes.
    """
    __tracebackhide__ = True
    ToolRunner("ipybox", {})._request({"op": "shell", "tool_name": kind, "cmd": cmd})


# One connection per thread and endpoint, reused across calls to save a connect per call.
_local = threading.local()


class _StaleConnection(ConnectionError):
    """The server closed the connection before answering."""


def _unwrap(encoded: dict[str, Any]) -> dict[str, Any] | str | None:
    structured = encoded.get("structured")
    if structured is not None:
        return structured  # type: ignore[no-any-return]
    return ToolOutput(encoded)


def _execution_tags() -> dict[str, Any]:
    """The caller's execution and the running one (in an ipybox kernel; else none)."""
    in_kernel = sys.modules.get("ipybox.kernel_mgr.in_kernel")
    return in_kernel.execution_tags() if in_kernel is not None else {}


def _flush_pending_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "_flush_pending", False):  # ipykernel's OutStream has unsent output
            stream.flush()


#: Seconds a caller polls for the start of its reply before it sleeps in `recv`, if the last reply
#: its thread got came within them. A thread asleep in `recv` is woken some tens of µs after the
#: reply arrives (more in VMs): about 50 µs of a fast tool's 0.7 ms round trip (docs/benchmarks.md).
#: A thread whose last reply came later (a slow tool) sleeps at once: it polls in vain only after
#: a quick reply.
_POLL_S = 0.001
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


def _read_line(sock: socket.socket, state: dict[str, Any]) -> bytes:
    """The reply line; `state` is the thread's, which keeps whether its last reply came quickly."""
    start = time.monotonic()
    polls = state.get("quick", True) and _DONTWAIT and sock.gettimeout() is None
    chunk = _polled(sock, start + _POLL_S) if polls else None
    if chunk is None:
        chunk = sock.recv(1 << 16)
    state["quick"] = time.monotonic() - start < _POLL_S
    chunks: list[bytes] = []
    while True:
        if not chunk:
            if chunks:
                raise ConnectionResetError("the tool server closed the connection mid-reply")
            raise _StaleConnection("the tool server closed the connection")
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            return b"".join(chunks)
        chunk = sock.recv(1 << 16)


def _polled(sock: socket.socket, end: float) -> bytes | None:
    """The first bytes of the reply if they come before `end` (`time.monotonic()`), else None.
    Others may run meanwhile: each try that finds nothing yields the processor."""
    while True:
        try:
            return sock.recv(1 << 16, _DONTWAIT)
        except BlockingIOError:
            if time.monotonic() >= end:
                return None
            os.sched_yield()
