"""`benchmarks/bench_codemode.py --quick` runs for real: code mode answers every task JSON calling answers.

Real MCP servers (`benchmarks/servers/domains.py`), the real `ipybox` MCP server over stdio and
the real `mcp.Client`. Timings and byte counts are printed by the benchmark, not asserted here;
the counts are only checked to be measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_codemode import measure, table, tasks  # noqa: E402


def test_the_suite_has_known_answers_over_three_servers() -> None:
    suite = tasks()
    assert len(suite) >= 20
    assert {t.domain for t in suite} == {"shop", "weather", "logs"}
    assert all(t.answer is not None and t.code for t in suite)


@pytest.mark.timeout(240)
async def test_quick_run_is_correct_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IPYBOX_STATE_DIR", str(tmp_path / "state"))
    rows = await measure(quick=True)
    assert {r.domain for r in rows} == {"shop", "weather", "logs"}
    for row in rows:
        assert row.json.correct == row.json.tasks == 2, row.domain
        assert row.code.correct == row.code.tasks == 2, row.domain
        assert row.json.context > 0 and row.code.context > 0 and row.code.reread > row.code.context
    assert "| **total** | auto |" in table(rows)
