"""Generated models enforce JSON Schema rules: each kind of constraint, formats, and the error an agent sees.

The hand-written cases (`constraint_cases.py`) are served by a real MCP server (the replay
server), generated, imported and checked in-process; then the error path is run for real in a
kernel through `CodeExecutor`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError
from servers.launch import approve_each, replay_params

from ipybox import (
    ApprovalRequest,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
)
from ipybox.mcp_apigen.generate import ToolSpec, tool_module_source
from ipybox.mcp_apigen.runtime import ToolArgumentError, ToolResultError, parse_result
from ipybox.mcp_apigen.schema import pattern_engine

from .conftest import GeneratedApi, generated_api
from .constraint_cases import CASES, UNCHECKED, Case, constraints_tool

UUID = "123e4567-e89b-12d3-a456-426614174000"
VALIDATORS = {2020: jsonschema.Draft202012Validator, 4: jsonschema.Draft4Validator}


@pytest.fixture(scope="module")
def constraints_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeneratedApi]:
    fixture = tmp_path_factory.mktemp("fixtures") / "constraints.json"
    fixture.write_text(json.dumps({"tools": [constraints_tool()]}))
    with generated_api(tmp_path_factory, "cons", replay_params(fixture)) as api:
        yield api


@pytest.fixture(scope="module")
def tool(constraints_api: GeneratedApi) -> ModuleType:
    return constraints_api.module("constrained")


def rejection(tool: ModuleType, name: str, value: Any) -> ToolArgumentError:
    with pytest.raises(ToolArgumentError) as info:
        tool.Params(**{name: value})
    return info.value


@pytest.mark.parametrize("case", [c for c in CASES if c.cross_check], ids=lambda c: c.name)
def test_the_cases_are_right_by_jsonschema(case: Case) -> None:
    """The test data itself: valid values are valid and invalid ones invalid, per a JSON Schema
    validator (for the rules it checks the way the schema's draft means them)."""
    validator = VALIDATORS[case.draft](case.schema)
    for value in case.valid:
        assert validator.is_valid(value), value
    for value, _ in case.invalid:
        assert not validator.is_valid(value), value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_valid_values_pass_and_go_over_the_wire(tool: ModuleType, case: Case) -> None:
    for value in case.valid:
        params = tool.Params(**{case.name: value})
        sent = params.model_dump(mode="json", exclude_unset=True)[case.name]
        assert json.loads(json.dumps(sent)) == sent  # plain JSON
        if case.name == "uri":
            assert sent.rstrip("/") == value
        elif case.name not in ("date_time",):
            assert sent == value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_invalid_values_are_rejected_naming_field_rule_and_value(tool: ModuleType, case: Case) -> None:
    for value, rule in case.invalid:
        error = rejection(tool, case.name, value)
        assert isinstance(error, ValidationError)  # code that catches pydantic's error still does
        lines = str(error).splitlines()
        assert lines[0] == "1 invalid argument for tool 'constrained'; nothing was sent:"
        assert len(lines) == 2, lines  # one line per bad field
        line = lines[1]
        assert line.startswith(f"- {case.name}"), line
        assert re.search(rf"\(rule: [^)]*\b{rule}\b", line), (line, rule)
        shown = {"nested": 0, "item_minimum": -1}.get(case.name, value)
        assert f"got {repr(shown)[:40]}" in line, line
        assert error.errors()  # pydantic's details are still there


def test_several_bad_fields_give_one_line_each(tool: ModuleType) -> None:
    with pytest.raises(ToolArgumentError) as info:
        tool.Params(minimum=0, pattern="abc-1", enum_str="blue", any_of_bounded="abcd", bogus=1)
    lines = str(info.value).splitlines()
    assert lines[0] == "5 invalid arguments for tool 'constrained'; nothing was sent:"
    assert sorted(line.split(":")[0] for line in lines[1:]) == [
        "- any_of_bounded",  # both members of the union failed: one line
        "- bogus",
        "- enum_str",
        "- minimum",
        "- pattern",
    ]
    assert "- bogus: Extra inputs are not permitted (rule: additionalProperties; got 1)" in lines
    assert "- minimum: Input should be greater than or equal to 1 (rule: minimum; got 0)" in lines


def test_nested_and_item_paths_are_named(tool: ModuleType) -> None:
    assert "- nested.port: " in str(rejection(tool, "nested", {"port": 0}))
    assert "- item_minimum[1]: " in str(rejection(tool, "item_minimum", [1, -1]))
    missing = str(rejection(tool, "nested", {}))
    assert "- nested.port: Field required (rule: required)" in missing


def test_assignment_and_dicts_are_checked_too(tool: ModuleType) -> None:
    params = tool.Params(minimum=3)
    with pytest.raises(ToolArgumentError, match=r"- minimum: .*rule: minimum; got 0"):
        params.minimum = 0
    assert params.minimum == 3
    with pytest.raises(ToolArgumentError, match=r"- maximum: .*rule: maximum; got 2"):
        tool.Params.model_validate({"maximum": 2})


def test_formats_become_types(tool: ModuleType) -> None:
    import datetime
    import ipaddress

    params = tool.Params(
        date_time="2024-05-01T10:00:00+02:00",
        date="2024-02-29",
        time="10:30:00",
        uuid="123e4567-e89b-12d3-a456-426614174000",
        ipv4="10.0.0.1",
        ipv6="::1",
    )
    assert isinstance(params.date_time, datetime.datetime) and params.date_time.tzinfo is not None
    assert isinstance(params.date, datetime.date) and isinstance(params.time, datetime.time)
    assert isinstance(params.uuid, uuid.UUID)
    assert isinstance(params.ipv4, ipaddress.IPv4Address) and isinstance(params.ipv6, ipaddress.IPv6Address)
    assert params.model_dump(mode="json", exclude_unset=True) == {
        "date_time": "2024-05-01T10:00:00+02:00",
        "date": "2024-02-29",
        "time": "10:30:00",
        "uuid": "123e4567-e89b-12d3-a456-426614174000",
        "ipv4": "10.0.0.1",
        "ipv6": "::1",
    }
    now = datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)
    assert tool.Params(date_time=now).model_dump(mode="json", exclude_unset=True) == {
        "date_time": "2024-05-01T00:00:00Z"
    }


def test_email_needs_no_extra_package(constraints_api: GeneratedApi) -> None:
    source = (constraints_api.package_dir / "constrained.py").read_text()
    assert "EmailStr" not in source and "email_validator" not in source
    assert "email: Email | None" in source


def test_what_is_not_checked_is_in_the_description(tool: ModuleType) -> None:
    fields = tool.Params.model_fields
    for name, (_, note) in UNCHECKED.items():
        description = fields[name].description
        assert description is not None and "Not checked before the call:" in description, name
        assert note in description, (name, description)
    assert fields["hostname"].description.startswith("A host.\n\n")
    assert tool.Params(ecma_pattern="anything", hostname="not a host!").ecma_pattern == "anything"


def test_patterns_fall_back_to_python_re_or_to_the_description() -> None:
    assert pattern_engine("^[a-z]+$") == "pydantic"
    assert pattern_engine("^\\p{L}+$") == "pydantic"
    assert pattern_engine("^(?=.*[0-9]).+$") == "re"  # lookahead: not in pydantic's engine
    assert pattern_engine("(a)\\1") == "re"  # backreference
    assert pattern_engine("^(?<y>a)\\k<y>$") is None  # ECMAScript only
    assert pattern_engine("[[a]") is None  # Python warns (a nested set): not used
    assert pattern_engine("(") is None


def test_result_models_check_their_rules_and_keep_the_result() -> None:
    spec = ToolSpec(
        "stats",
        None,
        {"type": "object"},
        {
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 0},
                "at": {"type": "string", "format": "date-time"},
            },
        },
    )
    namespace: dict[str, Any] = {"__name__": "stats_module"}
    source = tool_module_source(spec).replace("from . import SERVER_NAME, SERVER_PARAMS", "")
    exec(compile(source, "<stats>", "exec", dont_inherit=True), namespace)
    result_model = namespace["Result"]
    ok = parse_result(result_model, {"count": 1, "at": "2024-05-01T10:00:00"}, "stats")
    assert ok.at.tzinfo is None  # results may leave out the offset; arguments may not
    with pytest.raises(ToolResultError) as info:
        parse_result(result_model, {"count": -1}, "stats")
    assert str(info.value).splitlines() == [
        "The result of tool 'stats' does not match its output schema:",
        "- count: Input should be greater than or equal to 0 (rule: minimum; got -1)",
    ]
    assert info.value.result == {"count": -1}


# --- in a kernel ------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_the_agent_sees_one_line_per_bad_field_and_nothing_is_called(
    constraints_api: GeneratedApi, _state_dir: Path
) -> None:
    constraints_api.register()
    code = f"""
from {constraints_api.name} import constrained as c
c.run(c.Params(minimum=0, pattern="abc-1", enum_str="blue", date_time="2024-05-01"))
"""
    ok = f"""
from {constraints_api.name} import constrained as c
print(c.run(c.Params(minimum=1, uuid="{UUID}", date_time="2024-05-01T10:00:00Z")))
"""
    async with CodeExecutor(working_dir=constraints_api.root, spare_kernel=False) as executor:
        seen: list[object] = []
        with pytest.raises(CodeExecutionError) as info:
            async for item in executor.stream(code):
                seen.append(item)
                if isinstance(item, ApprovalRequest):
                    await item.accept()
        requests, result = await approve_each(executor, ok)
        with pytest.raises(CodeExecutionError, match=r"- minimum: .*\(rule: minimum; got 0\)"):
            await executor.execute(
                f"from {constraints_api.name} import constrained as c\nc.run({{'minimum': 0}})"
            )
    assert not any(isinstance(item, ApprovalRequest) for item in seen)  # no tool call was made
    message = str(info.value)
    assert "ToolArgumentError: 4 invalid arguments for tool 'constrained'; nothing was sent:" in message
    for line in [
        "- minimum: Input should be greater than or equal to 1 (rule: minimum; got 0)",
        "- pattern: String should match pattern '^[A-Z]{3}-\\d+$' (rule: pattern; got 'abc-1')",
        "- enum_str: Input should be 'red' or 'green' (rule: enum; got 'blue')",
        "- date_time: Input should have timezone info (rule: format; got '2024-05-01')",
    ]:
        assert line in message, message
    assert "errors.pydantic.dev" not in message  # no pydantic boilerplate
    assert len(requests) == 1 and isinstance(result, CodeExecutionResult)
    assert json.loads(result.text or "") == {
        "minimum": 1,
        "uuid": UUID,
        "date_time": "2024-05-01T10:00:00Z",
    }


@pytest.mark.timeout(120)
async def test_the_agent_sees_the_lines_through_the_mcp_server(tmp_path: Path) -> None:
    from mcp_server.conftest import open_ipybox, text_of

    fixture = tmp_path / "constraints.json"
    fixture.write_text(json.dumps({"tools": [constraints_tool()]}))
    workspace, state = tmp_path / "workspace", tmp_path / "state"
    workspace.mkdir()
    async with open_ipybox(workspace, state) as box:
        await box.register("cons", replay_params(fixture))
        rejected = await box.run(
            "from mcptools.cons import constrained as c\n"
            "c.run(c.Params(items_count=[], uri='not a uri', nested={'port': 70000}))"
        )
        accepted = await box.output(
            "from mcptools.cons import constrained as c\nprint(c.run(c.Params(items_count=['a'])))"
        )
    assert rejected.is_error
    text = text_of(rejected)
    assert "3 invalid arguments for tool 'constrained'; nothing was sent:" in text
    too_short = "List should have at least 1 item after validation, not 0"
    assert f"- items_count: {too_short} (rule: minItems; got [])" in text
    assert "- uri: " in text and "(rule: format; got 'not a uri')" in text
    assert "- nested.port: Input should be less than or equal to 65535 (rule: maximum; got 70000)" in text
    assert json.loads(accepted) == {"items_count": ["a"]}


def test_generated_modules_import_neither_the_generator_nor_the_mcp_sdk(
    constraints_api: GeneratedApi,
) -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(constraints_api.root)!r}); "
        f"import {constraints_api.name}.constrained; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'ipybox', 'jsonschema')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ast.literal_eval(done.stdout) == [
        "ipybox",
        "ipybox._lazy",  # the package's lazy exports (importlib alone)
        "ipybox.errors",
        "ipybox.mcp_apigen",
        "ipybox.mcp_apigen.discover",  # output parsers in a package's docstring (standard library only)
        "ipybox.mcp_apigen.runtime",
        "ipybox.tool_exec",
        "ipybox.tool_exec.client",
    ]
