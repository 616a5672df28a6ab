"""Output parsers in the signatures agents read: `search()` and a server package's docstring show
`; run_parsed() -> {...}` as soon as a parser is added, and the package keeps it when regenerated."""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path

from ipybox import generate_mcp_sources
from ipybox.mcp_apigen.discover import PARSED_NOTATION, PARSER_MARKER, parsed_result, search

from .test_names import CALC

PARSER_SECTION = f'''
{PARSER_MARKER}
from pydantic import BaseModel


class ParseResult(BaseModel):
    """What run_parsed() returns."""

    total: float
    exact: bool


def run_parsed(params: Params) -> ParseResult:
    return ParseResult(total=float(run(params).result), exact=True)
'''
PARSED = "sum_(numbers: list[float]) -> {result: str}; run_parsed() -> {total: float, exact: bool}"


def _import_fresh(root: Path, name: str) -> str:
    """The docstring of package `name` under `root`, imported anew."""
    for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
        del sys.modules[key]
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(name).__doc__ or ""
    finally:
        sys.path.remove(str(root))
        for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
            del sys.modules[key]


async def test_a_parser_shows_in_search_and_the_docstring_at_once_and_after_regeneration(
    tmp_path: Path,
) -> None:
    root, name = tmp_path / "mcptools", f"calc_{uuid.uuid4().hex[:6]}"
    await generate_mcp_sources(name, CALC, root)
    assert "run_parsed" not in search("add numbers", root=tmp_path)
    assert "`; run_parsed() -> ...`" not in (root / name / "__init__.py").read_text()
    sys.path.insert(0, str(root))
    try:  # the agent read the signatures in the kernel, then added a parser: no reload between
        package = importlib.import_module(name)
        assert "run_parsed" not in (package.__doc__ or "")
        with (root / name / "sum_.py").open("a") as f:
            f.write(PARSER_SECTION)
        assert f"\n\n{PARSED}\n" in (package.__doc__ or "")
        assert f"\n{PARSED_NOTATION}.\n\n" in (package.__doc__ or "")  # the header says what it means
    finally:
        sys.path.remove(str(root))

    assert f"mcptools.{name}.{PARSED}\n    Add numbers." in search("add numbers", root=tmp_path)
    assert f"\n\n{PARSED}\n" in _import_fresh(root, name)

    await generate_mcp_sources(name, CALC, root)  # registered again: the parser and its signature stay
    init = (root / name / "__init__.py").read_text()
    assert init.count("run_parsed() -> {total: float, exact: bool}") == 1
    assert "`; run_parsed() -> ...`: `<tool>.run_parsed(params)` returns the output parser's result" in init
    doc = _import_fresh(root, name)
    assert doc.count("run_parsed()") == 2 and f"\n\n{PARSED}\n" in doc  # the header's and sum_'s
    assert search("add numbers", root=tmp_path).count("run_parsed") == 1


def test_parsed_result_reads_only_the_parsers_code() -> None:
    assert parsed_result(PARSER_SECTION) == "{total: float, exact: bool}"
    assert parsed_result("def run_parsed(p) -> list[Row]:\n    ...") == "list[Row]"
    assert parsed_result("x = 1") is None
    assert parsed_result("def run_parsed(:") is None  # not Python: no signature, no error
    long = "class ParseResult:\n" + "".join(f"    field_{i}: int\n" for i in range(40))
    assert len(parsed_result(long + "def run_parsed(p) -> ParseResult: ...") or "") <= 200
