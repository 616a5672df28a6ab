"""Smoke test of the benchmark suite: `benchmarks/run_all.py --quick` runs for real and prints its table.

Timings are not asserted (they depend on the machine); only that every metric was measured
(or, for the sandbox and tool-call rows, skipped with a reason) and reported as numbers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

METRICS = [
    "executor start (ms)",
    "execute `1+1`, median (ms)",
    "reset, warm spare (ms)",
    "reset + first `1+1` (ms)",
    "tool call `echo`, median (ms)",
    "sandboxed start (ms)",
    "sandboxed execute `1+1`, median (ms)",
    "executions/s, 1 executor at once",
    "executions/s, 8 executors at once",
    "kernel RSS (MiB), executor + warm spare",
    "kernel RSS (MiB), executor, no spare",
]
COLUMNS = ["metric", "ipybox", "baseline", "ratio", "target", "verdict"]


def table(stdout: str) -> dict[str, dict[str, str]]:
    """The rows of the markdown table in `stdout`, by metric."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS, lines[0]
    assert set(lines[1]) <= set("|-:"), lines[1]  # the rule under the header
    rows: dict[str, dict[str, str]] = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        rows[cells[0]] = dict(zip(COLUMNS, cells, strict=True))
    return rows


def test_run_all_quick() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run_all.py"), "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = table(done.stdout)
    assert list(rows) == METRICS, done.stdout
    for metric, row in rows.items():
        if row["verdict"].startswith("skipped"):  # sandbox tools or server-everything missing
            assert metric.startswith(("sandboxed", "tool call")), row
            continue
        for column in ("ipybox", "baseline", "ratio"):
            value = float(row[column])  # raises if not a number
            assert value >= 0, row
        assert float(row["baseline"]) > 0, row
        if row["target"] == "-":
            assert row["verdict"] == "info", row
        else:  # met or not: timings on a loaded test machine say nothing
            assert row["verdict"].startswith(("OK", "OVER TARGET")), row
