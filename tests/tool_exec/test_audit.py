"""The audit trail: every tool call, its approval decision, duration and outcome, no secrets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from servers.launch import everything_params

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutor, generate_mcp_sources

from .conftest import Workspace, requires_node

pytestmark = pytest.mark.timeout(90)

SECRET = "s3cret-value-that-must-not-leak"


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_every_decision_and_outcome_is_recorded(workspace: Workspace, tmp_path: Path) -> None:
    workspace.register()
    log = tmp_path / "audit.jsonl"
    call = "from mcptools.nasty import echo\nprint(echo.run(echo.Params(message={!r})))"
    async with CodeExecutor(working_dir=workspace.root, audit_log=log, approval_timeout=1) as executor:
        await executor.execute(call.format("auto"))
        for answer in ("accept", "reject", "ignore"):
            try:
                async for item in executor.stream(call.format(answer)):
                    if isinstance(item, ApprovalRequest) and answer != "ignore":
                        await (item.accept() if answer == "accept" else item.reject())
            except CodeExecutionError:
                assert answer != "accept"
        with pytest.raises(CodeExecutionError):
            await executor.execute("from mcptools.nasty import fail\nfail.run(fail.Params())")

    entries = records(log)
    assert [(e["tool"], e["decision"], e["outcome"]) for e in entries] == [
        ("echo", "auto", "ok"),
        ("echo", "accepted", "ok"),
        ("echo", "rejected", "error"),
        ("echo", "timed_out", "error"),
        ("fail", "auto", "error"),
    ]
    assert entries[1]["args"] == {"message": "accept"}
    assert all(e["server"] == "nasty" for e in entries)
    for e in entries:
        assert type(e["duration_ms"]) in (int, float) and e["duration_ms"] >= 0, e
    timed_out = entries[3]  # the unanswered call: recorded with how long it waited
    assert timed_out["decision"] == "timed_out" and timed_out["duration_ms"] > 0, timed_out
    assert "boom: something went wrong" in entries[4]["error"]


async def test_refused_servers_are_recorded(workspace: Workspace, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"  # nothing registered in this test's registry
    code = (
        "from ipybox.tool_exec.client import ToolRunner\n"
        "ToolRunner('nasty', {'command': 'touch', 'args': ['/tmp/x']}).run_sync('echo', {})"
    )
    async with CodeExecutor(working_dir=workspace.root, audit_log=log) as executor:
        with pytest.raises(CodeExecutionError, match="not registered"):
            await executor.execute(code)
    [entry] = records(log)
    assert (entry["decision"], entry["outcome"]) == ("refused", "error")


@requires_node
async def test_secrets_from_placeholders_never_reach_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUDIT_SECRET", SECRET)
    params = everything_params() | {"env": {"TOKEN": "${AUDIT_SECRET}"}}
    await generate_mcp_sources("everything", params, tmp_path / "mcptools")
    log = tmp_path / "audit.jsonl"
    code = (
        "from mcptools.everything import get_env, echo\n"
        "env = get_env.run(get_env.Params())\n"
        "token = [line for line in env.splitlines() if 'TOKEN' in line]\n"
        "print(echo.run(echo.Params(message=env)))"  # the secret travels in a tool argument
    )
    async with CodeExecutor(working_dir=tmp_path, audit_log=log) as executor:
        result = await executor.execute(code)
    assert SECRET in (result.text or "")  # the kernel did see it through the tool...
    text = log.read_text()
    assert SECRET not in text  # ...but the audit trail does not
    assert "***" in text


async def test_late_approval_of_an_abandoned_call_runs_nothing(workspace: Workspace, tmp_path: Path) -> None:
    """A cell cancelled while its tool call awaits approval takes the call with it."""
    workspace.register()
    log = tmp_path / "audit.jsonl"
    code = "from mcptools.nasty import echo\nprint(echo.run(echo.Params(message='late')))"
    pending: list[ApprovalRequest] = []
    async with CodeExecutor(working_dir=workspace.root, audit_log=log) as executor:
        async for item in executor.stream(code, timeout=1):
            if isinstance(item, ApprovalRequest):
                pending.append(item)  # and never answered: approval waits do not time the cell out
                await executor.cancel()
        await asyncio.sleep(0.5)
        await pending[0].accept()  # too late: the call was given up
        after = await executor.execute("print('next')")
    assert after.text == "next"
    [entry] = records(log)
    assert entry["tool"] == "echo" and entry["outcome"] in ("cancelled", "error"), entry
    assert entry["decision"] != "accepted"
