"""`benchmarks/bench_notebook.py` runs for real and prints each of its figures as a number
(timings are not asserted: they depend on the machine)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FIGURES = [
    "cell round trip (recorder on)",
    "recorder's work for that cell",
    "A/B round trip: recording",
    "A/B round trip: keeping nothing",
    "save_notebook(), 35 cells, first",
    "again after a cell (median of 5)",
    "baseline: every cell's JSON again",
]


def test_bench_notebook_prints_every_figure() -> None:
    bench = REPO / "benchmarks" / "bench_notebook.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--n", "5"], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    for figure in FIGURES:
        line = next((line for line in done.stdout.splitlines() if figure in line), None)
        assert line is not None, (figure, done.stdout)
        assert re.search(r"\d+\.\d+ ms", line), line
