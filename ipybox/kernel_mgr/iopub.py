"""What the host takes in from a kernel's ZMQ sockets: bounded per message and per queue.

ZMQ receives each message whole, in its own I/O thread, before ipybox sees it, and by default
queues up to 1,000 of them per socket: a kernel displaying large images faster than the host
handles them made the host hold hundreds of MiB that no per-cell limit could reach. Each socket
of a kernel's client queues at most `QUEUE` messages (`RCVHWM`): past that ZMQ stops reading,
so the kernel's side waits and holds what it has not sent (in the kernel's own memory, under
its own limit). ipybox's code in the kernel keeps ordinary output within `message_bytes` per
message; from a sandboxed kernel, which may write to its sockets past that code, messages
larger than that, all parts counted, never reach ZMQ: the relay between the host's sockets
and the kernel's drops them (`ipybox.kernel_mgr.relay`), and the cell's output says so.
"""

from __future__ import annotations

from typing import Any

import zmq
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.session import json_unpacker

from ipybox import _json_text
from ipybox.kernel_mgr.limits import format_size

#: Messages ZMQ queues per socket before it stops reading from the kernel.
QUEUE = 1


def bound(client: AsyncKernelClient) -> None:
    """Bound the queue of every socket `client` creates from now on (call before `start_channels`),
    and read each message's JSON in whole characters (`_json_text.whole_characters`)."""
    client.context.setsockopt(zmq.RCVHWM, QUEUE)  # the client's own: no other kernel's sockets
    client.session.unpack = _unpack


def _unpack(data: bytes | str) -> Any:
    return _json_text.whole_characters(json_unpacker(data), data)


def dropped_note(message_bytes: int | None) -> str:
    """What a cell's output says where a message over the limit was dropped."""
    size = format_size(message_bytes or 0)
    return (
        f"\n[ipybox] The kernel sent an output message larger than {size}, the most ipybox takes in "
        "one message, as bytes or as it would parse (a JSON value of many small items takes tens of "
        "bytes per item) (ResourceLimits.message_bytes, ipybox --max-message-bytes): it was dropped (the "
        "rest of the output is kept). Display or print less at once (save large outputs to files), "
        "or raise the limit.\n"
    )
