"""Resource limits for kernels: memory, processes, and what the host holds for them (`ResourceLimits`).

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
    - `images`, `image_bytes`: images (their PNG bytes) kept per execution. Past either, further
      images are dropped as they arrive and the output says how many, which limit and how to
      raise it. Default 200 images, 128 MiB.
    - `message_bytes`: the largest message (all its parts) the host takes from the kernel at
      once: an image up to about three quarters of it (base64), a printed text up to it (the
      kernel sends longer texts in pieces). From a sandboxed kernel, a larger one is dropped by
      ipybox's relay, and the output says so. It bounds what the host holds in flight for the
      kernel to a few such messages. Default 32 MiB.
    - `tool_connections`: connections the kernel may hold open to its tool server at once (each
      thread that calls tools keeps one); more are refused with an error the calling code
      raises. Default 64.
    - `tool_buffer`: bytes of tool-call requests the tool server holds for the kernel at once,
      while reading them and while their calls run, each as memory holds it (parsed, a value
      takes tens of bytes: a list of a million numbers about 40 MiB); a request that does not fit
      is answered with an error naming this limit. Default 128 MiB.

    The host-side limits (output, images, tool server) hold on every platform and backend; a
    kernel that reaches one is told so, other kernels are unaffected. `None` switches a limit
    off. Memory and process limits need a cgroup ipybox may create (as root, or in a delegated
    cgroup v2); elsewhere they fall back to `RLIMIT_AS` and `RLIMIT_NPROC`, which are weaker
    (see docs/reliability.md), and a warning is logged once.
    """

    memory: int | None = None
    processes: int | None = None
    output: int | None = 10_000_000
    images: int | None = 200
    image_bytes: int | None = 128 << 20
    message_bytes: int | None = 32 << 20
    tool_connections: int | None = 64
    tool_buffer: int | None = 128 << 20


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
