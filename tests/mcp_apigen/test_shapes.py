"""Valid but unusual JSON schemas that made generated modules fail to import, by class.

Each class (a cycle of `$ref`s with no model in between, an empty union, a default that has no
Python literal, a keyword of the wrong JSON type, text pydantic cannot hold) gets several
variants, in input and output schemas; every module must import, its models must build, and
its compact signature must be written. The module for each tool is executed as the generator
wrote it.
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from servers.launch import replay_params

from ipybox.mcp_apigen.generate import ToolSpec, tool_module_source
from ipybox.mcp_apigen.signature import signature

from .conftest import generated_api


def obj(properties: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **rest}


NODE = obj({"x": {"type": "string"}})
SURROGATE = "\ud800"  # JSON allows it as the escape \ud800; pydantic's strings cannot hold it

SHAPES: dict[str, dict[str, Any]] = {
    # a cycle of references with no model in between
    "ref_two_cycle": obj(
        {"a": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}}
    ),
    "ref_self": obj({"a": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": {"$ref": "#/$defs/A"}}}),
    "ref_property_cycle": obj({"a": {"$ref": "#/properties/b"}, "b": {"$ref": "#/properties/a"}}),
    "ref_cycle_through_union": obj(
        {"a": {"$ref": "#/$defs/A"}},
        **{"$defs": {"A": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/B"}]}, "B": {"$ref": "#/$defs/A"}}},
    ),
    "all_of_itself": obj(
        {"a": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}, NODE]}}}
    ),
    "all_of_cycle": obj(
        {"a": {"$ref": "#/$defs/A"}},
        **{"$defs": {"A": {"allOf": [{"$ref": "#/$defs/B"}]}, "B": {"allOf": [{"$ref": "#/$defs/A"}, NODE]}}},
    ),
    # an empty union
    "any_of_empty": obj({"a": {"anyOf": []}, "b": {"type": "string"}}),
    "one_of_empty": obj({"a": {"oneOf": []}}),
    "type_empty": obj({"a": {"type": []}}),
    # defaults without a Python literal (Python's JSON parser reads NaN and Infinity)
    "default_nan": obj({"a": {"type": "number", "default": math.nan}}),
    "default_infinity": obj({"a": {"type": "number", "default": math.inf}, "b": {"default": -math.inf}}),
    "default_nested_nan": obj({"a": {"type": "array", "default": [1.0, math.nan, {"x": math.inf}]}}),
    # keywords of the wrong JSON type
    "required_unhashable": obj({"a": {"type": "string"}}, required=[["a"], {"b": 1}, "a"]),
    "required_not_strings": obj({"a": {"type": "string"}}, required=[1, None, True]),
    "all_of_properties_list": obj({"a": {"allOf": [{"properties": ["x"]}, NODE]}}),
    "all_of_required_string": obj({"a": {"allOf": [obj({"x": {"type": "string"}}, required="x")]}}),
    # text pydantic cannot hold
    "surrogate_enum": obj({"a": {"enum": ["ok", f"bad{SURROGATE}"]}}),
    "surrogate_const": obj({"a": {"const": SURROGATE}}),
    "surrogate_property": obj({f"a{SURROGATE}": {"type": "string"}}, required=[f"a{SURROGATE}"]),
}


def load(name: str, spec: ToolSpec) -> types.ModuleType:
    """The module for `spec`, executed as `shapes_pkg.<name>` (a generated package's module)."""
    package = types.ModuleType("shapes_pkg")
    package.SERVER_NAME, package.SERVER_PARAMS = "shapes", {"command": "x"}  # type: ignore[attr-defined]
    module = types.ModuleType(f"shapes_pkg.{name}")
    module.__package__ = "shapes_pkg"
    sys.modules[package.__name__], sys.modules[module.__name__] = package, module
    exec(compile(tool_module_source(spec), f"<{name}>", "exec", dont_inherit=True), module.__dict__)
    return module


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_imports_as_input_and_output(shape: str) -> None:
    schema = SHAPES[shape]
    params = load(f"{shape}_in", ToolSpec(shape, "A tool.", schema, None)).Params
    assert params.model_json_schema()
    result = load(f"{shape}_out", ToolSpec(shape, "A tool.", {"type": "object"}, schema)).Result
    assert result.model_json_schema()
    text = signature(shape, schema, schema, "A tool.")
    assert text.startswith(f"{shape}(") and "\n    A tool." in text


def test_what_the_shapes_accept() -> None:
    """The repaired parts check what can be checked and accept the rest."""
    cycle = load("cycle", ToolSpec("cycle", None, SHAPES["ref_two_cycle"], None)).Params
    assert cycle(a={"any": ["value"]}).a == {"any": ["value"]}  # the cycle accepts any value
    nan = load("nan", ToolSpec("nan", None, SHAPES["default_nan"], None)).Params
    assert math.isnan(nan().a) and nan(a=2).a == 2
    infinity = load("inf", ToolSpec("inf", None, SHAPES["default_infinity"], None)).Params()
    assert infinity.a == math.inf and infinity.b == -math.inf
    nested = load("nested", ToolSpec("nested", None, SHAPES["default_nested_nan"], None)).Params().a
    assert nested[0] == 1.0 and math.isnan(nested[1]) and nested[2] == {"x": math.inf}
    required = load("req", ToolSpec("req", None, SHAPES["required_unhashable"], None)).Params
    with pytest.raises(ValueError, match="a"):
        required()
    enum = load("enum", ToolSpec("enum", None, SHAPES["surrogate_enum"], None)).Params
    assert enum(a="ok").a == "ok"
    with pytest.raises(ValueError, match="one of"):
        enum(a="other")
    merged = load("merged", ToolSpec("merged", None, SHAPES["all_of_itself"], None)).Params
    assert merged(a={"x": "1"}).a.x == "1"


@pytest.mark.parametrize("name", ["\x00", "get\x00user", f"tool{SURROGATE}", "\u2028", " ", "名前"])
def test_tool_names_that_are_no_file_name_still_give_a_module(name: str) -> None:
    """A NUL in a tool's name once made the compile check fail, so the tool got no module."""
    module = load("odd_name", ToolSpec(name, "A tool.", obj({"a": {"type": "string"}}), None))
    assert module.TOOL_NAME == name and module.Params(a="x").a == "x"


def test_the_shapes_over_a_real_session_generate_modules_that_all_import(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Served by the replay server (what an MCP server written with the Python SDK can send: no
    lone surrogates, `required` lists of strings), through the real client and generator."""
    sendable = {k: v for k, v in SHAPES.items() if "surrogate" not in k and not k.startswith("required_")}
    tools = [
        {"name": name, "description": "A tool.", "inputSchema": schema} for name, schema in sendable.items()
    ]
    tools.append(
        {
            "name": "get\x00user",
            "inputSchema": SHAPES["ref_two_cycle"],
            "outputSchema": SHAPES["all_of_cycle"],
        }
    )
    fixture = tmp_path / "shapes.json"
    fixture.write_text(json.dumps({"source": "test_shapes.py", "tools": tools}))
    with generated_api(tmp_path_factory, "shapes", replay_params(fixture)) as api:
        assert len(api.modules) == len(tools) and not api.modules.skipped  # type: ignore[attr-defined]
        for module in api.modules:
            imported = api.module(module)
            assert imported.Params.model_json_schema()
        assert (
            api.module("get_user").TOOL_NAME == "get\x00user"
            and api.module("get_user").Result.model_json_schema()
        )
