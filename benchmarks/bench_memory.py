"""Memory: resident set size of the kernel process(es) one `CodeExecutor` runs, vs a bare kernel.

- with the warm spare (the default): the working kernel plus the spare, once the spare is up;
- with spare_kernel=False: the working kernel alone;
- baseline: one bare ipykernel started with jupyter_client.

Kernels are found as the processes this process gained by starting the executor (so a sandbox
wrapper would count too); each has run `1+1` (the spare has not) before RSS is read. RSS counts
shared pages (the Python interpreter, libraries) in every process, as `ps` does. The tool
server runs in the caller's process and is not counted.

Usage: uv run python benchmarks/bench_memory.py [--samples 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from _common import CODE, BareKernel, Row, child_pids, print_table, rss_mb

from ipybox import CodeExecutor


async def executor_rss(working_dir: Path, spare: bool) -> float:
    """MiB of RSS of the kernel processes of one started executor."""
    before = child_pids()
    async with CodeExecutor(working_dir=working_dir, spare_kernel=spare) as executor:
        await executor.execute(CODE)
        if spare:
            assert executor._kernels is not None
            await executor._kernels.spare_ready()
        await asyncio.sleep(0.5)  # let the kernels settle after start-up
        return rss_mb(child_pids() - before)


async def bare_rss(runtime_dir: Path) -> float:
    """MiB of RSS of one bare kernel's process(es)."""
    before = child_pids()
    kernel = await BareKernel.start("ipc", runtime_dir)
    try:
        await kernel.roundtrip()
        await asyncio.sleep(0.5)
        return rss_mb(child_pids() - before)
    finally:
        await kernel.stop()


async def measure(samples: int = 3) -> dict[str, float]:
    """Median MiB of RSS over `samples` starts: spare (executor with spare), no_spare, bare."""
    spare: list[float] = []
    no_spare: list[float] = []
    bare: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        for _ in range(samples):
            bare.append(await bare_rss(Path(tmp)))
            no_spare.append(await executor_rss(Path(tmp), spare=False))
            spare.append(await executor_rss(Path(tmp), spare=True))
    return {
        "spare": statistics.median(spare),
        "no_spare": statistics.median(no_spare),
        "bare": statistics.median(bare),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=3, help="starts per variant (default 3)")
    args = parser.parse_args()
    m = await measure(args.samples)
    print_table(
        [
            Row("kernel RSS MiB, executor + warm spare", m["spare"], m["bare"], digits=1),
            Row("kernel RSS MiB, executor, spare_kernel=False", m["no_spare"], m["bare"], digits=1),
        ]
    )


if __name__ == "__main__":
    asyncio.run(main())
