"""Enforcing `ResourceLimits` on a kernel's whole process tree with a cgroup ipybox creates per kernel.

cgroup v2 (`memory.max`, `memory.swap.max`, `pids.max`) or v1 (`memory.limit_in_bytes`,
`memory.memsw.limit_in_bytes`, `pids.max`). That needs root, or (v2) a cgroup delegated to the
user that this process runs in. Where neither exists, the kernel falls back to `RLIMIT_AS` /
`RLIMIT_NPROC`, with one warning saying so.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import signal
import time
from pathlib import Path

import psutil

from ipybox.kernel_mgr.limits import ResourceLimits, format_size

logger = logging.getLogger(__name__)

#: Where cgroup hierarchies are mounted: v2 here (or at `unified/` beside v1 ones), v1 per controller.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Kernel cgroups are named `ipybox-<owner pid>-<random>`, so leftovers of dead owners can be found.
_NAME = re.compile(r"ipybox-(\d+)-[0-9a-f]+")
#: cgroup v2 allows controllers for children only in a cgroup without processes of its own: the
#: processes of a delegated cgroup are moved into this leaf before kernel cgroups are made beside it.
HOST_LEAF = "ipybox-host"
#: Runs a command after moving itself into the cgroups listed before `--`: nothing of the command
#: (a kernel, or srt with the kernel inside) runs outside them.
_JOIN = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done; shift; exec "$@"'


class KernelCgroup:
    """The cgroup(s) holding one kernel's process tree: one directory on v2, one per controller on v1."""

    def __init__(self, dirs: dict[str, tuple[int, Path]], memory: int | None) -> None:
        self.dirs = dirs  # controller -> (cgroup version, directory)
        self.memory = memory if "memory" in dirs else None

    @classmethod
    def create(cls, limits: ResourceLimits) -> KernelCgroup | None:
        """A cgroup enforcing what it can of `limits`, or None if it can enforce none of them."""
        wanted = {c: v for c, v in (("memory", limits.memory), ("pids", limits.processes)) if v is not None}
        if not wanted:
            return None
        own = _own_cgroups()
        name = f"ipybox-{os.getpid()}-{secrets.token_hex(4)}"
        dirs: dict[str, tuple[int, Path]] = {}
        for controller, value in wanted.items():
            found = _parent_for(controller, own)
            if found is None:
                continue
            version, parent = found
            path = parent / name
            try:
                _remove_orphans(parent)
                if version == 2:
                    _enable_controller(parent, controller)
                path.mkdir(exist_ok=True)  # on v2 both controllers share it
                _write_limit(path, version, controller, value)
                dirs[controller] = (version, path)
            except OSError as e:
                logger.debug("no %s cgroup under %s: %s", controller, parent, e)
                if all(path != p for _, p in dirs.values()):
                    with contextlib.suppress(OSError):
                        path.rmdir()
        return cls(dirs, limits.memory) if dirs else None

    @property
    def procs_files(self) -> list[Path]:
        """The `cgroup.procs` files a kernel's launcher joins (each directory once)."""
        return [path / "cgroup.procs" for path in dict.fromkeys(p for _, p in self.dirs.values())]

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv`, run after the process has joined this cgroup: it inherits to all it starts."""
        return ["/bin/sh", "-c", _JOIN, "ipybox-cgroup", *map(str, self.procs_files), "--", *argv]

    def oom_kills(self) -> int:
        """How many processes the cgroup's out-of-memory killer has killed (at the memory limit)."""
        if "memory" not in self.dirs:
            return 0
        version, path = self.dirs["memory"]
        events = path / ("memory.events" if version == 2 else "memory.oom_control")
        with contextlib.suppress(OSError, ValueError):
            for line in events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def memory_note(self) -> str:
        """What killing a process at the memory limit means, for error messages."""
        assert self.memory is not None
        return f"the kernel's memory limit of {format_size(self.memory)} was reached"

    def remove(self) -> bool:
        """Kill what is left in the cgroup and remove it; False while processes are still exiting."""
        removed = True
        for path in dict.fromkeys(p for _, p in self.dirs.values()):
            removed &= _kill_and_remove(path)
        return removed


def fallback(limits: ResourceLimits, cgroup: KernelCgroup | None) -> tuple[list[str], str | None]:
    """Launcher arguments for the limits `cgroup` does not enforce, and a warning saying so.

    `RLIMIT_AS` caps the kernel's address space, not its memory, and per process; programs that
    reserve more address space than they use (Chromium, CUDA, JAX) fail under it. `RLIMIT_NPROC`
    counts every process and thread of the user, not only the kernel's, and root ignores it.
    """
    covered = cgroup.dirs if cgroup is not None else {}
    args: list[str] = []
    notes: list[str] = []
    if limits.memory is not None and "memory" not in covered:
        args += ["--memory", str(limits.memory)]
        notes.append(
            f"the memory limit of {format_size(limits.memory)} is applied as RLIMIT_AS to each process "
            "(address space, not memory; code gets MemoryError; Chromium, CUDA and JAX fail under it)"
        )
    if limits.processes is not None and "pids" not in covered:
        args += ["--processes", str(limits.processes)]
        whose = "root is exempt: no effect" if os.geteuid() == 0 else "it counts all the user's tasks"
        notes.append(f"the process limit of {limits.processes} is applied as RLIMIT_NPROC ({whose})")
    if not notes:
        return args, None
    return args, (
        "ipybox cannot create a cgroup for the kernel here (it needs root or a delegated cgroup v2): "
        + "; ".join(notes)
        + "."
    )


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and its cgroup v2 path under ``""``."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _v2_mount() -> Path | None:
    for path in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (path / "cgroup.controllers").exists():
            return path
    return None


def _parent_for(controller: str, own: dict[str, str]) -> tuple[int, Path] | None:
    """Where this process may create a cgroup with `controller`: (version, parent directory).

    On v2, the process's own cgroup, if the controller is available there and the directory is
    writable (root, or a delegated cgroup, e.g. a systemd unit with `Delegate=yes`); on v1, the
    process's cgroup in that controller's hierarchy, if writable (root).
    """
    mount = _v2_mount()
    if mount is not None and "" in own:
        parent = mount / own[""].lstrip("/")
        if parent.name == HOST_LEAF:  # moved there by an ipybox before: make kernels beside it
            parent = parent.parent
        with contextlib.suppress(OSError):
            available = (parent / "cgroup.controllers").read_text().split()
            if controller in available and os.access(parent, os.W_OK):
                return 2, parent
    parent = CGROUP_ROOT / controller / own.get(controller, "/").lstrip("/")
    if (parent / "cgroup.procs").exists() and os.access(parent, os.W_OK):
        return 1, parent
    return None


def _enable_controller(parent: Path, controller: str) -> None:
    """Let `parent`'s children use `controller` (v2), first moving its processes into a leaf if needed."""
    control = parent / "cgroup.subtree_control"
    if controller in control.read_text().split():
        return
    try:
        control.write_text(f"+{controller}")
    except OSError as e:
        if e.errno != errno.EBUSY:  # EBUSY: the cgroup has processes of its own
            raise
        leaf = parent / HOST_LEAF
        leaf.mkdir(exist_ok=True)
        for _ in range(10):  # processes may fork while they are moved
            pids = (parent / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    (leaf / "cgroup.procs").write_text(pid)
        logger.info("moved the processes of %s into %s: kernels get cgroups beside it", parent, leaf)
        control.write_text(f"+{controller}")


def _write_limit(path: Path, version: int, controller: str, value: int) -> None:
    if controller == "pids":
        (path / "pids.max").write_text(str(value))
    elif version == 2:
        (path / "memory.max").write_text(str(value))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
    else:
        (path / "memory.limit_in_bytes").write_text(str(value))
        if (path / "memory.memsw.limit_in_bytes").exists():  # memory plus swap: no swapping past the limit
            (path / "memory.memsw.limit_in_bytes").write_text(str(value))


def _kill_and_remove(path: Path) -> bool:
    """SIGKILL the processes in cgroup `path` and remove it; False while some are still exiting."""
    if not path.exists():
        return True
    with contextlib.suppress(OSError):
        if (path / "cgroup.kill").exists():
            (path / "cgroup.kill").write_text("1")
        else:
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _remove_orphans(parent: Path) -> None:
    """Remove kernel cgroups under `parent` whose ipybox process is gone (e.g. it was SIGKILLed)."""
    for path in parent.glob("ipybox-*"):
        match = _NAME.fullmatch(path.name)
        if match is None or psutil.pid_exists(int(match[1])):
            continue
        for _ in range(20):  # killed processes are gone within microseconds, as a rule
            if _kill_and_remove(path):
                logger.info("removed cgroup %s, left by a process that is gone", path)
                break
            time.sleep(0.005)
