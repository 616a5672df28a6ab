"""Compact signatures of tools: what an agent needs to call a tool, in one line plus its summary.

`forecast(city: str, days: int = 3) -> {days: list[{date: str, high: float}]}` says how to
build `Params` and what `Result` holds (Python field names, which are also attribute names),
in a fraction of the bytes of the tool's module or JSON definition.
"""

from __future__ import annotations

import json
from typing import Any

from ipybox.mcp_apigen.schema import field_name

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_MAX_DEPTH = 3
_MAX_ENUM = 6
_MAX_SUMMARY = 120


def summary(description: str | None) -> str:
    """The first sentence (or line) of a description, shortened to one line."""
    text = " ".join((description or "").split())
    for end in (". ", "? ", "! "):
        if end in text:
            text = text[: text.index(end) + 1]
    return text if len(text) <= _MAX_SUMMARY else text[: _MAX_SUMMARY - 3] + "..."


def signature(name: str, input_schema: Any, output_schema: Any, description: str | None) -> str:
    """`name(params) -> result` and, indented on the next line, the description's first sentence."""
    render = _Renderer(input_schema)
    params = render.params(input_schema)
    result = "str" if not isinstance(output_schema, dict) or not output_schema else None
    if result is None:
        result = _Renderer(output_schema).type(output_schema, 0)
    text = summary(description)
    return f"{name}({params}) -> {result}" + (f"\n    {text}" if text else "")


class _Renderer:
    def __init__(self, root: Any) -> None:
        self._root = root

    def params(self, schema: Any) -> str:
        if not isinstance(schema, dict):
            return ""
        properties: dict[str, Any] = _get(schema, "properties", dict)
        required: list[Any] = _get(schema, "required", list)
        undeclared: dict[str, Any] = {
            str(r): {} for r in required if r not in properties
        }  # required, any type
        parts = []
        for prop, prop_schema in sorted(
            (properties | undeclared).items(), key=lambda i: i[0] not in required
        ):
            text = f"{field_name(str(prop))}: {self.type(prop_schema, 1)}"
            if prop not in required:
                default = prop_schema.get("default") if isinstance(prop_schema, dict) else None
                text += f" = {_short(default)}"
            parts.append(text)
        return ", ".join(parts)

    def type(self, schema: Any, depth: int) -> str:
        if not isinstance(schema, dict) or not schema:
            return "Any"
        if isinstance(schema.get("$ref"), str):
            return self.type(self._resolve(schema["$ref"]), depth) if depth < _MAX_DEPTH else "dict"
        if "const" in schema:
            return _short(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            values = [_short(v) for v in schema["enum"][:_MAX_ENUM]]
            return "|".join(values) + ("|..." if len(schema["enum"]) > _MAX_ENUM else "")
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return " | ".join(dict.fromkeys(self.type(s, depth) for s in schema[key]))
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {"type": "object", "properties": {}}
            for part in schema["allOf"]:
                part = self._resolve(part["$ref"]) if isinstance(part, dict) and "$ref" in part else part
                if isinstance(part, dict):
                    merged["properties"] |= part.get("properties") or {}
            return self.type(merged, depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            return " | ".join(self.type(schema | {"type": k}, depth) for k in kind)
        if kind == "array":
            items = schema.get("items")
            return f"list[{self.type(items, depth + 1)}]" if isinstance(items, dict) else "list"
        if kind == "object" or (kind is None and "properties" in schema):
            return self._object(schema, depth)
        return _SCALARS.get(kind, "Any") if isinstance(kind, str) else "Any"

    def _object(self, schema: dict[str, Any], depth: int) -> str:
        properties = schema.get("properties")
        if isinstance(properties, dict) and properties:
            if depth >= _MAX_DEPTH:
                return "{...}"
            required: list[Any] = _get(schema, "required", list)
            fields = [
                f"{field_name(str(p))}{'' if p in required else '?'}: {self.type(s, depth + 1)}"
                for p, s in properties.items()
            ]
            return "{" + ", ".join(fields) + "}"
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"dict[str, {self.type(values, depth + 1)}]"
        return "dict"

    def _resolve(self, ref: str) -> Any:
        target: Any = self._root
        for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else []:
            target = (
                target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
            )
        return target


def _get(schema: dict[str, Any], key: str, kind: type[Any]) -> Any:
    """`schema[key]` if it is a `kind`, else an empty `kind`."""
    value = schema.get(key)
    return value if isinstance(value, kind) else kind()


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value) if value is not None else "None"
    if text in ("true", "false"):
        text = text.title()
    return text if len(text) <= 30 else text[:27] + "..."
