"""Fixtures for the sandbox tests: `srt` on PATH, a private ipybox state dir, sandboxed executors.

Tests that start a sandbox depend on `srt_available`, which skips them (with the reason) only
when sandbox-runtime, bubblewrap, socat or ripgrep is not installed or bubblewrap cannot
create namespaces on this machine, and fails them instead in CI (`CI=true`): see
`servers.launch.require_sandbox`. Everything else runs without them.
"""

from __future__ import annotations

import copy
import http.server
import json
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from servers.launch import EVERYTHING, SANDBOX_PATH, alive, describe, eventually, require_sandbox

from ipybox import CodeExecutor
from ipybox.sandbox import DEFAULT_CONFIG

#: What the workspace's `.env` holds; no sandboxed code may ever see it.
ENV_SECRET = "ipybox-dotenv-secret-5f0c1d"

#: Defines `attempt(fn)` in the kernel: "ok: <value>" or "<ExceptionName>: <message>".
ATTEMPT = """
import json as _json, os, pathlib
def attempt(fn):
    try:
        return f"ok: {fn()!r}"
    except BaseException as e:
        return f"{type(e).__name__}: {e}"
"""


@pytest.fixture
def srt_available() -> None:
    """Skip the test when no sandbox can run here (fail it in CI)."""
    require_sandbox()


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ipybox state dir (server registry), outside every workspace a kernel may write."""
    path = tmp_path_factory.mktemp("ipybox-state")
    monkeypatch.setenv("IPYBOX_STATE_DIR", str(path))
    monkeypatch.setenv("PATH", SANDBOX_PATH)
    monkeypatch.delenv("IPYBOX_SRT", raising=False)
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The kernel's working directory, with a secret `.env` and a harmless `hello.txt`."""
    path = tmp_path / "workspace"
    path.mkdir()
    (path / ".env").write_text(f"API_KEY={ENV_SECRET}\n")
    (path / "hello.txt").write_text("hello from the workspace\n")
    return path


@pytest.fixture
async def executor(srt_available: None, workspace: Path) -> AsyncIterator[CodeExecutor]:
    """A started sandboxed executor with the default policy and no spare kernel."""
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        yield executor


def sandbox_config(**sections: dict[str, Any]) -> dict[str, Any]:
    """The default policy with the given sections' keys replaced."""
    config = copy.deepcopy(DEFAULT_CONFIG)
    for section, values in sections.items():
        config[section].update(values)
    return config


def write_config(path: Path, config: Any) -> Path:
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path


async def run(executor: CodeExecutor, code: str, timeout: float = 60) -> str:
    """The text output of `code` ("" if it printed nothing)."""
    result = await executor.execute(code, timeout=timeout)
    return result.text or ""


async def probe(executor: CodeExecutor, code: str, timeout: float = 60) -> Any:
    """Run `ATTEMPT` + `code`, whose last line prints a JSON value, and return that value."""
    text = await run(executor, ATTEMPT + code, timeout)
    return json.loads(text.splitlines()[-1])


async def until(predicate: Callable[[], bool], timeout: float = 15) -> None:
    """Poll `predicate` until it holds; fail the test if it does not within `timeout` seconds."""
    if not await eventually(predicate, timeout):
        pytest.fail("condition not reached in time")


# --- processes ----------------------------------------------------------------------------------


class ProcessWatch:
    """The processes a test starts (descendants of the test process), to check none outlives it.

    `snapshot()` records the current descendants, so a process that is orphaned later (its
    parent killed, itself reparented to init) is still checked by `assert_all_gone()`.
    """

    def __init__(self) -> None:
        self._before = {p.pid for p in psutil.Process().children(recursive=True)}
        self.seen: dict[int, psutil.Process] = {}

    def snapshot(self) -> list[psutil.Process]:
        new = [p for p in psutil.Process().children(recursive=True) if p.pid not in self._before]
        for process in new:
            self.seen.setdefault(process.pid, process)
        return [p for p in new if alive(p)]

    def find(self, name: str, needle: str = "") -> list[psutil.Process]:
        """Recorded live processes with this name whose command line contains `needle`."""
        self.snapshot()
        found = []
        for process in self.seen.values():
            try:
                if alive(process) and process.name() == name and needle in " ".join(process.cmdline()):
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def left(self, runtime_dir: str | None = None) -> dict[int, psutil.Process]:
        """Recorded or new descendants still alive; also any process naming `runtime_dir`."""
        left = {p.pid: p for p in self.snapshot()}
        left |= {pid: p for pid, p in self.seen.items() if alive(p)}
        if runtime_dir is not None:
            for process in psutil.process_iter():
                try:
                    if alive(process) and runtime_dir in " ".join(process.cmdline()):
                        left[process.pid] = process
                except psutil.Error:
                    continue
        return left

    async def assert_all_gone(self, timeout: float = 5, runtime_dir: str | None = None) -> None:
        """Poll until no recorded or new descendant lives; also no process naming `runtime_dir`."""
        if not await eventually(lambda: not self.left(runtime_dir), timeout, interval=0.1):
            left = self.left(runtime_dir)
            pytest.fail("processes outlived the executor:\n" + "\n".join(map(describe, left.values())))


@pytest.fixture
def processes() -> ProcessWatch:
    return ProcessWatch()


# --- a local HTTP server in the test process ----------------------------------------------------


class LocalServer:
    """A tiny HTTP server on 127.0.0.1 (a thread of the test process) that counts its requests."""

    def __init__(self) -> None:
        self.body = f"local-server-{os.urandom(6).hex()}".encode()
        self.hits: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def local_server() -> Iterator[LocalServer]:
    server = LocalServer()
    try:
        yield server
    finally:
        server.close()


# --- MCP servers ----------------------------------------------------------------------------------


@pytest.fixture
def everything_params() -> dict[str, Any]:
    """stdio parameters of the `everything` MCP server (its `echo` tool answers "Echo: <message>")."""
    if not EVERYTHING.exists():
        pytest.skip("npm package @modelcontextprotocol/server-everything is not installed (npm ci)")
    return {"command": str(EVERYTHING), "args": ["stdio"]}
