"""The host's event loop while one kernel sends one large tool request, beside `json.loads` alone.

A kernel writes a request straight to its tool server's socket (as kernel code can, past the
generated API) with one argument of each shape below; the application rejects each call when
asked. Meanwhile a task in the host's event loop wakes every 5 ms: the longest it waited past its
time is how long the loop was blocked, i.e. how long every other kernel, cell and client of the
same process waited. The floor beside it is `json.loads` of the same request, timed in the
same process right after: what any host that parses the request pays.

Usage: uv run python benchmarks/bench_requests.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, environ

from ipybox import ApprovalRequest, CodeExecutor, generate_mcp_sources

SHAPES = {
    "one 8 MiB string": "'x' * (8 << 20)",
    "a million floats": "[i + 0.5 for i in range(1 << 20)]",
    "150,000 small dicts": "[{'a': i} for i in range(150_000)]",
    "3 million small ints": "[1] * (3 << 20)",
}
CODE = """
import json, os, socket
line = json.dumps({{"op": "run", "server_name": "s", "server_params": SERVER,
                   "tool_name": "t", "tool_args": {{"value": {value}}}}}).encode() + b"\\n"
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
sock.sendall(line)
reply = json.loads(sock.recv(1 << 16).split(b"\\n")[0])
refused = not reply["ok"] and "refused this request" in reply["error"]
print(len(line), "refused" if refused else "ran or rejected")
"""


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, environ(IPYBOX_STATE_DIR=tmp):
        root = Path(tmp)
        server = {"command": sys.executable, "args": [str(REPO / "benchmarks" / "servers" / "no_kernel.py")]}
        await generate_mcp_sources("s", server, root / "mcptools")  # registered; each call is rejected
        lags: list[float] = []

        async def beat() -> None:
            while True:
                started = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append(time.perf_counter() - started - 0.005)

        async with CodeExecutor(working_dir=root, spare_kernel=False) as executor:
            await executor.execute(f"SERVER = {server!r}")
            beating = asyncio.ensure_future(beat())
            rows = []
            for name, value in SHAPES.items():
                await asyncio.sleep(0.05)
                lags.clear()
                last: object = None
                async for last in executor.stream(CODE.format(value=value)):
                    if isinstance(last, ApprovalRequest):
                        await last.reject()
                size, outcome = (getattr(last, "text", None) or "0 ?").split(maxsplit=1)
                rows.append((name, value, int(size), max(lags), outcome))
            beating.cancel()
    print(f"{'request argument':<24}{'bytes':>11}{'loop blocked':>14}{'json.loads':>12}  outcome")
    for name, value, size, blocked, outcome in rows:  # the floor, with nothing else measured
        line = json.dumps({"tool_args": {"value": eval(value)}}).encode()  # noqa: S307 - our own
        started = time.perf_counter()
        json.loads(line)
        loads = time.perf_counter() - started
        print(f"{name:<24}{size:>11}{blocked * 1000:>11.0f} ms{loads * 1000:>9.0f} ms  {outcome}")


if __name__ == "__main__":
    asyncio.run(main())
