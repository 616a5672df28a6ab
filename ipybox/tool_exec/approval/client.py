"""The application's side of approval: `ApprovalRequest` and the remote `ApprovalClient`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ipybox.tool_exec.approval import display

logger = logging.getLogger(__name__)


@dataclass(eq=False, match_args=False)
class ApprovalRequest:
    """A tool call waiting for the application's decision: call `accept()` or `reject()`."""

    server_name: str
    tool_name: str
    tool_args: dict[str, Any]
    _respond: Callable[[bool], Awaitable[None]]
    #: Why the call was refused, if `reject()` said: the calling code's error gives it.
    rejection: str | None = field(default=None, init=False)
    #: Who or what decided, if `accept()` or `reject()` said (the session notebook shows it).
    decided_by: str | None = field(default=None, init=False)

    __match_args__ = ("server_name", "tool_name", "tool_args")

    def __str__(self) -> str:
        """The call as a person should see it: names and values escaped, long values cut with a
        note (`tool_args` keeps all of them, raw)."""
        return display.call(self.server_name, self.tool_name, self.tool_args, display.sdk_hint)

    def __repr__(self) -> str:
        return f"ApprovalRequest({self.server_name!r}, {self.tool_name!r}, {self.tool_args!r})"

    async def accept(self, *, by: str | None = None) -> None:
        """Let the tool call run; `by` says who decided (default: "application")."""
        self.decided_by = by
        await self._respond(True)

    async def reject(self, reason: str | None = None, *, by: str | None = None) -> None:
        """Refuse the tool call; the calling code gets an error saying `reason` (e.g. "declined by
        the user"), by default "rejected by the application". `by` says who decided."""
        self.rejection = reason
        self.decided_by = by
        await self._respond(False)


async def _no_answer(accepted: bool) -> None:
    raise AssertionError("replaced before the request is handed out")


ApprovalCallback = Callable[[ApprovalRequest], Awaitable[None]]


class ApprovalClient:
    """Receives approval requests from a `ToolServer` over its socket and passes them to `callback`.

    The tool server only accepts an approval client that presents its `approval_token`, so code
    running in a kernel cannot approve its own tool calls.
    """

    def __init__(
        self,
        callback: ApprovalCallback,
        host: str = "localhost",
        port: int = 8900,
        *,
        token: str,
        path: str | None = None,
    ) -> None:
        self._callback = callback
        self._host, self._port, self._path = host, port, path
        self._token = token
        #: The connection and the task serving it, while connected.
        self._session: tuple[asyncio.StreamWriter, asyncio.Task[None]] | None = None

    async def __aenter__(self) -> ApprovalClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.disconnect()

    async def connect(self) -> None:
        """Connect to the tool server's approval channel."""
        if self._path:
            reader, writer = await asyncio.open_unix_connection(self._path)
        else:
            reader, writer = await asyncio.open_connection(self._host, self._port)
        writer.write(json.dumps({"op": "approve", "token": self._token}).encode() + b"\n")
        await writer.drain()
        answer = json.loads(await reader.readline() or b"{}")
        if not answer.get("ok"):
            writer.close()
            raise ConnectionRefusedError(answer.get("error", "approval channel refused the connection"))
        self._session = writer, asyncio.create_task(self._serve(reader, writer))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()
        pending: set[asyncio.Future[None]] = set()
        while line := await reader.readline():
            msg = json.loads(line)
            request = ApprovalRequest(msg["server_name"], msg["tool_name"], msg["tool_args"], _no_answer)

            async def respond(accepted: bool, key: Any = msg["id"], asked: ApprovalRequest = request) -> None:
                answer = {"id": key, "accepted": accepted, "reason": asked.rejection}
                async with lock:
                    writer.write(json.dumps(answer).encode() + b"\n")
                    await writer.drain()

            request._respond = respond
            task: asyncio.Future[None] = asyncio.ensure_future(self._callback(request))
            pending.add(task)
            task.add_done_callback(pending.discard)

    async def disconnect(self) -> None:
        """Disconnect; pending requests on the server side fail."""
        if self._session is None:
            return
        writer, task = self._session
        self._session = None
        writer.close()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
