"""What a stdio MCP server gets besides its parameters' `env`, and what it said before it failed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections import deque
from collections.abc import Mapping
from typing import Any

from ipybox._programs import absolute_path
from ipybox.errors import IpyboxError
from ipybox.tool_exec.approval import display


class ServerStartError(IpyboxError, ConnectionError):
    """A stdio MCP server failed before its session was ready; the message ends with its stderr."""


async def open_stdio(
    stack: contextlib.AsyncExitStack, params: Mapping[str, Any]
) -> tuple[Any, Any, StderrTail]:
    """Start the stdio server of (resolved) `params` in `stack`: its read and write streams, and
    the tail of what it writes to stderr."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    # never the current directory, which may be the kernel-writable workspace: a planted
    # node_modules/, srv.py or .npmrc there would run with the server, on the host
    cwd = params.get("cwd") or stack.enter_context(tempfile.TemporaryDirectory(prefix="ipybox-mcp-"))
    server = StdioServerParameters(
        command=params["command"],
        args=params.get("args", []),
        env=_server_env(params.get("env") or {}),
        cwd=cwd,
    )
    stderr = stack.enter_context(StderrTail())
    read, write = await stack.enter_async_context(stdio_client(server, errlog=stderr.file))
    stderr.file.close()  # the server holds its own copy; EOF comes when it exits
    return read, write, stderr


def _server_env(env: Mapping[str, str]) -> dict[str, str]:
    """A stdio server's environment over the SDK's defaults; its `PATH` (given or ipybox's) keeps
    only absolute entries, so neither its command nor the programs it runs resolve to a directory
    relative to where it runs."""
    return passed_through_env() | dict(env) | {"PATH": absolute_path(env.get("PATH"))}


#: Variables a stdio server gets from ipybox's environment besides the MCP SDK's minimal set
#: (HOME, LOGNAME, PATH, SHELL, TERM, USER): where to find CA certificates and the proxy, without
#: which a server behind a TLS-intercepting proxy cannot reach the network. Its params' `env` wins.
PASSED_THROUGH = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)


def passed_through_env() -> dict[str, str]:
    """The `PASSED_THROUGH` variables set in ipybox's environment."""
    return {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}


class StderrTail(contextlib.AbstractContextManager["StderrTail"]):
    """Keeps the last lines a stdio server writes to stderr (`file`), to explain why it failed.

    Read on the running event loop from a pipe, so a chatty server costs a bounded buffer; the
    pipe is closed when the context ends.
    """

    def __init__(self, keep: int = 20) -> None:
        self._loop = asyncio.get_running_loop()
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        self.file = os.fdopen(write, "w")
        self._keep = keep
        self._tail: deque[bytes] = deque(maxlen=keep)
        self._partial = b""
        self._count = 0  # lines kept so far, in all
        self._closed = False  # the pipe's descriptor, once closed, may be another file's
        self._loop.add_reader(self._read, self._drain)

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._loop.remove_reader(self._read)
                return
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            kept = [line for line in complete if line.strip()]
            self._tail.extend(kept)
            self._count += len(kept)
            self._partial = self._partial[-4096:]

    def mark(self) -> int:
        """Where the server's stderr is now (as last read): `lines(since=mark)` is what came after."""
        return self._count

    def lines(self, since: int = 0) -> str:
        """What the server wrote last (up to `keep` lines; those after `since`), indented, each line
        escaped (`display.escape`): errors quoting it reach a person, and a server's escape
        sequences, controls and invisible characters must not act on their terminal."""
        if not self._closed:
            self._drain()
        newer = list(self._tail)[max(0, len(self._tail) - (self._count - since)) :]
        last = [*newer, *([self._partial] if self._partial.strip() else [])][-self._keep :]
        return "\n".join("  " + display.escape(line.decode(errors="replace").rstrip()) for line in last)

    def __exit__(self, *exc: object) -> None:
        self._drain()  # what a server wrote just before it died is still quoted afterwards
        self._closed = True
        self._loop.remove_reader(self._read)
        os.close(self._read)
        self.file.close()
