"""Kernel code that calls tools as no client would: on raw connections, or from threads.

A call runs in its connection's task; the connection's end while it runs (a hang-up) cancels it.
Kernel code may pipeline requests, hang up mid-call, send lines too large or nested too deep:
each gets an answer (or its call cancelled), and every byte of `tool_buffer` those requests held
is given back, so a kernel cannot shrink its own budget until its tool calls are refused. A call
that ends after the cell that made it is in that cell's record, never missing nor in another's.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from internals import tool_server_buffered

from ipybox import ApprovalRequest, CodeExecutor, ResourceLimits
from ipybox.notebook.record import SessionRecord
from ipybox.tool_exec.audit import MAX_ITEMS

from .conftest import Workspace

pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20

#: Kernel code: raw connections, requests as the client writes them, and their replies.
RAW = """
import json, os, socket
from mcptools.nasty import SERVER_NAME, SERVER_PARAMS

def connect():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
    return sock

def request(tool, params=SERVER_PARAMS, **args):
    return json.dumps({"op": "run", "server_name": SERVER_NAME, "server_params": params,
                       "tool_name": tool, "tool_args": args}).encode() + b"\\n"

def replies(sock, count=1):
    data = b""
    while data.count(b"\\n") < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines()]

def exchange(data, count=1):
    with connect() as sock:
        sock.sendall(data)
        return replies(sock, count)

def exchange_then_shut(data, count):
    with connect() as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        return replies(sock, count)

def exchange_split():
    import time
    big = request("echo", message="y" * 200_000)
    with connect() as sock:
        sock.sendall(request("slow", seconds=0.3) + big[:100_000])
        time.sleep(1.5)
        sock.sendall(big[100_000:])
        return replies(sock, 2)

def deep(n, kind=list):
    value = "x"
    for _ in range(n):
        value = [value] if kind is list else {"k": value}
    return value
"""
#: A request, and a large one sent in two halves, the second after the first call ended.
SPLIT = "exchange_split()"
#: Callers that hang up mid-call: at once, after half a request, or shutting their side only.
HANG_UP = """
import time
for tail, end in [(b"", "close"), (b'{"op": "run"', "close"), (b"", "shutdown"), (b'{"op"', "shutdown")]:
    sock = connect()
    sock.sendall(request("slow", seconds=30) + tail)
    sock.shutdown(socket.SHUT_WR) if end == "shutdown" else sock.close()
time.sleep(2)  # the calls are approved (automatically) only while the cell that makes them runs
"""
#: A cell whose thread's tool call (approved while the cell runs) ends after the cell, which goes on
#: until the test has approved the call and made the file `go`.
LEFT_RUNNING = """
import os, threading, time
from mcptools.nasty import slow
late = []
thread = threading.Thread(target=lambda: late.append(slow.run(slow.Params(seconds=1))))
thread.start()
while not os.path.exists(GO):
    time.sleep(0.01)
"""
SLOW = "from mcptools.nasty import slow\nslow.run(slow.Params(seconds=30))"
ECHO = "from mcptools.nasty import echo\nprint(echo.run(echo.Params(message='after')))"


def audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def run(executor: CodeExecutor, code: str) -> Any:
    """The value kernel `code` prints as JSON."""
    return json.loads((await executor.execute(f"print(json.dumps({code}))")).text or "null")


async def test_hostile_callers_are_answered_recorded_and_give_back_their_budget(
    workspace: Workspace, tmp_path: Path
) -> None:
    workspace.register()
    log = tmp_path / "audit.jsonl"
    limits = ResourceLimits(tool_buffer=4 * MIB)
    options: dict[str, Any] = {"spare_kernel": False, "audit_log": log, "limits": limits}
    async with CodeExecutor(working_dir=workspace.root, **options) as executor:
        await executor.execute(RAW)

        # nested too deep for the host's recursive walks (audit record, notebook, approval, MCP
        # client): refused on the wire with a reason, in the args, the params, as objects, and as
        # a line json.loads itself gives up on (1 MiB of it: three such lines would have used up
        # the budget had they kept it)
        variants = [
            "request('echo', message=deep(600))",
            "request('echo', message=deep(150, dict))",
            "request('echo', params={**SERVER_PARAMS, 'x': deep(300)})",
            "b' ' * (1 << 20) + b'[' * 5000 + b'\\n'",
            "b' ' * (1 << 20) + b'[' * 5000 + b'\\n'",
            "b' ' * (1 << 20) + b'[' * 5000 + b'\\n'",
        ]
        for variant in variants:
            answer = await run(executor, f"exchange({variant})")
            assert answer and "nest more than 100 levels deep" in answer[0]["error"], (variant, answer)
        within = await run(executor, "exchange(request('echo', message=deep(97)))")
        assert within[0]["ok"] is True, within
        assert [(e["tool"], e["outcome"]) for e in audit(log)] == [("echo", "ok")]  # the refused: no call

        # wide: many small items, as a list and as a dict (its keys carry a bracket and a quote,
        # which do not nest). The call runs with all of them; its audit record and notebook entry
        # keep about MAX_ITEMS, then say how many they left out (a record stays bounded, and so
        # does the host's walk of it)
        wide = "request('class', items=[1] * 30_000, table={f'[\"{i}': i for i in range(5_000)})"
        answer = await run(executor, f"exchange({wide})")
        assert answer[0]["ok"] is True and len(answer[0]["result"]["text"]) > 150_000, str(answer)[:300]
        [noted] = executor.notebook().cells[-1].metadata["ipybox"]["tool_calls"]
        for kept in (audit(log)[-1]["args"], noted["arguments"]):
            assert MAX_ITEMS - 20 < len(kept["items"]) <= MAX_ITEMS + 1
            assert kept["items"][-1] == f"… {30_001 - len(kept['items'])} more items not kept"
            assert kept["table"] == {"…": "5000 more entries not kept"}  # the list took the budget
        # a key is cut as a string is: a record stays bounded whatever the keys' length
        await run(executor, "exchange(request('class', items=[1], table={'K' * 500_000: 1}))")
        [noted] = executor.notebook().cells[-1].metadata["ipybox"]["tool_calls"]
        for kept in (audit(log)[-1]["args"], noted["arguments"]):
            assert [len(key) for key in kept["table"]] == [2001], str(kept)[:200]
        # small items cost the host far more parsed than as text: counted so before they are parsed
        # (800 KB of `{}, ` would take 14 MiB; counted 54), and refused with what they would take
        answer = await run(executor, "exchange(request('class', items=[{}] * 200_000))")
        assert re.search(r"\(parsed, its \d+ bytes would take about 54.2 MiB", answer[0]["error"]), answer
        assert tool_server_buffered(executor) == 0

        # numbers json.loads will not read (over 4300 digits: a ValueError, not a JSONDecodeError)
        # once ended the connection without a word: refused as malformed, the budget given back
        for number in ("1" * 5000, "-" + "9" * 4400, "[0, " + "1" * 4301 + "]"):
            line = '{"op": "run", "tool_name": "echo", "tool_args": {"n": ' + number + "}}"
            answer = await run(executor, f"exchange({line!r}.encode() + b'\\n')")
            assert answer == [{"ok": False, "error": "malformed request"}], (number[:10], answer)
        assert tool_server_buffered(executor) == 0

        # lone surrogates (JSON escapes of half a character: no UTF-8) in a call's names, keys and
        # values are read as U+FFFD: the notebook (and an MCP reply or approval) can carry them
        line = (
            '{"op": "run", "server_name": "s\\udc00", "server_params": {}, "tool_name": "t\\ud800", '
            '"tool_args": {"k\\udfff": ["v\\udbff"]}}\n'
        )
        answer = await run(executor, f"exchange({line!r}.encode())")
        assert answer and "is not registered" in answer[0]["error"], answer
        executor.save_notebook(tmp_path / "session.ipynb")
        [saved] = SessionRecord.load(tmp_path / "session.ipynb").entries[-1].tool_calls
        assert (saved.server, saved.tool, saved.arguments) == ("s\ufffd", "t\ufffd", {"k\ufffd": ["v\ufffd"]})

        # pipelined: two requests in one send, answered in order
        both = await run(executor, "exchange(request('echo', message='a') + request('echo', message='b'), 2)")
        assert [r["result"]["text"] for r in both] == ["a", "b"]
        # sent together, then the stream shut for writing: its caller still waits for the replies,
        # so this end of the stream, unlike a hang-up, cancels neither call
        shut = "exchange_then_shut(request('slow', seconds=0.5) + request('echo', message='b'), 2)"
        both = await run(executor, shut)
        assert [r["result"]["text"] for r in both] == ["done", "b"], both

        # a line too large for the budget, sent while a call runs: the call still ends and is
        # answered, then the line is refused; an approval hello mid-call gets no say over it
        answers = await run(executor, "exchange(request('slow', seconds=0.5) + b'x' * (5 << 20) + b'\\n', 2)")
        assert answers[0] == {
            "ok": True,
            "result": {"text": "done", "structured": None, "content": [{"type": "text", "text": "done"}]},
        }, answers
        assert "refused this request of 5242881 bytes" in answers[1]["error"]
        # a line over the reader's 64 KiB limit, half sent while a call runs and the rest after it:
        # the read taken beside the call goes on to its end rather than losing the half it has
        split = await run(executor, SPLIT)
        assert split[0]["ok"] is True and split[1]["result"]["text"] == "y" * 200_000, str(split)[:300]
        hello = json.dumps({"op": "approve", "token": "guessed"})
        answers = await run(executor, f"exchange(request('slow', seconds=0.5) + b'{hello}\\n', 2)")
        assert answers[0]["ok"] is True and answers[1] == {"ok": False, "error": "wrong approval token"}

        # hang-ups mid-call cancel the call, and give back what the read beside it held
        await executor.execute(HANG_UP)
        for _ in range(400):  # the server sees the hang-ups after the cell: until it has cancelled all 4
            if len(cancelled := [e for e in audit(log) if e["outcome"] == "cancelled"]) == 4:
                break
            await asyncio.sleep(0.05)
        assert len(cancelled) == 4 and tool_server_buffered(executor) == 0

        assert (await executor.execute(ECHO)).text == "after"

        # a thread's call ends after its cell, while the next one (which waits for it) runs: it
        # was in neither cell's record, or in the next one's, whose code never made it
        go = tmp_path / "go"
        await executor.execute(f"GO = {str(go)!r}")
        async for item in executor.stream(LEFT_RUNNING):
            if isinstance(item, ApprovalRequest):
                await item.accept()
                go.touch()
        assert (await executor.execute("thread.join()\nprint(late)")).text == "['done']"
        cells = executor.notebook().cells
        calls = {c.source: [t["tool"] for t in c.metadata["ipybox"]["tool_calls"]] for c in cells}
        assert (calls[LEFT_RUNNING], calls["thread.join()\nprint(late)"]) == (["slow"], [])

        # a cell interrupted mid-call (its timeout): the call was made, then cancelled; the cell's
        # record has it, as the audit log does
        with pytest.raises(TimeoutError):
            await executor.execute(SLOW, timeout=3)
        [cell] = [c for c in executor.notebook().cells if c.source == SLOW]
        [call] = cell.metadata["ipybox"]["tool_calls"]
        assert (call["tool"], call["decision"]) == ("slow", "auto") and "cancelled" in call["error"], call


#: Kernel code: a thread sends 40 requests with 1 MB replies on one connection, which nobody
#: reads, for 3 s (while the cell runs, its calls are approved automatically).
UNREAD_REPLIES = """
import threading, time
sock = connect()
big = request('echo', message='y' * 1_000_000)

def flood():
    try:
        for _ in range(40):
            sock.sendall(big)
    except OSError:
        pass

threading.Thread(target=flood, daemon=True).start()
time.sleep(3)
sock.shutdown(socket.SHUT_RDWR)
sock.close()
"""


async def test_a_caller_that_never_reads_its_replies_gets_no_more_calls(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Replies wait in the host's memory until the kernel reads them, which `tool_buffer` does not
    count: a connection reads no further request until its last reply is taken, so a kernel that
    sends and never reads gets a call or two made, not 40 (40 MB held on the host)."""
    workspace.register()
    log = tmp_path / "audit.jsonl"
    options: dict[str, Any] = {"spare_kernel": False, "audit_log": log}
    async with CodeExecutor(working_dir=workspace.root, **options) as executor:
        await executor.execute(RAW)
        await executor.execute(UNREAD_REPLIES)
        for _ in range(100):  # the hang-up reaches the server after the cell: until the budget is back
            if tool_server_buffered(executor) == 0:
                break
            await asyncio.sleep(0.05)
        made = [e for e in audit(log) if e["tool"] == "echo"]
        assert 1 <= len(made) <= 3, [(e["outcome"], e.get("error")) for e in made]
        assert tool_server_buffered(executor) == 0
        assert (await executor.execute(ECHO)).text == "after"
