"""A deliberately hostile MCP server for testing Python code generators.

Serves, over stdio, a battery of tools whose names, raw JSON schemas and
descriptions are hard to turn into Python code. Run it as::

    uv run python tests/servers/nasty_server.py

Built on the low-level `mcp.server.lowlevel.Server`, so every `input_schema` and
`output_schema` below goes over the wire exactly as written (no schema is derived
from a Python signature).

Behaviour:

- Unless a tool is listed in `SPECIAL_HANDLERS`, it echoes its arguments back:
  tools without an output schema return one `TextContent` holding
  `json.dumps(arguments, sort_keys=True)`; tools with an output schema return
  `structured_content` containing `{"received": arguments, ...}` plus the same JSON
  as text. Arguments are NOT validated against the input schema, so tests see exactly
  what the client sent.
- `tools/list` is paginated (`PAGE_SIZE` tools per page, opaque `next_cursor`), so a
  client that does not follow cursors misses most tools (including `echo`, which is
  listed last).
- `array_output` is protocol-version aware: the MCP wire format up to 2025-11-25
  (which `ClientSession.initialize()` negotiates) requires `type: "object"` at the
  root of an output schema and an object as `structured_content`; the SDK refuses
  a tools/list result that breaks this rule with "Handler returned an invalid result"
  (the whole page fails). On those versions the array schema is wrapped as
  `{"type": "object", "properties": {"result": <array schema>}, "required": ["result"]}`
  and the result as `{"result": [...]}`. On 2026-07-28 the raw array schema is
  served and the structured content is the bare list.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

PAGE_SIZE = 5

JsonSchema = dict[str, Any]
Arguments = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str | None
    input_schema: JsonSchema
    output_schema: JsonSchema | None = None


def _one_string(prop: str = "x") -> JsonSchema:
    return {"type": "object", "properties": {prop: {"type": "string", "description": "Any string."}}}


# --------------------------------------------------------------------------------------
# 1. Tool names that are not Python identifiers, are keywords, or collide when cleaned.
# --------------------------------------------------------------------------------------

LONG_NAME = "a" * 120

NAME_TOOLS = [
    ToolSpec("get-user.info", "Name with a hyphen and a dot.", _one_string()),
    ToolSpec("class", "Name is a Python keyword.", _one_string()),
    ToolSpec("3d_render", "Name starts with a digit.", _one_string()),
    ToolSpec("list", "Name shadows a builtin; collides with 'List' and 'list!'.", _one_string()),
    ToolSpec("List", "Collides with 'list' case-insensitively.", _one_string()),
    ToolSpec("list!", "Collides with 'list' once '!' is removed.", _one_string()),
    ToolSpec("über_tool", "Non-ASCII tool name.", _one_string()),
    ToolSpec(LONG_NAME, "A 120-character tool name.", _one_string()),
]

# --------------------------------------------------------------------------------------
# 2. Property names that are keywords, collide with pydantic/BaseModel attributes, are
#    not identifiers, or collide with each other after case folding.
# --------------------------------------------------------------------------------------

PROPERTY_TOOLS = [
    ToolSpec(
        "nasty_properties",
        "Property names that are keywords, pydantic attributes, non-identifiers or case collisions.",
        {
            "type": "object",
            "properties": {
                "class": {"type": "string", "description": "Python keyword."},
                "from": {"type": "string", "description": "Python keyword."},
                "user-name": {"type": "string", "description": "Contains a hyphen."},
                "schema": {"type": "string", "description": "Shadows BaseModel.schema."},
                "fields": {"type": "array", "items": {"type": "string"}, "description": "BaseModel attr."},
                "validate": {"type": "boolean", "description": "Shadows BaseModel.validate."},
                "model_config": {"type": "object", "description": "Reserved by pydantic v2."},
                "model_dump": {"type": "string", "description": "Shadows BaseModel.model_dump."},
                "123abc": {"type": "integer", "description": "Starts with a digit."},
                "with space": {"type": "string", "description": "Contains a space."},
                "_private": {"type": "string", "description": "Leading underscore (pydantic private)."},
                "__dunder__": {"type": "string", "description": "Dunder name."},
                "Param": {"type": "string", "description": "Collides with 'param' case-insensitively."},
                "param": {"type": "integer", "description": "Collides with 'Param' case-insensitively."},
                "self": {"type": "string", "description": "Conflicts with a method's self."},
            },
            "required": ["class", "from", "self"],
        },
    ),
    ToolSpec(
        "more_nasty_properties",
        "More property names likely to clash with generated code.",
        {
            "type": "object",
            "properties": {
                "return": {"type": "string"},
                "None": {"type": "string"},
                "True": {"type": "boolean"},
                "async": {"type": "string"},
                "await": {"type": "string"},
                "lambda": {"type": "string"},
                "import": {"type": "string"},
                "type": {"type": "string", "description": "Shadows a builtin."},
                "id": {"type": "integer", "description": "Shadows a builtin."},
                "json": {"type": "string", "description": "Shadows a common module name."},
                "name": {"type": "string", "description": "Often a parameter of call_tool(name, ...)."},
                "arguments": {"type": "object", "description": "Often a parameter of call_tool."},
                "args": {"type": "array", "items": {"type": "string"}},
                "kwargs": {"type": "object"},
                "user_name": {"type": "string", "description": "Collides with 'user-name' once cleaned."},
                "user-name": {"type": "string", "description": "Collides with 'user_name' once cleaned."},
            },
            "required": ["return", "name"],
        },
    ),
]

# --------------------------------------------------------------------------------------
# 3. JSON Schema features.
# --------------------------------------------------------------------------------------

ADDRESS: JsonSchema = {
    "type": "object",
    "description": "A postal address.",
    "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
    },
    "required": ["street", "city"],
}

SCHEMA_TOOLS = [
    ToolSpec(
        "refs",
        "Uses $ref/$defs; the Address definition is referenced twice.",
        {
            "type": "object",
            "$defs": {"Address": ADDRESS},
            "properties": {
                "home": {"$ref": "#/$defs/Address"},
                "work": {"$ref": "#/$defs/Address", "description": "Optional work address."},
            },
            "required": ["home"],
        },
    ),
    ToolSpec(
        "recursive",
        "Recursive $ref: a TreeNode has a list of TreeNode children.",
        {
            "type": "object",
            "$defs": {
                "TreeNode": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/TreeNode"}},
                    },
                    "required": ["value"],
                }
            },
            "properties": {"root": {"$ref": "#/$defs/TreeNode"}},
            "required": ["root"],
        },
    ),
    ToolSpec(
        "draft07_definitions",
        "Draft-07 style 'definitions' instead of '$defs'.",
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "definitions": {
                "Item": {
                    "type": "object",
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                    "required": ["sku"],
                }
            },
            "properties": {
                "item": {"$ref": "#/definitions/Item"},
                "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}},
            },
            "required": ["item"],
        },
    ),
    ToolSpec(
        "unions",
        "anyOf of scalars, oneOf of two objects, allOf merging two objects.",
        {
            "type": "object",
            "properties": {
                "str_or_int": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "shape": {
                    "oneOf": [
                        {
                            "type": "object",
                            "title": "Circle",
                            "properties": {"kind": {"const": "circle"}, "radius": {"type": "number"}},
                            "required": ["kind", "radius"],
                        },
                        {
                            "type": "object",
                            "title": "Square",
                            "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                            "required": ["kind", "side"],
                        },
                    ]
                },
                "merged": {
                    "allOf": [
                        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                        {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
                    ]
                },
            },
            "required": ["str_or_int"],
        },
    ),
    ToolSpec(
        "nullables",
        "Nullable via a type list and via anyOf with null.",
        {
            "type": "object",
            "properties": {
                "type_list": {"type": ["string", "null"]},
                "any_of_null": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "required_but_nullable": {"type": ["string", "null"]},
            },
            "required": ["required_but_nullable"],
        },
    ),
    ToolSpec(
        "enums_consts",
        "const, enums with non-identifier string values, mixed-type enum, integer enum.",
        {
            "type": "object",
            "properties": {
                "fixed": {"const": "fixed"},
                "str_enum": {"type": "string", "enum": ["a-b", "c d", "1x", "class", ""]},
                "mixed_enum": {"enum": [1, "two", None, True, 2.5]},
                "int_enum": {"type": "integer", "enum": [1, 2, 3]},
            },
            "required": ["fixed", "str_enum"],
        },
    ),
    ToolSpec(
        "defaults",
        "Defaults of every JSON type; the required property comes last.",
        {
            "type": "object",
            "properties": {
                "s": {"type": "string", "default": 'hello "world" \\ """'},
                "i": {"type": "integer", "default": 42},
                "b": {"type": "boolean", "default": True},
                "f": {"type": "number", "default": 0.5},
                "l": {"type": "array", "items": {"type": "string"}, "default": ["x", "y"]},
                "o": {"type": "object", "default": {"k": "v", "n": 1}},
                "n": {"type": ["string", "null"], "default": None},
                "req": {"type": "string", "description": "Required, listed after the defaulted ones."},
            },
            "required": ["req"],
        },
    ),
    ToolSpec(
        "free_form",
        "Free-form objects, a map of integers, an empty schema and a boolean schema.",
        {
            "type": "object",
            "properties": {
                "any_object": {"type": "object"},
                "int_map": {"type": "object", "additionalProperties": {"type": "integer"}},
                "anything": {},
                "bool_schema": True,
            },
        },
    ),
    ToolSpec(
        "arrays",
        "Array without items, array of arrays, tuple via prefixItems.",
        {
            "type": "object",
            "properties": {
                "untyped": {"type": "array"},
                "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                "pair": {
                    "type": "array",
                    "prefixItems": [{"type": "string"}, {"type": "integer"}],
                    "items": False,
                    "minItems": 2,
                    "maxItems": 2,
                },
            },
        },
    ),
    ToolSpec(
        "constraints",
        "Numeric bounds, date-time format, regex pattern with backslashes.",
        {
            "type": "object",
            "properties": {
                "ratio": {"type": "number", "minimum": 0, "maximum": 1},
                "count": {"type": "integer", "minimum": 1, "exclusiveMaximum": 100},
                "when": {"type": "string", "format": "date-time"},
                "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d+$", "minLength": 5, "maxLength": 12},
            },
            "required": ["ratio"],
        },
    ),
]

# --------------------------------------------------------------------------------------
# 4. Empty input schemas.
# --------------------------------------------------------------------------------------

EMPTY_INPUT_TOOLS = [
    ToolSpec("no_args_bare", 'Input schema is just {"type": "object"}.', {"type": "object"}),
    ToolSpec(
        "no_args_empty_props",
        'Input schema is {"type": "object", "properties": {}}.',
        {"type": "object", "properties": {}},
    ),
    ToolSpec(
        "no_args_strict",
        "Empty properties, empty required, additionalProperties false.",
        {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
    ),
]

# --------------------------------------------------------------------------------------
# 5. Output schemas.
# --------------------------------------------------------------------------------------

ARRAY_OF_STRINGS: JsonSchema = {"type": "array", "items": {"type": "string"}}

OUTPUT_TOOLS = [
    ToolSpec(
        "structured_output",
        "Object output schema with nested objects.",
        {"type": "object", "properties": {"user_id": {"type": "integer"}}},
        {
            "type": "object",
            "properties": {
                "received": {"type": "object"},
                "user": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "name": {"type": "string"},
                        "address": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                            "required": ["city"],
                        },
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["id", "name", "address"],
                },
            },
            "required": ["received", "user"],
        },
    ),
    ToolSpec(
        "array_output",
        "Output schema is an array of strings (wrapped as {'result': [...]} before 2026-07-28). "
        "Returns the 'items' argument.",
        {"type": "object", "properties": {"items": ARRAY_OF_STRINGS}, "required": ["items"]},
        ARRAY_OF_STRINGS,
    ),
    ToolSpec(
        "ref_output",
        "Output schema uses $ref/$defs.",
        {"type": "object", "properties": {"n": {"type": "integer", "default": 2}}},
        {
            "type": "object",
            "$defs": {
                "Point": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x", "y"],
                }
            },
            "properties": {
                "received": {"type": "object"},
                "origin": {"$ref": "#/$defs/Point"},
                "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
            },
            "required": ["received", "origin", "points"],
        },
    ),
]

# --------------------------------------------------------------------------------------
# 6. Descriptions that break naive code generation.
# --------------------------------------------------------------------------------------

INJECTION = (
    '"""\nimport os; os.system("touch /tmp/pwned")\n"""'
    "\n'''\nimport os; os.system('touch /tmp/pwned')\n'''"
    "\n\"; import os; os.system('touch /tmp/pwned'); \""
    "\n'; import os; os.system('touch /tmp/pwned'); '"
    "\nimport os; os.system('touch /tmp/pwned')  # after a newline, for '#' comments"
)

DESC_QUOTES = "Has \"\"\"triple double\"\"\" and '''triple single''' quotes, a lone \" and a lone ' too."
DESC_BACKSLASHES = (
    "Backslashes: C:\\path\\to\\file, literal \\n and \\t (not escapes), \\x41, \\u0041, \\N{BULLET}, "
    '\\" and a real\nnewline. Ends with a backslash \\'
)
DESC_FORMAT = "Braces {braces} {0} {{double}} {} and printf %s %d %(name)s %%; f-string {__import__('os')}"
DESC_UNICODE = "Ünïcödé — em dash, emoji 🚀, CJK 漢字, RTL שלום, combining e\u0301, zero-width\u200bspace."
DESC_CONTROL = (
    "Carriage\rreturn, tab\tchar, form\x0cfeed, vertical\x0btab, line\u2028separator, "
    "paragraph\u2029separator, escape \x1b[31mred\x1b[0m, bell\x07."
)

DESCRIPTION_TOOLS = [
    ToolSpec("desc_quotes", DESC_QUOTES, _one_string()),
    ToolSpec("desc_backslashes", DESC_BACKSLASHES, _one_string()),
    ToolSpec("desc_format", DESC_FORMAT, _one_string()),
    ToolSpec("desc_unicode", DESC_UNICODE, _one_string()),
    ToolSpec("desc_control_chars", DESC_CONTROL, _one_string()),
    ToolSpec("desc_injection", INJECTION, _one_string()),
    ToolSpec(
        "desc_properties",
        "Nasty text in property descriptions, titles, defaults and enum values.",
        {
            "type": "object",
            "title": 'Title with """ quotes',
            "properties": {
                "quotes": {"type": "string", "description": DESC_QUOTES},
                "backslashes": {"type": "string", "description": DESC_BACKSLASHES},
                "fmt": {"type": "string", "description": DESC_FORMAT},
                "uni": {"type": "string", "description": DESC_UNICODE},
                "ctrl": {"type": "string", "description": DESC_CONTROL},
                "inject": {
                    "type": "string",
                    "title": INJECTION,
                    "description": INJECTION,
                    "default": INJECTION,
                },
                "quoted_enum": {
                    "type": "string",
                    "enum": ['say "hi"', "it's", "back\\slash", '"""', "'''", "{x}", "new\nline"],
                    "description": "Enum values with quotes, backslashes, braces and a newline.",
                },
            },
            "required": ["quotes"],
        },
    ),
    ToolSpec("no_description", None, _one_string()),
    ToolSpec("empty_description", "", _one_string()),
]

# --------------------------------------------------------------------------------------
# 7. Behaviour tools.
# --------------------------------------------------------------------------------------

BEHAVIOUR_TOOLS = [
    ToolSpec("fail", "Always returns is_error=True.", {"type": "object"}),
    ToolSpec("crash", "Kills the server process (os._exit(1)) mid-call.", {"type": "object"}),
    ToolSpec(
        "slow",
        "Sleeps for 'seconds' then returns 'done'.",
        {
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0, "default": 1}},
        },
    ),
    ToolSpec("image", "Returns a 1x1 PNG ImageContent plus a TextContent.", {"type": "object"}),
    ToolSpec("resource", "Returns an EmbeddedResource with text.", {"type": "object"}),
    ToolSpec(
        "echo",
        "Returns a text content equal to 'message'.",
        {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    ),
]

TOOLS: list[ToolSpec] = [
    *NAME_TOOLS,
    *PROPERTY_TOOLS,
    *SCHEMA_TOOLS,
    *EMPTY_INPUT_TOOLS,
    *OUTPUT_TOOLS,
    *DESCRIPTION_TOOLS,
    *BEHAVIOUR_TOOLS,
]
TOOLS_BY_NAME: dict[str, ToolSpec] = {t.name: t for t in TOOLS}
assert len(TOOLS_BY_NAME) == len(TOOLS), "duplicate tool names"

# Tools whose output schema is not an object; wrapped under "result" on legacy versions.
NON_OBJECT_OUTPUT = {"array_output"}


def _is_modern(protocol_version: str) -> bool:
    return protocol_version in MODERN_PROTOCOL_VERSIONS


def _wire_output_schema(spec: ToolSpec, protocol_version: str) -> JsonSchema | None:
    if spec.output_schema is None or spec.name not in NON_OBJECT_OUTPUT or _is_modern(protocol_version):
        return spec.output_schema
    return {"type": "object", "properties": {"result": spec.output_schema}, "required": ["result"]}


def _tiny_png() -> bytes:
    """A valid 1x1 red RGB PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


PNG_BASE64 = base64.b64encode(_tiny_png()).decode("ascii")

# --------------------------------------------------------------------------------------
# Handlers.
# --------------------------------------------------------------------------------------


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _echo_text(arguments: Arguments) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(json.dumps(arguments, sort_keys=True))])


def _structured(structured: Any) -> types.CallToolResult:
    return types.CallToolResult(
        content=[_text(json.dumps(structured, sort_keys=True))], structured_content=structured
    )


ToolHandler = Callable[[Arguments, str], Awaitable[types.CallToolResult]]


async def _fail(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    return types.CallToolResult(content=[_text("boom: something went wrong")], is_error=True)


async def _crash(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    sys.stderr.write("nasty_server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(1)


async def _slow(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    await anyio.sleep(float(arguments.get("seconds", 1)))
    return types.CallToolResult(content=[_text("done")])


async def _image(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[
            types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
            _text("a 1x1 red PNG"),
        ]
    )


async def _resource(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri="nasty://resource/greeting",
                    mime_type="text/plain",
                    text="hello from an embedded resource",
                ),
            )
        ]
    )


async def _echo(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(str(arguments.get("message", "")))])


async def _structured_output(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    user_id = arguments.get("user_id", 7)
    return _structured(
        {
            "received": arguments,
            "user": {
                "id": user_id if isinstance(user_id, int) else 7,
                "name": "Ada",
                "address": {"city": "London", "zip": "NW1"},
                "tags": ["admin", "ops"],
            },
        }
    )


async def _array_output(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    items = [str(item) for item in arguments.get("items", [])]
    return _structured(items if _is_modern(protocol_version) else {"result": items})


async def _ref_output(arguments: Arguments, protocol_version: str) -> types.CallToolResult:
    n = arguments.get("n", 2)
    n = n if isinstance(n, int) and 0 <= n <= 100 else 2
    return _structured(
        {
            "received": arguments,
            "origin": {"x": 0.0, "y": 0.0},
            "points": [{"x": float(i), "y": float(i * i)} for i in range(n)],
        }
    )


SPECIAL_HANDLERS: dict[str, ToolHandler] = {
    "fail": _fail,
    "crash": _crash,
    "slow": _slow,
    "image": _image,
    "resource": _resource,
    "echo": _echo,
    "structured_output": _structured_output,
    "array_output": _array_output,
    "ref_output": _ref_output,
}


def _to_tool(spec: ToolSpec, protocol_version: str) -> types.Tool:
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=_wire_output_schema(spec, protocol_version),
    )


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    cursor = params.cursor if params is not None else None
    start = 0
    if cursor is not None:
        try:
            start = int(cursor.removeprefix("page:"))
        except ValueError:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid cursor: {cursor!r}") from None
        if not cursor.startswith("page:") or not 0 <= start < len(TOOLS):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid cursor: {cursor!r}")
    end = start + PAGE_SIZE
    page = [_to_tool(spec, ctx.protocol_version) for spec in TOOLS[start:end]]
    return types.ListToolsResult(tools=page, next_cursor=f"page:{end}" if end < len(TOOLS) else None)


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    spec = TOOLS_BY_NAME.get(params.name)
    if spec is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name!r}")
    arguments: Arguments = dict(params.arguments or {})
    handler = SPECIAL_HANDLERS.get(spec.name)
    if handler is not None:
        return await handler(arguments, ctx.protocol_version)
    if spec.output_schema is not None:
        return _structured({"received": arguments})
    return _echo_text(arguments)


server: Server[Any] = Server(
    "nasty-server",
    version="0.1.0",
    instructions="A hostile MCP server for code-generator tests.",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
