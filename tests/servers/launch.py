"""Helpers shared by the tests (importable as `servers.launch`, since tests/ is on sys.path).

Parameters of the MCP servers the tests run (nasty, malformed, everything, filesystem) and an HTTP server
runner; process helpers and polling; running a cell that approves its tool calls; whether a
sandbox can run here; the environment a process needs to reach the package index; our wheel.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import psutil
import pytest

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutionResult, CodeExecutor
from ipybox.sandbox import sandbox_problem

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / "node_modules" / ".bin"
NASTY_SERVER = REPO / "tests" / "servers" / "nasty_server.py"
MALFORMED_SERVER = REPO / "tests" / "servers" / "malformed_server.py"
REPLAY_SERVER = REPO / "tests" / "servers" / "replay_server.py"
EVERYTHING = NODE_BIN / "mcp-server-everything"
FILESYSTEM = NODE_BIN / "mcp-server-filesystem"

#: Tool names the nasty server lists (41, over 9 pages).
NASTY_TOOL_COUNT = 41


def nasty_params() -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(NASTY_SERVER)]}


def malformed_params() -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(MALFORMED_SERVER)]}


def replay_params(fixture: Path | str) -> dict[str, Any]:
    """The replay server serving the tools of a recorded `tools/list` fixture."""
    return {"command": sys.executable, "args": [str(REPLAY_SERVER), str(fixture)]}


def synthetic_params(count: int) -> dict[str, Any]:
    """The replay server serving `count` synthetic tools (constraints, nesting, enums, `$ref`s)."""
    return {"command": sys.executable, "args": [str(REPLAY_SERVER), "--synthetic", str(count)]}


def everything_params() -> dict[str, Any]:
    return {"command": str(EVERYTHING), "args": ["stdio"]}


def filesystem_params(directory: Path) -> dict[str, Any]:
    return {"command": str(FILESYSTEM), "args": [str(directory)]}


def node_servers_installed() -> bool:
    return EVERYTHING.exists() and FILESYSTEM.exists()


#: Where `free_port` picks: below the kernel's range of ephemeral ports (Linux: 32768-60999),
#: from which every process that binds port 0 gets one (kernels' ZMQ sockets, clients). A port
#: picked there and listened on a moment later could be taken in between by a kernel another
#: test worker starts; one picked here cannot.
_PICKED = range(20000, 32768)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and outside the ephemeral range (see `_PICKED`)."""
    for _ in range(200):
        port = random.choice(_PICKED)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PICKED.start}-{_PICKED.stop - 1} after 200 tries")


# --- processes and polling --------------------------------------------------------------------


def kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGKILL `process` (started with its own session) and its whole process group; reap it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def alive(process: psutil.Process) -> bool:
    """Whether `process` runs (a zombie does not)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_alive(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


def describe(process: psutil.Process) -> str:
    """`pid command line` (shortened), for failure messages."""
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    except psutil.Error:
        return str(process.pid)


def child_pids(needle: str = "") -> set[int]:
    """Live descendants of this process whose command line contains `needle` (all without one)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if alive(child) and (not needle or any(needle in part for part in child.cmdline())):
                pids.add(child.pid)
        except psutil.Error:
            continue
    return pids


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.05) -> bool:
    """Poll `predicate` (blocking) until it holds; False if it still does not after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll `predicate` on the event loop until it holds; False if it still does not after `timeout` s.

    A polling limit for conditions that settle asynchronously (a process exiting), not a
    performance bound: tests assert what happens, never how fast.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)
    return True


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def wait_for_port(process: subprocess.Popen[bytes], port: int, timeout: float = 20) -> str | None:
    """Wait until `process` listens on 127.0.0.1:`port`; None, or why it does not."""
    wait_until(lambda: process.poll() is not None or _listening(port), timeout)
    if process.poll() is not None:
        return f"exited with {process.returncode}"
    if not _listening(port):
        return f"did not listen on port {port} within {timeout} s"
    return None


async def approve_each(
    executor: CodeExecutor, code: str, timeout: float = 120
) -> tuple[list[ApprovalRequest], CodeExecutionResult]:
    """Run `code` with `stream()`, accepting every approval request; the requests and the result."""
    requests: list[ApprovalRequest] = []
    result: CodeExecutionResult | None = None
    async for item in executor.stream(code, timeout=timeout):
        if isinstance(item, ApprovalRequest):
            requests.append(item)
            await item.accept()
        elif isinstance(item, CodeExecutionResult):
            result = item
    assert result is not None, "stream() ended without a result"
    return requests, result


# --- what a test needs from the machine -----------------------------------------------------------


def unavailable(reason: str) -> NoReturn:
    """Skip the test because `reason`; in CI (`CI=true`), where everything must run, fail it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: this must not be skipped in CI)")
    pytest.skip(reason)


#: PATH with the repo's node tools (srt, the node MCP servers) first.
SANDBOX_PATH = os.pathsep.join(p for p in (str(NODE_BIN), os.environ.get("PATH", "")) if p)
SANDBOX_TOOLS = ("srt", "bwrap", "socat", "rg")


@functools.cache
def sandbox_unavailable() -> str | None:
    """Why sandboxes (sandbox-runtime on bubblewrap) cannot run on this machine, or None if they can."""
    if platform.system() != "Linux":
        return "the sandbox tests target Linux (bubblewrap)"
    return sandbox_problem(SANDBOX_PATH)


def require_sandbox() -> None:
    """Skip the calling test if no sandbox can run here (fail it in CI)."""
    if (reason := sandbox_unavailable()) is not None:
        unavailable(reason)


#: Debian's `chromium` package, which fails under the address-space limits ipybox once set.
CHROMIUM = Path("/usr/bin/chromium")


def require_chromium() -> None:
    """Skip the calling test if headless Chromium is not installed (fail it in CI)."""
    if not CHROMIUM.exists():
        unavailable(f"headless Chromium is not installed at {CHROMIUM} (apt-get install chromium)")


def chromium_dump_dom(url: str, profile: str) -> str:
    """A cell that renders `url` with headless Chromium (profile in `profile`) and prints the DOM."""
    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    argv += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    argv += [f"--user-data-dir={profile}", "--dump-dom", url]
    return (
        "import subprocess\n"
        f"done = subprocess.run({argv!r}, capture_output=True, text=True, timeout=60)\n"
        "print(done.returncode)\n"
        "print(done.stdout if done.returncode == 0 else done.stderr[-3000:])\n"
    )


def require_cgroups() -> None:
    """Skip the calling test unless ipybox may create memory and pids cgroups here (fail it in CI)."""
    from ipybox.kernel_mgr.cgroup import KernelCgroup
    from ipybox.kernel_mgr.limits import ResourceLimits

    cgroup = KernelCgroup.create(ResourceLimits(memory=1 << 30, processes=64))
    covered = set(cgroup.dirs) if cgroup is not None else set()
    if cgroup is not None:
        cgroup.remove()
    if covered != {"memory", "pids"}:
        reason = "needs root or a delegated cgroup v2"
        unavailable(f"no memory and pids cgroups for kernels here (only {sorted(covered)}): {reason}")


#: Prefixes of variables a process may need to reach the package index (certificates, mirrors).
NETWORK_ENV = ("SSL_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_", "UV_")


def network_env() -> dict[str, str]:
    """What a user's environment needs to reach the package index (proxies, certificates, mirrors)."""
    return {
        k: v for k, v in os.environ.items() if k.startswith(NETWORK_ENV) or k.endswith(("_PROXY", "_proxy"))
    }


def build_wheel(project: Path, out: Path) -> Path:
    """`uv build --wheel` of `project` into `out` (unless `out` exists already); the wheel there."""
    if not out.is_dir():
        uv = shutil.which("uv")
        if uv is None:
            unavailable("uv is not installed")
        build = subprocess.run(
            [uv, "build", "--wheel", "--out-dir", str(out)],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert build.returncode == 0, build.stderr
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


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
        if (problem := wait_for_port(self.process, self.port, timeout)) is not None:
            self.kill()
            raise RuntimeError(f"server-everything {self.kind} {problem}")
        return self

    def kill(self) -> None:
        if self.process is not None:
            kill_group(self.process)
            self.process = None


async def collect(
    executor: CodeExecutor,
    code: str,
    decide: Callable[[ApprovalRequest], str] = lambda request: "reject",
    timeout: float | None = 60,
) -> tuple[list[ApprovalRequest], CodeExecutionResult | CodeExecutionError]:
    """Run `code` with stream(); `decide` returns "accept", "reject" or "ignore" for each request."""
    requests: list[ApprovalRequest] = []
    try:
        async for item in executor.stream(code, timeout=timeout):
            if isinstance(item, ApprovalRequest):
                requests.append(item)
                decision = decide(item)
                if decision == "accept":
                    await item.accept()
                elif decision == "reject":
                    await item.reject()
            elif isinstance(item, CodeExecutionResult):
                return requests, item
    except CodeExecutionError as e:
        return requests, e
    raise AssertionError("stream() ended without a result")
