"""Repairs what an MCP server sends that the SDK's models would reject, one tool at a time.

The SDK validates a `tools/list` page as a whole, so one malformed tool costs every tool on
its page (and the page's cursor). `ToolRepair` sits between a transport and a `ClientSession`
and rewrites such responses before the session sees them: a tool whose meaning is clear is
repaired, any other is dropped, and both are recorded in a `ToolReport`. Tool results whose
structured content is not an object (what a non-object output schema promises) become text.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from mcp.shared.message import SessionMessage
from mcp.types import Tool
from mcp.types.jsonrpc import JSONRPCError, JSONRPCRequest, JSONRPCResponse
from mcp.types.methods import SERVER_RESULTS, validate_server_result
from pydantic import ValidationError

from ipybox.errors import IpyboxError

if TYPE_CHECKING:
    from mcp.client._transport import ReadStream, WriteStream

logger = logging.getLogger(__name__)

#: Optional fields of a tool that API generation and tool calls can do without.
_METADATA = ("title", "description", "annotations", "icons", "execution", "_meta")
#: Requests whose responses are repaired.
_WATCHED = ("initialize", "tools/list", "tools/call")
_REASON_LIMIT = 300


@dataclass
class ToolReport:
    """What `ToolRepair` changed: tool names with what was repaired, or why a tool was skipped."""

    repaired: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    #: Output schemas of any JSON type but object (allowed since protocol 2026-07-28), by tool
    #: name: the SDK's models of earlier versions drop them, API generation still types results.
    output_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)


class UnusableToolError(IpyboxError):
    """A tool definition that cannot be repaired; the message says why."""


class _Rejection:
    """Why the SDK rejects a tool: the first error for each of the tool's fields at fault."""

    def __init__(self, error: ValidationError) -> None:
        self.errors: dict[str, str] = {}
        for e in error.errors():
            loc = _in_tool(e["loc"])
            field = str(loc[0]) if loc else "tool"
            self.errors.setdefault(field, f"{'.'.join(map(str, loc)) or field}: {e['msg']}")

    @property
    def fields(self) -> set[str]:
        return set(self.errors)

    def __str__(self) -> str:
        return "; ".join(self.errors.values())


def _in_tool(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """An error location relative to the tool, without the members of a union that failed."""
    loc = loc[2:] if loc[:2] == ("tools", 0) else loc  # a page's errors are in "tools", 0
    for i, part in enumerate(loc):
        if isinstance(part, str) and "[" in part:  # e.g. "dict[str,any]"
            return loc[:i]
    return loc


def _rejection(tool: Any, version: str | None) -> _Rejection | None:
    """Why the SDK would reject `tool` on a session speaking `version`, or None if it accepts it."""
    try:
        if version is not None and ("tools/list", version) in SERVER_RESULTS:
            validate_server_result("tools/list", version, {"tools": [tool]})
        Tool.model_validate(tool, by_name=False)
    except ValidationError as e:
        return _Rejection(e)
    return None


def _shorten(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _input_schema(schema: Any, problem: _Rejection) -> tuple[dict[str, Any], str]:
    """The input schema read the only way it can be, and how; `UnusableToolError` if there is no such way."""
    if schema is None:
        return {"type": "object"}, "no input schema: takes no parameters"
    if not isinstance(schema, dict):
        raise UnusableToolError(f"its input schema is {_shorten(schema)}, not a JSON Schema object")
    if "type" not in schema:
        reading = "an object" if schema.get("properties") else "an object with no declared parameters"
        return {"type": "object", **schema}, f'input schema without "type": read as {reading}'
    if schema["type"] != "object":
        raise UnusableToolError(
            f"its input schema has type {_shorten(schema['type'])}; tool arguments are an object"
        )
    raise UnusableToolError(f"its input schema is invalid ({problem.errors['inputSchema']})")


def _output_schema(schema: Any, problem: _Rejection) -> tuple[dict[str, Any] | None, str]:
    """An object output schema, or None (the result is text, as without a schema), and how."""
    if isinstance(schema, dict) and "type" not in schema and isinstance(schema.get("properties"), dict):
        return {"type": "object", **schema}, 'output schema without "type": read as an object'
    if isinstance(schema, dict) and schema.get("type") == "object":
        return None, f"invalid output schema ({problem.errors['outputSchema']}) dropped: the result is text"
    return None, f"output schema {_shorten(schema)} is not an object schema: the result is text"


def repair_tool(tool: Any, version: str | None) -> tuple[dict[str, Any], list[str]]:
    """`tool` as the SDK accepts it and what was changed (nothing if it was fine).

    Raises `UnusableToolError` with the reason if the tool cannot be used.
    """
    problem = _rejection(tool, version)
    if problem is None:
        return tool, []
    if not isinstance(tool, dict):
        raise UnusableToolError("the tool definition is not a JSON object")
    fixed, notes = dict(tool), []
    while problem is not None:
        if "name" in problem.fields:
            raise UnusableToolError(f"its name is unusable ({problem.errors['name']})")
        before = dict(fixed)
        if "inputSchema" in problem.fields:
            fixed["inputSchema"], note = _input_schema(fixed.get("inputSchema"), problem)
            notes.append(note)
        if "outputSchema" in problem.fields:
            output, note = _output_schema(fixed.pop("outputSchema", None), problem)
            if output is not None:
                fixed["outputSchema"] = output
            notes.append(note)
        for name in problem.fields.intersection(_METADATA):
            fixed.pop(name, None)
            notes.append(f"dropped its invalid {name!r}")
        if fixed == before:  # a fault nothing here repairs
            raise UnusableToolError(str(problem))
        problem = _rejection(fixed, version)
    return fixed, notes


class ToolRepair:
    """Watches the messages of one MCP session and repairs responses the SDK would reject.

    `streams()` wraps a transport's streams; hand the wrapped ones to `ClientSession`.
    """

    def __init__(self, report: ToolReport | None = None) -> None:
        self.report = report if report is not None else ToolReport()
        self._pending: dict[int | str, str] = {}  # request id -> method, for `_WATCHED` methods
        self._version: str | None = None

    def streams(
        self, read: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]
    ) -> tuple[_RepairingReader, _WatchingWriter]:
        return _RepairingReader(read, self), _WatchingWriter(write, self)

    def sent(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCRequest) and message.method in _WATCHED:
            self._pending[message.id] = message.method

    def received(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if isinstance(item, Exception):
            return item
        message = item.message
        if not isinstance(message, (JSONRPCResponse, JSONRPCError)) or message.id is None:
            return item
        method = self._pending.pop(message.id, None)
        if not isinstance(message, JSONRPCResponse) or method is None:
            return item
        result = message.result
        if method == "initialize":
            version = result.get("protocolVersion")
            self._version = version if isinstance(version, str) else None
            return item
        repaired = self._tool_list(result) if method == "tools/list" else _tool_result(result, self._version)
        if repaired is result:
            return item
        return dataclasses.replace(item, message=message.model_copy(update={"result": repaired}))

    def _tool_list(self, result: dict[str, Any]) -> dict[str, Any]:
        tools = result.get("tools")
        if not isinstance(tools, list) or _page_accepted(result, self._version):
            return result
        kept = []
        for index, tool in enumerate(tools):
            name = tool.get("name") if isinstance(tool, dict) else None
            name = name if isinstance(name, str) else f"<tool {index} of a page, without a usable name>"
            try:
                fixed, notes = repair_tool(tool, self._version)
            except UnusableToolError as e:
                self._skip(name, str(e))
                continue
            if notes:
                self._repaired(name, "; ".join(notes))
            output = tool.get("outputSchema") if isinstance(tool, dict) else None
            if (
                isinstance(output, dict)
                and output.get("type", "object") != "object"
                and "outputSchema" not in fixed
            ):
                self.report.output_schemas[name] = output
            kept.append(fixed)
        return result | {"tools": kept}

    def _skip(self, name: str, reason: str) -> None:
        reason = reason if len(reason) <= _REASON_LIMIT else reason[: _REASON_LIMIT - 3] + "..."
        if self.report.skipped.get(name) != reason:
            logger.warning("skipping MCP tool %r, which cannot be used: %s", name, reason)
        self.report.skipped[name] = reason

    def _repaired(self, name: str, notes: str) -> None:
        if self.report.repaired.get(name) != notes:
            logger.info("repaired MCP tool %r: %s", name, notes)
        self.report.repaired[name] = notes


def _page_accepted(result: dict[str, Any], version: str | None) -> bool:
    """Whether the SDK accepts every tool of a page as it is (the common case, checked at once)."""
    try:
        if version is not None and ("tools/list", version) in SERVER_RESULTS:
            validate_server_result("tools/list", version, {"tools": result["tools"]})
        for tool in result["tools"]:
            Tool.model_validate(tool, by_name=False)
    except ValidationError:
        return False
    return True


def _tool_result(result: dict[str, Any], version: str | None) -> dict[str, Any]:
    """A tool result whose structured content is not an object, as text, if the SDK rejects it."""
    structured = result.get("structuredContent")
    content = result.get("content")
    if structured is None or isinstance(structured, dict) or not isinstance(content, list):
        return result
    if version is not None and ("tools/call", version) in SERVER_RESULTS:
        try:
            validate_server_result("tools/call", version, result)
            return result  # a protocol version that allows it
        except ValidationError:
            pass
    logger.debug("a tool result's structured content is not an object; passing it on as text")
    repaired = {k: v for k, v in result.items() if k != "structuredContent"}
    if not any(isinstance(block, dict) and block.get("type") == "text" for block in content):
        text = structured if isinstance(structured, str) else json.dumps(structured)
        repaired["content"] = [*content, {"type": "text", "text": text}]
    return repaired


class _Wrapped:
    """What both stream wrappers pass straight on to the stream they wrap."""

    def __init__(self, inner: Any, repair: ToolRepair) -> None:
        self._inner = inner
        self._repair = repair

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
        return result


class _RepairingReader(_Wrapped):
    """A transport's read stream, with every response passed through `ToolRepair.received`."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], repair: ToolRepair) -> None:
        super().__init__(inner, repair)

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item, for transports that carry one."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return self._repair.received(await self._inner.receive())

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._repair.received(await self._inner.__anext__())


class _WatchingWriter(_Wrapped):
    """A transport's write stream that tells `ToolRepair` which requests go out."""

    def __init__(self, inner: WriteStream[SessionMessage], repair: ToolRepair) -> None:
        super().__init__(inner, repair)

    async def send(self, item: SessionMessage, /) -> None:
        self._repair.sent(item)
        await self._inner.send(item)
