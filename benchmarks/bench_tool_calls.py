"""Latency of MCP tool calls from kernel code (through the generated API) vs a bare MCP client session.

Both sides call `echo` of server-everything over stdio N times:

- ipybox: one `CodeExecutor.execute()` cell calls `echo.run()` in a loop, timing each call inside
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

from _common import EVERYTHING, environ, ms, percentile

TARGET_MS = 3.0

KERNEL_LOOP = """
import json, statistics, time
from mcptools.everything import echo
echo.run(echo.Params(message="warm-up"))
_latencies = []
for _i in range({n}):
    _params = echo.Params(message=f"message {{_i}}")
    _start = time.perf_counter()
    _out = echo.run(_params)
    _latencies.append(time.perf_counter() - _start)
    assert _out == f"Echo: message {{_i}}", _out
print(json.dumps(_latencies))
"""


async def bench_ipybox(n: int, workspace: Path) -> list[float]:
    from ipybox import CodeExecutor, generate_mcp_sources

    params = {"command": str(EVERYTHING), "args": ["stdio"]}
    await generate_mcp_sources("everything", params, workspace / "mcptools")
    async with CodeExecutor(working_dir=workspace, spare_kernel=False) as executor:
        result = await executor.execute(KERNEL_LOOP.format(n=n), timeout=600)
    assert result.text is not None
    latencies: list[float] = json.loads(result.text)
    return latencies


async def bench_bare(n: int) -> list[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(command=str(EVERYTHING), args=["stdio"])
    with open(os.devnull, "w") as devnull:
        async with (
            stdio_client(server, errlog=devnull) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("echo", {"message": "warm-up"})
            latencies = []
            for i in range(n):
                start = time.perf_counter()
                result = await session.call_tool("echo", {"message": f"message {i}"})
                latencies.append(time.perf_counter() - start)
                assert not result.is_error
    return latencies


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
            bare = stats(await bench_bare(n))
            ipybox = stats(await bench_ipybox(n, workspace))
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
