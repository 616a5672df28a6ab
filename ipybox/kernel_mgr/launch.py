"""Kernel entry point: applies fallback rlimits, watches for the parent's death, runs ipykernel.

Started as `python -m ipybox.kernel_mgr.launch [--memory N] [--processes N] -- <ipykernel args>`,
also inside the sandbox, where the parent's process is not visible: the parent holds the
write end of the kernel's stdin, so end-of-file on stdin means ipybox is gone. `--memory` and
`--processes` (`RLIMIT_AS`, `RLIMIT_NPROC`) are passed only when a limit was asked for and no
cgroup can enforce it; a cgroup is joined before this runs (see `cgroup.KernelCgroup.wrap`).
"""

from __future__ import annotations

import argparse
import os
import resource
import runpy
import signal
import sys
import threading


def _limit(kind: int, value: int) -> None:
    _, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def _exit_when_orphaned() -> None:
    """End the kernel (and its process group) once stdin reaches end-of-file."""
    stdin = os.dup(0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the kernel itself must not consume the pipe

    def watch() -> None:
        while os.read(stdin, 4096):
            pass
        try:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        finally:
            os._exit(1)

    threading.Thread(target=watch, name="ipybox-parent-watch", daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(prog="ipybox.kernel_mgr.launch")
    parser.add_argument("--memory", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--watch-stdin", action="store_true")
    args, kernel_args = parser.parse_known_args()
    if args.memory:
        _limit(resource.RLIMIT_AS, args.memory)
    if args.processes:
        _limit(resource.RLIMIT_NPROC, args.processes)
    if args.watch_stdin:
        _exit_when_orphaned()
    sys.argv = ["ipykernel_launcher", *[a for a in kernel_args if a != "--"]]
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
