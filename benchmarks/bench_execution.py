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
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from ipybox import CodeExecutor

TARGETS = {"start": 1.3, "execute": 1.25}
RESET_TARGET_MS = 50.0
CODE = "1+1"


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


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


# --- bare jupyter_client -------------------------------------------------------------------------


async def bare_kernel(transport: str, runtime_dir: Path) -> tuple[AsyncKernelManager, Any]:
    if transport == "ipc":
        km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(runtime_dir / "bare"))
    else:
        km = AsyncKernelManager(kernel_name="python3")
    # The kernel options ipybox uses, so that both sides ask the kernel for the same work.
    await km.start_kernel(extra_arguments=["--IPKernelApp.log_level=ERROR", "--HistoryManager.enabled=False"])
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
    except BaseException:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        raise
    return km, kc


async def bare_stop(km: AsyncKernelManager, kc: Any) -> None:
    kc.stop_channels()
    await km.shutdown_kernel(now=True)


async def bare_start(transport: str, runtime_dir: Path, runs: int) -> list[float]:
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        km, kc = await bare_kernel(transport, runtime_dir)
        times.append(time.perf_counter() - started)
        await bare_stop(km, kc)
    return times


async def bare_roundtrip(kc: Any, code: str) -> None:
    msg_id = kc.execute(code, store_history=False)
    while True:
        msg = await kc.get_iopub_msg()
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
        ):
            break
    while True:
        msg = await kc.get_shell_msg()
        if msg["parent_header"].get("msg_id") == msg_id:
            assert msg["content"]["status"] == "ok", msg["content"]
            return


# --- both ----------------------------------------------------------------------------------------


async def execute_both(
    working_dir: Path, transport: str, runtime_dir: Path, n: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Round trips on an executor and a bare kernel, alternating so both see the same machine load."""

    async def ours() -> None:
        result = await executor.execute(CODE)
        assert result.text == "2", result

    async def bare() -> None:
        await bare_roundtrip(kc, CODE)

    ours_times: list[float] = []
    bare_times: list[float] = []
    async with CodeExecutor(working_dir=working_dir, spare_kernel=False) as executor:
        km, kc = await bare_kernel(transport, runtime_dir)
        try:
            for _ in range(warmup):
                await ours()
                await bare()
            for _ in range(n):
                ours_times.append(await timed(ours))
                bare_times.append(await timed(bare))
        finally:
            await bare_stop(km, kc)
    return ours_times, bare_times


# --- report --------------------------------------------------------------------------------------


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


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

    with tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        working_dir = Path(tmp) / "work"
        working_dir.mkdir()
        runtime_dir = Path(tmp)
        # Alternate the sides so that neither profits from a warmer machine.
        start_ours: list[float] = []
        start_bare: list[float] = []
        for _ in range(args.starts):
            start_bare += await bare_start(args.bare_transport, runtime_dir, 1)
            start_ours += await ours_start(working_dir, 1)
        exec_ours, exec_bare = await execute_both(
            working_dir, args.bare_transport, runtime_dir, args.n, args.warmup
        )
        resets, firsts = await ours_reset(working_dir, args.resets)

    rows = [
        ("start", ms(start_ours), ms(start_bare), TARGETS["start"]),
        (f"execute {CODE!r} (n={args.n})", ms(exec_ours), ms(exec_bare), TARGETS["execute"]),
    ]
    print(f"{'median':<24} {'ours ms':>9} {'bare ms':>9} {'ours/bare':>10} {'target':>8}  ok")
    for name, ours, bare, target in rows:
        ratio = ours / bare
        print(f"{name:<24} {ours:9.2f} {bare:9.2f} {ratio:10.2f} {f'<={target}x':>8}  {ratio <= target}")
    reset = ms(resets)
    target = f"<={RESET_TARGET_MS:g}ms"
    print(f"{'reset (spare warm)':<24} {reset:9.2f} {'':>9} {'':>10} {target:>8}  {reset <= RESET_TARGET_MS}")
    print(f"{'reset + first execute':<24} {ms(firsts):9.2f}")


if __name__ == "__main__":
    asyncio.run(main())
