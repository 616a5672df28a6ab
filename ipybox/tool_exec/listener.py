"""The tool server's listener: one-line JSON requests over a unix socket and/or TCP.

It knows the wire, not the policy: each request goes to a `Dispatch` that answers with a reply or
starts a call, and a connection that asks for "approve" is handed over whole. A caller that hangs
up while its call runs (cell interrupted, kernel dead) gets the call cancelled.
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

from ipybox.tool_exec.connections import ToolCallError

logger = logging.getLogger(__name__)

_MAX_LINE = 64 * 1024 * 1024

#: A request's call to run (its result is the reply), or the reply that refuses it.
Dispatch = Callable[[dict[str, Any]], "Coroutine[Any, Any, Any] | dict[str, Any]"]
#: Takes over a connection whose first line asked to decide on approvals.
ApprovalHandler = Callable[[dict[str, Any], asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: Requests that need the TCP token.
_GUARDED = ("run", "shell")


class Listener:
    """Accepts connections on `path` (owner only) and/or TCP `host`:`port` (0 or None: see `port`)."""

    def __init__(self, dispatch: Dispatch, approvals: ApprovalHandler, token: str) -> None:
        self._dispatch = dispatch
        self._approvals = approvals
        self._token = token.encode()
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def listening(self) -> bool:
        return bool(self._servers)

    async def listen_unix(self, path: Path) -> None:
        self._servers.append(await asyncio.start_unix_server(self._connection, path, limit=_MAX_LINE))
        path.chmod(0o600)

    async def listen_tcp(self, host: str, port: int) -> int:
        """Listen on TCP; returns the port (a free one for port 0)."""
        server = await asyncio.start_server(self._connection_tcp, host, port, limit=_MAX_LINE)
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
        self._connections.add(task)
        call: asyncio.Task[Any] | None = None
        try:
            # A client sends its next request only after the reply, so while a call runs this
            # readline() sees nothing but a hang-up: one read per request watches both.
            while line := await reader.readline():
                if call is not None and not call.done():  # a client that did not wait: in turn
                    await asyncio.wait({call})
                try:
                    request = json.loads(line)
                    op = request.get("op")
                except (json.JSONDecodeError, AttributeError):
                    await send(writer, {"ok": False, "error": "malformed request"})
                    continue
                if op == "approve":
                    await self._approvals(request, reader, writer)
                    return
                if check_token and op in _GUARDED and not self._token_ok(request):
                    logger.warning("refused a TCP request (op %r) without the tool server's token", op)
                    await send(writer, {"ok": False, "error": "refused: missing or wrong tool server token"})
                    return
                started = self._dispatch(request)
                if isinstance(started, dict):
                    await send(writer, started)
                    continue
                call = asyncio.ensure_future(started)
                call.add_done_callback(lambda done: _reply(writer, done))
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            # close() cancels open connections. End quietly: this task belongs to asyncio's server,
            # whose completion callback (Python 3.11) logs cancelled handler tasks as errors.
            pass
        finally:
            if call is not None and not call.done():  # the caller is gone: abandon its call
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
            self._connections.discard(task)
            writer.close()

    def _token_ok(self, request: dict[str, Any]) -> bool:
        return hmac.compare_digest(str(request.get("token", "")).encode(), self._token)


def _reply(writer: asyncio.StreamWriter, call: asyncio.Future[Any]) -> None:
    """Send a finished call's result or error (not a cancelled one's: nobody waits for it)."""
    if call.cancelled() or writer.is_closing():
        return
    error = call.exception()
    if error is None:
        message: dict[str, Any] = {"ok": True, "result": call.result()}
    elif isinstance(error, ToolCallError):
        message = {"ok": False, "error": str(error), "rejected": error.rejected}
    else:  # a bug in the call: the kernel gets its name rather than a hang
        logger.error("tool server call failed", exc_info=error)
        message = {"ok": False, "error": f"tool server error: {type(error).__name__}: {error}"}
    writer.write(json.dumps(message).encode() + b"\n")


async def send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    """Write one JSON line and wait until the transport takes it."""
    writer.write(json.dumps(message).encode() + b"\n")
    await writer.drain()
