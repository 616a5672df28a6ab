"""Property-based tests: random tool names and JSON schemas always give importable code and a signature."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipybox.mcp_apigen.generate import ToolSpec, tool_module_source
from ipybox.mcp_apigen.names import UniqueNames, module_name
from ipybox.mcp_apigen.signature import signature

_names = st.text(min_size=1, max_size=40)
_scalars = st.sampled_from(["string", "integer", "number", "boolean", "null"])
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats()  # NaN and Infinity too: Python's JSON parser reads them
    | _names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=6,
)


_numbers = st.integers(-(10**20), 10**20) | st.floats(allow_nan=False, allow_infinity=False) | st.booleans()
_rules = st.dictionaries(
    st.sampled_from(
        [
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
            "uniqueItems",
        ]
    ),
    _numbers,
    max_size=4,
) | st.fixed_dictionaries(
    {},
    optional={
        "pattern": st.sampled_from(["^[a-z]+$", "(?=x)", "\\p{L}", "(", "[[a]", "\\k<x>"]) | _names,
        "format": st.sampled_from(["date-time", "date", "time", "uuid", "ipv4", "ipv6", "uri", "email", "x"]),
        "contentMediaType": _names,
    },
)


def _schemas() -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.builds(lambda t, r: {"type": t, **r}, _scalars | st.just("array") | st.just("object"), _rules),
        st.builds(lambda t, r: {"type": [t, "null"], **r}, _scalars, _rules),
        st.builds(lambda r: r, _rules),
        st.builds(lambda t: {"type": t}, _scalars),
        st.builds(lambda t: {"type": [t, "null"]}, _scalars),
        st.builds(lambda v: {"const": v}, _json_values),
        st.builds(lambda vs: {"enum": vs}, st.lists(_json_values, min_size=1, max_size=4)),
        st.just({}),
        st.just(True),
        st.just({"$ref": "#/$defs/Node"}),
        st.just({"$ref": "#/definitions/missing"}),
        st.sampled_from([{"anyOf": []}, {"oneOf": []}, {"type": []}, {"enum": []}]),  # empty unions
        st.just({"type": "object", "properties": {"x": {}}, "required": [["x"], 1, "x"]}),  # odd `required`
    )

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        obj = st.builds(
            lambda props, req, extra: {
                "type": "object",
                "properties": props,
                "required": req,
                "additionalProperties": extra,
            },
            st.dictionaries(_names, inner, max_size=4),
            st.lists(_names, max_size=2),
            st.one_of(st.booleans(), inner),
        )
        return st.one_of(
            obj,
            st.builds(lambda i: {"type": "array", "items": i}, inner),
            st.builds(lambda ms: {"anyOf": ms}, st.lists(inner, min_size=1, max_size=3)),
            st.builds(lambda ms: {"oneOf": ms}, st.lists(inner, min_size=1, max_size=3)),
            st.builds(lambda ms: {"allOf": ms}, st.lists(obj, min_size=1, max_size=2)),
            st.builds(lambda s, d: {**s, "description": d} if isinstance(s, dict) else s, inner, _names),
            st.builds(lambda s, d: {**s, "default": d} if isinstance(s, dict) else s, inner, _json_values),
        )

    return st.recursive(leaf, extend, max_leaves=8)


def _input_schema(properties: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "$defs": {"Node": defs}}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=_names,
    description=st.none() | _names,
    properties=st.dictionaries(_names, _schemas(), max_size=5),
    node=_schemas(),
    output=st.none() | _schemas(),
)
def test_random_tools_generate_importable_modules(
    name: str, description: str | None, properties: dict[str, Any], node: Any, output: Any
) -> None:
    spec = ToolSpec(
        name, description, _input_schema(properties, node), output if isinstance(output, dict) else None
    )
    source = tool_module_source(spec)  # every valid schema shape gives code (see test_shapes.py)
    assert signature(module_name(name), spec.input_schema, spec.output_schema, description)
    package = types.ModuleType("fuzzpkg")
    package.SERVER_NAME, package.SERVER_PARAMS = "fuzz", {"command": "x"}  # type: ignore[attr-defined]
    sys.modules["fuzzpkg"] = package
    module = types.ModuleType("fuzzpkg.tool")
    module.__package__ = "fuzzpkg"
    sys.modules["fuzzpkg.tool"] = module
    exec(compile(source, "<fuzz>", "exec"), module.__dict__)  # must import without error
    params = module.Params
    assert params.model_json_schema()  # the model is complete (forward references resolved)
    assert json.dumps(module.TOOL_NAME) == json.dumps(name)  # the wire name is kept exactly


@given(st.lists(_names, min_size=1, max_size=30))
def test_module_names_are_unique_identifiers(tool_names: list[str]) -> None:
    names = UniqueNames({"__init__", "__main__"})
    modules = [names.claim(module_name(n)) for n in tool_names]
    assert all(m.isidentifier() for m in modules)
    assert len({m.lower() for m in modules}) == len(modules)
