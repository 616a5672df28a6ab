"""API generation with schema rules enforced vs the generator before it (and datamodel-code-generator).

Measured on a 100-tool synthetic server and on the test corpus (recorded `tools/list` output of
public MCP servers, plus the nasty server), all served over stdio by the test servers:

- codegen: `tool_module_source()` for every tool of a server (what generation adds to listing);
- generate: `generate_mcp_sources()` end to end (start the server, list, generate, write), with
  only the code generator swapped for the baseline's;
- import: importing all modules of the generated 100-tool package in a fresh kernel;
- rejected: single-property violations (confirmed by the `jsonschema` validator) that `Params`
  rejects before any call.

The baseline generator is ipybox's own from git revision `--baseline` (default: the last
commit before constraints were enforced), loaded under another package name. If
`datamodel_code_generator` is importable (`uv run --with datamodel-code-generator==0.89.0 ...`),
its batched generation of the same schemas (one `generate()` per server) is timed too.

Usage: uv run python benchmarks/bench_apigen.py [--rounds 5] [--baseline REV]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import REPO

sys.path.insert(0, str(REPO / "tests"))

from mcp_apigen.constraint_cases import violations  # noqa: E402
from servers.launch import nasty_params, replay_params, synthetic_params  # noqa: E402

from ipybox import CodeExecutor  # noqa: E402
from ipybox.mcp_apigen import generate as current  # noqa: E402

BASELINE_REV = "406aa66"  # API generation before schema rules were enforced
CORPUS = REPO / "tests" / "mcp_apigen" / "corpus"
IMPORT_ALL = """
import importlib, time
started = time.perf_counter()
for name in {modules!r}:
    importlib.import_module("{package}." + name)
print(time.perf_counter() - started)
"""

Generator = Callable[[Any], str]


def load_baseline(rev: str) -> types.ModuleType:
    """`ipybox.mcp_apigen.generate` as of git revision `rev`, importable as `baseline_apigen.generate`."""
    target = Path(tempfile.mkdtemp(prefix="baseline-apigen-")) / "baseline_apigen"
    target.mkdir()
    (target / "__init__.py").write_text("")
    for name in ("generate", "names", "schema"):
        source = subprocess.run(
            ["git", "show", f"{rev}:ipybox/mcp_apigen/{name}.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        source = source.replace("ipybox.mcp_apigen.", "baseline_apigen.")
        (target / f"{name}.py").write_text(source.replace("ipybox.mcp_connect", "baseline_apigen._connect"))
    # the modules the baseline imported its MCP helpers from are gone: the names, from where they live
    (target / "_connect.py").write_text(_BASELINE_CONNECT)
    sys.path.insert(0, str(target.parent))
    return importlib.import_module("baseline_apigen.generate")


_BASELINE_CONNECT = """
from ipybox.mcp_client.params import ServerParamsError, transport_of
from ipybox.mcp_client.placeholders import placeholder_values, redact
from ipybox.mcp_client.session import describe_error, list_all_tools, open_session


def environment(*args):  # a name later commits dropped; the baseline only imports it
    return {}
"""


def servers() -> dict[str, dict[str, Any]]:
    corpus = {f.stem: replay_params(f) for f in sorted(CORPUS.glob("*.json"))}
    return {"synthetic-100": synthetic_params(100)} | corpus | {"nasty": nasty_params()}


async def list_specs(params: dict[str, Any]) -> list[Any]:
    return await current.list_tools(params)


def codegen_seconds(generator: Generator, specs: list[Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for spec in specs:
            try:
                generator(spec)
            except Exception:  # noqa: BLE001 - a tool the generator skips still took its time
                pass
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def generate_seconds(generator: Generator, params: dict[str, Any], root: Path) -> float:
    """`generate_mcp_sources` end to end with `generator` as the code generator."""
    saved = current.tool_module_source
    current.tool_module_source = generator  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        await current.generate_mcp_sources("bench", params, root)
        return time.perf_counter() - started
    finally:
        current.tool_module_source = saved  # type: ignore[assignment]


def rejected(generator: Generator, specs: list[Any]) -> tuple[int, int]:
    """(rejected, confirmed) single-property violations over all tools."""
    import jsonschema
    from pydantic import ValidationError

    hits = total = 0
    package = types.ModuleType("benchpkg")
    package.SERVER_NAME, package.SERVER_PARAMS = "bench", {"command": "x"}  # type: ignore[attr-defined]
    sys.modules["benchpkg"] = package
    for spec in specs:
        module = types.ModuleType("benchpkg.tool")
        module.__package__ = "benchpkg"
        sys.modules["benchpkg.tool"] = module
        exec(compile(generator(spec), spec.name, "exec", dont_inherit=True), module.__dict__)
        schema = {k: v for k, v in spec.input_schema.items() if k != "required"}
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
        for prop, prop_schema in (spec.input_schema.get("properties") or {}).items():
            for value, rule in violations(prop_schema):
                if rule != "format" and validator.is_valid({prop: value}):
                    continue
                total += 1
                names = {prop} | {n for n, f in module.Params.model_fields.items() if f.alias == prop}
                try:
                    module.Params(**{prop: value})
                except ValidationError as e:  # counts only if the error is about this property
                    hits += any(error["loc"][:1] and error["loc"][0] in names for error in e.errors())
    return hits, total


async def import_seconds(package_root: Path, package: str, modules: list[str]) -> float:
    async with CodeExecutor(working_dir=package_root, spare_kernel=False) as executor:
        result = await executor.execute(IMPORT_ALL.format(modules=modules, package=package))
    return float(result.text or "nan")


def dcg_seconds(tools: list[dict[str, Any]]) -> tuple[float, float] | None:
    """datamodel-code-generator on one server's tools in one batch: (first call, median of 3 more)."""
    try:
        from datamodel_code_generator import DataModelType, InputFileType, PythonVersion, generate
        from datamodel_code_generator.format import Formatter
    except ImportError:
        return None
    options: dict[str, Any] = {
        "input_file_type": InputFileType.MCPTools,
        "output_model_type": DataModelType.PydanticV2BaseModel,
        "target_python_version": PythonVersion.PY_311,
        "use_annotated": True,
        "field_constraints": True,
        "use_union_operator": True,
        "use_standard_collections": True,
        "formatters": [Formatter.BUILTIN],
        "disable_timestamp": True,
    }
    document = {"tools": [{k: v for k, v in tool.items() if v is not None} for tool in tools]}
    times = []
    for _ in range(4):
        started = time.perf_counter()
        generate(document, **options)
        times.append(time.perf_counter() - started)
    return times[0], statistics.median(times[1:])


def as_tools(specs: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "description": s.description,
            "inputSchema": s.input_schema,
            "outputSchema": s.output_schema,
        }
        for s in specs
    ]


async def measure(rounds: int = 5, baseline_rev: str = BASELINE_REV) -> dict[str, Any]:
    baseline = load_baseline(baseline_rev)
    before, after = baseline.tool_module_source, current.tool_module_source
    figures: dict[str, Any] = {"servers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("IPYBOX_STATE_DIR", str(Path(tmp) / "state"))
        for name, params in servers().items():
            specs = await list_specs(params)
            row: dict[str, Any] = {"tools": len(specs)}
            row["codegen_before"] = codegen_seconds(before, specs, rounds)
            row["codegen_after"] = codegen_seconds(after, specs, rounds)
            ends: dict[str, list[float]] = {"before": [], "after": []}
            for i in range(rounds):  # alternated, so both sides see the same load
                for side, generator in (("before", before), ("after", after)):
                    root = Path(tmp) / f"{side}-{name}-{i}"
                    ends[side].append(await generate_seconds(generator, params, root))
            row["generate_before"] = statistics.median(ends["before"])
            row["generate_after"] = statistics.median(ends["after"])
            row["rejected_before"], row["confirmed"] = rejected(before, specs)
            row["rejected_after"], _ = rejected(after, specs)
            row["dcg"] = dcg_seconds(as_tools(specs))
            figures["servers"][name] = row
            print(f"measured {name}", file=sys.stderr)
        for side, generator in (("before", before), ("after", after)):
            root = Path(tmp) / f"import-{side}"
            current.tool_module_source = generator  # type: ignore[assignment]
            try:
                modules = await current.generate_mcp_sources("hundred", synthetic_params(100), root)
            finally:
                current.tool_module_source = after  # type: ignore[assignment]
            figures[f"import_{side}"] = await import_seconds(root, "hundred", list(modules))
    return figures


def report(figures: dict[str, Any]) -> str:
    lines = [
        "| server | tools | codegen before (ms) | codegen after (ms) | generate before (ms) "
        "| generate after (ms) | ratio | rejected before | rejected after | dcg batch (ms) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    totals = {k: 0.0 for k in ("tools", "cb", "ca", "gb", "ga", "rb", "ra", "n")}
    corpus = {k: 0.0 for k in totals}
    for name, row in figures["servers"].items():
        dcg = row["dcg"]
        dcg_text = "-" if dcg is None else f"{dcg[1] * 1000:.0f} (first {dcg[0] * 1000:.0f})"
        lines.append(
            f"| {name} | {row['tools']} "
            f"| {row['codegen_before'] * 1000:.1f} | {row['codegen_after'] * 1000:.1f} "
            f"| {row['generate_before'] * 1000:.0f} | {row['generate_after'] * 1000:.0f} "
            f"| {row['generate_after'] / row['generate_before']:.2f} "
            f"| {row['rejected_before']}/{row['confirmed']} | {row['rejected_after']}/{row['confirmed']} "
            f"| {dcg_text} |"
        )
        values = {
            "tools": row["tools"],
            "cb": row["codegen_before"],
            "ca": row["codegen_after"],
            "gb": row["generate_before"],
            "ga": row["generate_after"],
            "rb": row["rejected_before"],
            "ra": row["rejected_after"],
            "n": row["confirmed"],
        }
        for key, value in values.items():
            totals[key] += value
            if name != "synthetic-100":
                corpus[key] += value
    for label, sums in (("corpus (all but synthetic)", corpus), ("all", totals)):
        lines.append(
            f"| **{label}** | {sums['tools']:.0f} | {sums['cb'] * 1000:.1f} | {sums['ca'] * 1000:.1f} "
            f"| {sums['gb'] * 1000:.0f} | {sums['ga'] * 1000:.0f} | {sums['ga'] / sums['gb']:.2f} "
            f"| {sums['rb']:.0f}/{sums['n']:.0f} | {sums['ra']:.0f}/{sums['n']:.0f} | |"
        )
    lines.append("")
    lines.append(
        "import of the generated 100-tool package in a kernel: "
        f"before {figures['import_before'] * 1000:.0f} ms, "
        f"after {figures['import_after'] * 1000:.0f} ms (target < 1000 ms)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE_REV, help="git revision of the baseline generator")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.rounds, args.baseline))
    print(report(figures))
    if args.json:
        print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
