"""Tools the MCP SDK rejects: repaired or skipped one by one, against the real malformed server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from servers.launch import malformed_params
from servers.malformed_server import PAGES, REPAIRABLE, UNUSABLE

from ipybox import CodeExecutor, GeneratedModules, generate_mcp_sources
from ipybox.mcp_client.repair import UnusableToolError, repair_tool
from ipybox.tool_exec import registry

from .conftest import GeneratedApi, generated_api

#: Tools in the order the server lists them, over its two pages.
LISTED = [tool["name"] for page in PAGES for tool in page]
SKIPPED = {"string_input", "bad_properties"}
REPAIRED = {tool["name"] for tool in REPAIRABLE}


@pytest.fixture(scope="module")
def malformed_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeneratedApi]:
    with generated_api(tmp_path_factory, "malformed", malformed_params()) as api:
        yield api


def test_good_and_repaired_tools_on_both_pages_are_generated(malformed_api: GeneratedApi) -> None:
    modules = malformed_api.modules
    assert isinstance(modules, GeneratedModules) and isinstance(modules, list)
    assert modules == [name for name in LISTED if name not in SKIPPED]  # "add" is on the second page
    files = {p.name for p in malformed_api.package_dir.iterdir()}
    assert files == {f"{m}.py" for m in modules} | {"__init__.py"}


def test_skipped_tools_are_reported_with_their_reasons(malformed_api: GeneratedApi) -> None:
    skipped = malformed_api.modules.skipped
    assert set(skipped) == SKIPPED == {tool["name"] for tool in UNUSABLE}
    assert skipped["string_input"] == 'its input schema is "anything goes", not a JSON Schema object'
    assert "inputSchema.properties.x" in skipped["bad_properties"]
    assert "valid dictionary" in skipped["bad_properties"]


def test_repaired_tools_are_reported_with_what_was_assumed(malformed_api: GeneratedApi) -> None:
    repaired = malformed_api.modules.repaired
    assert set(repaired) == REPAIRED
    assert "no declared parameters" in repaired["empty_input"]
    assert "dropped its invalid 'annotations'" in repaired["empty_input"]
    assert 'without "type"' in repaired["untyped_input"]
    assert '{"type": "string"}' in repaired["string_output"] and "text" in repaired["string_output"]
    assert "not an object schema" in repaired["array_output"]
    # ... which the SDK's models of the session's version drop; the generated API keeps them
    assert malformed_api.module("string_output").Result.model_json_schema()["type"] == "string"


def test_repaired_modules_read_schemas_the_only_way_they_can_be(malformed_api: GeneratedApi) -> None:
    empty = malformed_api.module("empty_input")
    assert empty.Params.model_fields == {}
    assert empty.Params(anything=1).model_dump() == {"anything": 1}  # a free object
    untyped = malformed_api.module("untyped_input")
    assert untyped.Params(n=3).n == 3
    with pytest.raises(ValidationError):
        untyped.Params()  # n stays required
    echo = malformed_api.module("echo")
    assert not hasattr(echo, "Result")
    assert echo.run.__annotations__["return"] in ("str", str)
    # output schemas of other JSON types than object give checked results
    array = malformed_api.module("array_output")
    assert list(array.Result.model_validate([1, 2])) == [1, 2]
    with pytest.raises(ValidationError):
        array.Result.model_validate(["x"])
    assert malformed_api.module("string_output").Result.model_validate("s").root == "s"
    assert issubclass(malformed_api.module("add").Result, BaseModel)


async def test_one_warning_per_skipped_tool(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ipybox"):
        modules = await generate_mcp_sources("mal", malformed_params(), tmp_path)
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("ipybox")
    ]
    assert len(warnings) == len(SKIPPED)
    for name in SKIPPED:
        [message] = [w for w in warnings if repr(name) in w]
        assert modules.skipped[name] in message
    assert registry.is_registered("mal", malformed_params())


@pytest.mark.timeout(60)
async def test_repaired_and_good_tools_run_in_a_kernel(malformed_api: GeneratedApi) -> None:
    """Through the tool server: its SDK session lists (and validates against) the same broken pages."""
    malformed_api.register()
    code = f"""
import json
from {malformed_api.name} import add, array_output, echo, empty_input, string_output, untyped_input
total = add.run(add.Params(a=2, b=3))
print(json.dumps([type(total) is add.Result, total.sum]))
print(json.dumps(echo.run(echo.Params(message="hi"))))
print(json.dumps(empty_input.run(empty_input.Params(free="form", n=1))))
print(json.dumps(untyped_input.run(untyped_input.Params(n=7))))
s = string_output.run(string_output.Params(text="loud"))
print(json.dumps([type(s) is string_output.Result, s.root]))
a = array_output.run(array_output.Params(count=3))
print(json.dumps([type(a) is array_output.Result, a.root, len(a), a[1]]))
"""
    async with CodeExecutor(working_dir=malformed_api.root, spare_kernel=False) as executor:
        result = await executor.execute(code)
    assert result.text is not None
    lines = [json.loads(line) for line in result.text.splitlines()]
    assert lines == [
        [True, 5],
        "hi",
        json.dumps({"free": "form", "n": 1}, sort_keys=True),
        json.dumps({"n": 7}, sort_keys=True),
        [True, "LOUD"],  # the text content (a legacy session passes no string structured content)
        [True, [0, 1, 2], 3, 1],  # a bare list as structured content, read back from its JSON text
    ]


# --- repair_tool, one definition at a time ----------------------------------------------------------

OBJECT = {"type": "object"}


@pytest.mark.parametrize(
    ("tool", "expected", "note"),
    [
        ({"name": "t"}, {"name": "t", "inputSchema": OBJECT}, "takes no parameters"),
        ({"name": "t", "inputSchema": None}, {"name": "t", "inputSchema": OBJECT}, "takes no parameters"),
        (
            {"name": "t", "inputSchema": {"properties": {"a": {"type": "string"}}}},
            {"name": "t", "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "read as an object",
        ),
        (
            {"name": "t", "inputSchema": OBJECT, "outputSchema": {"type": ["string", "null"]}},
            {"name": "t", "inputSchema": OBJECT},
            "the result is text",
        ),
        (
            {"name": "t", "inputSchema": OBJECT, "outputSchema": {"properties": {"a": {"type": "integer"}}}},
            {
                "name": "t",
                "inputSchema": OBJECT,
                "outputSchema": {"type": "object", "properties": {"a": {"type": "integer"}}},
            },
            "read as an object",
        ),
        (
            {
                "name": "t",
                "inputSchema": OBJECT,
                "outputSchema": {"type": "object", "properties": {"a": "int"}},
            },
            {"name": "t", "inputSchema": OBJECT},
            "invalid output schema (outputSchema.properties.a",
        ),
        (
            {"name": "t", "inputSchema": OBJECT, "description": 42, "icons": "none"},
            {"name": "t", "inputSchema": OBJECT},
            "dropped its invalid 'description'",
        ),
    ],
)
def test_repair_tool_repairs_what_is_clear(tool: dict[str, Any], expected: dict[str, Any], note: str) -> None:
    fixed, notes = repair_tool(tool, "2025-11-25")
    assert fixed == expected
    assert note in "; ".join(notes)


@pytest.mark.parametrize(
    ("tool", "reason"),
    [
        ("a tool", "not a JSON object"),
        ({"inputSchema": OBJECT}, "name"),
        ({"name": 5, "inputSchema": OBJECT}, "name"),
        ({"name": "t", "inputSchema": 42}, "its input schema is 42, not a JSON Schema object"),
        ({"name": "t", "inputSchema": ["a"]}, "not a JSON Schema object"),
        ({"name": "t", "inputSchema": {"type": "string"}}, 'type "string"; tool arguments are an object'),
        ({"name": "t", "inputSchema": {"type": "object", "required": "a"}}, "inputSchema.required"),
    ],
)
def test_repair_tool_refuses_what_is_not(tool: Any, reason: str) -> None:
    with pytest.raises(UnusableToolError) as info:
        repair_tool(tool, "2025-11-25")
    assert reason in str(info.value)


def test_a_valid_tool_is_left_alone() -> None:
    tool = {"name": "t", "inputSchema": OBJECT, "outputSchema": OBJECT, "annotations": {"readOnlyHint": True}}
    fixed, notes = repair_tool(tool, "2025-11-25")
    assert fixed is tool and notes == []


def test_generated_modules_stay_a_plain_list_of_names() -> None:
    modules = GeneratedModules(["a", "b"], skipped={"c": "why"})
    assert modules == ["a", "b"] and list(modules) == ["a", "b"]
    assert modules.skipped == {"c": "why"} and modules.repaired == {}
    assert json.dumps(modules) == '["a", "b"]'
