"""Unit tests of the schema-to-source writer (`ModelWriter`, `docstring`) on small hand-written schemas."""

from __future__ import annotations

import ast
import keyword
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from ipybox.mcp_apigen.generate import ToolGenerationError, ToolSpec, tool_module_source
from ipybox.mcp_apigen.names import UniqueNames, class_name, identifier, module_name
from ipybox.mcp_apigen.schema import ModelWriter, docstring, import_lines


def squash(text: str) -> str:
    return " ".join(text.replace("\r\n", "\n").split())


def build(schema: dict[str, Any], extra: str = "forbid") -> dict[str, Any]:
    """Write `Params` for `schema`, execute the source and return its namespace."""
    writer = ModelWriter(schema, reserved={"Params"})
    writer.model("Params", schema, extra=extra)
    namespace: dict[str, Any] = {}
    # dont_inherit: this module's `from __future__ import annotations` must not apply to the source
    source = import_lines(writer.source) + "\n\n" + writer.source
    exec(compile(source, "<schema>", "exec", dont_inherit=True), namespace)
    return namespace


def annotation(schema: Any, hint: str = "Hint") -> str:
    return ModelWriter({}, reserved=set()).annotation(schema, hint)


# --- docstring ---------------------------------------------------------------------------------------

TRICKY = [
    '"""',
    "'''",
    'ends with a quote"',
    "ends with a backslash \\",
    "\\",
    '\\"""\nimport os\n"""',
    '""""""""',
    "line one\r\nline two\rthree",
    "line\u2028separator and zero\u200bwidth, bell\x07, nul\x00, esc\x1b[0m, del\x7f",
    "emoji 🚀 and 漢字 and combining e\u0301",
    "tab\tand\x0bvertical\x0cform",
    "{} {0} %s %(x)s f'{__import__(\"os\")}'",
    "   leading and trailing   \n\n",
    "",
    "\n\n\n",
    "\U000e0001 tag character and lone surrogate \ud800",
]


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("indent", ["", "    "])
def test_docstring_compiles_and_keeps_the_text(text: str, indent: str) -> None:
    source = (
        f"def f():\n{docstring(text, '    ')}\n    return 1\n" if indent else docstring(text) + "\nX = 1\n"
    )
    tree = ast.parse(source)
    namespace: dict[str, Any] = {}
    exec(compile(tree, "<doc>", "exec"), namespace)
    if indent:
        assert len(tree.body) == 1 and isinstance(tree.body[0], ast.FunctionDef)
        assert len(tree.body[0].body) == 2  # the docstring and `return 1`: nothing injected
        doc = namespace["f"].__doc__
    else:
        assert len(tree.body) == 2  # the docstring and X = 1
        doc = namespace["__doc__"]
    assert squash(doc) == squash(text)


def test_single_line_docstring_round_trips_exactly() -> None:
    for text in ['"""', "a\\", 'say "hi"', "x\u2028y", "\x00"]:
        assert ast.literal_eval(docstring(text)) == text


def test_multi_line_docstring_is_indented() -> None:
    assert docstring("a\nb", "    ") == '    """\n    a\n    b\n    """'
    assert docstring("one") == '"""one"""'


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_docstring_never_breaks_or_injects(text: str) -> None:
    source = f"def f():\n{docstring(text, '    ')}\n    return 1\n"
    tree = ast.parse(source)
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.FunctionDef)
    assert len(tree.body[0].body) == 2
    namespace: dict[str, Any] = {}
    exec(compile(tree, "<doc>", "exec"), namespace)
    assert set(namespace) - {"__builtins__"} == {"f"}
    assert namespace["f"]() == 1
    assert squash(namespace["f"].__doc__) == squash(text)
    source.encode("utf-8")  # writable as a source file


# --- annotations ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "str"),
        ({"type": "integer"}, "int"),
        ({"type": "number"}, "float"),
        ({"type": "boolean"}, "bool"),
        ({"type": "null"}, "None"),
        ({}, "Any"),
        (True, "Any"),
        ({"type": "unknown"}, "Any"),
        ({"type": ["string", "null"]}, "str | None"),
        ({"type": ["null", "integer", "string"]}, "int | str | None"),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "int | None"),
        ({"oneOf": [{"type": "integer"}, {}]}, "Any"),
        ({"const": "x"}, "Literal['x']"),
        ({"const": None}, "None"),
        ({"enum": [1, "two", None, True]}, "Literal[1, 'two', True] | None"),
        ({"enum": [1, 2, 2]}, "Literal[1, 2]"),
        ({"enum": [1.5, 2]}, "Annotated[Any, OneOf(1.5, 2)]"),
        ({"enum": [1, "a", 2.5]}, "Annotated[Any, OneOf(1, 'a', 2.5)]"),
        ({"enum": [{"a": 1}]}, "Annotated[Any, OneOf({'a': 1})]"),
        ({"type": "array"}, "list[Any]"),
        ({"type": "array", "items": {"type": "array", "items": {"type": "number"}}}, "list[list[float]]"),
        ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}, "tuple[str, int]"),
        ({"type": "array", "items": [{"type": "string"}, {"type": "boolean"}]}, "tuple[str, bool]"),
        ({"type": "object"}, "dict[str, Any]"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "dict[str, int]"),
        ({"$ref": "#/$defs/missing"}, "Any"),
        ({"$ref": "https://example.org/schema.json"}, "Any"),
    ],
)
def test_annotations(schema: Any, expected: str) -> None:
    assert annotation(schema) == expected


def test_string_enum_becomes_an_enum_class() -> None:
    writer = ModelWriter({}, reserved=set())
    values = ["a-b", "c d", "1x", "class", "", "name", "value", "_private", "mro"]
    assert writer.annotation({"type": "string", "enum": values}, "Kind") == "Kind"
    namespace: dict[str, Any] = {}
    exec(
        compile(import_lines(writer.source) + "\n" + writer.source, "<enum>", "exec", dont_inherit=True),
        namespace,
    )
    kind = namespace["Kind"]
    assert [m.value for m in kind] == values
    for member in kind:
        assert member.name.isidentifier() and not keyword.iskeyword(member.name)
        assert not member.name.startswith("_")


# --- models ---------------------------------------------------------------------------------------------


def test_field_names_are_identifiers_with_wire_aliases() -> None:
    schema = {
        "type": "object",
        "properties": {
            "class": {"type": "string"},
            "user-name": {"type": "string"},
            "user_name": {"type": "string"},
            "model_config": {"type": "object"},
            "model_dump": {"type": "string"},
            "123": {"type": "integer"},
            "": {"type": "string"},
            "_x": {"type": "string"},
            "str": {"type": "string"},
            "Any": {"type": "string"},
        },
        "required": ["class"],
    }
    params = build(schema)["Params"]
    wire = {name: name if field.alias is None else field.alias for name, field in params.model_fields.items()}
    assert set(wire.values()) == set(schema["properties"])
    assert all(name.isidentifier() and not keyword.iskeyword(name) for name in wire)
    values = {name: "v" if name != "field_123" else 1 for name in wire}
    values["model_config_"] = {"k": 1}
    dumped = params(**values).model_dump(mode="json", exclude_unset=True)
    assert set(dumped) == set(schema["properties"])
    assert params.model_fields["class_"].is_required()


def test_required_optional_and_defaults() -> None:
    schema = {
        "type": "object",
        "properties": {
            "req": {"type": "string"},
            "opt": {"type": "string"},
            "dflt": {"type": "integer", "default": 3},
            "nullable_req": {"type": ["string", "null"]},
        },
        "required": ["req", "nullable_req"],
    }
    params = build(schema)["Params"]
    p = params(req="r", nullable_req=None)
    assert (p.opt, p.dflt) == (None, 3)
    assert p.model_dump(exclude_unset=True) == {"req": "r", "nullable_req": None}
    with pytest.raises(ValidationError):
        params(req="r")
    with pytest.raises(ValidationError):
        params(req="r", nullable_req=None, unknown=1)  # closed
    assert build(schema, extra="allow")["Params"](req="r", nullable_req="n", unknown=1).model_extra == {
        "unknown": 1
    }


def test_refs_define_one_model_each_and_recursion_works() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "next": {"$ref": "#/$defs/Node"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["label"],
            },
            "Alias": {"type": "string"},
        },
        "properties": {
            "a": {"$ref": "#/$defs/Node"},
            "b": {"$ref": "#/$defs/Node"},
            "s": {"$ref": "#/$defs/Alias"},
        },
        "required": ["a"],
    }
    namespace = build(schema)
    params = namespace["Params"]
    p = params(a={"label": "1", "next": {"label": "2", "kids": [{"label": "3"}]}}, b={"label": "x"}, s="str")
    assert p.a.next.kids[0].label == "3"  # builtins that no annotation uses keep their names
    assert type(p.a) is type(p.b) is type(p.a.next.kids[0])
    with pytest.raises(ValidationError):
        params(a={"label": "1", "next": {"kids": [{}]}})
    models = [
        v
        for v in namespace.values()
        if isinstance(v, type) and issubclass(v, BaseModel) and v is not BaseModel
    ]
    assert {m.__name__ for m in models if m is not params} - {"RootModel", "ToolModel", "Open", "Closed"} == {
        "Node"
    }


def test_self_reference_to_the_root() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "parent": {"$ref": "#"}}}
    params = build(schema)["Params"]
    p = params(name="child", parent={"name": "parent", "parent": {"name": "grandparent"}})
    assert p.parent.parent.name == "grandparent"


def test_all_of_merges_objects_and_one_of_validates_each_branch() -> None:
    schema = {
        "type": "object",
        "properties": {
            "merged": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"$ref": "#/$defs/B"},
                ]
            },
            "either": {
                "oneOf": [
                    {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                    {"type": "string"},
                ]
            },
        },
        "$defs": {"B": {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}},
    }
    params = build(schema)["Params"]
    assert params(merged={"a": "x", "b": 1}).merged.b == 1
    with pytest.raises(ValidationError):
        params(merged={"a": "x"})
    assert params(either="s").either == "s"
    assert params(either={"x": 1}).either.x == 1


def test_class_names_never_start_with_underscores() -> None:
    assert class_name("__import__('os')") == "Import__Os"
    assert class_name("_private") == "Private"
    assert class_name("(__x)") == "X"
    assert class_name("") == "Model"
    assert class_name("3d") == "Model3d"
    schema = {
        "type": "object",
        "$defs": {"__Secret": {"type": "object", "properties": {"x": {"type": "string"}}}},
        "properties": {
            "__dunder": {"$ref": "#/$defs/__Secret"},
            "__obj": {"type": "object", "properties": {}},
        },
    }
    params = build(schema)["Params"]
    assert params(dunder={"x": "1"}).model_dump(by_alias=True, exclude_unset=True) == {"__dunder": {"x": "1"}}


def test_name_helpers() -> None:
    assert identifier("class") == "class_"
    assert identifier("match") == "match_"  # soft keyword
    assert identifier("9lives") == "value_9lives"
    assert identifier("über") == "uber"
    assert identifier("!!!") == "value"
    assert len(identifier("x" * 500)) <= 100
    assert module_name("Get-User.Info") == "get_user_info"
    names = UniqueNames({"__init__"})
    assert [names.claim(n) for n in ["list", "List", "list", "__INIT__"]] == [
        "list",
        "List_2",
        "list_3",
        "__INIT___2",
    ]


# --- whole tool modules -----------------------------------------------------------------------------


def test_tool_module_source_for_output_schemas_compiles() -> None:
    tool = ToolSpec(
        name="t",
        description='Tricky """ description \\',
        input_schema={
            "type": "object",
            "properties": {"Result": {"type": "string"}, "run": {"type": "string"}},
        },
        output_schema={
            "type": "array",
            "items": {"type": "object", "properties": {"x": {"type": "integer"}}},
        },
    )
    source = tool_module_source(tool)
    tree = ast.parse(source)
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assert {"Params", "Result", "run"} <= defined
    assert "class Result(ToolValue[" in source


def test_tool_module_source_reports_the_tool_it_cannot_generate() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(ToolGenerationError, match="'too_deep'"):
        tool_module_source(ToolSpec("too_deep", None, deep, None))
