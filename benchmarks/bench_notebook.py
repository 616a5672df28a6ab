"""What the session notebook's recorder costs a cell, beside the cell's round trip in the same process.

Three figures, from one executor (spare kernel off):

- round trip: `CodeExecutor.execute()` of a small cell that prints a line and returns a value
  (recorder on, as always), median of N;
- recorder: the recorder's own work for that cell, measured alone on the same events (begin the
  cell, add its stream and result events, finish it), median of N; its share of the round trip is
  the figure with the 5 % target;
- A/B: the same round trip with the executor's record swapped for one that keeps nothing,
  alternating cell by cell with the recording one, so both see the same machine (on a busy machine
  this difference is within noise; the recorder figure above is what it costs).

Also the cost of making and saving the notebook of an N-cell session (`save_notebook()`), which an
application pays when it saves, not per cell: the first save, and a save after one more cell (as
the MCP server saves), beside the baseline of making every cell's JSON again for that save.

Usage: uv run python benchmarks/bench_notebook.py [--n 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ms

from ipybox import CodeExecutor
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.output import KernelEvent
from ipybox.notebook import CellRecord, SessionRecord, _format

TARGET = 0.05
CELL = "print('row', {i})\n{i} * 2"


class _NothingKept(CellRecord):
    """A cell record that keeps nothing: the baseline of the A/B comparison."""

    def add_event(self, event: KernelEvent) -> None:
        pass

    def add_tool_call(self, *args: Any, **kwargs: Any) -> Any:
        pass

    def finish(self, duration_s: float, error: str | None = None) -> None:
        pass


class _Unrecorded(SessionRecord):
    def begin_cell(self, code: str, limits: ResourceLimits | None = None) -> CellRecord:
        return _NothingKept(code, 0, limits or self.limits)


def _events(i: int) -> list[KernelEvent]:
    """The events ipybox reads from this cell's iopub messages (as `OutputCollector` makes them)."""
    stream = {"name": "stdout", "text": f"row {i}\n"}
    result = {"data": {"text/plain": str(i * 2)}, "metadata": {}, "execution_count": None}
    return [
        KernelEvent("stream", text=stream["text"], msg_type="stream", content=stream),
        KernelEvent("text", text=f"{i * 2}\n", msg_type="execute_result", content=result),
    ]


def recorder_cost(n: int) -> list[float]:
    record = SessionRecord("bench")
    times = []
    for i in range(n):
        events = _events(i)
        started = time.perf_counter()
        cell = record.begin_cell(CELL.format(i=i))
        for event in events:
            cell.add_event(event)
        cell.finish(0.001)
        times.append(time.perf_counter() - started)
    return times


async def round_trips(executor: CodeExecutor, n: int, start: int = 0) -> list[float]:
    times = []
    for i in range(start, start + n):
        started = time.perf_counter()
        await executor.execute(CELL.format(i=i))
        times.append(time.perf_counter() - started)
    return times


async def measure(n: int = 200) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        async with CodeExecutor(working_dir=tmp, spare_kernel=False) as executor:
            await round_trips(executor, 20)  # warm-up
            recording = await round_trips(executor, n)
            kernels = executor._kernels  # the A/B swap needs the supervisor's record
            assert kernels is not None
            kept, nothing = kernels.record, _Unrecorded("baseline")
            on: list[float] = []
            off: list[float] = []
            for i in range(n):  # alternating cell by cell: both sides see the same moments of the machine
                kernels.record = nothing
                off += await round_trips(executor, 1, i)
                kernels.record = kept
                on += await round_trips(executor, 1, i)
            path = Path(tmp) / "session.ipynb"
            started = time.perf_counter()
            executor.save_notebook(path)
            first_save = time.perf_counter() - started
            saves, whole = [], []
            for i in range(5):  # as the MCP server saves: again after each cell
                await round_trips(executor, 1, i)
                started = time.perf_counter()
                executor.save_notebook(path)
                saves.append(time.perf_counter() - started)
                started = time.perf_counter()  # baseline: every cell's JSON made again
                (Path(tmp) / "whole.ipynb").write_bytes(
                    _format.dumps(kept._notebook()).encode(errors="backslashreplace")
                )
                whole.append(time.perf_counter() - started)
            cells = len(kept.cells)
    cost = recorder_cost(n)
    round_trip = statistics.median(recording)
    return {
        "round_trip_ms": ms(recording),
        "recorder_ms": ms(cost),
        "recorder_share": statistics.median(cost) / round_trip,
        "ab_on_ms": ms(on),
        "ab_off_ms": ms(off),
        "first_save_ms": first_save * 1000,
        "save_ms": ms(saves),
        "whole_save_ms": ms(whole),
        "save_cells": cells,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="cells per figure")
    args = parser.parse_args()
    m = asyncio.run(measure(args.n))
    share = m["recorder_share"]
    print(f"cell round trip (recorder on)       {m['round_trip_ms']:8.3f} ms")
    print(f"recorder's work for that cell       {m['recorder_ms']:8.4f} ms  ({share:.2%} of the round trip)")
    print(f"A/B round trip: recording           {m['ab_on_ms']:8.3f} ms")
    print(f"A/B round trip: keeping nothing     {m['ab_off_ms']:8.3f} ms")
    print(f"save_notebook(), {m['save_cells']:.0f} cells, first    {m['first_save_ms']:8.3f} ms")
    print(f"  again after a cell (median of 5)  {m['save_ms']:8.3f} ms")
    print(f"  baseline: every cell's JSON again {m['whole_save_ms']:8.3f} ms")
    verdict = "ok" if share <= TARGET else "OVER TARGET"
    print(f"target: recorder <= {TARGET:.0%} of a round trip: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
