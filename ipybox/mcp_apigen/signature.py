"""Compact signatures of tools: what an agent needs to call a tool right the first time, in a few lines.

`forecast(city: str, days: int = 3) -> {days: list[{date: str, high: float}]}` says how to
build `Params` and what `Result` holds (Python field names, which are also attribute names),
in a fraction of the bytes of the tool's module or JSON definition. The description's first
sentence follows, then, where the schema or a field's description gives them, the units and
formats of the fields (`# days: 1..16; at: date-time; rate: in percent`), which the types alone
do not say.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeGuard

from ipybox.mcp_apigen.schema import field_name

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_MAX_DEPTH = 3
_MAX_ENUM = 6
_MAX_SUMMARY = 120
_MAX_HINT = 48  # one field's hint, in characters
_MAX_HINTS = 6  # fields with a hint, per tool
#: Formats that say only how wide a number is: the type says enough.
_NUMBER_FORMATS = frozenset("int8 int16 int32 int64 uint8 uint16 uint32 uint64 float double".split())

#: Phrases of a field's description that say a unit or format the type does not (case-insensitive).
_UNIT = (
    r"(?:milli|micro|nano)?seconds?|ms|minutes?|hours?|days?|weeks?|months?|years?"
    r"|percent(?:age)?s?|per ?cent|%|basis points|fractions?|decimals?|ratio"
    r"|bytes|[kmgt]i?b|(?:kilo|mega|giga)bytes|pixels|px|points|pt"
    r"|(?:kilo|centi|milli)?met(?:er|re)s|km|cm|mm|miles|feet|inches"
    r"|degrees(?: (?:celsius|fahrenheit))?|radians|celsius|fahrenheit|kelvin"
    r"|cents|usd|eur|dollars|euros|utc|local time|lower ?case|upper ?case"
    r"|iso[ -]?8601(?: format)?|rfc ?3339(?: format)?|unix (?:time|timestamp|epoch)|base64|markdown|hex"
)
#: Each with words one of which a description must hold (lowercased) for the pattern to be tried.
_HINT_PATTERNS = [
    (
        ("in ", "as "),
        re.compile(
            rf"\b(?:in|as|given in|expressed in|measured in) (?:an? )?(?:units of )?(?:{_UNIT})(?![\w-])",
            re.I,
        ),
    ),
    (
        ("iso", "rfc", "unix", "epoch"),
        re.compile(
            r"\b(?:iso[ -]?8601|rfc ?3339)\b|\b(?:unix|epoch) (?:timestamp|time|seconds|milliseconds)\b", re.I
        ),
    ),
    (
        ("yy", "mm", "dd", "hh", "ss"),
        re.compile(r"(?<![\w-])[YMDHhmsS]{2,4}(?:[-/:. T][YMDHhmsSZ]{1,4}){1,5}(?![\w-])"),
    ),
    (
        ("separated", "delimited", " path"),
        re.compile(
            r"\b(?:comma|space|newline)[- ](?:separated|delimited)\b|\b(?:absolute|relative) paths?\b", re.I
        ),
    ),
    (
        ("based", "indexed", "between"),
        re.compile(r"\b(?:zero|one|0|1)[- ](?:based|indexed)\b|\bbetween -?\d[\d.]* and -?\d[\d.]*", re.I),
    ),
    (
        ("e.g", "example", "such as"),
        re.compile(
            r"(?:\be\.g\.|\bfor example|\bsuch as|\bexample:)[,:]? ?"
            r"([^\s,;)][^,;)\n]{0,28}?)(?=[,;)\n]|\.(?:\s|$)|$)",
            re.I,
        ),
    ),
]


def summary(description: str | None) -> str:
    """The first sentence (or line) of a description, shortened to one line."""
    text = " ".join((description or "").split())
    for end in (". ", "? ", "! "):
        if end in text:
            text = text[: text.index(end) + 1]
    return text if len(text) <= _MAX_SUMMARY else text[: _MAX_SUMMARY - 3] + "..."


def signature(
    name: str, input_schema: Any, output_schema: Any, description: str | None, parsed: str | None = None
) -> str:
    """`name(params) -> result` and, indented below, the description's first sentence and the
    fields' units and formats. `parsed` is what the tool's output parser returns, if it has one."""
    render = _Renderer(input_schema)
    params = render.params(input_schema)
    result = "str" if not isinstance(output_schema, dict) or not output_schema else None
    if result is None:
        result = _Renderer(output_schema).type(output_schema, 0)
    if parsed:
        result += f"; run_parsed() -> {parsed}"
    lines = [f"{name}({params}) -> {result}"]
    if text := summary(description):
        lines.append(f"    {text}")
    if render.hints:
        lines.append(f"    # {'; '.join(render.hints[:_MAX_HINTS])}")
    return "\n".join(lines)


def hint(schema: Any, resolve: Any = None) -> str:
    """What a field's schema says about its values that its compact type does not: a range, a
    format, units or formats its description names, or an example. Empty if nothing."""
    if not isinstance(schema, dict):
        return ""
    parts: list[str] = []
    for member in _members(schema, resolve):
        parts += _schema_hints(member)
        items = member.get("items")
        if member.get("type") == "array" and isinstance(items, dict):
            parts += [f"each {h}" for h in _schema_hints(items)]
    description = schema.get("description")
    if isinstance(description, str):
        parts += _description_hints(description)
    text = ", ".join(dict.fromkeys(p for p in parts if p))
    return text if len(text) <= _MAX_HINT else text[: _MAX_HINT - 3].rstrip(" ,") + "..."


def _members(schema: dict[str, Any], resolve: Any) -> list[dict[str, Any]]:
    """The schema, or the members of its `anyOf`/`oneOf` (one `$ref` followed), that are not null."""
    found: list[dict[str, Any]] = []
    union = schema.get("anyOf") or schema.get("oneOf")
    for member in union if isinstance(union, list) else [schema]:
        if isinstance(member, dict) and isinstance(member.get("$ref"), str) and resolve is not None:
            member = resolve(member["$ref"])
        if isinstance(member, dict) and member.get("type") != "null":
            found.append(member)
    return found


def _schema_hints(schema: dict[str, Any]) -> list[str]:
    parts = []
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt and len(fmt) <= 20 and fmt not in _NUMBER_FORMATS:
        parts.append(fmt)
    low = _first_number(schema, "minimum", "exclusiveMinimum")
    high = _first_number(schema, "maximum", "exclusiveMaximum")
    if low is not None and high is not None:
        parts.append(
            f"{low[0]}..{high[0]}"
            if low[1] == high[1] == ""
            else f"{low[1] or '>='}{low[0]}..{high[1] or '<='}{high[0]}"
        )
    elif low is not None:
        parts.append(f"{low[1] or '>='}{low[0]}")
    elif high is not None:
        parts.append(f"{high[1] or '<='}{high[0]}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and 0 < len(pattern) <= 24:
        parts.append(f"pattern {pattern}")
    return parts


def _first_number(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[str, str] | None:
    """A bound as text and its marker ("" inclusive, ">"/"<" exclusive), in draft-04 or later form."""
    marker = ">" if exclusive == "exclusiveMinimum" else "<"
    value = schema.get(exclusive)
    if _is_number(value):
        return _number_text(value), marker
    value = schema.get(inclusive)
    if _is_number(value):
        return _number_text(value), marker if schema.get(exclusive) is True else ""
    return None


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e15


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _plain_example(text: str) -> bool:
    """An example that is a whole value: no brackets, and quotes that close."""
    return not any(c in text for c in "[]{}()") and text.count("'") % 2 == 0 and text.count('"') % 2 == 0


def _description_hints(description: str) -> list[str]:
    text = " ".join(description.split())
    lower = text.lower()
    found = []
    for words, pattern in _HINT_PATTERNS:
        match = pattern.search(text) if any(w in lower for w in words) else None
        if match and match.lastindex:
            example = match.group(1).strip()
            if _plain_example(example):  # structured examples are cut short; the type says more
                found.append(f"e.g. {example}")
        elif match:
            found.append(match.group(0))
    return found


class _Renderer:
    def __init__(self, root: Any) -> None:
        self._root = root
        self._expanding: set[str] = set()  # `$ref`s being rendered: one met again is a cycle
        self.hints: list[str] = []  # `field: hint` for the parameters rendered

    def params(self, schema: Any) -> str:
        if not isinstance(schema, dict):
            return ""
        properties: dict[str, Any] = _get(schema, "properties", dict)
        required = [r for r in _get(schema, "required", list) if isinstance(r, str)]
        undeclared: dict[str, Any] = {r: {} for r in required if r not in properties}  # required, any type
        parts = []
        for prop, prop_schema in sorted(
            (properties | undeclared).items(), key=lambda i: i[0] not in required
        ):
            name = field_name(str(prop))
            text = f"{name}: {self.type(prop_schema, 1)}"
            if note := hint(prop_schema, self._resolve):
                self.hints.append(f"{name}: {note}")
            if prop not in required:
                default = prop_schema.get("default") if isinstance(prop_schema, dict) else None
                text += f" = {_short(default)}"
            parts.append(text)
        return ", ".join(parts)

    def type(self, schema: Any, depth: int) -> str:
        if not isinstance(schema, dict) or not schema:
            return "Any"
        if isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            if ref in self._expanding:  # a type that contains itself
                return "Any"
            if depth >= _MAX_DEPTH:
                return "dict"
            self._expanding.add(ref)
            try:
                return self.type(self._resolve(ref), depth)
            finally:
                self._expanding.discard(ref)
        if "const" in schema:
            return _short(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            values = [_short(v) for v in schema["enum"][:_MAX_ENUM]]
            return "|".join(values) + ("|..." if len(schema["enum"]) > _MAX_ENUM else "")
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return " | ".join(dict.fromkeys(self.type(s, depth) for s in schema[key]))
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {"type": "object", "properties": {}}
            for part in schema["allOf"]:
                part = self._resolve(part["$ref"]) if isinstance(part, dict) and "$ref" in part else part
                if isinstance(part, dict) and isinstance(part.get("properties"), dict):
                    merged["properties"] |= part["properties"]
            return self.type(merged, depth)
        kind = schema.get("type")
        if isinstance(kind, list) and kind:
            return " | ".join(dict.fromkeys(self.type(schema | {"type": k}, depth) for k in kind))
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
            required = [r for r in _get(schema, "required", list) if isinstance(r, str)]
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
