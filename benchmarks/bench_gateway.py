"""Kernels on a gateway: ipybox against a bare websocket client on the same gateway, same run.

For Jupyter Kernel Gateway and Enterprise Gateway (each from its own venv, as in the tests),
started once as shipped (Nagle's algorithm on for the server's sockets) and once with a config
that sets TCP_NODELAY on every accepted connection, it measures:

1. `1+1` round trip, median: `CodeExecutor.execute()` vs a bare client (`websockets`, one
   execute request, read until the reply and the idle status) with and without Linux
   `TCP_QUICKACK`, which ipybox sets on its websocket;
2. kernel start: `CodeExecutor.start()` (spare_kernel=False: REST start, websocket, set-up
   cell) vs the bare client's POST + connect + first reply;
3. a kernel's memory (RSS of the gateway's kernel process), and kernels per 64 GiB node.

Usage: uv run python benchmarks/bench_gateway.py [--n 100] [--starts 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx2
import psutil
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from servers.gateways import ENTERPRISE_GATEWAY, KERNEL_GATEWAY, GatewayKind, GatewayProcess, gateway_venv  # noqa: E402

from ipybox import CodeExecutor  # noqa: E402

TARGET = 1.25
NODE_MEMORY = 64 << 30
ENV = {"KERNEL_USERNAME": "ipybox-bench"}  # Enterprise Gateway refuses root without it


def _request(code: str) -> tuple[str, str]:
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "username": "",
        "session": "bench",
        "version": "5.3",
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
    }
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
    return msg_id, json.dumps(message)


async def bare(gateway: GatewayProcess, n: int, quick_ack: bool) -> tuple[float, float]:
    """Start time (s) and median `1+1` round trip (ms) of a bare websocket client."""
    headers = {"Authorization": f"token {gateway.token}"}
    async with httpx2.AsyncClient(base_url=gateway.url, headers=headers, timeout=60) as http:
        started = time.perf_counter()
        kernel_id = (await http.post("/api/kernels", json={"name": "python3", "env": ENV})).json()["id"]
        ws_url = gateway.url.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
        try:
            async with websockets.connect(ws_url, additional_headers=headers, max_size=None) as ws:
                sock = ws.transport.get_extra_info("socket")

                async def execute(code: str) -> None:
                    msg_id, text = _request(code)
                    await ws.send(text)
                    reply = idle = False
                    while not (reply and idle):
                        if quick_ack:
                            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                        msg = json.loads(await ws.recv())
                        if msg["parent_header"].get("msg_id") != msg_id:
                            continue
                        reply = reply or msg["msg_type"] == "execute_reply"
                        idle = (
                            idle
                            or msg["msg_type"] == "status"
                            and msg["content"]["execution_state"] == "idle"
                        )

                await execute("None")
                start_time = time.perf_counter() - started
                for _ in range(10):
                    await execute("1+1")
                times = []
                for _ in range(n):
                    t = time.perf_counter()
                    await execute("1+1")
                    times.append(time.perf_counter() - t)
        finally:
            await http.delete(f"/api/kernels/{kernel_id}")
    return start_time, statistics.median(times) * 1000


async def ours(gateway: GatewayProcess, n: int, starts: int) -> tuple[float, float, float]:
    """Start time (s), median `1+1` (ms) and the kernel's RSS (MiB) through `CodeExecutor`."""
    start_times = []
    with tempfile.TemporaryDirectory() as workspace:
        for _ in range(starts):
            executor = CodeExecutor(
                kernel_gateway_url=gateway.url,
                kernel_gateway_token=gateway.token,
                working_dir=Path(workspace),
                kernel_env=ENV,
                spare_kernel=False,
            )
            t = time.perf_counter()
            await executor.start()
            start_times.append(time.perf_counter() - t)
            if len(start_times) < starts:
                await executor.stop()
        try:
            for _ in range(10):
                await executor.execute("1+1")
            times = []
            for _ in range(n):
                t = time.perf_counter()
                await executor.execute("1+1")
                times.append(time.perf_counter() - t)
            rss = _kernel_rss(gateway)
        finally:
            await executor.stop()
    return statistics.median(start_times), statistics.median(times) * 1000, rss


def _kernel_rss(gateway: GatewayProcess) -> float:
    """RSS (MiB) of the gateway's kernel process (the largest ipykernel child)."""
    assert gateway.process is not None
    sizes = [0]
    for child in psutil.Process(gateway.process.pid).children(recursive=True):
        try:
            if "ipykernel" in " ".join(child.cmdline()):
                sizes.append(child.memory_info().rss)
        except psutil.Error:
            continue
    return max(sizes) / (1 << 20)


async def measure_kind(kind: GatewayKind, nodelay: bool, n: int, starts: int) -> dict[str, float]:
    gateway = GatewayProcess(kind, gateway_venv(kind), nodelay=nodelay).start()
    try:
        await bare(gateway, 5, True)  # warm the gateway's imports and the OS caches
        bare_start, bare_plain = await bare(gateway, n, quick_ack=False)
        _, bare_quick = await bare(gateway, n, quick_ack=True)
        start, execute, rss = await ours(gateway, n, starts)
    finally:
        gateway.close()
    return {
        "start_s": start,
        "bare_start_s": bare_start,
        "execute_ms": execute,
        "bare_ms": bare_plain,
        "bare_quickack_ms": bare_quick,
        "kernel_rss_mib": rss,
    }


async def measure(n: int = 100, starts: int = 3) -> dict[str, dict[str, float]]:
    results = {}
    for kind in (KERNEL_GATEWAY, ENTERPRISE_GATEWAY):
        for nodelay in (False, True):
            name = f"{kind.name}{' (server TCP_NODELAY)' if nodelay else ''}"
            results[name] = await measure_kind(kind, nodelay, n, starts)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="round trips per client")
    parser.add_argument("--starts", type=int, default=3, help="executor starts")
    args = parser.parse_args()
    results = asyncio.run(measure(args.n, args.starts))
    print(
        "| gateway | ipybox `1+1` (ms) | bare ws (ms) | bare ws + quickack (ms) | ratio vs best bare | "
        "target | ipybox start (s) | bare start (s) | kernel RSS (MiB) | kernels / 64 GiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, m in results.items():
        best = min(m["bare_ms"], m["bare_quickack_ms"])
        ratio = m["execute_ms"] / best
        verdict = "ok" if ratio <= TARGET else "MISSED"
        per_node = int(NODE_MEMORY / (m["kernel_rss_mib"] * (1 << 20))) if m["kernel_rss_mib"] else 0
        print(
            f"| {name} | {m['execute_ms']:.2f} | {m['bare_ms']:.2f} | {m['bare_quickack_ms']:.2f} | "
            f"{ratio:.2f}x | <= {TARGET}x ({verdict}) | {m['start_s']:.2f} | {m['bare_start_s']:.2f} | "
            f"{m['kernel_rss_mib']:.0f} | {per_node} |"
        )


if __name__ == "__main__":
    main()
