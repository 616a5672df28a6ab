"""Several tool calls a cell makes at once, put to the user with `--approval ask`: on 2026-07-28 in
ONE input-required round (the kernel paused meanwhile, the wait not counted against the cell's
timeout), on the handshake era as one elicitation each; only the accepted calls run."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp.types import CallToolResult, ElicitRequest, ElicitRequestParams, ElicitResult, InputRequiredResult

from .conftest import running_http_ipybox, text_of
from .test_clients import NOTES_SERVER, connect, output

pytestmark = pytest.mark.timeout(90)

#: Three add_note calls started together (a barrier lines the threads up); each prints its fate.
CONCURRENT_CALLS = """\
import threading
from concurrent.futures import ThreadPoolExecutor
from mcptools.notes import add_note
from ipybox.tool_exec.client import ApprovalRejectedError
together = threading.Barrier(3)
def add(text):
    together.wait()
    try:
        return f"{text} {add_note.run(add_note.Params(text=text)).result}"
    except ApprovalRejectedError as e:
        return f"{text} refused: {e}"
with ThreadPoolExecutor(3) as pool:
    print("\\n".join(pool.map(add, TEXTS)))
"""
#: A read-only call (run unasked) that starts the kernel and its connection to the notes server.
WARM_UP = "from mcptools.notes import count_notes\nprint(count_notes.run(count_notes.Params()).result)"
_ASKED_TEXT = re.compile(r'text="([^"]+)"')


@dataclass
class Server:
    url: str
    notes: Path

    def added(self) -> list[str]:
        return sorted(self.notes.read_text().splitlines()) if self.notes.exists() else []


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """ipybox over HTTP on loopback (one principal, `--no-auth`), asking the user about every writing
    tool call, with the notes server registered."""
    base = tmp_path_factory.mktemp("rounds")
    (base / "ws").mkdir()
    notes = base / "notes.txt"
    args = ["--approval", "ask", "--no-auth"]
    with running_http_ipybox(base / "ws", base / "state", base / "log", args=args) as (_, url):
        asyncio.run(_register_notes(url, notes))
        yield Server(url, notes)


async def _register_notes(url: str, notes: Path) -> None:
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    async with connect(url, None, "auto") as client:
        registered = await client.call_tool(
            "register_mcp_server", {"server_name": "notes", "server_params": params}
        )
        assert not registered.is_error, text_of(registered)


def _answer(accept: bool) -> ElicitResult:
    return ElicitResult(action="accept", content={}) if accept else ElicitResult(action="decline")


async def _unused_user(context: Any, params: ElicitRequestParams) -> ElicitResult:
    """Declares elicitation support; the test answers the round itself."""
    raise AssertionError("the test drives the input-required rounds itself")


def _cell(texts: list[str]) -> str:
    return f"TEXTS = {texts!r}\n{CONCURRENT_CALLS}"


def _asked_text(request: Any) -> str:
    """The note text a question is about (the arguments are shown as JSON)."""
    assert isinstance(request, ElicitRequest), request
    message = request.params.message
    assert "notes.add_note" in message, message
    found = _ASKED_TEXT.search(message)
    assert found, message
    return found.group(1)


async def test_concurrent_calls_are_asked_in_one_round(server: Server) -> None:
    texts = ["round-a", "round-b", "round-c"]
    accept = {"round-a", "round-c"}
    async with connect(server.url, None, "auto", _unused_user) as client:  # type: ignore[arg-type]
        await output(client, WARM_UP, kernel="rounds")
        first = await client.session.call_tool(
            "execute_ipython_cell",
            {"code": _cell(texts), "kernel": "rounds", "timeout": 2},
            allow_input_required=True,
        )
        assert isinstance(first, InputRequiredResult), first
        asked = {key: _asked_text(request) for key, request in first.input_requests.items()}
        assert sorted(asked.values()) == texts  # all three calls in this one round
        assert server.added() == []  # paused: nothing ran before the answers

        await asyncio.sleep(3)  # the user takes longer than the cell's 2 s timeout to answer
        responses = {key: _answer(text in accept) for key, text in asked.items()}
        final = await client.session.call_tool(
            "execute_ipython_cell",
            {"code": _cell(texts), "kernel": "rounds", "timeout": 2},
            input_responses=responses,
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(final, CallToolResult) and not final.is_error, final
    assert text_of(final).splitlines() == [
        "round-a added",
        "round-b refused: Tool call notes.add_note was declined by the user when asked.",
        "round-c added",
    ]
    assert server.added() == ["round-a", "round-c"]  # exactly the accepted calls ran


async def test_client_answers_every_request_of_the_round(server: Server) -> None:
    """The SDK's `Client` drives the rounds itself, calling the elicitation callback per request."""
    texts = ["driven-a", "driven-b", "driven-c"]
    rounds: list[set[str]] = []
    arrived = asyncio.Event()
    waiting: set[str] = set()

    async def user(context: Any, params: ElicitRequestParams) -> ElicitResult:
        text = _asked_text(ElicitRequest(params=params))
        waiting.add(text)
        if len(waiting) == len(texts):  # the round's last question: the user sees them all at once
            rounds.append(set(waiting))
            arrived.set()
        await asyncio.wait_for(arrived.wait(), 30)  # a question held back for a later round fails here
        return _answer(text != "driven-b")

    async with connect(server.url, None, "auto", user) as client:  # type: ignore[arg-type]
        out = await output(client, _cell(texts), kernel="driven")
    assert rounds == [set(texts)]
    refused = "driven-b refused: Tool call notes.add_note was declined by the user when asked."
    assert out.splitlines()[1] == refused
    assert [line for line in server.added() if line.startswith("driven")] == ["driven-a", "driven-c"]


async def test_handshake_era_asks_each_call(server: Server) -> None:
    texts = ["legacy-a", "legacy-b", "legacy-c"]
    asked: list[str] = []

    async def user(context: Any, params: ElicitRequestParams) -> ElicitResult:
        text = _asked_text(ElicitRequest(params=params))
        asked.append(text)
        if len(asked) == 1:
            await asyncio.sleep(3)  # the first answer takes longer than the cell's 2 s timeout
        return _answer(text != "legacy-b")

    async with connect(server.url, None, "legacy", user) as client:  # type: ignore[arg-type]
        await output(client, WARM_UP, kernel="legacy")
        out = await output(client, _cell(texts), kernel="legacy", timeout=2)
    assert sorted(asked) == texts  # each call asked once
    assert out.splitlines() == [
        "legacy-a added",
        "legacy-b refused: Tool call notes.add_note was declined by the user when asked.",
        "legacy-c added",
    ]
    assert [line for line in server.added() if line.startswith("legacy")] == ["legacy-a", "legacy-c"]
