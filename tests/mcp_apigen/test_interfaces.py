"""Generated modules as interfaces: their size, results of any JSON type, types that compose, discovery."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from servers.launch import replay_params

from ipybox import CodeExecutor, generate_mcp_sources
from ipybox.gentools import create_gentool
from ipybox.mcp_apigen.discover import search
from ipybox.mcp_apigen.generate import ToolSpec, tool_module_source
from ipybox.mcp_apigen.runtime import ToolArgumentError, ToolMap, ToolResultError, call
from ipybox.tool_exec import registry

CORPUS = Path(__file__).parent / "corpus"


def corpus_tools() -> list[dict[str, Any]]:
    return [t for f in sorted(CORPUS.glob("*.json")) for t in json.loads(f.read_text())["tools"]]


def load(name: str, tool: ToolSpec) -> types.ModuleType:
    """The module for `tool`, executed as `pkg_<name>.<name>` (its package as a generated one)."""
    package = types.ModuleType(f"pkg_{name}")
    package.SERVER_NAME, package.SERVER_PARAMS = "srv", {"command": "x"}  # type: ignore[attr-defined]
    module = types.ModuleType(f"pkg_{name}.{name}")
    sys.modules[package.__name__], sys.modules[module.__name__] = package, module
    exec(compile(tool_module_source(tool), f"<{name}>", "exec", dont_inherit=True), module.__dict__)
    return module


# --- size --------------------------------------------------------------------------------------------


def test_a_module_is_about_the_size_of_its_tool_definition() -> None:
    """Over the recorded corpus: what an agent reads to use a tool costs no more than its JSON."""
    total_module = total_json = 0
    for tool in corpus_tools():
        spec = ToolSpec(tool["name"], tool.get("description"), tool["inputSchema"], tool.get("outputSchema"))
        module = len(tool_module_source(spec).encode())
        definition = len(json.dumps(tool).encode())
        assert module <= 1.15 * definition + 100, (tool["name"], module, definition)
        total_module, total_json = total_module + module, total_json + definition
    assert total_module <= total_json, (total_module, total_json)


def test_the_shared_machinery_is_not_repeated_in_modules() -> None:
    source = tool_module_source(
        ToolSpec("t", "T.", {"type": "object", "properties": {"a": {"type": "string"}}}, None)
    )
    assert "ConfigDict" not in source and "ToolRunner" not in source and "model_dump" not in source
    assert source.count("\n") <= 17, source


# --- results of any JSON type -----------------------------------------------------------------------

MAP_OUTPUT = {"type": "object", "additionalProperties": {"type": "integer"}}


def test_a_map_shaped_result_is_checked_and_is_a_mapping() -> None:
    counts = load("counts", ToolSpec("counts", None, {"type": "object"}, MAP_OUTPUT))
    result = counts.Result.model_validate({"A": 1, "B": 2})
    assert isinstance(result, Mapping) and isinstance(result, ToolMap)
    assert dict(result) == {"A": 1, "B": 2} and result["B"] == 2 and len(result) == 2 and "A" in result
    assert counts.Result(A=3)["A"] == 3
    with pytest.raises(ToolArgumentError, match="A"):
        counts.Result(A="many")
    with pytest.raises(ValidationError):
        counts.Result.model_validate({"A": "many"})


@pytest.mark.parametrize(
    ("output", "good", "bad"),
    [
        ({"type": "array", "items": {"type": "integer"}}, [1, 2], ["x"]),
        ({"type": "string", "maxLength": 3}, "abc", "abcd"),
        ({"type": "number", "minimum": 0}, 1.5, -1),
        ({"type": "boolean"}, True, "maybe"),
        ({"type": ["integer", "null"]}, None, "x"),
    ],
)
def test_non_object_output_schemas_give_checked_results(output: dict[str, Any], good: Any, bad: Any) -> None:
    module = load(f"value_{abs(hash(json.dumps(output)))}", ToolSpec("v", None, {"type": "object"}, output))
    assert module.Result.model_validate(good).root == good
    with pytest.raises(ValidationError):
        module.Result.model_validate(bad)
    assert module.run.__annotations__["return"] is module.Result


def test_a_result_passes_into_a_parameter_of_the_same_schema() -> None:
    point = {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x"],
    }
    producer = load(
        "producer",
        ToolSpec(
            "producer",
            None,
            {"type": "object"},
            {"type": "object", "properties": {"counts": MAP_OUTPUT, "at": point}},
        ),
    )
    counts = load("counts2", ToolSpec("counts2", None, {"type": "object"}, MAP_OUTPUT))
    consumer = load(
        "consumer",
        ToolSpec(
            "consumer", None, {"type": "object", "properties": {"counts": MAP_OUTPUT, "at": point}}, None
        ),
    )
    made = producer.Result.model_validate({"counts": {"a": 1}, "at": {"x": 1.0, "y": 2.0}})
    params = consumer.Params(counts=counts.Result.model_validate({"b": 2}), at=made.at)
    assert params.model_dump(mode="json", exclude_unset=True) == {
        "counts": {"b": 2},
        "at": {"x": 1.0, "y": 2.0},
    }
    assert consumer.Params(counts=made.counts, at=made.at).counts == {"a": 1}


def test_required_names_the_schema_does_not_declare_are_accepted() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}
    module = load("undeclared", ToolSpec("undeclared", None, schema, None))
    params = module.Params(a="x", b=[1])
    assert params.model_dump(mode="json", exclude_unset=True) == {"a": "x", "b": [1]}
    with pytest.raises(ToolArgumentError, match="b"):
        module.Params(a="x")  # still required
    with pytest.raises(ToolArgumentError, match="c"):
        module.Params(a="x", b=1, c=2)  # other names stay refused: the schema declares its properties


def test_call_rejects_invalid_arguments_before_connecting() -> None:
    module = load(
        "strict", ToolSpec("strict", None, {"type": "object", "properties": {"n": {"type": "integer"}}}, None)
    )
    with pytest.raises(ToolArgumentError, match="nothing was sent"):
        call(module.Params, {"n": "x"}, str)
    with pytest.raises(ToolResultError):
        raise ToolResultError.from_exception_data("x", [])


# --- packages and discovery -------------------------------------------------------------------------

TIME = CORPUS / "mcp-server-time.json"


@pytest.mark.timeout(60)
async def test_a_server_package_exposes_its_tools_and_signatures_in_a_fresh_kernel(tmp_path: Path) -> None:
    await generate_mcp_sources("clock", replay_params(TIME), tmp_path / "mcptools")
    create_gentool("travel", "meeting_time", "Find a meeting time across time zones.", tmp_path / "gentools")
    registry.register("clock", replay_params(TIME), tmp_path)
    code = """
import subprocess
import sys
import mcptools.clock as s
print(s.convert_time.__name__, "pydantic" in sys.modules, "mcp" in sys.modules)
print("get_current_time" in dir(s))
print(s.__doc__.count(") -> "))
from mcptools import search
print(search("convert timezone", limit=1))
"""
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        result = await executor.execute(code)
    assert result.text is not None
    lines = result.text.splitlines()
    assert lines[0] == "mcptools.clock.convert_time True False"  # no MCP SDK in the kernel
    assert lines[1:3] == ["True", "2"]
    assert lines[3].startswith("mcptools.clock.convert_time(source_timezone: str, time: str")


def test_search_ranks_tool_and_gentool_signatures(tmp_path: Path) -> None:
    package = tmp_path / "mcptools" / "clock"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        '"""MCP server header.\n\nnow(zone: str) -> {iso: str}\n    Current time in a zone.\n\n'
        'alarm(at: str) -> str\n    Set an alarm.\n"""\n'
    )
    create_gentool("travel", "meeting_time", "Find a meeting time across time zones.", tmp_path / "gentools")
    found = search("zone", root=tmp_path)
    assert found.splitlines()[0] == "mcptools.clock.now(zone: str) -> {iso: str}"
    assert "gentools.travel.meeting_time.run(example_param: str='value') -> Result{summary: str}" in found
    assert "alarm" not in found
    assert repr(found) == str(found)  # shown as text when a cell ends with it
    assert search("", root=tmp_path).count("\n    ") == 3
    assert "No tool matches" in search("weather", root=tmp_path)


def test_signatures_show_fields_defaults_and_result_shapes() -> None:
    from ipybox.mcp_apigen.signature import signature

    schema = {
        "type": "object",
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "properties": {
            "class": {"type": "string", "enum": ["a", "b"]},
            "days": {"type": "integer", "default": 3},
            "at": {"$ref": "#/$defs/Point"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "user-name": {"type": ["string", "null"]},
        },
        "required": ["class", "token"],
    }
    text = signature("plan", schema, MAP_OUTPUT, "Plan a trip. Long details follow.")
    head, summary = text.split("\n")
    assert head == (
        "plan(class_: 'a'|'b', token: Any, days: int = 3, at: {x: float} = None, tags: list[str] = None, "
        "user_name: str | None = None) -> dict[str, int]"
    )
    assert summary == "    Plan a trip."
    assert signature("t", {"type": "object"}, None, None) == "t() -> str"
    assert signature("t", {}, {"type": "array", "items": {"type": "integer"}}, "").endswith("-> list[int]")


def test_generated_modules_import_exactly_what_they_use(tmp_path: Path) -> None:
    """ruff finds no undefined, unused or redefined names in the modules of the whole corpus."""
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment")
    for i, tool in enumerate(corpus_tools()):
        spec = ToolSpec(tool["name"], tool.get("description"), tool["inputSchema"], tool.get("outputSchema"))
        (tmp_path / f"m{i}.py").write_text(tool_module_source(spec))
    result = subprocess.run(
        [str(ruff), "check", "--no-cache", "--isolated", "--select", "F401,F811,F821,F841", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.parametrize("planted", ["dangling", "to_file", "user_init"])
async def test_the_workspace_init_is_never_written_through_a_link(tmp_path: Path, planted: str) -> None:
    root = tmp_path / "mcptools"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    init = root / "__init__.py"
    if planted == "dangling":
        init.symlink_to(outside)
    elif planted == "to_file":
        outside.write_text("keep\n")
        init.symlink_to(outside)
    else:
        init.write_text("# mine\n")
    await generate_mcp_sources("clock", replay_params(TIME), root)
    assert (root / "clock" / "__init__.py").exists()
    if planted == "dangling":
        assert not outside.exists()
    elif planted == "to_file":
        assert outside.read_text() == "keep\n"
    else:
        assert init.read_text() == "# mine\n"
