"""The audit trail of `ipybox --sandbox`: every tool call and its approval, as any user.

With the log missing when the sandbox starts, `srt` used to make it as an empty read-only
(0444) mount point on the host, which ipybox, run as a normal user, could not append to:
root writes it anyway, so only the normal-user run (`scripts/test-as-user`) shows the bug.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from servers.launch import require_sandbox

from .conftest import EVERYTHING, open_ipybox, requires_node

pytestmark = [pytest.mark.timeout(120), requires_node]

CALL = "from mcptools.everything import echo\nprint(echo.run(echo.Params(message={!r})))"


@pytest.mark.parametrize("approval", ["ask", "auto"])
async def test_sandboxed_tool_calls_are_audited(workspace: Path, state_dir: Path, approval: str) -> None:
    """Both the approval decision (the client's user's, or `auto`) and the call are recorded,
    for a fresh workspace (no `.ipybox/`) and for a second session appending to the log."""
    require_sandbox()
    args = ["--sandbox"] + (["--approval", "auto"] if approval == "auto" else [])
    log = workspace / ".ipybox" / "audit.jsonl"
    for session in ("first", "second"):
        async with open_ipybox(workspace, state_dir, args=args) as box:
            if session == "first":
                await box.register("everything", EVERYTHING)
            assert f"Echo: {session}" in await box.output(CALL.format(session)), box.stderr()
            stderr = box.stderr()
        assert "cannot write the audit log" not in stderr, stderr
        assert log.exists(), f"no audit log; ipybox stderr:\n{stderr}"
        entries = [json.loads(line) for line in log.read_text().splitlines()]
        calls = [e for e in entries if e.get("tool") == "echo" and "event" not in e]
        approvals = [e for e in entries if e.get("event") == "approval" and e["tool"] == "echo"]
        assert [c["args"]["message"] for c in calls] == ["first", "second"][: len(calls)], entries
        assert calls[-1]["args"] == {"message": session}, entries
        assert calls[-1]["server"] == "everything" and calls[-1]["outcome"] == "ok", entries
        if approval == "ask":  # the client's user accepted (`accept_all`)
            assert calls[-1]["decision"] == "accepted", entries
            assert [a["decision"] for a in approvals] == ["accepted"] * len(calls), entries
        else:  # run without asking: the call's record says so
            assert calls[-1]["decision"] == "auto", entries
    assert len(calls) == 2, entries
    assert stat.S_IMODE(log.stat().st_mode) & 0o200, "the log stays writable by its owner"
