"""A stdio MCP server that serves recorded `tools/list` output, or a synthetic set of tools.

Run it as::

    uv run python tests/servers/replay_server.py tests/mcp_apigen/corpus/server-time.json
    uv run python tests/servers/replay_server.py --synthetic 100

A fixture is a JSON object with a `tools` list, each tool as a real server listed it
(`name`, `description`, `inputSchema`, `outputSchema`), so the generator sees the real
schemas over a real MCP session. `--synthetic N` serves N tools with the mix of constraints,
nested objects, enums and `$ref`s that real servers use (for benchmarks). `tools/list` is
paginated (`PAGE_SIZE` tools per page). Every tool call echoes its arguments:
`json.dumps(arguments, sort_keys=True)` as text, and `{"received": arguments}` as structured
content for tools with an output schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

PAGE_SIZE = 25

Json = dict[str, Any]


def load_fixture(path: str | Path) -> list[Json]:
    """The tools of a recorded `tools/list` fixture."""
    tools: list[Json] = json.loads(Path(path).read_text(encoding="utf-8"))["tools"]
    return tools


def synthetic_tool(i: int) -> Json:
    """Tool number `i` of the synthetic server: what a typical real tool declares, and more."""
    ref = {
        "type": "object",
        "description": "A filter on one field.",
        "properties": {
            "field": {"type": "string", "minLength": 1, "maxLength": 64},
            "op": {"type": "string", "enum": ["eq", "ne", "lt", "gt", "contains"]},
            "value": {"type": ["string", "number", "boolean", "null"]},
        },
        "required": ["field", "op"],
    }
    schema: Json = {
        "type": "object",
        "$defs": {"Filter": ref},
        "properties": {
            "query": {"type": "string", "description": f"Search text for item kind {i}.", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            "offset": {"type": "integer", "minimum": 0},
            "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "multipleOf": 0.01},
            "since": {"type": "string", "format": "date-time", "description": "Only items after this."},
            "id": {"type": "string", "format": "uuid"},
            "code": {"type": "string", "pattern": "^[A-Z]{2,4}-[0-9]+$"},
            "sort": {"type": "string", "enum": ["asc", "desc"], "default": "asc"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
            "filters": {"type": "array", "items": {"$ref": "#/$defs/Filter"}, "maxItems": 10},
            "options": {
                "type": "object",
                "properties": {
                    "verbose": {"type": "boolean"},
                    "timeout_ms": {"type": "integer", "minimum": 100, "maximum": 60000},
                    "callback": {"type": "string", "format": "uri"},
                },
            },
            "contact": {"type": "string", "format": "email"},
        },
        "required": ["query"],
    }
    output: Json | None = None
    if i % 3 == 0:
        output = {
            "type": "object",
            "properties": {
                "received": {"type": "object"},
                "total": {"type": "integer", "minimum": 0},
            },
            "required": ["received"],
        }
    return {
        "name": f"search_kind_{i}",
        "description": f"Search items of kind {i}.",
        "inputSchema": schema,
        "outputSchema": output,
    }


def synthetic_tools(count: int) -> list[Json]:
    return [synthetic_tool(i) for i in range(count)]


def _tool(raw: Json) -> types.Tool:
    return types.Tool(
        name=raw["name"],
        description=raw.get("description"),
        input_schema=raw.get("inputSchema") or {"type": "object"},
        output_schema=raw.get("outputSchema"),
    )


def serve(tools: list[Json]) -> None:
    """Serve `tools` over stdio until the client goes away."""
    listed = [_tool(raw) for raw in tools]
    by_name = {tool.name: tool for tool in listed}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        cursor = params.cursor if params is not None else None
        start = int(cursor.removeprefix("page:")) if cursor else 0
        end = start + PAGE_SIZE
        next_cursor = f"page:{end}" if end < len(listed) else None
        return types.ListToolsResult(tools=listed[start:end], next_cursor=next_cursor)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name!r}")
        arguments = dict(params.arguments or {})
        text = [types.TextContent(type="text", text=json.dumps(arguments, sort_keys=True))]
        if tool.output_schema is not None:
            return types.CallToolResult(content=text, structured_content={"received": arguments})
        return types.CallToolResult(content=text)

    server: Server[Any] = Server("replay", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--synthetic"]:
        serve(synthetic_tools(int(sys.argv[2])))
    else:
        serve(load_fixture(sys.argv[1]))
