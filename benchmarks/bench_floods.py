"""Host memory under floods from one kernel: ipybox's process peak RSS against the limits it was given.

Each flood runs in a fresh Python process (one `CodeExecutor`, its kernel under a memory limit, as
in issue #27), which reports its RSS after one ordinary cell (the baseline) and its peak RSS
(Linux's VmHWM) over the flood, so each peak is that flood's alone:

- images: one cell displays a 24 MiB PNG 40 times (384 MiB kernel memory limit);
- images-raw: the same 40 messages written straight to the kernel's iopub socket, past anything
  ipybox sets up inside the kernel (what a hostile kernel can do; the kernel is sandboxed);
- parts: one message of 250 parts of 1 MiB written to the kernel's ZMQ socket itself (sandboxed);
- objects-raw: 4 messages of 28 MiB of empty objects (`{}`, 7 Mi of them: within `message_bytes`
  as bytes, 60-odd bytes each once parsed) written to the kernel's iopub socket (sandboxed);
- images-kept: a 6 MiB PNG 40 times, so the result keeps images up to `image_bytes`;
- sockets: 24 connections to the kernel's tool server, each sending 60 MiB without a newline
  (256 MiB kernel memory limit);
- wide: one tool request of 18 MiB of empty objects (`{},` 6 Mi times), within `tool_buffer` as
  text, 60-odd bytes a value once parsed.

The bound is what the limits let the host hold for the kernel: `image_bytes` of images kept
(and again, as base64, in the session's notebook record), plus up to five times `message_bytes`
in flight (a message ZMQ reads, one it queues, and one
ipybox decodes: its bytes, their text and the value parsed from it), or `tool_buffer`
(connections' buffers and requests together). What the allocator keeps of freed memory comes on
top (run with MALLOC_MMAP_THRESHOLD_=1048576 to see the peaks without most of it).

Usage: uv run python benchmarks/bench_floods.py [--only NAME]   (Linux; as root for the memory limit)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import environ, node_bin_path

from ipybox import CodeExecutor, ResourceLimits

MIB = 1 << 20

_DISPLAY = """
import base64, os
from IPython.display import display
png = base64.b64encode(b"\\x89PNG\\r\\n\\x1a\\n" + os.urandom({size} - 8)).decode()
for _ in range(40):
    display({{"image/png": png}}, raw=True)
print("shown")
"""
_RAW = """
import base64, os
png = base64.b64encode(b"\\x89PNG\\r\\n\\x1a\\n" + os.urandom({size} - 8)).decode()
pub = get_ipython().display_pub
for _ in range(40):
    content = {{"data": {{"image/png": png}}, "metadata": {{}}}}
    msg = pub.session.msg("display_data", content, parent=pub.parent_header)
    pub.session.send(pub.pub_socket, msg, ident=pub.topic)
print("sent")
"""
_OBJECTS = """
pub = get_ipython().display_pub
for _ in range(4):
    content = {"data": {"application/json": [{}] * (7 << 20)}, "metadata": {}}
    msg = pub.session.msg("display_data", content, parent=pub.parent_header)
    pub.session.send(pub.pub_socket, msg, ident=pub.topic)
print("sent")
"""
_PARTS = """
import threading
io = get_ipython().display_pub.pub_socket.io_thread
sent = threading.Event()
def send():
    io.socket.send_multipart([b"x" * 2**20] * 250)
    sent.set()
io.schedule(send)
sent.wait(120)
print("sent")
"""
_SOCKETS = """
import os, socket, threading
def one():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
    try:
        for _ in range(60):
            sock.sendall(b"x" * 2**20)
    except OSError:
        pass  # refused
    sock.close()
threads = [threading.Thread(target=one) for _ in range(24)]
for t in threads: t.start()
for t in threads: t.join()
print("sent")
"""
_WIDE = """
import os, socket
line = (b'{"op": "run", "server_name": "x", "server_params": {}, "tool_name": "t", "tool_args": '
        b'{"items": [' + b'{},' * (6 << 20) + b'{}]}}\\n')
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
sock.sendall(line)
print(sock.recv(120))
"""
#: Floods past ipybox's code in the kernel: what a sandboxed (possibly hostile) kernel can do.
SANDBOXED = {"images-raw", "parts", "objects-raw"}
FLOODS = {
    "images": (_DISPLAY.format(size=24 * MIB), 384 * MIB),
    "images-raw": (_RAW.format(size=24 * MIB), 384 * MIB),
    "images-kept": (_DISPLAY.format(size=6 * MIB), 384 * MIB),
    "parts": (_PARTS, 384 * MIB),
    "objects-raw": (_OBJECTS, 384 * MIB),
    "sockets": (_SOCKETS, 256 * MIB),
    "wide": (_WIDE, 256 * MIB),
}


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise LookupError(key)


def bound(limits: ResourceLimits, flood: str) -> int:
    """Bytes the limits let the host hold for the kernel in this flood."""
    if flood in ("sockets", "wide"):
        return limits.tool_buffer or 0
    images = limits.image_bytes or 0
    return images + images * 4 // 3 + 5 * (getattr(limits, "message_bytes", 0) or 0)  # result, record


async def one(flood: str) -> dict[str, object]:
    code, memory = FLOODS[flood]
    limits = ResourceLimits(memory=memory)
    sandbox = flood in SANDBOXED
    with tempfile.TemporaryDirectory() as tmp, environ(PATH=node_bin_path()):  # srt, for the sandbox
        executor = CodeExecutor(working_dir=Path(tmp), spare_kernel=False, limits=limits, sandbox=sandbox)
        async with executor:
            await executor.execute("print(1)")
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here
            base = _status("VmRSS:")
            try:
                result = await executor.execute(code, timeout=300)
                text, kept = result.text or "", sum(len(png) for png in result._png)
            except Exception as e:  # noqa: BLE001 - e.g. the kernel killed at its memory limit
                text, kept = f"{type(e).__name__}: {e}", 0
            peak = _status("VmHWM:")
    return {
        "flood": flood,
        "base_mib": base / MIB,
        "peak_mib": peak / MIB,
        "growth_mib": (peak - base) / MIB,
        "bound_mib": bound(limits, flood) / MIB,
        "kept_mib": kept / MIB,
        "output": text[-300:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(FLOODS))
    parser.add_argument("--child", choices=sorted(FLOODS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(one(args.child))))
        return
    print(f"{'flood':<12} {'base':>8} {'peak':>8} {'growth':>8} {'bound':>8} {'kept':>8}  (MiB)")
    for flood in [args.only] if args.only else list(FLOODS):
        out = subprocess.run(
            [sys.executable, __file__, "--child", flood], capture_output=True, text=True, check=True
        ).stdout
        row = json.loads(out.splitlines()[-1])
        print(
            f"{flood:<12} {row['base_mib']:>8.0f} {row['peak_mib']:>8.0f} {row['growth_mib']:>8.0f} "
            f"{row['bound_mib']:>8.0f} {row['kept_mib']:>8.0f}  {row['output'][-120:]!r}"
        )


if __name__ == "__main__":
    main()
