"""Opens MCP client sessions from ipybox server parameters (stdio, streamable HTTP, SSE)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipybox.errors import IpyboxError
from ipybox.mcp_client.params import transport_of
from ipybox.mcp_client.placeholders import Placeholders, resolve
from ipybox.mcp_client.stdio import ServerStartError, StderrTail, open_stdio
from ipybox.tool_exec.approval import display
from ipybox.upstream import mcp_http_client

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import Tool

    from ipybox.mcp_client.repair import ToolReport


@contextlib.asynccontextmanager
async def open_session(
    params: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    report: ToolReport | None = None,
    source: str = "the values given",
    on_stderr: Callable[[StderrTail], object] | None = None,
) -> AsyncIterator[ClientSession]:
    """Connect to an MCP server and yield an initialized session.

    `${VAR}` placeholders are resolved from `env` (default: `.env` in the current directory plus
    the environment) by the rule of `resolve()`; `source` names where `env` came from.
    Tools the SDK would reject are repaired or left out of every listing (see `ipybox.mcp_client.repair`),
    so one malformed tool does not cost the others; `report` records which and why.
    `on_stderr` gets a stdio server's stderr tail, to quote if the server dies later.
    """
    from mcp import ClientSession
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    from ipybox.mcp_client.repair import ToolRepair

    kind = transport_of(params)
    if env is None:
        placeholders = Placeholders.of(Path.cwd())
        env, source = placeholders.values(), placeholders.describe()
    resolved = resolve(params, env, source)
    stderr: StderrTail | None = None
    async with contextlib.AsyncExitStack() as stack:
        if kind == "stdio":
            read, write, stderr = await open_stdio(stack, resolved)
            if on_stderr is not None:
                on_stderr(stderr)
        elif kind == "sse":
            read, write = await stack.enter_async_context(
                sse_client(resolved["url"], headers=resolved.get("headers"))
            )
        else:
            http = await stack.enter_async_context(mcp_http_client(resolved.get("headers")))
            read, write = await stack.enter_async_context(
                streamable_http_client(resolved["url"], http_client=http)
            )
        session = await stack.enter_async_context(ClientSession(*ToolRepair(report).streams(read, write)))
        try:
            await session.initialize()
        except Exception as e:
            if stderr is not None and (lines := stderr.lines()):
                reason = f"{describe_error(e)}; the server's stderr ended with:\n{lines}"
                raise ServerStartError(reason) from e
            raise
        yield session


async def list_all_tools(session: ClientSession) -> list[Tool]:
    """Every tool of a server, following pagination cursors."""
    from mcp.types import PaginatedRequestParams

    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def describe_error(error: BaseException | None) -> str:
    """One readable line for an error, flattening the exception groups of anyio task groups; what
    others' errors say (a server's error message) escaped, as errors quoting it reach a person."""
    if error is None:
        return ""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe_error(e) for e in error.exceptions)
    if not str(error):
        return type(error).__name__
    said = str(error) if isinstance(error, IpyboxError) else display.escape(str(error))  # ours: escaped
    return f"{type(error).__name__}: {said}"
