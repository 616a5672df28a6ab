"""Throughput: executions of `1+1` per second with 1 and with K executors at once, vs bare kernels.

For each concurrency level, K `CodeExecutor`s (spare_kernel=False, so that both sides run the
same number of kernels) and K bare jupyter_client kernels are started, all in this process's
asyncio loop. Then, for --rounds rounds, all executors run --n executions of `1+1` each,
concurrently (one task per executor), and after them all bare kernels do the same; throughput
is the total number of executions over the total wall time of that side's batches.

Alternating the sides round by round spreads any drift of the machine's load over both.

Usage: uv run python benchmarks/bench_throughput.py [--n 100] [--rounds 3] [--concurrency 1 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from _common import CODE, BareKernel, Row, print_table

from ipybox import CodeExecutor


async def batch(workers: Sequence[Callable[[], Awaitable[None]]], n: int) -> float:
    """Seconds for every worker to run `n` executions, all workers at once."""

    async def run(execute: Callable[[], Awaitable[None]]) -> None:
        for _ in range(n):
            await execute()

    started = time.perf_counter()
    await asyncio.gather(*(run(w) for w in workers))
    return time.perf_counter() - started


async def throughput(k: int, n: int, rounds: int, warmup: int, runtime_dir: Path) -> tuple[float, float]:
    """Executions per second of k executors and of k bare kernels."""
    async with contextlib.AsyncExitStack() as stack:
        executors = [
            await stack.enter_async_context(CodeExecutor(working_dir=runtime_dir, spare_kernel=False))
            for _ in range(k)
        ]
        bare: list[BareKernel] = []
        stack.push_async_callback(lambda: asyncio.gather(*(b.stop() for b in bare)))
        for i in range(k):
            bare.append(await BareKernel.start("ipc", runtime_dir, name=f"bare{i}"))

        def ours(executor: CodeExecutor) -> Callable[[], Awaitable[None]]:
            async def execute() -> None:
                result = await executor.execute(CODE)
                assert result.text == "2", result

            return execute

        ours_workers = [ours(e) for e in executors]
        bare_workers = [b.roundtrip for b in bare]
        await batch(ours_workers, warmup)
        await batch(bare_workers, warmup)
        ours_time = bare_time = 0.0
        for _ in range(rounds):
            ours_time += await batch(ours_workers, n)
            bare_time += await batch(bare_workers, n)
    total = k * n * rounds
    return total / ours_time, total / bare_time


async def measure(
    n: int = 100, rounds: int = 3, warmup: int = 10, concurrency: Sequence[int] = (1, 8)
) -> dict[str, float]:
    """Executions/s: ours_<k> and bare_<k> for each k in `concurrency`."""
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        for k in concurrency:
            result[f"ours_{k}"], result[f"bare_{k}"] = await throughput(k, n, rounds, warmup, Path(tmp))
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100, help="executions per executor per round (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side (default 3)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed executions first (default 10)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8], help="executors at once (default 1 8)"
    )
    args = parser.parse_args()
    m = await measure(args.n, args.rounds, args.warmup, args.concurrency)
    rows = [
        Row(f"executions/s, {k} executor(s)", m[f"ours_{k}"], m[f"bare_{k}"], digits=0)
        for k in args.concurrency
    ]
    print_table(rows)


if __name__ == "__main__":
    asyncio.run(main())
