"""The tool server's listener: one-line JSON requests over a unix socket and/or TCP.

It knows the wire, not the policy: each request goes to a `Dispatch` that answers with a reply or
starts a call, and a connection that asks for "approve" is handed over whole. A caller that hangs
up while its call runs (cell interrupted, kernel dead) gets the call cancelled.

What it holds for the kernel is bounded: at most `max_connections` connections at once (more are
answered with an error line and closed), and at most `max_buffered` bytes in all: each open
connection's read buffers, and its requests as memory holds them, while one is read (with what
Python allocates ahead as it grows), parsed (its text and what it parses to) and while its call
runs; a request that does not fit is read to its end without being kept and answered with an
error, a connection that does not fit is refused. The errors name the limit and how to raise it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from ipybox import _json_text
from ipybox._nesting import MAX_NESTING
from ipybox.kernel_mgr.limits import format_size
from ipybox.tool_exec.connections import ToolCallError

logger = logging.getLogger(__name__)

#: Bytes a connection's reader buffers before a request line is taken from it in pieces.
_READ_LIMIT = 64 * 1024
#: What an open connection holds at most besides its request: asyncio's reader buffers up to twice
#: its limit before it stops reading, plus one read from the socket (256 KiB); and a piece as large
#: taken from that buffer while it is added to the request (bench_floods' `sockets` flood went 3 MiB
#: over `tool_buffer` with 24 connections while the pieces were not counted).
_CONNECTION_BYTES = 2 * (2 * _READ_LIMIT + 256 * 1024)

#: A request's call to run (its result is the reply), or the reply that refuses it.
Dispatch = Callable[[dict[str, Any]], "Coroutine[Any, Any, Any] | dict[str, Any]"]
#: Takes over a connection whose first line asked to decide on approvals.
ApprovalHandler = Callable[[dict[str, Any], asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: Called with each new connection's streams.
_Connected = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: Requests that need the TCP token.
_GUARDED = ("run", "shell")
_TOO_DEEP = (
    f"The ipybox tool server refused this request: its arrays and objects nest more than {MAX_NESTING} "
    "levels deep, more than any tool's arguments need. Flatten the data, or pass it to the tool as a "
    "file in the workspace."
)


class _TooLarge(Exception):
    """A request that did not fit in the bytes left of the budget; `size`: its bytes, all read."""

    def __init__(self, size: int) -> None:
        self.size = size


class Listener:
    """Accepts connections on `path` (owner only) and/or TCP `host`:`port` (0 or None: see `port`).

    `max_connections` and `max_buffered` (None: no limit) bound what one kernel's connections may
    hold on the host; approval clients (authenticated by their first line) are not counted.
    """

    def __init__(
        self,
        dispatch: Dispatch,
        approvals: ApprovalHandler,
        token: str,
        *,
        max_connections: int | None = None,
        max_buffered: int | None = None,
    ) -> None:
        self._dispatch = dispatch
        self._approvals = approvals
        self._token = token.encode()
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._counted: set[asyncio.Task[None]] = set()  # the connections max_connections bounds
        self._max_connections = max_connections
        self._max_buffered = max_buffered
        #: Bytes of requests held now: being read, or of calls that run.
        self.buffered = 0
        self._warned: set[str] = set()

    @property
    def listening(self) -> bool:
        return bool(self._servers)

    async def listen_unix(self, path: Path) -> None:
        loop = asyncio.get_running_loop()
        self._servers.append(await loop.create_unix_server(lambda: _Protocol(self._connection), path))
        path.chmod(0o600)

    async def listen_tcp(self, host: str, port: int) -> int:
        """Listen on TCP; returns the port (a free one for port 0)."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Protocol(self._connection_tcp), host, port)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop accepting and end every open connection (cancelling the calls they wait for)."""
        for server in self._servers:
            server.close()
        self._servers = []
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._connection(reader, writer, check_token=True)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, check_token: bool = False
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        protocol = writer.transport.get_protocol()
        assert isinstance(protocol, _Protocol)
        if not await self._admit(writer):
            return
        self._connections.add(task)
        self._counted.add(task)
        reserved, held = _CONNECTION_BYTES, 0

        def uncharge() -> None:  # an approval client's connection: the application's, not the kernel's
            nonlocal reserved, held
            self._counted.discard(task)
            self._release(reserved + held)
            reserved = held = 0

        try:
            while True:
                try:
                    line, held = await self._read_request(protocol)
                except _TooLarge as e:
                    await send(writer, {"ok": False, "error": self._too_large(e.size)})
                    continue
                if not line:
                    self._release(held)
                    break
                try:  # whatever ends the request (a bug or a cancel too) gives back what it held
                    started, kept = await self._handle(line, reader, writer, check_token, uncharge)
                    line = bytearray()  # gone: from here its call holds what it parsed to
                    self._release(held)
                    held = kept
                    if isinstance(started, Coroutine):
                        # run here, not in a task of its own: it starts in the event-loop turn its
                        # request came in (on the hot path, a turn is a good part of the tool
                        # server's own latency); a hang-up meanwhile cancels it (see `_Protocol`)
                        protocol.on_hang_up = task.cancel
                        try:
                            await _call_and_reply(started, writer)
                        finally:
                            protocol.on_hang_up = None
                finally:
                    self._release(held)
                    held = 0
                if started is False:
                    return  # handed over to the approval client, or refused
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            # close() cancels open connections. End quietly: this task belongs to asyncio's server,
            # whose completion callback (Python 3.11) logs cancelled handler tasks as errors.
            pass
        finally:
            self._release(reserved)
            self._connections.discard(task)
            self._counted.discard(task)
            writer.close()

    async def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Take a new connection within the limits (its read buffers reserved), or refuse it."""
        if self._max_connections is not None and len(self._counted) >= self._max_connections:
            await self._refuse_connection(writer, self._too_many())
            return False
        if not self._reserve(_CONNECTION_BYTES):
            await self._refuse_connection(writer, self._too_large(_CONNECTION_BYTES, "connection"))
            return False
        return True

    async def _handle(
        self,
        line: bytes | bytearray,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        check_token: bool,
        uncharge: Callable[[], None],
    ) -> tuple[Coroutine[Any, Any, Any] | bool | None, int]:
        """Act on one request: the call it asks for (to run), None when answered at once, or False
        when the connection is done (handed over to an approval client, or refused); and the bytes
        of the budget its call holds from here (what the request parsed to) until it ends."""
        reading = 2 * len(line)  # the copies `measure` makes, then json.loads' of the text
        if not self._reserve(reading):
            await send(writer, {"ok": False, "error": self._too_large(len(line))})
            return None, 0
        try:
            fits = None if self._max_buffered is None else self._max_buffered - self.buffered + reading
            text = _json_text.measure(line, within=fits)
            if text.too_deep:  # refused before it is parsed: nothing walks it
                await send(writer, {"ok": False, "error": _TOO_DEEP})
                return None, 0
            if not self._reserve(text.parse_bytes - reading):
                error = self._too_large(len(line), parsed=text.parsed_bytes)
                await send(writer, {"ok": False, "error": error})
                return None, 0
            reading = text.parse_bytes
            try:
                request = _json_text.whole_characters(_json_text.loads(line.decode()), line)  # UTF-8 only
                op = request.get("op")
            except _json_text.NotFinite as e:  # shown as NaN, sent as null: refused before anyone is asked
                await send(writer, {"ok": False, "error": str(e)})
                return None, 0
            except (RecursionError, ValueError, AttributeError):  # ValueError: JSON, UTF-8, a long int
                await send(writer, {"ok": False, "error": "malformed request"})
                return None, 0
            self._release(text.parse_bytes - text.parsed_bytes)  # the decoded text is gone
            reading = text.parsed_bytes
            started = await self._act(request, op, reader, writer, check_token, uncharge)
            if not isinstance(started, Coroutine):
                return started, 0
            kept, reading = reading, 0
            return started, kept
        finally:
            self._release(reading)

    async def _act(
        self,
        request: dict[str, Any],
        op: Any,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        check_token: bool,
        uncharge: Callable[[], None],
    ) -> Coroutine[Any, Any, Any] | bool | None:
        if op == "approve":
            uncharge()
            await self._approvals(request, reader, writer)
            return False
        if check_token and op in _GUARDED and not self._token_ok(request):
            logger.warning("refused a TCP request (op %r) without the tool server's token", op)
            await send(writer, {"ok": False, "error": "refused: missing or wrong tool server token"})
            return False
        started = self._dispatch(request)
        if isinstance(started, dict):
            await send(writer, started)
            return None
        return started

    async def _read_request(self, protocol: _Protocol) -> tuple[bytearray, int]:
        """The next request line (empty at the end) and the bytes of the budget it holds.

        Taken in pieces of at most `_READ_LIMIT` bytes, each counted (as the memory the line will
        take with it) before the next is read; a line that does not fit is read to its end,
        dropped, and raised as `_TooLarge`.
        """
        line = bytearray()
        held = 0
        try:
            while True:
                piece = await protocol.piece()
                more = _allocated(len(line) + len(piece)) - held
                if not self._reserve(more):
                    raise _TooLarge(len(line) + len(piece) + await _skip_line(protocol, piece))
                held += more
                line += piece
                if not piece or piece.endswith(b"\n"):
                    return line, held
        except BaseException:
            self._release(held)
            raise

    def _reserve(self, size: int) -> bool:
        """Count `size` more bytes as held, if they fit in `max_buffered`."""
        if self._max_buffered is not None and self.buffered + size > self._max_buffered:
            return False
        self.buffered += size
        return True

    def _release(self, held: int) -> None:
        self.buffered -= held

    async def _refuse_connection(self, writer: asyncio.StreamWriter, error: str) -> None:
        with contextlib.suppress(ConnectionError):
            await send(writer, {"ok": False, "error": error})
        writer.close()

    def _too_many(self) -> str:
        self._warn(
            "connections", "refused a tool server connection (max_connections %d)", self._max_connections
        )
        return (
            f"The ipybox tool server refused this connection: the kernel already holds "
            f"{self._max_connections} connections to it, its limit (ResourceLimits.tool_connections; "
            "ipybox --max-tool-connections). Call tools from fewer threads at once, close connections "
            "to the tool server you opened yourself, or raise the limit."
        )

    def _too_large(self, size: int, what: str = "request", parsed: int | None = None) -> str:
        assert self._max_buffered is not None
        self._warn("buffer", "refused a tool server %s of %d bytes (max_buffered)", what, size)
        many = (
            f" (parsed, its {size} bytes would take about {format_size(parsed)}: a value for each "
            "of its many small items)"
            if parsed is not None
            else ""
        )
        return (
            f"The ipybox tool server refused this {what} of {size} bytes{many}: what it holds for "
            f"this kernel at once (connections, and requests as read and as parsed) may take "
            f"{format_size(self._max_buffered)} (ResourceLimits.tool_buffer; ipybox "
            f"--max-tool-buffer), {format_size(self.buffered)} of which is held now. Pass large "
            "data to tools as files in the workspace rather than as arguments, make fewer calls "
            "at once, or raise the limit."
        )

    def _warn(self, kind: str, message: str, *args: Any) -> None:
        """Log a refusal as a warning the first time, later ones of its kind at debug level (a flood)."""
        level = logging.DEBUG if kind in self._warned else logging.WARNING
        self._warned.add(kind)
        logger.log(level, message, *args)

    def _token_ok(self, request: dict[str, Any]) -> bool:
        return hmac.compare_digest(str(request.get("token", "")).encode(), self._token)


async def _call_and_reply(call: Coroutine[Any, Any, Any], writer: asyncio.StreamWriter) -> None:
    """Run a call and send its result or error, in the call's own task (a cancelled call sends
    nothing: nobody waits for it). Written at once, not from a done callback: that would cost
    the reply an event-loop turn. Returns once the transport has taken the reply (at once,
    unless the caller leaves its replies unread): until then the connection reads no further
    request, so replies never pile up on the host (the budget does not count them)."""
    try:
        message: dict[str, Any] = {"ok": True, "result": await call}
    except ToolCallError as error:
        message = {"ok": False, "error": str(error), "rejected": error.rejected}
    except Exception as error:  # a bug in the call: the kernel gets its name rather than a hang
        logger.error("tool server call failed", exc_info=error)
        message = {"ok": False, "error": f"tool server error: {type(error).__name__}: {error}"}
    if not writer.is_closing():
        writer.write(json.dumps(message).encode() + b"\n")
        await writer.drain()


def _allocated(size: int) -> int:
    """Bytes a bytearray grown to `size` may take: CPython allocates an eighth ahead as it grows."""
    return size + (size >> 3) + 64


async def _skip_line(protocol: _Protocol, piece: bytes) -> int:
    """Read and drop the rest of a line whose `piece` was just read; the bytes dropped after it."""
    skipped = 0
    while piece and not piece.endswith(b"\n"):
        piece = await protocol.piece()
        skipped += len(piece)
    return skipped


class _Protocol(asyncio.StreamReaderProtocol):
    """A connection's stream, which also tells the call it runs when its caller hangs up.

    A caller sends its next request only after the reply, so an end of the stream while a call
    runs means the caller is gone (the cell interrupted, the kernel dead): `on_hang_up`, set while
    a call runs, is called then; unless a whole request line waits to be read (requests sent
    together, then the stream shut for writing), whose caller still waits for the replies.
    Watching here, rather than with a read of the next request beside each call, saves that
    read's task: about 20 µs of each call (docs/benchmarks.md).
    """

    def __init__(self, connected: _Connected) -> None:
        self.reader = asyncio.StreamReader(limit=_READ_LIMIT)
        super().__init__(self.reader, connected)
        self.on_hang_up: Callable[[], object] | None = None
        self._lines = 0  # line ends that came
        self._taken = 0  # line ends read

    async def piece(self) -> bytes:
        """The rest of the current line, or `_READ_LIMIT` bytes of it; at the end what is left, if
        anything (a last line without a line end), then b""."""
        try:
            piece = await self.reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as e:
            piece = await self.reader.readexactly(e.consumed)  # holds no line end
        except asyncio.IncompleteReadError as e:
            piece = e.partial
        self._taken += piece.endswith(b"\n")
        return piece

    def data_received(self, data: bytes) -> None:
        self._lines += data.count(b"\n")
        super().data_received(data)

    def eof_received(self) -> bool:
        if self._lines == self._taken:
            self._hung_up()
        return bool(super().eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None or self._lines == self._taken:
            self._hung_up()
        super().connection_lost(exc)

    def _hung_up(self) -> None:
        if self.on_hang_up is not None:
            self.on_hang_up()


async def send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    """Write one JSON line and wait until the transport takes it."""
    writer.write(json.dumps(message).encode() + b"\n")
    await writer.drain()
