"""What ipybox sets up inside each kernel at start (stdlib only: it runs before every first cell).

- `exit()` and `quit()` explain themselves instead of shutting the kernel down behind the
  caller's back.
- Output written straight to file descriptors 1 and 2 (by C code, `os.write`, child processes)
  reaches ipykernel through a pipe that a thread forwards; a cell ends only once that pipe is
  drained, so such output is never reported after the cell's result, or lost.
"""

from __future__ import annotations

import fcntl
import struct
import sys
import termios
import time
from typing import Any

#: How long a finished cell waits for its fd output to be forwarded.
_DRAIN_SECONDS = 2.0


def _no_exit(*args: object, **kwargs: object) -> None:
    raise RuntimeError("exit() and quit() are disabled in ipybox: reset for a fresh kernel.")


def _pending(fd: int) -> int:
    """Bytes waiting to be read from the pipe `fd`."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return 0


def drain_fd_output(*_: object) -> None:
    """Wait until ipykernel has read what was written to the captured fds, then flush it."""
    deadline = time.monotonic() + _DRAIN_SECONDS
    for stream in (sys.stdout, sys.stderr):
        fd = getattr(stream, "_fid", None)  # the read end of ipykernel's capture pipe
        if not isinstance(fd, int):
            continue
        while _pending(fd) and time.monotonic() < deadline:
            time.sleep(0.001)
        stream.flush()


def install(shell: Any) -> None:
    """Set all of the above up in the kernel's interactive shell."""
    shell.user_ns["exit"] = shell.user_ns["quit"] = _no_exit
    shell.events.register("post_run_cell", drain_fd_output)
