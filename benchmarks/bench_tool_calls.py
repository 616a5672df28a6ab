"""Latency of MCP tool calls from kernel code (through the generated API) vs a bare MCP client session.

Both sides call `echo` of server-everything over stdio N times, in alternating blocks of `BLOCK`
calls (both kept open), and the medians are compared:

- ipybox: a `CodeExecutor.execute()` cell per block calls `echo.run()` in a loop, timing each call inside
  the kernel (generated API -> tool server -> approval (auto-approved by execute()) -> MCP session).
- bare: an `mcp.ClientSession` in this process calls `session.call_tool("echo", ...)` in a loop.

Usage: uv run python benchmarks/bench_tool_calls.py [--n 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import EVERYTHING, environ, ms, percentile

TARGET_MS = 0.3

#: Calls per block: the two sides take turns, a block each, so both see the same load.
BLOCK = 25

KERNEL_SETUP = """
import json, time
from mcptools.everything import echo
echo.run(echo.Params(message="warm-up"))
"""

KERNEL_BLOCK = """
_latencies = []
for _i in range({n}):
    _params = echo.Params(message=f"message {{_i}}")
    _start = time.perf_counter()
    _out = echo.run(_params)
    _latencies.append(time.perf_counter() - _start)
    assert _out == f"Echo: message {{_i}}", _out
print(json.dumps(_latencies))
"""


async def _bare_block(session: Any, n: int) -> list[float]:
    latencies = []
    for i in range(n):
        start = time.perf_counter()
        result = await session.call_tool("echo", {"message": f"message {i}"})
        latencies.append(time.perf_counter() - start)
        assert not result.is_error
    return latencies


async def _ipybox_block(executor: Any, n: int) -> list[float]:
    result = await executor.execute(KERNEL_BLOCK.format(n=n), timeout=600)
    assert result.text is not None
    latencies: list[float] = json.loads(result.text)
    return latencies


async def alternate(n: int, workspace: Path) -> tuple[list[float], list[float]]:
    """Per-call latencies (s) of the bare session and of ipybox, `n` each, taken in turns.

    Both stay open throughout; blocks of `BLOCK` calls alternate, and which side goes first
    alternates too, so that load on a shared machine falls on both alike.
    """
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from ipybox import CodeExecutor, generate_mcp_sources

    params = {"command": str(EVERYTHING), "args": ["stdio"]}
    await generate_mcp_sources("everything", params, workspace / "mcptools")
    server = StdioServerParameters(command=str(EVERYTHING), args=["stdio"])
    bare: list[float] = []
    ipybox: list[float] = []
    with open(os.devnull, "w") as devnull:
        async with (
            stdio_client(server, errlog=devnull) as (read, write),
            ClientSession(read, write) as session,
            CodeExecutor(working_dir=workspace, spare_kernel=False) as executor,
        ):
            await session.initialize()
            await session.call_tool("echo", {"message": "warm-up"})
            await executor.execute(KERNEL_SETUP, timeout=600)
            turn = 0
            while len(bare) < n:
                k = min(BLOCK, n - len(bare))
                if turn % 2 == 0:
                    bare += await _bare_block(session, k)
                    ipybox += await _ipybox_block(executor, k)
                else:
                    ipybox += await _ipybox_block(executor, k)
                    bare += await _bare_block(session, k)
                turn += 1
    return bare, ipybox


def stats(latencies: list[float]) -> dict[str, float]:
    return {
        "median": ms(latencies),
        "p90": percentile(latencies, 0.9) * 1000,
        "min": min(latencies) * 1000,
        "n": len(latencies),
    }


async def measure(n: int = 200) -> dict[str, float]:
    """Per-call latencies in ms: {bare,ipybox}_{median,p90,min}, n, and overhead (median difference).

    Raises FileNotFoundError if server-everything is not installed (`npm install`).
    """
    if not EVERYTHING.exists():
        raise FileNotFoundError(f"{EVERYTHING} not found; run `npm install` first")
    with tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        # keep the server registry out of ~/.local
        with environ(IPYBOX_STATE_DIR=str(Path(tmp) / "state")):
            workspace = Path(tmp) / "workspace"
            workspace.mkdir()
            bare_latencies, ipybox_latencies = await alternate(n, workspace)
    bare, ipybox = stats(bare_latencies), stats(ipybox_latencies)
    result = {f"bare_{key}": value for key, value in bare.items() if key != "n"}
    result |= {f"ipybox_{key}": value for key, value in ipybox.items() if key != "n"}
    result["n"] = ipybox["n"]
    result["overhead"] = ipybox["median"] - bare["median"]
    return result


def summary(name: str, m: dict[str, float]) -> None:
    print(
        f"{name:>7}: median {m[f'{name}_median']:6.2f} ms   p90 {m[f'{name}_p90']:6.2f} ms   "
        f"min {m[f'{name}_min']:6.2f} ms   (n={m['n']:g})"
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200, help="calls per side (default 200)")
    args = parser.parse_args()
    try:
        m = await measure(args.n)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2

    summary("bare", m)
    summary("ipybox", m)
    overhead = m["overhead"]
    verdict = "OK" if overhead <= TARGET_MS else "OVER TARGET"
    print(f"overhead: {overhead:.2f} ms per call (target <= {TARGET_MS:g} ms): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
