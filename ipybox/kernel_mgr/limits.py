"""Resource limits for kernels: memory, processes and output volume (`ResourceLimits`).

How memory and process limits are enforced (a cgroup per kernel, or rlimits where no cgroup can
be made) is `kernel_mgr.cgroup`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceLimits:
    """Limits for one kernel and everything it starts.

    - `memory`: bytes of memory (RAM, no swap) for the kernel and all its processes together.
      At the limit the kernel's cgroup runs the out-of-memory killer on its largest process: a
      child started by the cell, or the kernel, which is then replaced and reported as killed
      by the limit. Default: none.
    - `processes`: processes and threads the kernel's tree may have at once, so a fork bomb
      stays contained (`fork` fails). Default: none.
    - `output`: characters of output kept per execution; the rest is dropped with a marker
      saying how much, so a flood of output cannot exhaust the host's memory. Default 10 M.

    `None` switches a limit off. Memory and process limits need a cgroup ipybox may create (as
    root, or in a delegated cgroup v2); elsewhere they fall back to `RLIMIT_AS` and
    `RLIMIT_NPROC`, which are weaker (see docs/reliability.md), and a warning is logged once.
    """

    memory: int | None = None
    processes: int | None = None
    output: int | None = 10_000_000


def format_size(size: int) -> str:
    """`1.0 GiB`, `512.0 MiB`: a byte count as people write limits."""
    if size < 1024:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"
