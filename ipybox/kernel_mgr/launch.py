"""Kernel entry point: takes the kernel's settings, applies fallback rlimits, watches for the
parent's death, runs ipykernel.

Started as `python -m ipybox.kernel_mgr.launch [--env-file F] [--memory N] [--processes N] --
<ipykernel args>`, also inside the sandbox, where the parent's process is not visible: the parent
holds the write end of the kernel's stdin, so end-of-file on stdin means ipybox is gone.
`--memory` and `--processes` (`RLIMIT_AS`, `RLIMIT_NPROC`) are passed only when a limit was asked
for and no cgroup can enforce it; a cgroup is joined before this runs (see
`cgroup.KernelCgroup.wrap`).

`--env-file` names the application's variables for the kernel (`kernel_env`), written by ipybox
in the kernel's private directory: they are applied here, after every program on the way in
(the sandbox's `sh`, `env`, `srt` under node, `bwrap`) has started with ipybox's own clean
environment, so no variable meant for the kernel (`NODE_OPTIONS`, `LD_PRELOAD`, `PATH`, …) can
steer a program outside the sandbox. Where one of them is read only when a process starts
(`_READ_AT_START`: the interpreter's `PYTHON*`, the loader's `LD_*`, locale, time zone, home,
allocator), the launcher then starts itself again, so the kernel's interpreter and loader see
them from its first instruction; the rest are read later, from `os.environ`, and cost no restart.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import runpy
import signal
import sys
import threading


def _limit(kind: int, value: int) -> None:
    _, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def _close_inherited() -> None:
    """Close every descriptor past stdio that the launcher was started with, before anything runs.

    In a sandbox they come from outside it, whatever they are: node (srt) marks close-on-exec only
    the descriptors up to its first closed number above 15, so one numbered higher that a program
    of the sandbox's launch inherited would reach the kernel (the policy pipe, before it was moved
    to srt's fd 3). Linux only (`/proc`); elsewhere the spawner closes them (macOS: posix_spawn's
    close-on-exec default).
    """
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, closed already
                pass


#: `prctl` option: orphaned descendants are re-parented to this process, not to init.
_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    """Keep what the kernel starts among its descendants, also what leaves its process group
    (`setsid`, double forks), so that `ipybox.kernel_mgr.reaper` finds and ends it (Linux only;
    kept across `exec`)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # here, not at the top: only Linux needs it

    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.stderr.write(f"ipybox: not a child subreaper: {os.strerror(ctypes.get_errno())}\n")


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


#: Variables a process reads as it starts (the interpreter: `PYTHON*`, and `HOME` for the user's
#: site-packages; the dynamic loader: `LD_*`; the C library: locale, `TZ`, `MALLOC_*`,
#: `GLIBC_TUNABLES`): a change to one of them takes a restart of the kernel's interpreter.
_READ_AT_START = re.compile(r"PYTHON|LD_|LC_|LANG$|LANGUAGE$|TZ$|HOME$|MALLOC_|GLIBC_TUNABLES$")


def _apply_env_file(path: str) -> bool:
    """Set the variables of the settings file at `path` (then removed); whether one read at a
    process's start (`_READ_AT_START`) changed.

    A variable the sandbox set or changed on the way (its `TMPDIR`, its proxies) keeps the
    sandbox's value, as it did when the variables were passed through it.
    """
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    os.unlink(path)
    given: dict[str, str] = settings["given"]
    changed = False
    for name, value in settings["env"].items():
        if os.environ.get(name) != given.get(name) or os.environ.get(name) == value:
            continue
        os.environ[name] = value
        changed = changed or _READ_AT_START.match(name) is not None
    return changed


def _without_env_file(argv: list[str]) -> list[str]:
    at = argv.index("--env-file")
    return argv[:at] + argv[at + 2 :]


def main() -> None:
    parser = argparse.ArgumentParser(prog="ipybox.kernel_mgr.launch")
    parser.add_argument("--env-file")
    parser.add_argument("--memory", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--watch-stdin", action="store_true")
    args, kernel_args = parser.parse_known_args()
    _close_inherited()
    _become_subreaper()  # before anything is started
    if args.env_file and _apply_env_file(args.env_file):
        # the interpreter and the loader read some variables (PYTHONPATH, LD_*) only at start
        rest = _without_env_file(sys.argv[1:])
        os.execv(sys.executable, [sys.executable, "-m", "ipybox.kernel_mgr.launch", *rest])
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
