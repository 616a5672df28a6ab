"""How the tool server settles a call it allows, and what it reports of each one.

`ToolCalls` is the seam: it decides a call (asks for approval) and makes it. `LiveCalls` asks the
application and calls the MCP server; a resume puts in one that answers both from a session's
record (`ipybox.notebook.replay`), so nothing is asked or done again. Each settled call, tool or
shell command, is reported as a `ToolCallEvent` to the tool server's observers (the session
notebook is one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ipybox.tool_exec.approval.server import ApprovalChannel, Decision
from ipybox.tool_exec.connections import ConnectionPool, ToolCallError

if TYPE_CHECKING:
    from mcp.types import CallToolResult


@dataclass(frozen=True)
class ToolCallEvent:
    """A tool call (`kind` "tool") or shell command ("shell", server "ipybox") as it was settled.

    `tool_args` are raw: redact them with `secrets` (the values of its `${VAR}` placeholders) before
    they are kept anywhere. `decision` is as the audit log writes it (accepted, rejected, auto,
    refused, timed_out), `decided_by` who or what decided (None: nobody was asked). `result` is the
    encoded result the kernel got, `error` the error it got instead.
    """

    kind: str
    server_name: str
    tool_name: str
    tool_args: dict[str, Any]
    decision: str
    decided_by: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    secrets: tuple[str, ...] = ()


class ToolCalls(Protocol):
    """Decides and makes the calls a tool server allows (registered server, placeholders resolved)."""

    async def decide(
        self, server_name: str, tool_name: str, tool_args: dict[str, Any], *, kind: str
    ) -> Decision:
        """Whether the call may run (`kind` "tool" or "shell"). Raises `RuntimeError` when nobody can
        be asked, `TimeoutError` when no decision came in time, `ToolCallError` to refuse it."""
        ...

    async def call(
        self,
        server_name: str,
        server_params: Mapping[str, Any],
        tool_name: str,
        tool_args: dict[str, Any],
        env: Mapping[str, str],
    ) -> dict[str, Any]:
        """Make an accepted tool call: its encoded result, or `ToolCallError` (the kernel's error)."""
        ...


class LiveCalls:
    """Asks `approval` and calls the MCP servers of `pool`: what a tool server does by default."""

    def __init__(self, approval: ApprovalChannel, pool: ConnectionPool) -> None:
        self._approval = approval
        self._pool = pool

    async def decide(
        self, server_name: str, tool_name: str, tool_args: dict[str, Any], *, kind: str
    ) -> Decision:
        return await self._approval.ask(server_name, tool_name, tool_args, kind=kind)

    async def call(
        self,
        server_name: str,
        server_params: Mapping[str, Any],
        tool_name: str,
        tool_args: dict[str, Any],
        env: Mapping[str, str],
    ) -> dict[str, Any]:
        pending = self._pool.call(server_name, server_params, tool_name, tool_args, env)
        return await _settled(f"{server_name}.{tool_name}", pending)


async def _settled(call: str, pending: Awaitable[CallToolResult]) -> dict[str, Any]:
    """The encoded result of the tool call `pending`; its failures as `ToolCallError`s naming `call`."""
    try:
        result = await pending
    except ToolCallError:
        raise
    except Exception as e:
        raise ToolCallError(f"Tool call {call} failed: {type(e).__name__}: {e}") from None
    encoded = encode_result(result)
    if result.is_error:
        raise ToolCallError(encoded["text"] or f"Tool call {call} reported an error without a message.")
    return encoded


def encode_result(result: CallToolResult) -> dict[str, Any]:
    """A tool result as plain JSON: joined text, structured content and every content block."""
    blocks: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in result.content:
        data = block.model_dump(mode="json", by_alias=False, exclude_none=True)
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "resource" and isinstance(getattr(block.resource, "text", None), str):
            texts.append(block.resource.text)  # type: ignore[union-attr]
        blocks.append(data)
    return {"text": "\n".join(texts), "structured": result.structured_content, "content": blocks}
