"""Keeps every process a kernel starts findable, so that stopping the kernel ends them all.

A process that leaves the kernel's process group (`setsid`, a double-forked daemon, `nohup … &`)
would outlive `stop()` where no cgroup holds the kernel (a normal user without a delegated
cgroup, or no limits asked for). The kernel's launcher makes itself a *child subreaper*
(`ipybox.kernel_mgr.launch`, Linux `PR_SET_CHILD_SUBREAPER`) before it runs anything: orphans are
re-parented to it instead of to init, so they stay among its descendants, where `kill_escaped`
finds them. In a sandbox, bubblewrap's own process is the init of the kernel's pid namespace and
holds its orphans the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os

import psutil

logger = logging.getLogger(__name__)


def kill_escaped(pid: int, rounds: int = 5) -> None:
    """SIGKILL every descendant of `pid` outside its process group (the group is killed as a
    whole by the caller), again until none is left: one may fork meanwhile."""
    for _ in range(rounds):
        try:
            escaped = [p for p in psutil.Process(pid).children(recursive=True) if _escaped(p, pid)]
        except psutil.Error:
            return
        if not escaped:
            return
        for process in escaped:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(escaped, timeout=1)
    logger.warning("processes started by kernel %s kept forking while being stopped", pid)


def _escaped(process: psutil.Process, group: int) -> bool:
    """Whether `process` runs outside the process group `group` (a killed one lingers as a zombie
    until the kernel's top process ends and init reaps it: that one is done)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) != group
    except (OSError, psutil.Error):
        return False
