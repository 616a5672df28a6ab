"""Over stdio with the real `mcp` 2.x `Client` in both protocol eras: approval rules files,
progress while a cell is silent, and a cancelled cell that keeps the kernel's state."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError, StdioServerParameters
from mcp.client.client import Client

from .conftest import IPYBOX_COMMAND, NO_SPARE, server_env, text_of
from .test_clients import MODES, NOTES_SERVER, User

pytestmark = pytest.mark.timeout(90)


@contextlib.asynccontextmanager
async def stdio(
    workspace: Path, state_dir: Path, mode: str, *args: str, user: User | None = None
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=IPYBOX_COMMAND[0],
        args=[*IPYBOX_COMMAND[1:], "--workspace", str(workspace), *NO_SPARE, *args],
        env=server_env(state_dir),
    )
    async with Client(params, mode=mode, elicitation_callback=user) as client:  # type: ignore[arg-type]
        yield client


async def output(client: Client, code: str, **arguments: Any) -> str:
    result = await client.call_tool("execute_ipython_cell", {"code": code, **arguments})
    assert not result.is_error, text_of(result)
    return text_of(result)


@pytest.mark.parametrize("mode", MODES)
async def test_rules_file_allows_asks_and_denies(
    workspace: Path, state_dir: Path, tmp_path: Path, mode: str
) -> None:
    rules = tmp_path / "approval.toml"
    rules.write_text(
        "# first match wins\n"
        '[[rule]]\nserver = "trusted"\naction = "allow"\n\n'
        '[[rule]]\nserver = "notes"\ntool = "add_*"\naction = "deny"\n\n'
        '[[rule]]\ntool = "count_notes"\naction = "ask"\n'  # asked although it is read-only
        '[[rule]]\nserver = "ipybox"\ntool = "shell"\naction = "deny"\n'  # shell commands, same path
    )
    notes = tmp_path / "notes.txt"
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    user = User()  # accepts what it is asked
    args = ["--approval", str(rules), "--approve-shell-cmds"]
    async with stdio(workspace, state_dir, mode, *args, user=user) as client:
        for name in ("notes", "trusted"):
            result = await client.call_tool(
                "register_mcp_server", {"server_name": name, "server_params": params}
            )
            assert not result.is_error, text_of(result)
        out = await output(
            client,
            "from mcptools.notes import add_note, count_notes\n"
            "from mcptools.trusted import add_note as trusted_add\n"
            "from ipybox.tool_exec.client import ApprovalRejectedError\n"
            "try:\n"
            "    add_note.run(add_note.Params(text='denied'))\n"
            "except ApprovalRejectedError:\n"
            "    print('refused')\n"
            "trusted_add.run(trusted_add.Params(text='allowed'))\n"
            "print(count_notes.run(count_notes.Params()).result)\n"
            "try:\n"
            "    get_ipython().system('touch shell-ran')\n"
            "except ApprovalRejectedError:\n"
            "    print('no shell')\n",
        )
    assert out.splitlines() == ["refused", "1", "no shell"]
    assert not (workspace / "shell-ran").exists()
    assert notes.read_text() == "allowed\n"
    assert len(user.asked) == 1 and "count_notes" in user.asked[0]


@pytest.mark.timeout(120)
async def test_silent_cell_sends_progress_and_cancel_keeps_state(workspace: Path, state_dir: Path) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with stdio(workspace, state_dir, "auto", user=User()) as client:
        await output(client, "kept = 'still here'")
        await client.call_tool(
            "execute_ipython_cell", {"code": "import time\ntime.sleep(13)"}, progress_callback=on_progress
        )
        # a notification every HEARTBEAT (5 s) of silence, each with a larger progress value
        assert len(progress) >= 2 and progress == sorted(set(progress)), progress

        with pytest.raises((MCPError, TimeoutError)):
            await client.call_tool(
                "execute_ipython_cell", {"code": "import time\ntime.sleep(3600)"}, read_timeout_seconds=1
            )
        # had the cancel not interrupted the cell, this one would wait behind it
        assert await output(client, "print(kept)", timeout=30) == "still here"
