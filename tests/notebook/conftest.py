"""One recorded session shared by the notebook tests: a real kernel, the real notes MCP server.

The session has a plot, kernel text that looks like markup, an error, a reset, a kernel crash, and
after it a tool call accepted and one rejected, whose notes file counts the calls really made.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutor, generate_mcp_sources
from ipybox.tool_exec import registry

NOTES_SERVER = Path(__file__).parents[1] / "servers" / "notes_server.py"
#: Kernel text that would be markup if a renderer took it as such.
HOSTILE = "<script>alert('kernel')</script><img src=x onerror=alert(1)>**bold**"

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('a plot')\nplt.show()"
#: The cells after the crash: what a resume runs again.
AFTER_CRASH = [
    "x = 41\nprint('x is', x)",
    "from mcptools.notes import add_note\n"
    "first = add_note.run(add_note.Params(text='first'))\n"
    "try:\n"
    f"    add_note.run(add_note.Params(text={HOSTILE!r}))\n"
    "except Exception as e:\n"
    "    refused = type(e).__name__\n"
    "print(first, refused)",
    "y = x + 1\nprint(y)",
]


@dataclass
class Recorded:
    workspace: Path
    notebook: Path
    notes: Path
    params: dict[str, object]
    state: Path


def notes_params(notes: Path) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}


async def _record(workspace: Path, notes: Path) -> Path:
    params = notes_params(notes)
    await generate_mcp_sources("notes", params, workspace / "mcptools")
    async with CodeExecutor(working_dir=workspace, spare_kernel=False) as executor:
        await executor.execute(PLOT)
        await executor.execute(f"print({HOSTILE!r})")
        with pytest.raises(CodeExecutionError):
            await executor.execute("1 / 0")
        await executor.reset()
        with pytest.raises(CodeExecutionError, match="died|exit"):
            await executor.execute("import os\nos._exit(3)")
        for code in AFTER_CRASH:
            async for item in executor.stream(code):
                if isinstance(item, ApprovalRequest):
                    if item.tool_args["text"] == "first":
                        await item.accept(by="alice (reviewer)")
                    else:
                        await item.reject("declined by the user", by="bob")
        path = workspace / ".ipybox" / "notebooks" / "session.ipynb"
        executor.save_notebook(path)
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    workspace = tmp_path_factory.mktemp("workspace")
    notes = tmp_path_factory.mktemp("notes") / "notes.txt"
    state = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYBOX_STATE_DIR", str(state))
        notebook = asyncio.run(_record(workspace, notes))
    return Recorded(workspace, notebook, notes, notes_params(notes), state)


@pytest.fixture
def registered(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """The recorded session's state dir (where the notes server is registered) in use."""
    monkeypatch.setenv("IPYBOX_STATE_DIR", str(recorded.state))
    assert registry.is_registered("notes", recorded.params, recorded.workspace)
    return recorded
