"""Execution-core overhead: `CodeExecutor` against a bare jupyter_client kernel.

Measures, in one run:

1. start time: `CodeExecutor.start()` (spare_kernel=False) vs `AsyncKernelManager.start_kernel()`
   plus a client's `wait_for_ready()`;
2. round trip of `1+1`: `CodeExecutor.execute()` vs `AsyncKernelClient.execute()` plus reading
   iopub until idle and the shell reply;
3. `CodeExecutor.reset()` with the spare kernel warm (and, for information, reset plus the
   first execution on the fresh kernel).

The bare kernel gets the options ipybox gives its kernels (no history, `store_history=False`)
and, by default, the same ipc transport, so that the ratios show the client-side overhead.

Usage: uv run python benchmarks/bench_execution.py [--n 200] [--starts 5] [--resets 10]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from _common import CODE, BareKernel, bare_start_time, ms, timed

from ipybox import CodeExecutor

TARGETS = {"start": 1.3, "execute": 1.25}
RESET_TARGET_MS = 50.0


# --- ours ----------------------------------------------------------------------------------------


async def ours_start(working_dir: Path, runs: int) -> list[float]:
    times: list[float] = []
    for _ in range(runs):
        executor = CodeExecutor(working_dir=working_dir, spare_kernel=False)
        times.append(await timed(executor.start))
        await executor.stop()
    return times


async def ours_reset(working_dir: Path, runs: int) -> tuple[list[float], list[float]]:
    """Times of reset() alone and of reset() plus the first execution on the fresh kernel."""
    async with CodeExecutor(working_dir=working_dir) as executor:
        assert executor._kernels is not None
        resets: list[float] = []
        firsts: list[float] = []
        for i in range(runs):
            await executor._kernels.spare_ready()
            await executor.execute(f"x = {i}")
            started = time.perf_counter()
            await executor.reset()
            resets.append(time.perf_counter() - started)
            result = await executor.execute("print('x' in globals())")
            firsts.append(time.perf_counter() - started)
            assert result.text == "False", result
    return resets, firsts


# --- both ----------------------------------------------------------------------------------------


async def execute_both(
    working_dir: Path, transport: str, runtime_dir: Path, n: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Round trips on an executor and a bare kernel, alternating so both see the same machine load."""

    async def ours() -> None:
        result = await executor.execute(CODE)
        assert result.text == "2", result

    ours_times: list[float] = []
    bare_times: list[float] = []
    async with CodeExecutor(working_dir=working_dir, spare_kernel=False) as executor:
        bare = await BareKernel.start(transport, runtime_dir)
        try:
            for _ in range(warmup):
                await ours()
                await bare.roundtrip()
            for _ in range(n):
                ours_times.append(await timed(ours))
                bare_times.append(await timed(bare.roundtrip))
        finally:
            await bare.stop()
    return ours_times, bare_times


async def measure(
    n: int = 200, starts: int = 5, resets: int = 10, warmup: int = 20, transport: str = "ipc"
) -> dict[str, float]:
    """Medians in ms: start_ours/start_bare, execute_ours/execute_bare, reset, reset_first."""
    with tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        working_dir = Path(tmp) / "work"
        working_dir.mkdir()
        runtime_dir = Path(tmp)
        # Alternate the sides so that neither profits from a warmer machine.
        start_ours: list[float] = []
        start_bare: list[float] = []
        for _ in range(starts):
            start_bare.append(await bare_start_time(transport, runtime_dir))
            start_ours += await ours_start(working_dir, 1)
        exec_ours, exec_bare = await execute_both(working_dir, transport, runtime_dir, n, warmup)
        reset_times, firsts = await ours_reset(working_dir, resets)
    return {
        "start_ours": ms(start_ours),
        "start_bare": ms(start_bare),
        "execute_ours": ms(exec_ours),
        "execute_bare": ms(exec_bare),
        "reset": ms(reset_times),
        "reset_first": ms(firsts),
    }


# --- report --------------------------------------------------------------------------------------


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="executions of `1+1` per side (default 200)")
    parser.add_argument("--starts", type=int, default=5, help="starts per side (default 5)")
    parser.add_argument("--resets", type=int, default=10, help="resets (default 10)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed executions first (default 20)")
    parser.add_argument(
        "--bare-transport",
        choices=["ipc", "tcp"],
        default="ipc",
        help="transport of the bare kernel (default ipc, as ipybox uses)",
    )
    args = parser.parse_args()
    m = await measure(args.n, args.starts, args.resets, args.warmup, args.bare_transport)

    rows = [
        ("start", m["start_ours"], m["start_bare"], TARGETS["start"]),
        (f"execute {CODE!r} (n={args.n})", m["execute_ours"], m["execute_bare"], TARGETS["execute"]),
    ]
    print(f"{'median':<24} {'ours ms':>9} {'bare ms':>9} {'ours/bare':>10} {'target':>8}  ok")
    for name, ours, bare, target in rows:
        ratio = ours / bare
        print(f"{name:<24} {ours:9.2f} {bare:9.2f} {ratio:10.2f} {f'<={target}x':>8}  {ratio <= target}")
    reset = m["reset"]
    reset_target, reset_ok = f"<={RESET_TARGET_MS:g}ms", reset <= RESET_TARGET_MS
    print(f"{'reset (spare warm)':<24} {reset:9.2f} {'':>9} {'':>10} {reset_target:>8}  {reset_ok}")
    print(f"{'reset + first execute':<24} {m['reset_first']:9.2f}")


if __name__ == "__main__":
    asyncio.run(main())
