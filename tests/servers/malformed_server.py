"""An MCP server whose `tools/list` holds tools the MCP SDK's models reject.

Written as raw JSON-RPC over stdio (one JSON message per line) rather than on the SDK,
since the SDK's server refuses to send such tools; real servers in other languages do.
Run it as::

    uv run python tests/servers/malformed_server.py

`tools/list` has two pages (`PAGES`; the cursor is `"page:1"`), each with a tool the SDK
rejects next to good ones, so a client that drops a whole page on one bad tool loses
good tools too. Every tool call answers with `TextContent(json.dumps(arguments, sort_keys=True))`
except where `_call` says otherwise.
"""

from __future__ import annotations

import json
import sys
from typing import Any

Json = dict[str, Any]

#: Tools with a schema the SDK accepts.
GOOD: list[Json] = [
    {
        "name": "echo",
        "description": "Return `message`.",
        "inputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        },
    },
    {
        "name": "add",
        "description": "Add two integers; a structured result.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"sum": {"type": "integer"}},
            "required": ["sum"],
        },
    },
]

#: Tools the SDK rejects but whose meaning is clear: a client can repair them.
REPAIRABLE: list[Json] = [
    {
        "name": "empty_input",
        "description": 'An input schema of `{}` (no "type") and annotations that are a string.',
        "inputSchema": {},
        "annotations": "read-only",
    },
    {
        "name": "untyped_input",
        "description": 'An input schema with properties but no "type".',
        "inputSchema": {"properties": {"n": {"type": "integer"}}, "required": ["n"]},
    },
    {
        "name": "string_output",
        "description": 'Output schema `{"type": "string"}`; the result is a string.',
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "outputSchema": {"type": "string"},
    },
    {
        "name": "array_output",
        "description": "Output schema of an array; the structured content is a bare list.",
        "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}},
        "outputSchema": {"type": "array", "items": {"type": "integer"}},
    },
]

#: Tools the SDK rejects that nobody can make sense of: a client must skip them.
UNUSABLE: list[Json] = [
    {"name": "string_input", "description": "The input schema is a string.", "inputSchema": "anything goes"},
    {
        "name": "bad_properties",
        "description": "A property schema that is a string.",
        "inputSchema": {"type": "object", "properties": {"x": "string"}},
    },
]

_BY_NAME = {tool["name"]: tool for tool in GOOD + REPAIRABLE + UNUSABLE}
PAGES: list[list[Json]] = [
    [_BY_NAME[n] for n in ("echo", "empty_input", "string_output", "string_input")],
    [_BY_NAME[n] for n in ("untyped_input", "bad_properties", "array_output", "add")],
]


def _text(text: str) -> list[Json]:
    return [{"type": "text", "text": text}]


def _call(name: str, args: Json) -> Json:
    if name == "echo":
        return {"content": _text(str(args.get("message")))}
    if name == "add":
        total = int(args["a"]) + int(args["b"])
        return {"content": _text(str(total)), "structuredContent": {"sum": total}}
    if name == "string_output":
        shouted = str(args.get("text", "")).upper()
        return {"content": _text(shouted), "structuredContent": shouted}
    if name == "array_output":
        return {"content": [], "structuredContent": list(range(int(args.get("count", 3))))}
    return {"content": _text(json.dumps(args, sort_keys=True))}


def _result(method: str, params: Json) -> Json:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "malformed", "version": "1.0"},
        }
    if method == "tools/list":
        cursor = params.get("cursor")
        page = int(cursor.removeprefix("page:")) if isinstance(cursor, str) else 0
        more = {"nextCursor": f"page:{page + 1}"} if page + 1 < len(PAGES) else {}
        return {"tools": PAGES[page], **more}
    if method == "tools/call":
        return _call(str(params.get("name")), params.get("arguments") or {})
    if method == "ping":
        return {}
    raise LookupError(method)


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # a notification, or a response to nothing we asked
        reply: Json = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            reply["result"] = _result(message["method"], message.get("params") or {})
        except LookupError as e:
            reply["error"] = {"code": -32601, "message": f"Method not found: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
