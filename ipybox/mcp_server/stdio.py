"""The MCP server's stdio transport: the SDK's, with the wire read and written on the event loop.

The SDK's `stdio_server` reads each line and writes each answer (twice: the text, then a flush)
through worker threads, and each hand-over to a thread and back costs the round trip of a cell
about 0.4 ms on a 2-core machine (docs/benchmarks.md). Where stdin and stdout are pipes or sockets
(as every MCP client starts a server) ipybox hands `stdio_server` its own streams instead, which
the event loop reads when it says stdin is readable and writes when stdout can take the bytes.
Neither descriptor is made non-blocking, as that would change them for every process sharing them
(the shell a person started ipybox from, say); a read of a readable pipe, and a write of at most
`select.PIPE_BUF` bytes to a writable one, return at once. Anything else (a terminal, a file) is
served by the SDK's streams.

As the SDK does, the wire is moved to descriptors of its own while the server runs: fd 0 then
reads `/dev/null` and fd 1 writes to stderr, so nothing another part of the process (or a program
it starts) prints can break a message.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import select
import stat
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

logger = logging.getLogger(__name__)

#: Whole lines, and bytes of them, read ahead of the server before ipybox stops reading stdin
#: (until the server takes one): the client then waits, rather than ipybox's memory growing. (A
#: line still coming is read whole, as the SDK reads it: the client is not the untrusted party.)
_READ_AHEAD = 64
_READ_AHEAD_BYTES = 1 << 20
#: Bytes taken from stdin at a time.
_CHUNK = 1 << 16
#: Bytes written at a time: a write of at most PIPE_BUF bytes to a writable pipe never blocks.
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)


async def serve(server: MCPServer[Any]) -> None:
    """Run `server` on stdin and stdout until the client hangs up."""
    from mcp.server.stdio import stdio_server

    from ipybox.upstream import lowlevel_server

    try:
        async with _wire() as streams, stdio_server(*streams) as (read, write):
            lowlevel = lowlevel_server(server)
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
    except* (BrokenPipeError, ConnectionResetError):  # nothing can answer a client that stopped reading
        logger.warning("the client closed ipybox's stdout; stopping")


@contextlib.asynccontextmanager
async def _wire() -> AsyncIterator[tuple[Any, Any]]:
    """Streams for `stdio_server` on the event loop, or (None, None): the SDK's own."""
    if not (_served_on_loop(0) and _served_on_loop(1)):
        yield None, None
        return
    with _claimed(0) as stdin, _claimed(1) as stdout:
        lines = _Lines(stdin)
        try:
            yield lines, _Writer(stdout)
        finally:
            lines.close()


def _served_on_loop(fd: int) -> bool:
    """Whether `fd` is a pipe or a socket, which the event loop can watch (not on Windows)."""
    if sys.platform == "win32":
        return False
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.contextmanager
def _claimed(fd: int) -> Any:
    """A private copy of `fd`, which meanwhile reads /dev/null (0) or writes to stderr (1)."""
    import fcntl  # not on Windows, which never gets here

    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)  # above stdio, and no program started inherits it
    _flush(fd)  # what was printed before goes where it was meant to, and nothing after reaches the wire
    if fd == 0:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, fd)
        os.close(null)
    else:
        os.dup2(2, fd)
    try:
        yield private
    finally:
        _flush(fd)
        os.dup2(private, fd)
        os.close(private)


def _flush(fd: int) -> None:
    """Flush what Python holds for `fd` (stdout's buffer), before the descriptor is moved."""
    if fd == 1:
        with contextlib.suppress(Exception):
            sys.stdout.flush()


class _Lines:
    """The lines of stdin (as `str`), read when the event loop says it is readable."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._lines: collections.deque[bytes] = collections.deque()
        self._queued = 0  # bytes of `_lines`
        self._partial: list[bytes] = []  # the pieces of a line still without its end
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None
        self._reading = False
        self._read()

    def _read(self) -> None:
        if not (self._reading or self._ended) and len(self._lines) < _READ_AHEAD:
            if self._queued < _READ_AHEAD_BYTES:
                self._loop.add_reader(self._fd, self._readable)
                self._reading = True

    def close(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return  # made non-blocking by a process it is shared with, and read by it first: wait on
        except OSError:
            data = b""
        if data:
            first, *rest = data.split(b"\n")
            self._partial.append(first)
            if rest:  # a line ended: joined once, however many pieces it came in
                self._add(b"".join(self._partial))
                *complete, last = rest
                for line in complete:
                    self._add(line)
                self._partial = [last]
        else:
            self._ended = True
            if last_line := b"".join(self._partial):
                self._add(last_line)  # a last line without its line end
            self._partial = []
        if self._ended or len(self._lines) >= _READ_AHEAD or self._queued >= _READ_AHEAD_BYTES:
            self.close()  # the end; or the server is behind: the client waits, not ipybox's memory
        if self._waiter is not None and not self._waiter.done() and (self._lines or self._ended):
            self._waiter.set_result(None)

    def _add(self, line: bytes) -> None:
        self._lines.append(line)
        self._queued += len(line)

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._ended:
                raise StopAsyncIteration
            self._waiter = self._loop.create_future()
            await self._waiter
        line = self._lines.popleft()
        self._queued -= len(line)
        self._read()
        return line.decode("utf-8", errors="replace")


class _Writer:
    """Writes to stdout whenever the event loop says it can take more."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._poll = select.poll()
        self._poll.register(fd, select.POLLOUT)

    async def write(self, text: str) -> None:
        data = memoryview(text.encode())
        while data:
            if not self._poll.poll(0):
                await self._writable()
            data = data[os.write(self._fd, data[:_PIPE_BUF]) :]

    async def _writable(self) -> None:
        ready: asyncio.Future[None] = self._loop.create_future()
        self._loop.add_writer(self._fd, _settle, ready)
        try:
            await ready
        finally:
            self._loop.remove_writer(self._fd)

    async def flush(self) -> None:
        """Nothing to do: each write went out whole."""


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
