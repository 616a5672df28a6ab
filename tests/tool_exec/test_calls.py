"""The tool server's `calls` seam and the events it reports, with the real notes MCP server."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ipybox.tool_exec.approval.client import ApprovalRequest
from ipybox.tool_exec.approval.server import Decision
from ipybox.tool_exec.calls import ToolCallEvent
from ipybox.tool_exec.connections import ToolCallError
from ipybox.tool_exec.server import ToolServer

NOTES_SERVER = Path(__file__).parents[1] / "servers" / "notes_server.py"


def _params(notes: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}


class _Answered:
    """A `ToolCalls` answering every call itself, as a resume does: it never reaches a server."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def decide(
        self, server_name: str, tool_name: str, tool_args: dict[str, Any], *, kind: str
    ) -> Decision:
        accepted = tool_args.get("text") != "no"
        return Decision(accepted, "accepted" if accepted else "rejected", "the test", "said no")

    async def call(
        self,
        server_name: str,
        server_params: Mapping[str, Any],
        tool_name: str,
        tool_args: dict[str, Any],
        env: Mapping[str, str],
    ) -> dict[str, Any]:
        self.calls.append((server_name, tool_name, tool_args))
        return {"text": "answered", "structured": None, "content": []}


async def test_each_settled_call_is_reported_and_the_seam_decides_and_makes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes.txt"
    monkeypatch.setenv("NOTES_SECRET", "s3cret-value")
    params = _params(notes) | {"env": {"NOTES_FILE": str(notes), "TOKEN": "${NOTES_SECRET}"}}
    server = ToolServer(port=None, approval_required=True, servers={"notes": params}, workspace=tmp_path)
    events: list[ToolCallEvent] = []
    server.observers.append(events.append)

    async def decide(request: ApprovalRequest) -> None:
        await (request.accept(by="alice") if request.tool_args["text"] == "yes" else request.reject(by="bob"))

    server.approval.connect(decide)
    try:
        assert (await server.run("notes", params, "add_note", {"text": "yes"}))["text"] == "added"
        with pytest.raises(ToolCallError, match="rejected by the application"):
            await server.run("notes", params, "add_note", {"text": "no"})
        with pytest.raises(ToolCallError, match="not registered"):
            await server.run("other", params, "add_note", {"text": "yes"})

        answered = _Answered()
        live, server.calls = server.calls, answered
        assert (await server.run("notes", params, "add_note", {"text": "yes"}))["text"] == "answered"
        with pytest.raises(ToolCallError, match="said no"):
            await server.run("notes", params, "add_note", {"text": "no"})
        server.calls = live
    finally:
        await server.stop()

    assert notes.read_text() == "yes\n"  # only the live, accepted call reached the server
    assert answered.calls == [("notes", "add_note", {"text": "yes"})]
    summary = [
        (e.server_name, e.decision, e.decided_by, (e.result or {}).get("text"), e.error) for e in events
    ]
    assert summary == [
        ("notes", "accepted", "alice", "added", None),
        ("notes", "rejected", "bob", None, "Tool call notes.add_note was rejected by the application."),
        ("other", "refused", None, None, summary[2][4]),
        ("notes", "accepted", "the test", "answered", None),
        ("notes", "rejected", "the test", None, "Tool call notes.add_note was said no."),
    ]
    assert "not registered" in (events[2].error or "")
    assert all(e.secrets == ("s3cret-value",) for e in events if e.server_name == "notes")
