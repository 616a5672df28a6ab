"""The stdio front of the plugins (ipybox/cli/front.py): it answers the handshake from recorded
answers while ipybox starts, forwards everything else, and reports a server that died."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.client import Client
from mcp.client.stdio import stdio_client
from mcp.types import ElicitRequestParams, ElicitResult
from servers.launch import REPO, SANDBOX_PATH, require_sandbox

from ipybox.cli import front

IPYBOX = Path(sys.executable).parent / "ipybox"
FRONT = [sys.executable, front.__file__, "--"]  # by path, as the plugins run it
TOOLS = {"register_mcp_server", "execute_ipython_cell", "install_package", "reset"}
LATEST = front.HANDSHAKE[-1]
MODES = ["auto", "legacy"]  # the real client in the 2026-07-28 era, and in the handshake era
NOTES_SERVER = REPO / "tests" / "servers" / "notes_server.py"

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("options", [[], ["--sandbox"]], ids=["default", "sandbox"])
def test_recorded_answers_are_what_the_server_answers(
    options: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answers the front gives in the server's place are the live server's, for the options
    the plugins start it with."""
    if options:
        require_sandbox()
        monkeypatch.setenv("PATH", SANDBOX_PATH)
    command = [str(IPYBOX), "--workspace", str(tmp_path), *options]
    live = front.record(command, versions=(LATEST, *front.MODERN))
    recorded = json.loads(front.ANSWERS.read_text())
    for version in live:
        assert live[version] == recorded[version], (
            "ipybox/cli/front_answers.json is stale: run "
            "`uv run python ipybox/cli/front.py --record -- ipybox --workspace /tmp` and commit it"
        )
    assert set(recorded) == set(front.VERSIONS)
    for version in front.HANDSHAKE:
        assert recorded[version]["initialize"]["protocolVersion"] == version
    for version in front.MODERN:
        assert version in recorded[version]["server/discover"]["supportedVersions"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_opening_is_answered_while_the_server_says_nothing(tmp_path: Path, mode: str) -> None:
    """A server that reads its input and never answers: the real client still opens its session
    in either era (`server/discover` in 2026-07-28, `initialize` before) and lists ipybox's
    tools, and ends the session cleanly."""
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    params = StdioServerParameters(command=FRONT[0], args=[*FRONT[1:], *silent], cwd=str(tmp_path))
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        assert client.server_info is not None and client.server_info.name == "ipybox"
        assert client.protocol_version == (front.MODERN[-1] if mode == "auto" else LATEST)
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS


@pytest.mark.parametrize("mode", MODES)
async def test_a_session_through_the_front_reaches_the_kernel_and_asks_the_user(
    tmp_path: Path, mode: str
) -> None:
    """Everything else passes through both ways, in either era: tool calls, and ipybox's approval
    questions (elicitations, or 2026-07-28's input-required rounds) with the user's answers."""
    notes, asked = tmp_path / "notes.txt", []

    async def user(context: Any, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={})

    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ["HOME"],
        "IPYBOX_STATE_DIR": str(tmp_path / "state"),
    }
    params = StdioServerParameters(
        command=FRONT[0], args=[*FRONT[1:], str(IPYBOX), "--workspace", str(workspace)], env=env
    )
    notes_server = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    async with Client(params, mode=mode, elicitation_callback=user) as client:  # type: ignore[arg-type]
        arguments = {"server_name": "notes", "server_params": notes_server}
        registered = await client.call_tool("register_mcp_server", arguments)
        assert not registered.is_error, registered
        code = "from mcptools.notes import add_note\nprint(add_note.run(add_note.Params(text='hi')).result)"
        result = await client.call_tool("execute_ipython_cell", {"code": code})
        assert not result.is_error and "added" in str(result.content), result
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS  # now the server's
    assert len(asked) == 1 and "add_note" in asked[0]
    assert notes.read_text() == "hi\n"


def _send(process: subprocess.Popen[str], message: dict[str, Any]) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    process.stdin.flush()
    reply: dict[str, Any] = json.loads(process.stdout.readline())
    return reply


def test_a_server_that_fails_to_start_says_why_in_each_answer(tmp_path: Path) -> None:
    """ipybox refuses its options and exits: the client, already initialized by the front, gets
    ipybox's one-line reason as the error of each later request; the front exits as ipybox did."""
    bad = [str(IPYBOX), "--workspace", str(tmp_path), "--sandbox-config", str(tmp_path / "none.json")]
    with subprocess.Popen(
        [*FRONT, *bad], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        init = {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        assert "serverInfo" in _send(process, {"id": 1, "method": "initialize", "params": init})["result"]
        for request_id in (2, 3):  # forwarded before ipybox exited, or after: the same answer
            call = {"name": "execute_ipython_cell", "arguments": {"code": "1"}}
            reply = _send(process, {"id": request_id, "method": "tools/call", "params": call})
            assert reply["id"] == request_id
            assert "--sandbox-config applies only with --sandbox" in reply["error"]["message"], reply
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=60) == 1
        assert process.stderr is not None
        assert "--sandbox-config applies only with --sandbox" in process.stderr.read()


def test_a_signal_before_the_server_is_up_ends_both_at_once(tmp_path: Path) -> None:
    """Claude Code stops a server with SIGINT, then SIGTERM, then SIGKILL a few hundred ms apart.
    Before ipybox has answered initialize it runs no kernel, so the front does not wait for it:
    it passes the signal on and exits."""
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    with subprocess.Popen(
        [*FRONT, *silent], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        init = {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        assert "result" in _send(process, {"id": 1, "method": "initialize", "params": init})
        (server,) = psutil.Process(process.pid).children()
        process.send_signal(signal.SIGINT)  # stdin stays open: only the signal can end them
        assert process.wait(timeout=30) == 128 + signal.SIGINT
        server.wait(timeout=30)  # psutil.TimeoutExpired if the server had not got the signal
        assert not server.is_running()


async def test_a_stale_recording_is_reported(tmp_path: Path) -> None:
    """The real front with a recording that lost a tool: the client got the front's (stale) list
    before ipybox was up; when ipybox's own answer differs, the front says so on stderr."""
    copy = tmp_path / "front"
    copy.mkdir()
    shutil.copy(front.__file__, copy / "front.py")
    answers = json.loads(front.ANSWERS.read_text())
    answers[LATEST]["tools/list"]["tools"].pop()
    (copy / front.ANSWERS.name).write_text(json.dumps(answers))
    command = [str(IPYBOX), "--workspace", str(tmp_path)]
    params = StdioServerParameters(command=sys.executable, args=[str(copy / "front.py"), "--", *command])
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert len((await session.list_tools()).tools) == len(TOOLS) - 1  # the front's
                await session.call_tool("reset", {})  # once ipybox answers, it has answered both
    assert "ipybox answers tools/list differently than front_answers.json" in log.read_text()
