"""Runs every ipybox benchmark in one go and prints one table of figures beside their baselines.

    uv run python benchmarks/run_all.py [--quick]

Columns: metric | ipybox | baseline | ratio (ipybox / baseline) | target | verdict. Times are
medians in ms, throughput in executions/s (higher is better), memory in MiB of RSS. Rows without
a target say "info". The sandbox rows are skipped, with the reason, if srt, bubblewrap, socat or
ripgrep is missing; the tool-call row if server-everything is not installed (`npm install`).

--quick runs small counts: a smoke test of the whole suite, not figures to quote.
See docs/benchmarks.md for what each figure and its baseline mean.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

import bench_execution
import bench_memory
import bench_sandbox
import bench_throughput
import bench_tool_calls
from _common import CODE, EVERYTHING, Row, print_table, sandbox_unavailable, verdict

T = TypeVar("T")


@dataclass(frozen=True)
class Counts:
    executions: int  # `1+1` round trips per side (execute and sandbox benchmarks)
    warmup: int
    starts: int  # starts per side
    resets: int
    tool_calls: int
    throughput_n: int  # executions per executor per round
    throughput_rounds: int
    memory_samples: int


FULL = Counts(
    executions=200,
    warmup=20,
    starts=5,
    resets=10,
    tool_calls=200,
    throughput_n=100,
    throughput_rounds=3,
    memory_samples=3,
)
QUICK = Counts(
    executions=20,
    warmup=3,
    starts=2,
    resets=3,
    tool_calls=20,
    throughput_n=10,
    throughput_rounds=1,
    memory_samples=1,
)
CONCURRENCY = (1, 8)

BASELINES = """\
baselines: start, execute, reset = a bare jupyter_client kernel (AsyncKernelManager.start_kernel()
  + wait_for_ready(); execute + iopub idle + shell reply), reset's baseline being its cold start;
  tool call = mcp ClientSession.call_tool() in-process; sandbox = the same CodeExecutor unsandboxed;
  executions/s = as many bare kernels driven concurrently from one asyncio loop;
  memory = RSS of one bare ipykernel."""


async def step(name: str, aw: Awaitable[T]) -> T:
    """Run one benchmark, reporting progress on stderr (stdout carries only the results)."""
    print(f"running {name} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    result = await aw
    print(f"  {name} done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return result


async def run(counts: Counts) -> list[Row]:
    rows: list[Row] = []
    code = f"`{CODE}`"

    m = await step(
        "execution",
        bench_execution.measure(counts.executions, counts.starts, counts.resets, counts.warmup),
    )
    target = bench_execution.TARGETS
    start_ratio = m["start_ours"] / m["start_bare"]
    exec_ratio = m["execute_ours"] / m["execute_bare"]
    rows += [
        Row(
            "executor start (ms)",
            m["start_ours"],
            m["start_bare"],
            f"<= {target['start']:g}x",
            verdict(start_ratio <= target["start"]),
        ),
        Row(
            f"execute {code}, median (ms)",
            m["execute_ours"],
            m["execute_bare"],
            f"<= {target['execute']:g}x",
            verdict(exec_ratio <= target["execute"]),
        ),
        Row(
            "reset, warm spare (ms)",
            m["reset"],
            m["start_bare"],
            f"<= {bench_execution.RESET_TARGET_MS:g} ms",
            verdict(m["reset"] <= bench_execution.RESET_TARGET_MS),
        ),
        Row(f"reset + first {code} (ms)", m["reset_first"], m["start_bare"]),
    ]

    tool_metric = "tool call `echo`, median (ms)"
    tool_target = f"overhead <= {bench_tool_calls.TARGET_MS:g} ms"
    if EVERYTHING.exists():
        m = await step("tool calls", bench_tool_calls.measure(counts.tool_calls))
        ok = m["overhead"] <= bench_tool_calls.TARGET_MS
        rows.append(
            Row(
                tool_metric,
                m["ipybox_median"],
                m["bare_median"],
                tool_target,
                verdict(ok, f"{m['overhead']:+.2f} ms"),
            )
        )
    else:
        rows.append(Row(tool_metric, None, None, tool_target, "skipped: mcp-server-everything not installed"))

    start_target = f"<= +{bench_sandbox.START_TARGET_S * 1000:g} ms"
    exec_target = f"<= {bench_sandbox.EXECUTE_TARGET:g}x"
    start_metric = "sandboxed start (ms)"
    exec_metric = f"sandboxed execute {code}, median (ms)"
    if (reason := sandbox_unavailable()) is None:
        m = await step("sandbox", bench_sandbox.measure(counts.executions, counts.starts, counts.warmup))
        diff = m["start_sandbox"] - m["start_plain"]
        ratio = m["execute_sandbox"] / m["execute_plain"]
        rows += [
            Row(
                start_metric,
                m["start_sandbox"],
                m["start_plain"],
                start_target,
                verdict(diff <= bench_sandbox.START_TARGET_S * 1000, f"{diff:+.0f} ms"),
                digits=1,
            ),
            Row(
                exec_metric,
                m["execute_sandbox"],
                m["execute_plain"],
                exec_target,
                verdict(ratio <= bench_sandbox.EXECUTE_TARGET),
            ),
        ]
    else:
        rows += [
            Row(start_metric, None, None, start_target, f"skipped: {reason}"),
            Row(exec_metric, None, None, exec_target, f"skipped: {reason}"),
        ]

    m = await step(
        "throughput",
        bench_throughput.measure(counts.throughput_n, counts.throughput_rounds, counts.warmup, CONCURRENCY),
    )
    rows += [
        Row(
            f"executions/s, {k} executor{'s' if k > 1 else ''} at once",
            m[f"ours_{k}"],
            m[f"bare_{k}"],
            digits=0,
        )
        for k in CONCURRENCY
    ]

    m = await step("memory", bench_memory.measure(counts.memory_samples))
    rows += [
        Row("kernel RSS (MiB), executor + warm spare", m["spare"], m["bare"], digits=1),
        Row("kernel RSS (MiB), executor, no spare", m["no_spare"], m["bare"], digits=1),
    ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = asyncio.run(run(QUICK if args.quick else FULL))
    elapsed = time.perf_counter() - started
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    machine = f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}"
    machine += f", Python {platform.python_version()}"
    print(f"ipybox benchmarks{' (--quick)' if args.quick else ''}: {now}; {machine}; took {elapsed:.0f} s")
    print()
    print_table(rows)
    print()
    print(BASELINES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
