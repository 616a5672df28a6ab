"""Tools named like Python builtins, generated from a real server (tests/servers/calc_server.py):
their modules take a trailing `_`, so the documented `from mcptools.<server> import <tool>`
never hides `sum`, `max`, `open`, ... in the agent's kernel."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ipybox import CodeExecutor
from ipybox.mcp_apigen.names import BUILTIN_NAMES, module_name

from .conftest import GeneratedApi, generated_api

CALC = {"command": sys.executable, "args": [str(Path(__file__).parents[1] / "servers" / "calc_server.py")]}
SHADOWING = ["sum", "min", "max", "list", "open", "type", "id"]


@pytest.fixture(scope="module")
def calc_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeneratedApi]:
    with generated_api(tmp_path_factory, "calc", CALC) as api:
        yield api


def test_module_names_never_take_a_builtins_name() -> None:
    for name in ("sum", "MAX", "Open", "print", "display", "get_ipython", "help"):
        assert module_name(name) == f"{name.lower()}_"
    for name in ("summary", "max_items", "get-user", "class"):  # other names are kept as before
        assert module_name(name) in ("summary", "max_items", "get_user", "class_")
    import builtins

    assert {n for n in dir(builtins) if n.islower() and not n.startswith("_")} <= BUILTIN_NAMES


def test_builtin_named_tools_import_under_a_trailing_underscore(calc_api: GeneratedApi) -> None:
    assert sorted(calc_api.modules) == sorted([f"{n}_" for n in SHADOWING] + ["calculate_tariff"])
    package = importlib.import_module(calc_api.name)
    doc = package.__doc__ or ""
    assert "a tool named like a Python builtin has a trailing `_` (`sum_`)" in doc
    assert "\n\nsum_(numbers: list[float]) -> {result: str}\n    Add numbers." in doc
    assert "# price: in USD; tariff_rate: 0..100, in percent, e.g. 25; since: YYYY-MM-DD" in doc
    namespace: dict[str, Any] = {}
    exec(f"from {calc_api.name} import sum_, max_, open_, type_", namespace)
    assert [namespace[f"{n}_"].TOOL_NAME for n in ("sum", "max", "open", "type")] == [
        "sum",
        "max",
        "open",
        "type",
    ]
    assert not {"sum", "max", "open", "type"} & set(namespace)  # the builtins stay
    exec(f"from {calc_api.name} import sum, list", namespace)  # code written before still imports
    assert namespace["sum"] is namespace["sum_"] and namespace["list"].TOOL_NAME == "list"
    assert "sum" not in dir(package) and "sum_" in dir(package)
    with pytest.raises(ImportError):
        exec(f"from {calc_api.name} import summ", namespace)


async def test_the_documented_pattern_calls_the_tool_and_keeps_the_builtin(
    calc_api: GeneratedApi, _state_dir: Path
) -> None:
    calc_api.register()
    code = (
        f"from {calc_api.name} import sum_, max_\n"
        "total, top = sum_.run(sum_.Params(numbers=[1, 2.5])), max_.run(max_.Params(numbers=[3, 9]))\n"
        "print(total.result, top.result)\n"
        "print(sum([1, 2]), max(3, 4), type(1).__name__)"
    )
    async with CodeExecutor(working_dir=calc_api.root, spare_kernel=False) as executor:
        result = await executor.execute(code)
    assert result.text.splitlines() == ["3.5 9", "3 4 int"]
