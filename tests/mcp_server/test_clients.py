"""Today's clients: the real `mcp` 2.x `Client` in both protocol eras (2026-07-28 and the handshake)
over streamable HTTP with bearer tokens: kernel state, named kernels, principals kept apart, and
tool calls from code approved (or not) by the user through elicitation."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, InputRequiredResult
from servers.launch import REPO

from .conftest import running_http_ipybox, text_of

pytestmark = pytest.mark.timeout(90)

NOTES_SERVER = REPO / "tests" / "servers" / "notes_server.py"
TOKENS = {"alice": "alice-secret-token-0123456789", "bob": "bob-secret-token-9876543210"}
MODES = ["auto", "legacy"]  # 2026-07-28, and the initialize handshake


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Team:
    """One ipybox over HTTP with a token file of two users (unsandboxed: `--shared-trust`)."""

    url: str
    workspace: Path
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    base = tmp_path_factory.mktemp("team")
    workspace, state = base / "workspace", base / "state"
    workspace.mkdir()
    tokens = base / "tokens"
    tokens.write_text(f"alice {TOKENS['alice']}\n# a hashed one\nbob sha256:{_sha256(TOKENS['bob'])}\n")
    args = ["--auth-tokens", str(tokens), "--shared-trust"]
    with running_http_ipybox(workspace, state, base / "log", args=args) as (process, url):
        yield Team(url, workspace, process)


@dataclass
class User:
    """Answers elicitations as told, and remembers what it was asked."""

    answers: list[str] = field(default_factory=list)  # actions, in order; then "accept"
    asked: list[str] = field(default_factory=list)

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        action = self.answers.pop(0) if self.answers else "accept"
        return ElicitResult(action=action, content={} if action == "accept" else None)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None, mode: str, user: User | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, elicitation_callback=user) as client:  # type: ignore[arg-type]
            yield client


async def cell(client: Client, code: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool("execute_ipython_cell", {"code": code, **arguments})


async def output(client: Client, code: str, **arguments: Any) -> str:
    result = await cell(client, code, **arguments)
    assert not result.is_error, text_of(result)
    return text_of(result)


@pytest.mark.parametrize("mode", MODES)
async def test_state_named_kernels_and_users_kept_apart(team: Team, mode: str) -> None:
    user = User()
    async with connect(team.url, TOKENS["alice"], mode, user) as alice:
        await output(alice, f"x = 41  # {mode}")
        assert await output(alice, "print(x + 1)") == "42"  # the same kernel on the next call
        await output(alice, "y = 'other'", kernel="scratch")
        missing = await cell(alice, "print(x)", kernel="scratch")
        assert missing.is_error and "NameError" in text_of(missing)
        assert await output(alice, "print(y)", kernel="scratch") == "other"
        bad = await cell(alice, "1", kernel="../bob")
        assert bad.is_error and "kernel must be a short name" in text_of(bad)
        alice_dir = await output(alice, "import os\nopen('mine.txt', 'w').write('a')\nprint(os.getcwd())")
    async with connect(team.url, TOKENS["bob"], mode, user) as bob:
        for kernel in ("default", "scratch"):
            result = await cell(bob, "print(x, y)", kernel=kernel)
            assert result.is_error and "NameError" in text_of(result), kernel
        bob_dir = await output(bob, "import os\nprint(os.getcwd(), os.path.exists('mine.txt'))")
    assert bob_dir.endswith("False") and not bob_dir.startswith(alice_dir)
    assert Path(alice_dir) == team.workspace / "users" / "alice"


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-token-0000000000",
        f"Bearer {TOKENS['alice']}x",
        f"Bearer {TOKENS['alice'][:-1]}",
        f"Bearer {_sha256(TOKENS['bob'])}",  # the hash in the file is not itself a token
        f"Basic {TOKENS['alice']}",
        TOKENS["alice"],
    ],
)
async def test_requests_without_a_valid_token_are_refused(team: Team, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient() as http:
        response = await http.post(
            team.url, json=body, headers=headers | {"Accept": "application/json, text/event-stream"}
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_reset_kernels_stay_with_their_user(team: Team) -> None:
    """The server keeps one warm spare for all users: whoever holds it, a reset gives each user a
    kernel in their own workspace, never a spare started for the other."""
    where = "import os\nprint(os.getcwd(), 'x' in dir())"
    async with (
        connect(team.url, TOKENS["alice"], "auto") as alice,
        connect(team.url, TOKENS["bob"], "auto") as bob,
    ):
        homes = {}
        for name, client in (("alice", alice), ("bob", bob)):
            homes[name] = await output(client, f"x = 1\n{where}", kernel="fresh")
            for _ in range(2):  # the spare's owner swaps it in; the other starts a kernel
                reset = await client.call_tool("reset", {"kernel": "fresh"})
                assert not reset.is_error, text_of(reset)
                assert await output(client, where, kernel="fresh") == homes[name].replace("True", "False")
    assert homes["alice"] != homes["bob"] and homes["alice"].endswith("users/alice True"), homes


@pytest.mark.parametrize("mode", MODES)
async def test_user_approves_tool_calls_from_code(team: Team, mode: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    user = User(answers=["decline", "accept", "cancel"])
    async with connect(team.url, TOKENS["alice"], mode, user) as alice:
        registered = await alice.call_tool(
            "register_mcp_server", {"server_name": "notes", "server_params": params}
        )
        assert not registered.is_error, text_of(registered)
        code = (
            "from mcptools.notes import add_note, count_notes\n"
            "from ipybox.tool_exec.client import ApprovalRejectedError\n"
            "for text in ['one', 'two', 'three']:\n"
            "    try:\n"
            "        add_note.run(add_note.Params(text=text))\n"
            "    except ApprovalRejectedError as e:\n"
            "        print('refused', text, '|', e)\n"
            "print('count', count_notes.run(count_notes.Params()).result)\n"
        )
        out = await output(alice, code)
    lines = out.splitlines()
    assert [line.split(" |")[0] for line in lines] == ["refused one", "refused three", "count 1"]
    # the kernel's error names the user, not the application, and tells decline from cancel
    assert lines[0].endswith("was declined by the user when asked."), lines
    assert lines[1].endswith("was dismissed by the user without an answer (cancelled), so it did not run."), (
        lines
    )
    assert notes.read_text() == "two\n"  # only the accepted call ran
    assert len(user.asked) == 3  # count_notes is read-only: not asked
    assert all("add_note" in message and "notes" in message for message in user.asked)
    assert "'one'" in user.asked[0] or '"one"' in user.asked[0]
    audit = [
        json.loads(line) for line in (team.workspace / "users" / "alice" / ".ipybox" / "audit.jsonl").open()
    ]
    decided = [e for e in audit if e.get("event") == "approval"][-4:]
    assert [(e["tool"], e["decision"]) for e in decided] == [
        ("add_note", "rejected"),
        ("add_note", "accepted"),
        ("add_note", "rejected"),
        ("count_notes", "accepted"),
    ]
    calls = [e for e in audit if e.get("tool") == "add_note" and "event" not in e][-3:]
    assert [(e["args"]["text"], e["decision"]) for e in calls] == [
        ("one", "rejected"),
        ("two", "accepted"),
        ("three", "rejected"),
    ]
    assert decided[0]["by"] == "user (alice) through the client"
    assert "read-only" in decided[3]["by"]


async def test_client_without_elicitation_runs_calls_and_is_told(team: Team, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    async with connect(team.url, TOKENS["bob"], "auto") as bob:
        plain = await output(bob, "print('no tool call')")  # nothing ran unasked: nothing to tell
        registered = await bob.call_tool(
            "register_mcp_server", {"server_name": "mute", "server_params": params}
        )
        assert not registered.is_error, text_of(registered)
        first = await output(
            bob, "from mcptools.mute import add_note\nprint(add_note.run(add_note.Params(text='n')).result)"
        )
        second = await output(bob, "print(add_note.run(add_note.Params(text='m')).result)")
    assert plain == "no tool call"
    assert "no elicitation support" in first and first.endswith("added")
    assert second == "added"  # said once
    assert notes.read_text() == "n\nm\n"
    audit = (team.workspace / "users" / "bob" / ".ipybox" / "audit.jsonl").read_text()
    assert "no elicitation support" in audit


async def test_unanswered_approval_gives_way_to_the_next_cell(team: Team, tmp_path: Path) -> None:
    """A 2026-07-28 client that never answers leaves the cell paused; its next cell on that kernel
    interrupts the paused one instead of waiting behind it, and the unanswered call never runs."""
    notes = tmp_path / "notes.txt"
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    async with connect(team.url, TOKENS["alice"], "auto", User()) as alice:
        registered = await alice.call_tool(
            "register_mcp_server", {"server_name": "later", "server_params": params}
        )
        assert not registered.is_error, text_of(registered)
        code = "from mcptools.later import add_note\nadd_note.run(add_note.Params(text='never'))"
        first = await alice.session.call_tool(
            "execute_ipython_cell", {"code": code, "kernel": "paused"}, allow_input_required=True
        )
        assert isinstance(first, InputRequiredResult) and len(first.input_requests) == 1
        assert await output(alice, "print('next')", kernel="paused") == "next"
    assert not notes.exists()
