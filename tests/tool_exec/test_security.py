"""Attacks from kernel code on the tool server; each must fail to get through.

Kernel code can reach the tool server's socket (its path is in the kernel's environment), so
it can send any request. The tool server must only start servers the application registered,
must not let kernel code approve tool calls, and must ask the application about every call.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from servers.launch import collect, eventually, nasty_params

from ipybox import (
    ApprovalRequest,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    generate_mcp_sources,
)
from ipybox.tool_exec import registry

from .conftest import Workspace

#: Kernel code defining `raw(request)`: one JSON request over the tool server's socket, one reply.
RAW_CLIENT = """
import json, os, socket

def connect():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
    return sock

def read_reply(sock):
    data = b""
    while not data.endswith(b"\\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data) if data else None

def raw(request):
    with connect() as sock:
        sock.sendall(json.dumps(request).encode() + b"\\n")
        return read_reply(sock)
"""


def replies(result: CodeExecutionResult | CodeExecutionError) -> list[dict[str, object]]:
    """The JSON lines kernel code printed."""
    assert isinstance(result, CodeExecutionResult), result
    assert result.text is not None
    return [json.loads(line) for line in result.text.splitlines()]


@pytest.fixture
async def attacker(executor: CodeExecutor) -> CodeExecutor:
    await executor.execute(RAW_CLIENT)
    return executor


@pytest.mark.timeout(60)
@pytest.mark.parametrize("server_name", ["evil", "nasty"])
async def test_unregistered_server_params_are_refused(
    attacker: CodeExecutor, tmp_path: Path, server_name: str
) -> None:
    marker = tmp_path / f"pwned-{server_name}"
    evil = {"command": "touch", "args": [str(marker)]}
    code = f"""
print(json.dumps(raw({{"op": "run", "server_name": {server_name!r}, "server_params": {evil!r},
                       "tool_name": "echo", "tool_args": {{"message": "x"}}}})))
print(json.dumps(raw({{"op": "run", "server_name": {server_name!r},
                       "server_params": {{"command": "sh", "args": ["-c", "touch {marker}"]}},
                       "tool_name": "echo", "tool_args": {{}}}})))
"""
    requests, result = await collect(attacker, code, lambda r: "accept")
    assert requests == []  # refused before anyone is asked
    for reply in replies(result):
        assert reply["ok"] is False
        assert "not registered" in str(reply["error"])
    assert not marker.exists()


@pytest.mark.timeout(60)
async def test_registered_params_under_another_name_are_refused(attacker: CodeExecutor) -> None:
    code = f"""
print(json.dumps(raw({{"op": "run", "server_name": "other", "server_params": {nasty_params()!r},
                       "tool_name": "echo", "tool_args": {{"message": "x"}}}})))
"""
    requests, result = await collect(attacker, code, lambda r: "accept")
    assert requests == []
    [reply] = replies(result)
    assert reply["ok"] is False and "not registered" in str(reply["error"])


@pytest.mark.timeout(60)
async def test_malformed_requests_are_refused(attacker: CodeExecutor) -> None:
    code = """
with connect() as sock:
    for line in [b"not json", b"[1, 2]", b'{"op": "shutdown"}', b'{"id": 0, "accepted": true}']:
        sock.sendall(line + b"\\n")
        print(json.dumps(read_reply(sock)))
"""
    requests, result = await collect(attacker, code, lambda r: "accept")
    assert requests == []
    answers = replies(result)
    assert len(answers) == 4
    assert all(answer["ok"] is False for answer in answers)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hello", [{"op": "approve", "token": "guessed-token"}, {"op": "approve"}])
async def test_kernel_cannot_become_the_approval_client(
    attacker: CodeExecutor, hello: dict[str, str]
) -> None:
    code = f"""
hijack = connect()
hijack.sendall(json.dumps({hello!r}).encode() + b"\\n")
print(json.dumps(read_reply(hijack)))
hijack.settimeout(5)
print(json.dumps({{"closed": hijack.recv(1) == b""}}))
"""
    requests, result = await collect(attacker, code, lambda r: "accept")
    assert requests == []
    refusal, closed = replies(result)
    assert refusal["ok"] is False and "token" in str(refusal["error"])
    assert closed == {"closed": True}

    # a tool call from the kernel still goes to the application, which rejects it
    code = """
from mcptools.nasty import echo
print(json.dumps({"ok": True, "result": echo.run(echo.Params(message="sneaky"))}))
"""
    requests, outcome = await collect(attacker, code, lambda r: "reject")
    assert [(r.server_name, r.tool_name, r.tool_args) for r in requests] == [
        ("nasty", "echo", {"message": "sneaky"})
    ]
    assert isinstance(outcome, CodeExecutionError)
    assert "rejected" in str(outcome)


@pytest.mark.timeout(60)
async def test_connection_open_while_a_call_awaits_approval_cannot_approve_it(
    attacker: CodeExecutor, tmp_path: Path
) -> None:
    """Kernel code opens a connection before its tool call, so it is there while the call awaits
    the application's decision; only then does it try to become the approval client and to
    accept the call. The call stays the application's to decide (here: rejected)."""
    go, tried = tmp_path / "go", tmp_path / "tried"
    code = f"""
import pathlib, threading, time
from mcptools.nasty import echo
hijack = connect()  # open, and silent until the call below awaits approval
outcome = {{}}

def hijack_the_approval():
    while not pathlib.Path({str(go)!r}).exists():
        time.sleep(0.01)
    hijack.sendall(json.dumps({{"op": "approve", "token": "guessed-token"}}).encode() + b"\\n")
    outcome["refusal"] = read_reply(hijack)
    try:  # answer the pending call (the first request an approval client would get has id 0)
        hijack.sendall(json.dumps({{"id": 0, "accepted": True}}).encode() + b"\\n")
        hijack.settimeout(5)
        outcome["after"] = "closed" if hijack.recv(1) == b"" else "open"
    except OSError as e:
        outcome["after"] = type(e).__name__
    pathlib.Path({str(tried)!r}).touch()

thread = threading.Thread(target=hijack_the_approval)
thread.start()
try:
    outcome["call"] = echo.run(echo.Params(message="sneaky"))
except Exception as e:
    outcome["call"] = str(e)
thread.join()
print(json.dumps(outcome))
"""
    requests: list[ApprovalRequest] = []
    result: CodeExecutionResult | None = None
    async for item in attacker.stream(code, timeout=60):
        if isinstance(item, ApprovalRequest):
            requests.append(item)
            go.touch()  # the call awaits approval: now the hijacker tries
            assert await eventually(tried.exists, timeout=30), "the hijack attempt did not finish"
            await item.reject()
        elif isinstance(item, CodeExecutionResult):
            result = item

    assert [(r.server_name, r.tool_name, r.tool_args) for r in requests] == [
        ("nasty", "echo", {"message": "sneaky"})
    ]
    assert result is not None
    [outcome] = replies(result)
    assert outcome["refusal"] == {"ok": False, "error": "wrong approval token"}
    assert outcome["after"] in ("closed", "ConnectionResetError", "BrokenPipeError"), outcome
    assert "rejected" in str(outcome["call"]), outcome  # the application's decision, not the hijacker's


@pytest.mark.timeout(60)
async def test_direct_call_with_registered_params_still_needs_approval(attacker: CodeExecutor) -> None:
    code = """
from mcptools.nasty import SERVER_NAME, SERVER_PARAMS
request = {"op": "run", "server_name": SERVER_NAME, "server_params": SERVER_PARAMS,
           "tool_name": "echo", "tool_args": {"message": "direct"}}
print(json.dumps(raw(request)))
print(json.dumps(raw(request)))
"""
    decisions = iter(["reject", "accept"])
    requests, result = await collect(attacker, code, lambda r: next(decisions))
    assert [(r.server_name, r.tool_name, r.tool_args) for r in requests] == [
        ("nasty", "echo", {"message": "direct"})
    ] * 2
    rejected, accepted = replies(result)
    assert rejected["ok"] is False and "rejected" in str(rejected["error"])
    assert accepted["ok"] is True
    assert isinstance(accepted["result"], dict) and accepted["result"]["text"] == "direct"


@pytest.mark.timeout(60)
async def test_editing_generated_server_params_is_refused(tmp_path: Path) -> None:
    await generate_mcp_sources("nasty", nasty_params(), tmp_path / "mcptools")
    marker = tmp_path / "pwned-by-edit"
    init = tmp_path / "mcptools" / "nasty" / "__init__.py"
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        code = f"""
import pathlib, re
init = pathlib.Path("mcptools/nasty/__init__.py")
evil = {{"command": "touch", "args": [{str(marker)!r}]}}
init.write_text(re.sub(r"SERVER_PARAMS = .*", "SERVER_PARAMS = " + repr(evil), init.read_text()))
from mcptools.nasty import echo
import mcptools.nasty as pkg
print(pkg.SERVER_PARAMS == evil)
echo.run(echo.Params(message="x"))
"""
        requests, outcome = await collect(executor, code, lambda r: "accept")
        assert requests == []
        assert isinstance(outcome, CodeExecutionError)
        assert "not registered" in str(outcome)
        assert outcome.output == "True"
        assert "touch" in init.read_text()
        assert not marker.exists()

        # extra keys (an env that injects code into the registered command) are refused too
        params = nasty_params() | {"env": {"PYTHONSTARTUP": "evil.py"}}
        code = f"""
from ipybox import ToolRunner
from mcptools.nasty import SERVER_NAME
ToolRunner(SERVER_NAME, {params!r}).run_sync("echo", {{"message": "x"}})
"""
        requests, outcome = await collect(executor, code, lambda r: "accept")
        assert requests == []
        assert isinstance(outcome, CodeExecutionError) and "not registered" in str(outcome)


@pytest.mark.timeout(60)
async def test_a_registration_removed_stops_calls_and_a_new_one_counts_at_once(
    executor: CodeExecutor, workspace: Workspace
) -> None:
    """The tool server takes a registration it found as still there for a second (reading the
    registry for every call cost latency): one removed by hand stops calls within that time; one
    added counts at the next call, as a server not found is always looked up anew."""
    call = "from mcptools.nasty import echo\nprint(echo.run(echo.Params(message='hi')))"
    assert (await executor.execute(call)).text == "hi"
    path = registry.registry_file(None)  # where the workspace fixture registers its servers
    kept = path.read_text()
    path.write_text(json.dumps({"servers": {}}))

    async def refused() -> bool:
        try:
            await executor.execute(call)
        except CodeExecutionError as e:
            assert "not registered" in str(e), e
            return True
        return False

    for _ in range(40):  # well past the second, however slowly the calls go
        if await refused():
            break
        await asyncio.sleep(0.1)
    assert await refused()
    path.write_text(kept)  # registered again (as generate_mcp_sources would): the next call runs
    assert (await executor.execute(call)).text == "hi"


@pytest.mark.timeout(60)
async def test_registered_workspace_is_what_the_server_runs(
    workspace: Workspace, attacker: CodeExecutor
) -> None:
    """Sanity check for the attacks above: the same socket and params do work when approved."""
    code = """
from mcptools.nasty import echo
print(json.dumps({"ok": True, "result": echo.run(echo.Params(message="fine"))}))
"""
    requests, result = await collect(attacker, code, lambda r: "accept")
    assert len(requests) == 1
    assert replies(result) == [{"ok": True, "result": "fine"}]
