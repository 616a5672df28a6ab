"""Helpers shared by the benchmark scripts: timing, medians, the result table, baseline kernels.

The baseline for most figures is a bare jupyter_client kernel: `AsyncKernelManager.start_kernel()`
plus a client's `wait_for_ready()`, given the kernel options ipybox gives its kernels (no history,
`store_history=False`) and, by default, the same ipc transport, so that ratios show the
client-side overhead of ipybox.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from jupyter_client.manager import AsyncKernelManager

from ipybox.sandbox import sandbox_problem

REPO = Path(__file__).resolve().parents[1]
NODE_BIN = REPO / "node_modules" / ".bin"
EVERYTHING = NODE_BIN / "mcp-server-everything"
CODE = "1+1"

#: The kernel options ipybox uses, so that both sides ask the kernel for the same work.
BARE_KERNEL_OPTIONS = ["--IPKernelApp.log_level=ERROR", "--HistoryManager.enabled=False"]


# --- timing --------------------------------------------------------------------------------------


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    """Seconds `fn()` takes to complete."""
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


def ms(values: Sequence[float]) -> float:
    """The median of `values` (seconds), in milliseconds."""
    return statistics.median(values) * 1000


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value below which `fraction` of `values` lie (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[max(int(len(ordered) * fraction) - 1, 0)]


# --- environment ---------------------------------------------------------------------------------


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of the block, then restore them."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def node_bin_path() -> str:
    """PATH with the repository's node_modules/.bin (srt, mcp-server-everything) in front."""
    return os.pathsep.join(p for p in (str(NODE_BIN), os.environ.get("PATH", "")) if p)


@functools.cache
def sandbox_unavailable() -> str | None:
    """Why sandboxed kernels cannot run on this machine, or None if they can."""
    if platform.system() != "Linux":
        return "the sandbox benchmark targets Linux (bubblewrap)"
    return sandbox_problem(node_bin_path())


# --- processes -----------------------------------------------------------------------------------


def child_pids() -> set[int]:
    """Pids of all descendants of this process."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def rss_mb(pids: set[int]) -> float:
    """Summed resident set size of `pids` (those still alive), in MiB."""
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += psutil.Process(pid).memory_info().rss
    return total / 2**20


# --- bare jupyter_client kernels -----------------------------------------------------------------


@dataclass
class BareKernel:
    """A kernel started and driven with plain jupyter_client, as the baseline."""

    manager: AsyncKernelManager
    client: Any  # AsyncKernelClient

    @classmethod
    async def start(cls, transport: str, runtime_dir: Path, name: str = "bare") -> BareKernel:
        """Start a kernel and wait until it is ready (`wait_for_ready()`, as jupyter_client users do).

        With the ipc transport its sockets are `runtime_dir/<name>-<port>`: give concurrent
        kernels different names.
        """
        if transport == "ipc":
            km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(runtime_dir / name))
        else:
            km = AsyncKernelManager(kernel_name="python3")
        await km.start_kernel(extra_arguments=BARE_KERNEL_OPTIONS)
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
        except BaseException:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
            raise
        return cls(km, kc)

    async def stop(self) -> None:
        self.client.stop_channels()
        await self.manager.shutdown_kernel(now=True)

    async def roundtrip(self, code: str = CODE) -> None:
        """Execute `code` and wait for both the idle status on iopub and the shell reply."""
        kc = self.client
        msg_id = kc.execute(code, store_history=False)
        while True:
            msg = await kc.get_iopub_msg()
            if (
                msg["parent_header"].get("msg_id") == msg_id
                and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"
            ):
                break
        while True:
            msg = await kc.get_shell_msg()
            if msg["parent_header"].get("msg_id") == msg_id:
                assert msg["content"]["status"] == "ok", msg["content"]
                return


async def bare_start_time(transport: str, runtime_dir: Path) -> float:
    """Seconds from `start_kernel()` to a ready client, for one bare kernel (stopped afterwards)."""
    started = time.perf_counter()
    kernel = await BareKernel.start(transport, runtime_dir)
    elapsed = time.perf_counter() - started
    await kernel.stop()
    return elapsed


# --- the result table ----------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the summary table. `ipybox`/`baseline` are None when not measured."""

    metric: str
    ipybox: float | None
    baseline: float | None
    target: str = "-"
    verdict: str = "info"
    digits: int = 2

    @property
    def ratio(self) -> float | None:
        if self.ipybox is None or not self.baseline:
            return None
        return self.ipybox / self.baseline


def verdict(ok: bool, detail: str = "") -> str:
    text = "OK" if ok else "OVER TARGET"
    return f"{text} ({detail})" if detail else text


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a markdown table: metric | ipybox | baseline | ratio | target | verdict."""

    def number(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    header = ("metric", "ipybox", "baseline", "ratio", "target", "verdict")
    cells = [header] + [
        (
            row.metric,
            number(row.ipybox, row.digits),
            number(row.baseline, row.digits),
            number(row.ratio, 2),
            row.target,
            row.verdict,
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    right = {1, 2, 3}  # numbers

    def line(values: Sequence[str]) -> str:
        padded = [
            v.rjust(w) if i in right else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i in right else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), rule, *(line(c) for c in cells[1:])])


def print_table(rows: Sequence[Row]) -> None:
    print(format_table(rows))
