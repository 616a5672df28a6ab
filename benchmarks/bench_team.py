"""What a team costs the machine: processes and memory of one `ipybox --transport streamable-http`
serving USERS users with KERNELS named kernels each, by number of warm spares (`--spare-kernels`),
unsandboxed and (where srt works) with `--sandbox`.

    python benchmarks/bench_team.py [--users 4] [--kernels 2] [--spares 1 8]

`--spares N` with N = USERS x KERNELS keeps a spare for every kernel, which is what ipybox did
before spares became one pool. RSS is summed over the server's descendants (shared pages count
once per process, so it is an upper bound).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import REPO, node_bin_path, sandbox_unavailable
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

sys.path.insert(0, str(REPO / "tests"))
from servers.launch import free_port, wait_for_port  # noqa: E402


async def _session_cells(url: str, token: str, kernels: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for k in range(kernels):
            result = await session.call_tool("execute_ipython_cell", {"code": "x = 1", "kernel": f"k{k}"})
            assert not result.is_error, result


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _kernels(procs: list[psutil.Process]) -> int:
    """The kernels among `procs`: Python processes running ipybox's kernel launcher (not srt, bwrap or
    the shells that start them, whose command lines name it too)."""
    found = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            found += p.name().startswith("python") and "ipybox.kernel_mgr.launch" in p.cmdline()
    return found


async def measure(users: int, kernels: int, spares: int, sandbox: bool) -> dict[str, float]:
    """Start the server, have every user run a cell in each of its kernels, let spares settle, count."""
    with tempfile.TemporaryDirectory() as base_name:
        base = Path(base_name)
        tokens = {f"user{i}": secrets.token_hex(16) for i in range(users)}
        (base / "tokens").write_text("".join(f"{n} {t}\n" for n, t in tokens.items()))
        port = free_port()
        command = [sys.executable, "-m", "ipybox.mcp_server", "--workspace", str(base / "ws")]
        command += [
            "--transport",
            "streamable-http",
            "--port",
            str(port),
            "--auth-tokens",
            str(base / "tokens"),
        ]
        command += ["--spare-kernels", str(spares), "--max-kernels", str(kernels)]
        command += ["--sandbox"] if sandbox else ["--shared-trust"]
        env = os.environ | {"IPYBOX_STATE_DIR": str(base / "state"), "PATH": node_bin_path()}
        process = subprocess.Popen(  # noqa: ASYNC220 - started once, then polled
            command, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            assert wait_for_port(process, port, 60) is None
            url = f"http://127.0.0.1:{port}/mcp"
            await asyncio.gather(*(_session_cells(url, t, kernels) for t in tokens.values()))
            expected = users * kernels + min(spares, users * kernels)
            deadline = time.monotonic() + 120
            while _kernels(_tree(process.pid)) < expected:
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(3)  # the last spares finish importing
            procs = _tree(process.pid)[1:]  # the server itself excluded
            rss = 0
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    rss += p.memory_info().rss
            return {
                "kernels": _kernels(procs),
                "processes": len(procs),
                "rss_mib": round(rss / 2**20),
            }
        finally:
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--kernels", type=int, default=2)
    parser.add_argument("--spares", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    modes = [False] + ([True] if sandbox_unavailable() is None else [])
    print("| sandbox | users x kernels | --spare-kernels | kernels with spares | processes | RSS (MiB) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for sandbox in modes:
        for spares in args.spares:
            row = asyncio.run(measure(args.users, args.kernels, spares, sandbox))
            cells = [
                "yes" if sandbox else "no",
                f"{args.users} x {args.kernels}",
                *(str(v) for v in (spares, row["kernels"], row["processes"], row["rss_mib"])),
            ]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
