"""Real tool schemas: recorded `tools/list` output of public MCP servers, served again and generated.

Each fixture in `corpus/` (see `corpus/README.md`) is replayed by `tests/servers/replay_server.py`,
so generation runs over a real MCP session. Every module must import, and for every property
with a rule the models can check, a value that breaks the rule (confirmed invalid by the
`jsonschema` validator) must be rejected before a call, naming the field.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from servers.launch import nasty_params, replay_params, synthetic_params

from ipybox import generate_mcp_sources
from ipybox.mcp_apigen.runtime import ToolArgumentError

from .conftest import GeneratedApi
from .constraint_cases import violations

CORPUS = Path(__file__).parent / "corpus"
FIXTURES = sorted(CORPUS.glob("*.json"))
SOURCES = {f.stem: replay_params(f) for f in FIXTURES} | {
    "synthetic": synthetic_params(100),
    "nasty": nasty_params(),
}


def generate(name: str, params: dict[str, Any], root: Path) -> list[str]:
    return list(asyncio.run(generate_mcp_sources(name, params, root)))


@pytest.fixture(scope="module")
def corpus_apis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, GeneratedApi]]:
    root = tmp_path_factory.mktemp("apis")
    apis: dict[str, GeneratedApi] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYBOX_STATE_DIR", str(tmp_path_factory.mktemp("generation-state")))
        for source, params in SOURCES.items():
            name = f"corpus_{source.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
            apis[source] = GeneratedApi(root, name, params, generate(name, params, root))
    sys.path.insert(0, str(root))
    try:
        yield apis
    finally:
        sys.path.remove(str(root))
        for api in apis.values():
            for key in [k for k in sys.modules if k == api.name or k.startswith(f"{api.name}.")]:
                del sys.modules[key]


def test_the_corpus_is_modest_and_recorded() -> None:
    assert len(FIXTURES) >= 8
    assert sum(f.stat().st_size for f in FIXTURES) < 1_000_000
    for fixture in FIXTURES:
        data = json.loads(fixture.read_text())
        assert data["source"] and data["tools"], fixture


@pytest.mark.parametrize("source", list(SOURCES))
def test_every_tool_gets_a_module_that_imports(corpus_apis: dict[str, GeneratedApi], source: str) -> None:
    api = corpus_apis[source]
    expected = {"synthetic": 100, "nasty": 41}.get(source)
    if expected is None:
        expected = len(json.loads((CORPUS / f"{source}.json").read_text())["tools"])
    assert len(api.modules) == expected
    for module in api.modules:
        imported = api.module(module)
        assert imported.Params.model_json_schema()


def test_every_checkable_rule_in_the_corpus_is_enforced(corpus_apis: dict[str, GeneratedApi]) -> None:
    """The corpus-wide count: each single-property violation jsonschema confirms is rejected before a call."""
    checked: dict[str, int] = {}
    missed: list[str] = []
    for source, api in corpus_apis.items():
        for module in api.modules:
            imported = api.module(module)
            tool_schema = _tool_schema(source, imported.TOOL_NAME)
            root = {k: v for k, v in tool_schema.items() if k != "required"}
            validator = jsonschema.Draft202012Validator(root, format_checker=jsonschema.FormatChecker())
            for prop, prop_schema in (tool_schema.get("properties") or {}).items():
                for value, rule in violations(prop_schema):
                    if validator.is_valid({prop: value}) and rule != "format":
                        continue  # not a violation after all (jsonschema checks formats only with extras)
                    try:
                        imported.Params(**{prop: value})
                    except ToolArgumentError as e:
                        lines = str(e).splitlines()
                        if any(line.startswith(f"- {_field(imported, prop)}") for line in lines):
                            checked[rule] = checked.get(rule, 0) + 1
                            continue
                    missed.append(f"{source}/{imported.TOOL_NAME}.{prop}={value!r} ({rule})")
    assert missed == []
    assert sum(checked.values()) >= 100, checked
    kinds = {"minimum", "maximum", "minLength", "pattern", "minItems", "enum", "format"}
    assert kinds <= set(checked), checked


def _field(module: Any, wire: str) -> str:
    for name, info in module.Params.model_fields.items():
        if (info.alias or name) == wire:
            return str(name)
    return wire


_SCHEMAS: dict[str, dict[str, Any]] = {}


def _tool_schema(source: str, tool_name: str) -> dict[str, Any]:
    """The input schema the server listed for a tool."""
    if source not in _SCHEMAS:
        if source == "synthetic":
            from servers.replay_server import synthetic_tools

            tools = synthetic_tools(100)
        elif source == "nasty":
            from servers.nasty_server import TOOLS

            tools = [{"name": t.name, "inputSchema": t.input_schema} for t in TOOLS]
        else:
            tools = json.loads((CORPUS / f"{source}.json").read_text())["tools"]
        _SCHEMAS[source] = {t["name"]: t for t in tools}
    schema: dict[str, Any] = _SCHEMAS[source][tool_name]["inputSchema"]
    return schema
