"""What the host takes in from a kernel's ZMQ sockets: bounded per message and per queue.

ZMQ receives each message whole, in its own I/O thread, before ipybox sees it, and by default
queues up to 1,000 of them per socket: a kernel displaying large images faster than the host
handles them made the host hold hundreds of MiB that no per-cell limit could reach. Here each
socket of a kernel's client takes messages of at most `message_bytes` (ZMQ's `MAXMSGSIZE`, per
message part) and queues at most `QUEUE` of them (`RCVHWM`): past that ZMQ stops reading, so
the kernel's side waits and holds what it has not sent (in the kernel's own memory, under its
own limit). A message over the limit makes ZMQ drop it and end the connection for good;
`DropWatch` notices that (a socket monitor's disconnect event) and connects again, so the cell
can say what was dropped, and `Kernel` then learns by a probe request when the cell's output has
ended, as the cell's own end-of-output message may have gone with the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable
from typing import cast

import zmq
from jupyter_client.asynchronous.client import AsyncKernelClient

from ipybox.kernel_mgr.limits import format_size

#: Messages ZMQ queues per socket before it stops reading from the kernel.
QUEUE = 1


def bound(client: AsyncKernelClient, message_bytes: int | None) -> None:
    """Bound every socket `client` creates from now on (call before `start_channels`)."""
    context = client.context  # the client's own: these defaults reach no other kernel's sockets
    context.setsockopt(zmq.RCVHWM, QUEUE)
    if message_bytes is not None:
        context.setsockopt(zmq.MAXMSGSIZE, message_bytes)


def dropped_note(message_bytes: int | None) -> str:
    """What a cell's output says where the kernel's connection dropped a message over the limit."""
    size = format_size(message_bytes or 0)
    return (
        f"\n[ipybox] The kernel sent an output message larger than {size}, the most ipybox takes in "
        "one message (ResourceLimits.message_bytes, ipybox --max-message-bytes): it was dropped, and "
        "output sent just after it may be missing. Display or print less at once (save large outputs "
        "to files), or raise the limit.\n"
    )


class DropWatch:
    """Counts how often ZMQ dropped the connection of `socket` (connected to its kernel), and
    connects it again at once: each time, for a message over the limit (or because the kernel
    died, which `Kernel` learns on its own). Made in a running event loop."""

    def __init__(self, socket: zmq.Socket[bytes]) -> None:
        self._socket = socket
        self._url = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._task = asyncio.ensure_future(self._watch())
        self.drops = 0

    async def _watch(self) -> None:
        while True:
            await cast("Awaitable[list[bytes]]", self._monitor.recv_multipart())  # an asyncio socket
            self.drops += 1
            # ZMQ ends a connection that broke its rules and does not connect again by itself;
            # at once, so that little of what the kernel sends meanwhile is lost. Not to a kernel
            # that died: ending that connection while its last message is read aborts libzmq.
            if not _listening(self._url):
                continue
            with contextlib.suppress(zmq.ZMQError):
                self._socket.disconnect(self._url)
            with contextlib.suppress(zmq.ZMQError):  # closed meanwhile
                self._socket.connect(self._url)

    def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(zmq.ZMQError):
            self._socket.disable_monitor()
        self._monitor.close(linger=0)


def _listening(url: str) -> bool:
    """Whether the kernel still accepts connections at its ipc `url` (any other transport: assumed)."""
    if not url.startswith("ipc://"):
        return True
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(url.removeprefix("ipc://"))
        except OSError:  # refused: the kernel's process is gone
            return False
    return True
