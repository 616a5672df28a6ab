"""Parameters and process helpers for the MCP servers the tests run (nasty, everything, filesystem)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / "node_modules" / ".bin"
NASTY_SERVER = REPO / "tests" / "servers" / "nasty_server.py"
EVERYTHING = NODE_BIN / "mcp-server-everything"
FILESYSTEM = NODE_BIN / "mcp-server-filesystem"

#: Tool names the nasty server lists (41, over 9 pages).
NASTY_TOOL_COUNT = 41


def nasty_params() -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(NASTY_SERVER)]}


def everything_params() -> dict[str, Any]:
    return {"command": str(EVERYTHING), "args": ["stdio"]}


def filesystem_params(directory: Path) -> dict[str, Any]:
    return {"command": str(FILESYSTEM), "args": [str(directory)]}


def node_servers_installed() -> bool:
    return EVERYTHING.exists() and FILESYSTEM.exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def child_pids(needle: str) -> set[int]:
    """Live descendants of this process whose command line contains `needle`."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if _alive(child) and any(needle in part for part in child.cmdline()):
                pids.add(child.pid)
        except psutil.Error:
            continue
    return pids


def wait_until(predicate: Any, timeout: float = 5.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


class HttpServer:
    """server-everything over streamable HTTP (`kind="streamableHttp"`) or SSE (`kind="sse"`)."""

    def __init__(self, kind: str, port: int | None = None) -> None:
        self.kind = kind
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{'sse' if self.kind == 'sse' else 'mcp'}"

    @property
    def params(self) -> dict[str, Any]:
        return {"url": self.url}

    def start(self, timeout: float = 20) -> HttpServer:
        self.process = subprocess.Popen(
            [str(EVERYTHING), self.kind],
            env=os.environ | {"PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"server-everything {self.kind} exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise TimeoutError(
                        f"server-everything {self.kind} did not listen on {self.port}"
                    ) from None
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)
        self.process = None
