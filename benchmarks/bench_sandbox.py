"""Cost of the sandbox: `CodeExecutor(sandbox=True)` against `CodeExecutor(sandbox=False)`.

Measures, in one run:

1. start time: `CodeExecutor.start()` with spare_kernel=False, sandboxed and not, alternating
   (median of --starts runs each);
2. round trip of `1+1`: `CodeExecutor.execute()` on a sandboxed and an unsandboxed executor,
   both started, alternating call by call so both see the same machine load (median of --n).

Targets: execute <= 1.1x unsandboxed; start <= unsandboxed + 0.4 s (srt's own launch: its
node process, bubblewrap, the proxy bridges).

Needs `srt` (node_modules/.bin is put on PATH), bubblewrap, socat and ripgrep.

`--folders N` starts the kernels in a project of N folders (two levels, breadth first) instead
of an empty directory: the sandbox guards the shallowest ones against becoming git repositories,
which costs start time with the project's size (see docs/sandbox.md).

Usage: uv run python benchmarks/bench_sandbox.py [--n 200] [--starts 5] [--folders 0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from _common import CODE, environ, ms, node_bin_path, sandbox_unavailable

from ipybox import CodeExecutor

EXECUTE_TARGET = 1.1  # sandboxed / unsandboxed
START_TARGET_S = 0.4  # sandboxed - unsandboxed


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


def _make_project(root: Path, folders: int) -> None:
    """`folders` folders under `root`: up to 8 at the top, the rest spread below them."""
    top = [root / f"pkg{i}" for i in range(min(folders, 8))]
    for i in range(folders):
        path = top[i] if i < len(top) else top[i % len(top)] / f"sub{i}"
        path.mkdir(parents=True, exist_ok=True)
        (path / "module.py").write_text("x = 1\n")


async def measure(n: int = 200, starts: int = 5, warmup: int = 20, folders: int = 0) -> dict[str, float]:
    """Medians in ms: start_sandbox/start_plain, execute_sandbox/execute_plain.

    Puts node_modules/.bin on PATH while it runs (for `srt`); check `sandbox_unavailable()` first.
    """
    with environ(PATH=node_bin_path()), tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        working_dir = Path(tmp)
        _make_project(working_dir, folders)
        start_boxed: list[float] = []
        start_plain: list[float] = []
        for _ in range(starts):  # alternate, so neither side profits from a warmer machine
            start_plain.append(await start_time(working_dir, sandbox=False))
            start_boxed.append(await start_time(working_dir, sandbox=True))
        exec_boxed, exec_plain = await execute_times(working_dir, n, warmup)
    return {
        "start_sandbox": ms(start_boxed),
        "start_plain": ms(start_plain),
        "execute_sandbox": ms(exec_boxed),
        "execute_plain": ms(exec_plain),
    }


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="executions of `1+1` per side (default 200)")
    parser.add_argument("--starts", type=int, default=5, help="starts per side (default 5)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed executions first (default 20)")
    parser.add_argument("--folders", type=int, default=0, help="folders in the kernels' project (default 0)")
    args = parser.parse_args()
    if (reason := sandbox_unavailable()) is not None:
        print(f"cannot benchmark the sandbox: {reason}", file=sys.stderr)
        return 2
    m = await measure(args.n, args.starts, args.warmup, args.folders)

    print(f"{'median':<24} {'sandbox':>9} {'plain':>9} {'ratio':>7} {'diff':>9} {'target':>12}  ok")
    boxed, plain = m["start_sandbox"], m["start_plain"]
    diff = boxed - plain
    target = f"<=+{START_TARGET_S * 1000:g}ms"
    ok = diff <= START_TARGET_S * 1000
    print(
        f"{'start (ms)':<24} {boxed:9.1f} {plain:9.1f} {boxed / plain:7.2f} {diff:+9.1f} {target:>12}  {ok}"
    )
    boxed, plain = m["execute_sandbox"], m["execute_plain"]
    ratio = boxed / plain
    target = f"<={EXECUTE_TARGET:g}x"
    print(
        f"{f'execute {CODE!r} (n={args.n}) ms':<24} {boxed:9.2f} {plain:9.2f} {ratio:7.2f} "
        f"{boxed - plain:+9.2f} {target:>12}  {ratio <= EXECUTE_TARGET}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
