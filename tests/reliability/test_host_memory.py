"""Floods from one kernel bound what the host process holds for it, and leave another kernel alone.

One kernel (sandboxed, as a hostile one would be) displays 40 images of 4 MiB (160 MiB), writes
10 messages of 12 MiB, one message of 100 parts of 1 MiB each, and 3 messages of 7 MiB of `{}`
(within the limit as bytes, 16 times over it parsed) straight to its iopub socket (past
ipybox's code in the kernel, as a hostile kernel can), and opens 16
connections to its tool server, each sending 24 MiB without a newline, under small limits;
another kernel of the same process runs cells and tool calls meanwhile. What the host kept is
asserted (the images within `image_bytes`, the request bytes within `tool_buffer`), and so is its
peak RSS per flood (Linux's VmHWM, reset before each flood), measured, not timed: it grows by at
most what the limits allow (`image_bytes` plus five `message_bytes` in flight; `tool_buffer`)
plus `MARGIN` for the interpreter and the other kernel's cells meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from internals import tool_server_buffered
from servers.launch import SANDBOX_PATH, require_sandbox

from ipybox import CodeExecutor, ResourceLimits

from .conftest import MIB, Figures, Workspace, echo_code

LIMITS = ResourceLimits(image_bytes=32 * MIB, message_bytes=8 * MIB, tool_connections=8, tool_buffer=16 * MIB)
#: What the host may allocate besides what the limits count: the interpreter's and allocator's own
#: churn, the other kernel's cells, a flood's error lines.
MARGIN = 16 * MIB
#: `image_bytes` of images kept in the result, and five messages' worth in flight (one ZMQ reads,
#: one it queues, one ipybox decodes: its bytes, their text and the value parsed from it).
IN_FLIGHT = 5 * 8 * MIB
#: The same images again in the session's notebook record, as base64 (a third more).
RECORDED = 32 * MIB * 4 // 3
IMAGES_BOUND = 32 * MIB + RECORDED + IN_FLIGHT
IMAGES = """
import base64, os
from IPython.display import display
png = base64.b64encode(b"\\x89PNG\\r\\n\\x1a\\n" + os.urandom(4 * 2**20 - 8)).decode()
for _ in range(40):
    display({"image/png": png}, raw=True)
print("shown")
"""
RAW = """
pub = get_ipython().display_pub
for _ in range(10):
    content = {"data": {"image/png": "A" * (12 * 2**20)}, "metadata": {}}
    msg = pub.session.msg("display_data", content, parent=pub.parent_header)
    pub.session.send(pub.pub_socket, msg, ident=pub.topic)
print("sent")
"""
PARTS = """
import threading
io = get_ipython().display_pub.pub_socket.io_thread  # ipykernel's iopub thread and its ZMQ socket
sent = threading.Event()
def send():
    io.socket.send_multipart([b"x" * 2**20] * 100)  # one message of 100 parts, each under the limit
    io.socket.send_multipart([b"not", b"a", b"jupyter", b"message"])  # and a small malformed one
    session = get_ipython().display_pub.session  # and a signed one too deep to parse
    parts = [session.pack(session.msg_header("display_data")), b"{}", b"{}", b"[" * 3000 + b"]" * 3000]
    io.socket.send_multipart([b"topic", b"<IDS|MSG>", session.sign(parts), *parts])
    sent.set()
io.schedule(send)
sent.wait(60)
print("sent")
"""
#: Messages within `message_bytes` as bytes whose content would parse to 16 times more.
OBJECTS = """
pub = get_ipython().display_pub
for _ in range(3):
    content = {"data": {"application/json": [{}] * (7 << 18)}, "metadata": {}}
    msg = pub.session.msg("display_data", content, parent=pub.parent_header)
    pub.session.send(pub.pub_socket, msg, ident=pub.topic)
print("sent")
"""
SOCKETS = """
import os, socket, threading
def one():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
    try:
        for _ in range(24):
            sock.sendall(b"x" * 2**20)
    except OSError:
        pass  # refused
    sock.close()
threads = [threading.Thread(target=one) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print("sent")
"""


def _kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise LookupError(key)


def _reset_peak() -> bool:
    """Start Linux's peak-RSS count (VmHWM) afresh; False where it cannot be."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
        return True
    return False


async def _meanwhile(other: CodeExecutor, done: asyncio.Future[object]) -> int:
    """Cells and tool calls on the other kernel until `done`: how many ran, each checked."""
    runs = 0
    while not done.done() or runs == 0:
        assert (await other.execute(f"print({runs} * 2)")).text == str(runs * 2)
        assert (await other.execute(echo_code(f"m{runs}"))).text == f"m{runs}"
        runs += 1
    return runs


async def _most_buffered(executor: CodeExecutor, until: asyncio.Future[object]) -> int:
    """The most request bytes the executor's tool server held at once, sampled until `until`."""
    most = 0
    while not until.done():
        most = max(most, tool_server_buffered(executor))
        await asyncio.sleep(0.001)
    return most


@pytest.mark.timeout(300)
async def test_floods_from_one_kernel_keep_host_memory_bounded(
    workspace: Workspace, figures: Figures, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_sandbox()  # skipped where no sandbox can run (failed in CI)
    monkeypatch.setenv("PATH", SANDBOX_PATH)
    workspace.register()
    values: dict[str, object] = {}
    async with (
        CodeExecutor(working_dir=workspace.root, spare_kernel=False, limits=LIMITS, sandbox=True) as flooder,
        CodeExecutor(working_dir=workspace.root, spare_kernel=False) as other,
    ):
        await other.execute("print(1)")
        measured = _reset_peak()
        base = _kib("VmRSS:")
        images = asyncio.ensure_future(flooder.execute(IMAGES, timeout=240))
        values["other_runs_images"] = await _meanwhile(other, images)
        result = await images
        kept = sum(len(png) for png in result.png)
        assert kept <= LIMITS.image_bytes and len(result.images) == 8  # type: ignore[operator]
        assert (
            result.text is not None
            and "32 of the 40 images this execution displayed were dropped" in result.text
        )
        growth = _kib("VmHWM:") - base
        values |= {"images_kept_mib": kept // MIB, "images_peak_growth_mib": growth // MIB}
        assert not measured or growth <= IMAGES_BOUND + MARGIN, values
        del result

        for name, code in (("raw", RAW), ("parts", PARTS), ("objects", OBJECTS)):  # past the kernel's code
            _reset_peak()
            base = _kib("VmRSS:")
            flood = asyncio.ensure_future(flooder.execute(code, timeout=240))
            values[f"other_runs_{name}"] = await _meanwhile(other, flood)
            text = (await flood).text or ""
            assert "sent" in text and "larger than 8.0 MiB, the most ipybox takes in one message" in text
            growth = _kib("VmHWM:") - base
            values[f"{name}_peak_growth_mib"] = growth // MIB
            assert not measured or growth <= IN_FLIGHT + MARGIN, values

        _reset_peak()
        base = _kib("VmRSS:")
        sockets = asyncio.ensure_future(flooder.execute(SOCKETS, timeout=240))
        sampled = asyncio.ensure_future(_most_buffered(flooder, sockets))
        values["other_runs_sockets"] = await _meanwhile(other, sockets)
        assert (await sockets).text == "sent"
        buffered = await sampled
        assert buffered <= LIMITS.tool_buffer  # type: ignore[operator]
        growth = _kib("VmHWM:") - base
        values |= {"socket_buffered_peak_mib": buffered // MIB, "socket_peak_growth_mib": growth // MIB}
        assert not measured or growth <= LIMITS.tool_buffer + MARGIN, values  # type: ignore[operator]
        assert (await flooder.execute(echo_code("after"))).text == "after"  # its tool calls work again
    if not measured:
        values = {k: v for k, v in values.items() if "growth" not in k}
    figures.report("host_memory_floods", values)
