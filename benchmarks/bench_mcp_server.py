"""ipybox's MCP server beside a bare `mcp` server doing the same (benchmarks/servers/bare_exec.py:
one tool that runs code in a jupyter_client kernel) and the floor of any `mcp` server (a tool
that runs nothing: benchmarks/servers/no_kernel.py), over stdio with the real `mcp` 2.x Client:

- launch to first answer: spawning the installed console script until `tools/list` answers, and
  until the first `execute_ipython_cell("1+1")` answers (warm: the OS caches are hot);
- `execute_ipython_cell("1+1")` round trip, median, in the 2026-07-28 era (mode "auto") and the
  handshake era (mode "legacy").

    uv run --frozen python benchmarks/bench_mcp_server.py [--n 200] [--starts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import StdioServerParameters
from mcp.client.client import Client

REPO = Path(__file__).resolve().parents[1]
IPYBOX = Path(sys.executable).parent / "ipybox"
SERVERS = REPO / "benchmarks" / "servers"
SCRIPTS = {"bare": SERVERS / "bare_exec.py", "floor": SERVERS / "no_kernel.py"}


def _params(name: str, workspace: Path) -> StdioServerParameters:
    if name == "ipybox":
        return StdioServerParameters(
            command=str(IPYBOX), args=["--workspace", str(workspace), "--approval", "auto"]
        )
    return StdioServerParameters(command=sys.executable, args=[str(SCRIPTS[name])], cwd=str(workspace))


async def _launch(name: str, workspace: Path) -> tuple[float, float]:
    started = time.perf_counter()
    async with Client(_params(name, workspace)) as client:
        await client.list_tools()
        listed = time.perf_counter() - started
        result = await client.call_tool("execute_ipython_cell", {"code": "print(1+1)"})
        assert "2" in str(result.content[0]), result
        return listed, time.perf_counter() - started


async def _round_trips(name: str, workspace: Path, mode: str, n: int) -> float:
    async with Client(_params(name, workspace), mode=mode) as client:  # type: ignore[arg-type]
        times = []
        for i in range(n + 5):
            started = time.perf_counter()
            result = await client.call_tool("execute_ipython_cell", {"code": "1+1"})
            if i >= 5:  # warm-up
                times.append(time.perf_counter() - started)
        assert not result.is_error, result
        return statistics.median(times) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    rows: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        launch: dict[str, list[tuple[float, float]]] = {"ipybox": [], "bare": [], "floor": []}
        for _ in range(args.starts):
            for name in launch:
                launch[name].append(await _launch(name, workspace))
        for index, what in ((0, "launch to tools/list (ms)"), (1, "launch to first execute (ms)")):
            rows.append(
                (what, *(f"{statistics.median(x[index] for x in launch[n]) * 1000:.0f}" for n in launch))
            )
        for mode, era in (("auto", "2026-07-28"), ("legacy", "handshake")):
            medians = [await _round_trips(name, workspace, mode, args.n) for name in launch]
            rows.append((f"execute_ipython_cell `1+1`, {era}, median (ms)", *(f"{m:.2f}" for m in medians)))
    print("| metric | ipybox | bare mcp server | mcp server, no kernel |")
    print("| --- | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {' | '.join(row)} |")


if __name__ == "__main__":
    asyncio.run(main())
