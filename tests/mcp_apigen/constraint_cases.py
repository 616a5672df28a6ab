"""Hand-written constraint cases: one property per JSON Schema rule, with values that pass and fail.

`constraints_tool()` puts them all in one tool (no property required), which the tests serve
with `tests/servers/replay_server.py`, so the models come from a real MCP session.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    """A property, values its schema accepts, and values it rejects with the rule that rejects them.

    `draft` is the JSON Schema draft the schema is written in; `cross_check` says whether the
    `jsonschema` package can confirm the values (it checks no formats without extra packages,
    and no regular expressions Python's `re` cannot compile).
    """

    name: str
    schema: dict[str, Any]
    valid: list[Any]
    invalid: list[tuple[Any, str]]
    draft: int = 2020
    cross_check: bool = True
    sent: list[Any] = field(default_factory=list)  # what `valid` becomes on the wire, if it changes


CASES = [
    Case("minimum", {"type": "integer", "minimum": 1}, [1, 5], [(0, "minimum"), (-3, "minimum")]),
    Case("maximum", {"type": "number", "maximum": 1.5}, [1.5, -2], [(1.6, "maximum")]),
    Case(
        "exclusive_2020",
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
        [0.1, 9.99],
        [(0, "exclusiveMinimum"), (10, "exclusiveMaximum"), (11, "exclusiveMaximum")],
    ),
    Case(
        "exclusive_draft04",
        {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": True},
        [1, 9],
        [(0, "exclusiveMinimum"), (10, "exclusiveMaximum")],
        draft=4,
    ),
    Case(
        "fractional_bounds",
        {"type": "integer", "minimum": 0.5, "maximum": 3.5},
        [1, 3],
        [(0, "minimum"), (4, "maximum")],
    ),
    Case("multiple_of", {"type": "integer", "multipleOf": 5}, [0, 15], [(7, "multipleOf")]),
    Case("multiple_of_float", {"type": "number", "multipleOf": 0.25}, [0.5, 1.75], [(0.3, "multipleOf")]),
    Case(
        "lengths",
        {"type": "string", "minLength": 2, "maxLength": 4},
        ["ab", "🚀🚀", "abcd"],
        [("a", "minLength"), ("abcde", "maxLength")],
    ),
    Case("pattern", {"type": "string", "pattern": "^[A-Z]{3}-\\d+$"}, ["ABC-1"], [("abc-1", "pattern")]),
    Case("pattern_search", {"type": "string", "pattern": "[0-9]"}, ["a1b"], [("abc", "pattern")]),
    Case(
        "pattern_lookahead",
        {"type": "string", "pattern": "^(?=.*[0-9])[a-z0-9]+$"},
        ["abc1"],
        [("abc", "pattern")],
    ),
    Case(
        "pattern_unicode_class",
        {"type": "string", "pattern": "^\\p{Lu}"},
        ["Ärger"],
        [("ärger", "pattern")],
        cross_check=False,  # Python's re has no \p{...}
    ),
    Case(
        "items_count",
        {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        [["a"], ["a", "b"]],
        [([], "minItems"), (["a", "b", "c"], "maxItems")],
    ),
    Case(
        "unique_items",
        {"type": "array", "uniqueItems": True},
        [[1, "1", True], [{"a": 1}, {"a": 2}]],
        [([1, 1.0], "uniqueItems"), ([{"a": 1}, {"a": 1}], "uniqueItems")],
    ),
    Case(
        "item_minimum",
        {"type": "array", "items": {"type": "integer", "minimum": 0}},
        [[0, 3]],
        [([1, -1], "minimum")],
    ),
    Case("const", {"const": "fixed"}, ["fixed"], [("other", "const")]),
    Case("const_float", {"const": 1.5}, [1.5], [(2, "const")]),
    Case("const_object", {"const": {"a": [1]}}, [{"a": [1]}], [({"a": [2]}, "const")]),
    Case("enum_str", {"type": "string", "enum": ["red", "green"]}, ["red"], [("blue", "enum")]),
    Case("enum_int", {"type": "integer", "enum": [1, 2, 3]}, [2], [(4, "enum")]),
    Case("enum_mixed", {"enum": [1.5, "x", None]}, [1.5, "x", None], [(2, "enum"), ("y", "enum")]),
    Case(
        "date_time",
        {"type": "string", "format": "date-time"},
        ["2024-05-01T10:00:00Z", "2024-05-01T10:00:00+02:00"],
        [("2024-05-01", "format"), ("yesterday", "format"), ("2024-05-01T10:00:00", "format")],
        cross_check=False,
    ),
    Case(
        "date",
        {"type": "string", "format": "date"},
        ["2024-02-29"],
        [("2023-02-29", "format"), ("01/02/2024", "format")],
        cross_check=False,
    ),
    Case(
        "time", {"type": "string", "format": "time"}, ["10:30:00"], [("25:00", "format")], cross_check=False
    ),
    Case(
        "uuid",
        {"type": "string", "format": "uuid"},
        ["123e4567-e89b-12d3-a456-426614174000"],
        [("not-a-uuid", "format")],
        cross_check=False,
    ),
    Case(
        "ipv4",
        {"type": "string", "format": "ipv4"},
        ["192.168.0.1"],
        [("256.1.1.1", "format"), ("::1", "format")],
        cross_check=False,
    ),
    Case("ipv6", {"type": "string", "format": "ipv6"}, ["::1"], [("10.0.0.1", "format")], cross_check=False),
    Case(
        "uri",
        {"type": "string", "format": "uri", "maxLength": 40},
        ["https://example.org/x?y=1", "urn:isbn:0451450523"],
        [("not a uri", "format"), ("https://example.org/" + "x" * 40, "maxLength")],
        cross_check=False,
    ),
    Case(
        "email",
        {"type": "string", "format": "email"},
        ["a@example.org"],
        [("no-at-sign", "format"), ("a@", "format")],
        cross_check=False,
    ),
    Case("nullable_bounded", {"type": ["integer", "null"], "maximum": 10}, [None, 10], [(11, "maximum")]),
    Case(
        "any_of_bounded",
        {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 0}]},
        ["abc", 5],
        [("abcd", "maxLength"), (-1, "minimum")],
    ),
    Case(
        "map_size",
        {"type": "object", "additionalProperties": True, "minProperties": 1, "maxProperties": 2},
        [{"a": 1}],
        [({}, "minProperties"), ({"a": 1, "b": 2, "c": 3}, "maxProperties")],
    ),
    Case(
        "nested",
        {
            "type": "object",
            "properties": {"port": {"type": "integer", "minimum": 1, "maximum": 65535}},
            "required": ["port"],
        },
        [{"port": 80}],
        [({"port": 0}, "minimum")],
    ),
]

#: Properties with rules no model checks; each must be stated in the field's description.
UNCHECKED = {
    "hostname": ({"type": "string", "format": "hostname", "description": "A host."}, 'format "hostname"'),
    "untyped_format": ({"format": "date-time"}, 'format "date-time"'),
    "media": ({"type": "string", "contentMediaType": "image/png"}, 'contentMediaType "image/png"'),
    "ecma_pattern": ({"type": "string", "pattern": "^(?<y>a)\\k<y>$"}, 'pattern "^(?<y>a)\\\\k<y>$"'),
}


def constraints_tool() -> dict[str, Any]:
    """One tool with a property per case (none required), in the `tools/list` form."""
    properties = {case.name: case.schema for case in CASES}
    properties |= {name: schema for name, (schema, _) in UNCHECKED.items()}
    return {
        "name": "constrained",
        "description": "Echoes its arguments; every property has a JSON Schema rule.",
        "inputSchema": {"type": "object", "properties": properties, "additionalProperties": False},
    }


#: Values that break a `format` the models check.
BAD_FORMATS = {
    "date-time": "not a date",
    "date": "2023-02-29",
    "time": "25:99",
    "uuid": "not-a-uuid",
    "ipv4": "256.1.1.1",
    "ipv6": "::g",
    "uri": "no scheme here",
    "email": "no-at-sign",
}


def violations(schema: Any) -> Iterator[tuple[Any, str]]:
    """Values (with the rule they break) for a property schema's own rules, where one is easy to make."""
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("integer", "number"):
        step = 1 if kind == "integer" else 0.5
        for key, delta in (("minimum", -step), ("maximum", step)):
            if type(schema.get(key)) in (int, float) and schema.get(f"exclusive{key.title()}") is not True:
                yield schema[key] + delta, key
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if type(schema.get(key)) in (int, float):
                yield schema[key], key
    if kind == "string":
        if isinstance(schema.get("minLength"), int) and schema["minLength"] > 0:
            yield "x" * (schema["minLength"] - 1), "minLength"
        if isinstance(schema.get("maxLength"), int):
            yield "x" * (schema["maxLength"] + 1), "maxLength"
        if isinstance(schema.get("pattern"), str):
            for candidate in ("", "!", " ~ ", "zzzz9999"):
                try:
                    if re.search(schema["pattern"], candidate) is None:
                        yield candidate, "pattern"
                        break
                except re.error:
                    break
        if schema.get("format") in BAD_FORMATS:
            yield BAD_FORMATS[schema["format"]], "format"
        if isinstance(schema.get("enum"), list):
            yield "\x00not a member", "enum"
    if kind == "array" and isinstance(schema.get("minItems"), int) and schema["minItems"] > 0:
        yield [], "minItems"
    strings = isinstance(schema.get("items"), dict) and schema["items"].get("type") == "string"
    if kind == "array" and schema.get("uniqueItems") is True and strings:
        yield ["a", "a"], "uniqueItems"
    if "const" in schema:
        yield "\x00not the constant", "const"
