"""Resource limits for kernels: memory, processes and output volume."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

#: cgroup v1's pids hierarchy, then a cgroup v2 root.
_CGROUP_PIDS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


def _default_memory() -> int | None:
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return max(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2, 1 << 30)
    return None


@dataclass(frozen=True)
class ResourceLimits:
    """Limits for one kernel and everything it starts.

    - `memory`: bytes of address space for the kernel process (`RLIMIT_AS`). Code that asks for
      more gets a `MemoryError` instead of bringing the machine down. Default: half the RAM.
    - `processes`: processes the kernel may have at once (a cgroup where ipybox may create
      one, else `RLIMIT_NPROC`), so a fork bomb stays contained. Default 512.
    - `output`: characters of output kept per execution; the rest is dropped with a marker
      saying how much, so a flood of output cannot exhaust the host's memory. Default 10 M.

    `None` switches a limit off.
    """

    memory: int | None = _default_memory()
    processes: int | None = 512
    output: int | None = 10_000_000

    def launcher_args(self) -> list[str]:
        """Arguments for `ipybox.kernel_mgr.launch`, which applies the limits inside the kernel."""
        args = []
        if self.memory is not None:
            args += ["--memory", str(self.memory)]
        if self.processes is not None:
            args += ["--processes", str(self.processes)]
        return args


class PidsCgroup:
    """A pids cgroup that caps the number of processes of a kernel's tree (where permitted)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> PidsCgroup | None:
        """A new cgroup with `pids.max`, or None when cgroups are not writable here."""
        for root in _CGROUP_PIDS:
            if not (root / "cgroup.procs").exists():
                continue
            path = root / f"ipybox-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(max_pids))
                return cls(path)
            except OSError as e:
                logger.debug("no pids cgroup under %s: %s", root, e)
                with contextlib.suppress(OSError):
                    path.rmdir()
        return None

    def add(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Remove the cgroup (possible once its processes are gone)."""
        with contextlib.suppress(OSError):
            self.path.rmdir()
