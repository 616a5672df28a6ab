"""The one place tests reach into a `CodeExecutor`'s internals (its kernels, runtime directory).

When the executor's insides change, this module changes, not every test that looks inside.
"""

from __future__ import annotations

from pathlib import Path

from ipybox import CodeExecutor
from ipybox.kernel_mgr.backend import KernelLike
from ipybox.kernel_mgr.supervisor import KernelSupervisor


def kernels(executor: CodeExecutor) -> KernelSupervisor:
    """The started executor's kernel supervisor."""
    kernels = executor._kernels
    assert kernels is not None, "start the executor first"
    return kernels


def kernel(executor: CodeExecutor) -> KernelLike:
    """The kernel the next cell runs on."""
    return kernels(executor).kernel


def kernel_pid(executor: CodeExecutor) -> int | None:
    """The process id of the current (local) kernel."""
    return kernel(executor).pid


def runtime_dir(executor: CodeExecutor) -> Path | None:
    """The private directory of sockets and connection files (None once stopped)."""
    path: Path | None = getattr(executor.backend, "runtime_dir", None)
    return path


def busy(executor: CodeExecutor) -> bool:
    """Whether a cell, reset or transfer holds the executor."""
    return executor._lock.locked()


def tool_server_buffered(executor: CodeExecutor) -> int:
    """Bytes of requests the executor's tool server holds for its kernel now."""
    return executor.tool_server._listener.buffered
