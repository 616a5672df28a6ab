"""Fixtures for the reliability tests: scale (CI or `--soak-full`), a workspace with the nasty
server's generated API, process and resource probes, and the figures the soak and load tests report.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import internals
import psutil
import pytest
from servers.launch import alive, nasty_params

from ipybox import CodeExecutor, generate_mcp_sources
from ipybox.tool_exec import registry

NASTY = "nasty_server.py"
MIB = 1024 * 1024


# --- scale -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """How much the soak and load tests do: reduced for CI, full with `--soak-full`."""

    full: bool
    soak_executions: int
    soak_tool_calls: int
    load_executions: int  # per executor
    load_tool_calls: int  # per executor


CI_SCALE = Scale(
    full=False, soak_executions=1_000, soak_tool_calls=300, load_executions=100, load_tool_calls=20
)
FULL_SCALE = Scale(
    full=True, soak_executions=10_000, soak_tool_calls=2_000, load_executions=300, load_tool_calls=50
)


@pytest.fixture(scope="session")
def scale(pytestconfig: pytest.Config) -> Scale:
    return FULL_SCALE if pytestconfig.getoption("--soak-full") else CI_SCALE


# --- a workspace with a generated API --------------------------------------------------------------


@dataclass
class Workspace:
    """A working directory whose `mcptools/nasty/` holds the nasty server's generated API.

    Tests call `register()` first: the registry is per test (`IPYBOX_STATE_DIR`, tests/conftest.py).
    """

    root: Path

    def register(self) -> None:
        """Register the nasty server in the current (per-test) registry."""
        registry.register("nasty", nasty_params())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("workspace")
    with pytest.MonkeyPatch.context() as mp:  # the generator's registration goes to a throwaway registry
        mp.setenv("IPYBOX_STATE_DIR", str(tmp_path_factory.mktemp("generation-state")))
        asyncio.run(generate_mcp_sources("nasty", nasty_params(), root / "mcptools"))
    return Workspace(root)


def echo_code(message: str) -> str:
    return f"from mcptools.nasty import echo\nprint(echo.run(echo.Params(message={message!r})))"


# --- processes ---------------------------------------------------------------------------------------


def descendants(root: psutil.Process | None = None) -> list[psutil.Process]:
    """Live descendants of `root` (default: this process), recursively."""
    try:
        children = (root or psutil.Process()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in children if alive(p)]


def mentioning(needle: str) -> list[psutil.Process]:
    """Live processes (anyone's) whose command line contains `needle`."""
    found = []
    for process in psutil.process_iter():
        try:
            if alive(process) and needle in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def kernel_pid(executor: CodeExecutor) -> int:
    """The pid ipybox started for the current kernel (the `srt` wrapper if sandboxed)."""
    pid = internals.kernel_pid(executor)
    assert pid is not None
    return pid


# --- resource usage ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Resources held by the kernel and by this (host) process."""

    kernel_rss: int
    host_rss: int
    fds: int
    children: int
    threads: int
    tasks: int

    @classmethod
    def of(cls, executor: CodeExecutor) -> Usage:
        gc.collect()
        host = psutil.Process()
        return cls(
            kernel_rss=psutil.Process(kernel_pid(executor)).memory_info().rss,
            host_rss=host.memory_info().rss,
            fds=host.num_fds(),
            children=len(descendants()),
            threads=host.num_threads(),
            tasks=len(asyncio.all_tasks()),
        )

    def figures(self, prefix: str) -> dict[str, Any]:
        values = asdict(self)
        return {
            f"{prefix}_{key}": round(value / MIB, 1) if key.endswith("rss") else value
            for key, value in values.items()
        }


# --- figures -------------------------------------------------------------------------------------------

_FIGURES = pytest.StashKey[list[str]]()


class Figures:
    """Reports a test's measurements: one line on the terminal (also at the end of the run),
    a JSON file in the test's tmp dir, and a `record_property` entry for the junit XML."""

    def __init__(self, config: pytest.Config, capsys: pytest.CaptureFixture[str], record: Any, tmp: Path):
        self._config = config
        self._capsys = capsys
        self._record = record
        self._tmp = tmp

    def report(self, name: str, values: dict[str, Any]) -> None:
        line = f"[{name}] " + " ".join(f"{key}={value}" for key, value in values.items())
        self._record(name, json.dumps(values))
        (self._tmp / f"{name}.json").write_text(json.dumps(values, indent=1))
        self._config.stash.setdefault(_FIGURES, []).append(line)
        with self._capsys.disabled():
            sys.stdout.write(f"\n{line}\n")
            sys.stdout.flush()


@pytest.fixture
def figures(
    pytestconfig: pytest.Config,
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
    tmp_path: Path,
) -> Figures:
    return Figures(pytestconfig, capsys, record_property, tmp_path)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_FIGURES, [])
    if lines:
        terminalreporter.section("reliability figures")
        for line in lines:
            terminalreporter.write_line(line)
