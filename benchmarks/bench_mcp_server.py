"""ipybox's MCP server beside a bare `mcp` server doing the same (benchmarks/servers/bare_exec.py:
one tool that runs code in a jupyter_client kernel) and the floor of any `mcp` server (a tool
that runs nothing: benchmarks/servers/no_kernel.py), over stdio with the real `mcp` 2.x Client:

- launch to first answer: spawning the installed console script until `tools/list` answers, and
  until the first `execute_ipython_cell("1+1")` answers (warm: the OS caches are hot);
- `execute_ipython_cell("1+1")` round trip, median, in the 2026-07-28 era (mode "auto") and the
  handshake era (mode "legacy"), the servers open at once and taking turns in blocks of `BLOCK`
  calls, and ipybox's median over the bare server's (goal: at most `TARGET_RATIO`).

    uv run --frozen python benchmarks/bench_mcp_server.py [--n 200] [--starts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
#: Round trips per turn: the servers take turns, a block each.
BLOCK = 20
#: The goal for ipybox's round trip over the bare server's (issue #29).
TARGET_RATIO = 1.1


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


async def _round_trips(names: list[str], workspace: Path, mode: str, n: int) -> dict[str, float]:
    """Median `execute_ipython_cell("1+1")` round trip (ms) of each server, all open at once and
    taking turns in blocks of `BLOCK` calls (the first in turn rotating), so that load on a
    shared machine falls on each alike."""
    async with contextlib.AsyncExitStack() as stack:
        clients = {
            name: await stack.enter_async_context(Client(_params(name, workspace), mode=mode))  # type: ignore[arg-type]
            for name in names
        }
        times: dict[str, list[float]] = {name: [] for name in names}
        for client in clients.values():  # warm-up
            for _ in range(5):
                await client.call_tool("execute_ipython_cell", {"code": "1+1"})
        turn = 0
        while len(times[names[0]]) < n:
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                for _ in range(min(BLOCK, n - len(times[name]))):
                    started = time.perf_counter()
                    result = await clients[name].call_tool("execute_ipython_cell", {"code": "1+1"})
                    times[name].append(time.perf_counter() - started)
                    assert not result.is_error, result
            turn += 1
        return {name: statistics.median(t) * 1000 for name, t in times.items()}


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
                (what, *(f"{statistics.median(x[index] for x in launch[n]) * 1000:.0f}" for n in launch), "")
            )
        for mode, era in (("auto", "2026-07-28"), ("legacy", "handshake")):
            medians = await _round_trips(list(launch), workspace, mode, args.n)
            ratio = medians["ipybox"] / medians["bare"]
            rows.append(
                (
                    f"execute_ipython_cell `1+1`, {era}, median (ms)",
                    *(f"{m:.2f}" for m in medians.values()),
                    f"{ratio:.2f}x ({'OK' if ratio <= TARGET_RATIO else 'OVER'})",
                )
            )
    header = "| metric | ipybox | bare mcp server | mcp server, no kernel "
    header += f"| ipybox / bare (<= {TARGET_RATIO}x) |"
    print(header)
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {' | '.join(row)} |")


if __name__ == "__main__":
    asyncio.run(main())
