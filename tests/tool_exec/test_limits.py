"""What the tool server holds for one kernel is bounded: connections and buffered request bytes.

Kernel code can open as many connections to the tool server's socket as it likes and send lines
without end. Past `ResourceLimits.tool_connections` connections are refused, past
`tool_buffer` bytes a request is dropped as it is read; both get an error line that names the
limit, and the kernel's own tool calls work again once the flood is over.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from internals import tool_server_buffered
from servers.launch import collect

from ipybox import CodeExecutionResult, CodeExecutor, ResourceLimits

from .conftest import Workspace

MIB = 1 << 20
LIMITS = ResourceLimits(tool_connections=4, tool_buffer=8 * MIB)

#: Kernel code: `flood(count, size)` opens `count` connections at once, sends `size` bytes on each
#: (no newline before the last byte), and returns each one's error ("closed" if none came).
FLOOD = """
import json, os, socket, threading

def connect():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
    return sock

def reply(sock):
    data = b""
    try:
        while not data.endswith(b"\\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return json.loads(data)["error"] if data else "closed"

def flood(count, size):
    socks = [connect() for _ in range(count)]
    errors = [None] * count
    def send(i):
        try:
            for _ in range(size // (1 << 20)):
                socks[i].sendall(b"x" * (1 << 20))
            socks[i].sendall(b"\\n")
        except OSError:
            pass  # refused: the server closed the connection
        errors[i] = reply(socks[i])
    threads = [threading.Thread(target=send, args=(i,)) for i in range(count)]
    for t in threads: t.start()
    for t in threads: t.join()
    for s in socks: s.close()
    return errors
"""
#: 8 threads each call a tool (on a connection of their own); the cell ends once 4 are refused.
PENDING = """
import threading, time
from mcptools.nasty import echo
errors = []
def call():
    try:
        echo.run(echo.Params(message="p"))
    except Exception as e:
        errors.append(str(e))
for _ in range(8):
    threading.Thread(target=call, daemon=True).start()
while len(errors) < 4:
    time.sleep(0.01)
print("refused by the limit" if all("tool_connections" in e for e in errors[:4]) else errors)
"""
ECHO = "from mcptools.nasty import echo\nprint(len(echo.run(echo.Params(message='x' * {size}))))"
#: A tool call from a new thread (so on a new connection); prints its result's length or its error.
IN_THREAD = """
import threading
from mcptools.nasty import echo
out = []
def call():
    try:
        out.append(len(echo.run(echo.Params(message='x' * {size}))))
    except Exception as e:
        out.append(f"{{type(e).__name__}}: {{e}}")
t = threading.Thread(target=call)
t.start()
t.join()
print(out[0])
"""


@pytest.mark.timeout(120)
async def test_socket_flood_is_refused_and_bounded_and_tool_calls_work_after(workspace: Workspace) -> None:
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root, spare_kernel=False, limits=LIMITS) as executor:
        await executor.execute(FLOOD)
        # 12 connections at once, each sending 16 MiB in one line: 4 are served, and each of their
        # requests is larger than the whole buffer; the other 8 are refused
        cell = asyncio.ensure_future(executor.execute("for e in flood(12, 16 << 20): print(e)", timeout=60))
        peak = 0
        while not cell.done():
            peak = max(peak, tool_server_buffered(executor))
            await asyncio.sleep(0.001)
        errors = (await cell).text.splitlines()  # type: ignore[union-attr]
        assert peak <= LIMITS.tool_buffer  # type: ignore[operator]
        assert tool_server_buffered(executor) == 0
        refused = [e for e in errors if "refused this connection" in e]
        too_large = [e for e in errors if "refused this request of 16777217 bytes" in e]
        assert (len(refused), len(too_large)) == (8, 4), errors
        assert "holds 4 connections to it, its limit (ResourceLimits.tool_connections" in refused[0]
        assert "may take 8.0 MiB (ResourceLimits.tool_buffer; ipybox --max-tool-buffer)" in too_large[0]

        # a request within the buffer still goes through, large as it is
        assert (await executor.execute(ECHO.format(size=2 * MIB))).text == str(2 * MIB)

        # a thread's tool call, while the kernel holds all its connections, gets the refusal as its error
        await executor.execute("held = [connect() for _ in range(4)]")
        refused_call = await executor.execute(IN_THREAD.format(size=5))
        assert re.fullmatch(
            r"ToolRunnerError: .*refused this connection.*tool_connections.*", refused_call.text or ""
        )
        await executor.execute("for s in held: s.close()")
        result = await executor.execute(IN_THREAD.format(size=5))
        assert result.text == "5"

        # approvals waiting at once are bounded by the connections: 8 threads call a tool, nobody
        # decides; at most 4 calls wait for a decision, the others are refused at once
        requests, waited = await collect(executor, PENDING, lambda request: "ignore")
        assert isinstance(waited, CodeExecutionResult) and waited.text == "refused by the limit"
        assert len(requests) <= 4
