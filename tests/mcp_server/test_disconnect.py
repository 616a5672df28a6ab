"""A client over streamable HTTP that disappears mid-cell (killed: no cancel notification, no session
DELETE) interrupts its cell in both protocol eras, also while the user is being asked about a tool
call; the kernel keeps its state and the next cell queued for it, another client's, runs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers.launch import REPO

from .conftest import running_http_ipybox, text_of
from .test_clients import MODES, NOTES_SERVER, connect, output

pytestmark = pytest.mark.timeout(90)

DROPPED_CLIENT = REPO / "tests" / "servers" / "dropped_client.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("disconnect")
    (base / "ws").mkdir()
    with running_http_ipybox(base / "ws", base / "state", base / "log", args=["--no-auth"]) as (_, url):
        yield url


@pytest.mark.parametrize("mode", MODES)
async def test_killed_client_interrupts_its_cell(server: str, mode: str, tmp_path: Path) -> None:
    marker = tmp_path / "slept-through"
    code = f"import time, pathlib\nx = 1\nprint('started')\ntime.sleep(60)\npathlib.Path(r'{marker}').touch()"
    assert await _queued_behind_dropped_client(server, mode, f"dropped-{mode}", code, b"started") == "1"
    assert not marker.exists(), "the cell slept on after its client was gone"


async def test_client_killed_while_asked_frees_the_kernel(server: str, tmp_path: Path) -> None:
    """On the handshake era the question is an elicitation request the dead client never answers.
    (On 2026-07-28 it is a returned round: test_clients covers a round left unanswered.)"""
    notes = tmp_path / "notes.txt"
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    async with connect(server, None, "legacy") as client:
        registered = await client.call_tool(
            "register_mcp_server", {"server_name": "asked", "server_params": params}
        )
        assert not registered.is_error, text_of(registered)
    code = "x = 1\nfrom mcptools.asked import add_note\nadd_note.run(add_note.Params(text='never'))"
    assert await _queued_behind_dropped_client(server, "legacy", "asked", code, b"asked") == "1"
    assert not notes.exists()  # the call asked about never ran


async def _queued_behind_dropped_client(server: str, mode: str, kernel: str, code: str, sign: bytes) -> str:
    """Start `code` from a client that is killed once it prints `sign`; meanwhile another client
    of the same principal queues `print(x)` for the same kernel: its output."""
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DROPPED_CLIENT),
        server,
        mode,
        kernel,
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    async with connect(server, None, mode) as again:
        try:
            assert client.stdout is not None
            line = await asyncio.wait_for(client.stdout.readline(), 30)
            assert line == sign + b"\n", line + await client.stdout.read()
            queued = asyncio.create_task(output(again, "print(x)", kernel=kernel))
            await asyncio.sleep(1)
            assert not queued.done()  # waits behind the dropped client's cell
        finally:
            client.kill()
            await client.wait()
        # runs once the vanished client's cell is interrupted, and is not interrupted itself
        return await queued
