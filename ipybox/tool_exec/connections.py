"""Long-lived MCP server connections, started on first use and restarted after a crash."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ipybox.errors import IpyboxError
from ipybox.mcp_client.session import describe_error, list_all_tools, open_session
from ipybox.mcp_client.stdio import StderrTail

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult

logger = logging.getLogger(__name__)


class ToolCallError(IpyboxError):
    """A tool call could not be completed; the message is meant for the caller's code.

    `rejected` says the application rejected it (the kernel raises `ApprovalRejectedError`).
    """

    def __init__(self, message: str, *, rejected: bool = False) -> None:
        super().__init__(message)
        self.rejected = rejected


class _Connection:
    """One MCP session, owned by a task so its transport is opened and closed in one place."""

    def __init__(self, name: str, params: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.params = dict(params)
        self._env = env
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        self._stderr: StderrTail | None = None  # a stdio server's: quoted if it dies during a call
        self._task = asyncio.create_task(self._run(), name=f"mcp-{name}")

    async def _run(self) -> None:
        try:
            async with open_session(self.params, self._env, on_stderr=self._keep_stderr) as session:
                await _learn_output_schemas(session)
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported to whoever waits on this connection
            self._error = e
        finally:
            self._session = None
            self._ready.set()

    def _keep_stderr(self, tail: StderrTail) -> None:
        self._stderr = tail

    def _last_words(self, since: int) -> str:
        """What a stdio server wrote to stderr after `since` (else last), to end an error with."""
        if self._stderr is None:
            return ""
        if lines := self._stderr.lines(since):
            return f" During the call it wrote to stderr:\n{lines}"
        lines = self._stderr.lines()
        return f" Its stderr ended with:\n{lines}" if lines else ""

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def session(self, timeout: float) -> ClientSession:
        try:
            if not self._ready.is_set():  # wait_for costs a task: only while the server starts
                await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            await self.close()
            raise ToolCallError(
                f"MCP server {self.name!r} did not start within {timeout:g} s (connect_timeout)."
            ) from None
        if self._session is None:
            reason = describe_error(self._error)
            raise ToolCallError(f"Could not connect to MCP server {self.name!r}: {reason}")
        return self._session

    async def call(self, tool: str, args: dict[str, Any], timeout: float | None) -> CallToolResult:
        """Call a tool, failing fast if the server goes away during the call.

        The request runs in the caller's task (no task of its own: a tool call is the hot path),
        which the connection's end cancels; `uncancel()` tells that apart from the caller's own
        cancellation.
        """
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        session = self._session
        assert session is not None
        said = self._stderr.mark() if self._stderr is not None else 0
        caller = asyncio.current_task()
        assert caller is not None
        ended = False

        def on_end(_: object) -> None:
            nonlocal ended
            ended = True
            caller.cancel()

        self._task.add_done_callback(on_end)
        deadline = asyncio.timeout(timeout)
        try:
            try:
                async with deadline:
                    return await session.call_tool(tool, args)
            finally:
                self._task.remove_done_callback(on_end)
        except asyncio.CancelledError:
            if not ended or caller.uncancel() > 0:
                raise  # the caller gave up: so does the request to the server
        except MCPError as e:
            if e.code != CONNECTION_CLOSED:
                raise
            last_words = self._last_words(said)
            if not ended:  # (once ended, the cancel on its way would end the close too)
                await self.close()  # the transport is gone (the server exited): start afresh
            raise ToolCallError(
                f"MCP server {self.name!r} closed the connection during the call to {tool!r}."
                f" It will be restarted on the next call.{last_words or self._last_words(said)}"
            ) from None
        except TimeoutError:
            if not deadline.expired():
                raise
            if not ended:
                await self.close()
                raise ToolCallError(
                    f"Tool {tool!r} of MCP server {self.name!r} did not answer within {timeout:g} s."
                ) from None
        raise ToolCallError(
            f"MCP server {self.name!r} closed the connection during the call to {tool!r}"
            f" ({describe_error(self._error) or 'it exited'}). It will be restarted on the next call."
            f"{self._last_words(said)}"
        )

    async def close(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 10)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


async def _learn_output_schemas(session: ClientSession) -> None:
    """List every tool once, so the session knows each tool's output schema.

    Otherwise the SDK lists (only the first page of) tools again before validating the result
    of any tool it has not seen, on every call to a tool that is not on that page.
    """
    try:
        await list_all_tools(session)
    except Exception as e:  # noqa: BLE001 - a server without tools/list can still run its tools
        logger.debug("could not list the tools of an MCP server: %s", describe_error(e))


class ConnectionPool:
    """Connections by server name; a crashed connection is replaced on the next call."""

    def __init__(self, connect_timeout: float = 30, call_timeout: float | None = None) -> None:
        self._connect_timeout = connect_timeout
        self._call_timeout = call_timeout
        self._connections: dict[str, _Connection] = {}
        self._lock = asyncio.Lock()

    async def _get(self, name: str, params: Mapping[str, Any], env: Mapping[str, str] | None) -> _Connection:
        async with self._lock:
            conn = self._connections.get(name)
            if conn is not None and (not conn.alive or conn.params != dict(params)):
                await conn.close()
                conn = None
            if conn is None:
                conn = self._connections[name] = _Connection(name, params, env)
        try:
            await conn.session(self._connect_timeout)
        except ToolCallError:
            if self._connections.get(name) is conn:  # not a newer connection started meanwhile
                del self._connections[name]
            raise
        return conn

    async def call(
        self,
        name: str,
        params: Mapping[str, Any],
        tool: str,
        args: dict[str, Any],
        env: Mapping[str, str] | None = None,
    ) -> CallToolResult:
        """Call a tool, starting the server if needed; its `${VAR}` placeholders take values from `env`."""
        conn = await self._get(name, params, env)
        return await conn.call(tool, args, self._call_timeout)

    async def close(self) -> None:
        """Close every connection (stdio servers are terminated)."""
        async with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
