"""Cost of the sandbox: `CodeExecutor(sandbox=True)` against `CodeExecutor(sandbox=False)`.

Measures, in one run:

1. start time: `CodeExecutor.start()` with spare_kernel=False, sandboxed and not, alternating
   (median of --starts runs each);
2. round trip of `1+1`: `CodeExecutor.execute()` on a sandboxed and an unsandboxed executor,
   both started, alternating call by call so both see the same machine load (median of --n).

Targets: execute <= 1.2x unsandboxed; start <= unsandboxed + 0.6 s (srt's own launch: its
node process, bubblewrap, the proxy bridges).

Needs `srt` (node_modules/.bin is put on PATH), bubblewrap, socat and ripgrep.

Usage: uv run python benchmarks/bench_sandbox.py [--n 200] [--starts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from ipybox import CodeExecutor

REPO = Path(__file__).resolve().parents[1]
NODE_BIN = REPO / "node_modules" / ".bin"
EXECUTE_TARGET = 1.2  # sandboxed / unsandboxed
START_TARGET_S = 0.6  # sandboxed - unsandboxed
CODE = "1+1"


async def start_time(working_dir: Path, sandbox: bool) -> float:
    executor = CodeExecutor(sandbox=sandbox, working_dir=working_dir, spare_kernel=False)
    started = time.perf_counter()
    await executor.start()
    elapsed = time.perf_counter() - started
    await executor.stop()
    return elapsed


async def execute_times(working_dir: Path, n: int, warmup: int) -> tuple[list[float], list[float]]:
    """Round trips of `CODE` on a sandboxed and an unsandboxed executor, alternating."""
    sandboxed: list[float] = []
    plain: list[float] = []
    async with (
        CodeExecutor(sandbox=True, working_dir=working_dir, spare_kernel=False) as boxed,
        CodeExecutor(sandbox=False, working_dir=working_dir, spare_kernel=False) as unboxed,
    ):
        for i in range(warmup + n):
            for executor, times in ((boxed, sandboxed), (unboxed, plain)):
                started = time.perf_counter()
                result = await executor.execute(CODE)
                elapsed = time.perf_counter() - started
                assert result.text == "2", result
                if i >= warmup:
                    times.append(elapsed)
    return sandboxed, plain


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="executions of `1+1` per side (default 200)")
    parser.add_argument("--starts", type=int, default=5, help="starts per side (default 5)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed executions first (default 20)")
    args = parser.parse_args()

    if NODE_BIN.is_dir():
        os.environ["PATH"] = f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        working_dir = Path(tmp)
        start_boxed: list[float] = []
        start_plain: list[float] = []
        for _ in range(args.starts):  # alternate, so neither side profits from a warmer machine
            start_plain.append(await start_time(working_dir, sandbox=False))
            start_boxed.append(await start_time(working_dir, sandbox=True))
        exec_boxed, exec_plain = await execute_times(working_dir, args.n, args.warmup)

    print(f"{'median':<24} {'sandbox':>9} {'plain':>9} {'ratio':>7} {'diff':>9} {'target':>12}  ok")
    boxed, plain = ms(start_boxed), ms(start_plain)
    diff = boxed - plain
    target = f"<=+{START_TARGET_S * 1000:g}ms"
    ok = diff <= START_TARGET_S * 1000
    print(
        f"{'start (ms)':<24} {boxed:9.1f} {plain:9.1f} {boxed / plain:7.2f} {diff:+9.1f} {target:>12}  {ok}"
    )
    boxed, plain = ms(exec_boxed), ms(exec_plain)
    ratio = boxed / plain
    target = f"<={EXECUTE_TARGET:g}x"
    print(
        f"{f'execute {CODE!r} (n={args.n}) ms':<24} {boxed:9.2f} {plain:9.2f} {ratio:7.2f} "
        f"{boxed - plain:+9.2f} {target:>12}  {ratio <= EXECUTE_TARGET}"
    )


if __name__ == "__main__":
    asyncio.run(main())
