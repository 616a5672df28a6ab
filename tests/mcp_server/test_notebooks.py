"""The notebooks the MCP server keeps of each kernel (`.ipybox/notebooks/<kernel>.ipynb`), over
stdio with the real `mcp` 2.x `Client` in both protocol eras; `ipybox --resume`; and a sandboxed
kernel that tries to forge its own notebook."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from servers.launch import require_sandbox

from .conftest import text_of
from .test_clients import MODES, NOTES_SERVER, User
from .test_eras import output, stdio

pytestmark = pytest.mark.timeout(180)

_PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
_CALLS = (
    "from mcptools.notes import add_note\n"
    "from ipybox.tool_exec.client import ApprovalRejectedError\n"
    "for text in ['kept', 'refused']:\n"
    "    try:\n"
    "        add_note.run(add_note.Params(text=text))\n"
    "    except ApprovalRejectedError:\n"
    "        print('refused:', text)\n"
)


def _notebook(workspace: Path, kernel: str = "default") -> Any:
    path = workspace / ".ipybox" / "notebooks" / f"{kernel}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return nb


def _own(cell: Any) -> dict[str, Any]:
    return dict(cell.metadata.get("ipybox") or {})


@pytest.mark.parametrize("mode", MODES)
async def test_session_is_kept_as_a_notebook(
    workspace: Path, state_dir: Path, tmp_path: Path, mode: str
) -> None:
    notes = tmp_path / "notes.txt"
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    user = User(answers=["accept", "decline"])
    async with stdio(workspace, state_dir, mode, user=user) as client:
        registered = await client.call_tool(
            "register_mcp_server", {"server_name": "notes", "server_params": params}
        )
        assert not registered.is_error
        await output(client, "x = 6 * 7")
        assert await output(client, _CALLS) == "refused: refused"
        await output(client, _PLOT)
        failed = await client.call_tool("execute_ipython_cell", {"code": "1 / 0"})
        assert failed.is_error
        assert not (await client.call_tool("reset", {})).is_error
        crashed = await client.call_tool("execute_ipython_cell", {"code": "import os\nos._exit(1)"})
        assert crashed.is_error
        assert await output(client, "print('after the crash')") == "after the crash"
        await output(client, "y = 1", kernel="other")
    assert notes.read_text() == "kept\n"

    nb = _notebook(workspace)
    # the agent's cells, and ipybox's own (registering a server refreshes the kernel's modules)
    code = [c for c in nb.cells if c.cell_type == "code" and not c.source.startswith("# ipybox:")]
    sources = [c.source for c in code]
    assert sources[:3] == ["x = 6 * 7", _CALLS, _PLOT], sources
    assert "1 / 0" in sources and "print('after the crash')" in sources
    [calls] = [c for c in code if c.source == _CALLS]
    decided = [(c["tool"], c["decision"], c["decided_by"]) for c in _own(calls)["tool_calls"]]
    by = "user (local) through the client"
    assert decided == [("add_note", "accepted", by), ("add_note", "rejected", by)], decided
    shown = json.dumps(calls.outputs)
    assert "add_note" in shown and "rejected" in shown  # visible, not only in the metadata
    [plot] = [c for c in code if c.source == _PLOT]
    assert any("image/png" in o.get("data", {}) for o in plot.outputs)
    [error] = [c for c in code if c.source == "1 / 0"]
    assert any(o.output_type == "error" and o.ename == "ZeroDivisionError" for o in error.outputs)
    marks = [_own(c).get("mark") for c in nb.cells if c.cell_type == "markdown"]
    assert "reset" in marks and "restart" in marks, marks
    assert [c.source for c in _notebook(workspace, "other").cells if c.cell_type == "code"] == ["y = 1"]
    assert user.asked and len(user.asked) == 2


def _note_from(file: str) -> str:
    return f"from mcptools.notes import add_note\nadd_note.run(add_note.Params(text=open({file!r}).read()))"


async def test_resume_rebuilds_kernels_without_calling_tools_and_stops_where_they_diverge(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    params = {"command": sys.executable, "args": [str(NOTES_SERVER)], "env": {"NOTES_FILE": str(notes)}}
    files = {"default": workspace / "message.txt", "diverges": workspace / "other.txt"}
    for file in files.values():
        file.write_text("first")
    async with stdio(workspace, state_dir, "auto", user=User()) as client:
        registered = await client.call_tool(
            "register_mcp_server", {"server_name": "notes", "server_params": params}
        )
        assert not registered.is_error
        for kernel, file in files.items():
            await output(client, "a = 6 * 7", kernel=kernel)
            await output(client, _note_from(file.name), kernel=kernel)
            await output(client, "b = a + 1", kernel=kernel)
    assert notes.read_text() == "first\nfirst\n"
    nb = _notebook(workspace)

    files["diverges"].write_text("second")  # that kernel's tool call no longer fits its record
    user = User()
    async with stdio(workspace, state_dir, "auto", "--resume", user=user) as client:
        resumed = await output(client, "print(a, b)")
        assert resumed.endswith("42 43") and "resumed from .ipybox/notebooks/default.ipynb" in resumed
        assert "tool calls answered from the notebook" in resumed
        stopped = await output(client, "print(a)", kernel="diverges")
        assert "stopped at cell [2]" in stopped and "notes.add_note" in stopped, stopped
        assert stopped.endswith("42")
        missing = await client.call_tool("execute_ipython_cell", {"code": "b", "kernel": "diverges"})
        assert missing.is_error and "NameError" in text_of(missing)
    assert notes.read_text() == "first\nfirst\n"  # no tool call made again
    assert not user.asked
    after = _notebook(workspace)  # the resumed session goes on in the same notebook
    assert len(after.cells) > len(nb.cells)
    assert any(_own(c).get("mark") == "restart" for c in after.cells if c.cell_type == "markdown")


_FORGE = """
import os, time
nb = '.ipybox/notebooks/default.ipynb'
for _ in range(600):  # written shortly after the cell before ended
    if os.path.exists(nb):
        break
    time.sleep(0.05)
open('forged.ipynb', 'w').write('{}')
attempts = {
    'write': lambda: open(nb, 'w').write('{}'),
    'append': lambda: open(nb, 'a').write('x'),
    'new file': lambda: open('.ipybox/notebooks/other.ipynb', 'w').write('{}'),
    'replace': lambda: os.replace('forged.ipynb', nb),
    'symlink': lambda: os.symlink(os.path.abspath('forged.ipynb'), '.ipybox/notebooks/other.ipynb'),
    'hard link': lambda: os.link('forged.ipynb', '.ipybox/notebooks/other.ipynb'),
    'unlink': lambda: os.unlink(nb),
    'chmod': lambda: os.chmod(nb, 0o666),
    'rename folder': lambda: os.rename('.ipybox/notebooks', 'notebooks'),
    'rename state': lambda: os.rename('.ipybox', 'state'),
    'state link': lambda: os.symlink('.', '.ipybox/nb'),
}
done = []
for name, attempt in attempts.items():
    try:
        attempt()
        done.append(name)
    except OSError:
        pass
print('forged:', done, os.path.exists(nb))
"""


#: Kernel output nested too deep for a recursive load: it made a notebook the next start could not read.
_DEEP = """secret = 'kept'
from IPython.display import display
deep = 'x'
for _ in range(600):
    deep = [deep]
display({'application/json': deep, 'text/plain': 'deep'}, raw=True)"""


async def test_sandboxed_kernel_cannot_forge_its_notebook(workspace: Path, state_dir: Path) -> None:
    require_sandbox()
    async with stdio(workspace, state_dir, "legacy", "--sandbox", user=User()) as client:
        await output(client, _DEEP)
        assert await output(client, _FORGE) == "forged: [] True"
    nb = _notebook(workspace)
    assert [c.source for c in nb.cells if c.cell_type == "code"] == [_DEEP, _FORGE]
    assert sorted(os.listdir(workspace / ".ipybox" / "notebooks")) == ["default.ipynb"]
    async with stdio(workspace, state_dir, "legacy", "--sandbox", "--resume", user=User()) as client:
        assert (await output(client, "print(secret)")).endswith("kept")


#: A cell that displays `count` incompressible PNGs of 2 MiB each (what a record keeps whole).
async def test_a_stopped_kernels_record_is_written_and_let_go(tmp_path: Path) -> None:
    """A user who runs each cell in a new kernel name (each stopping the least recently used one)
    had every stopped kernel's record, images included, kept in ipybox's memory for good: a
    stopped kernel's notebook is now written and its record let go; the kernel's next executor
    reads the notebook back and continues it."""
    from ipybox import CodeExecutor
    from ipybox.mcp_server.homes import Homes
    from ipybox.mcp_server.kernels import LOCAL
    from ipybox.mcp_server.notebooks import Notebooks

    homes = Homes(tmp_path)
    notebooks = Notebooks(homes)
    record = notebooks.record(LOCAL, "k0")
    assert notebooks.record(LOCAL, "k0") is record  # kept while its kernel may run
    workspace = homes.workspace(LOCAL)
    async with CodeExecutor(working_dir=workspace, spare_kernel=False, record=record) as executor:
        await executor.execute("print('k0')")
    notebooks.stopped(LOCAL, "k0", executor)
    again = notebooks.record(LOCAL, "k0")
    assert again is not record  # let go: read back from the notebook written at the stop
    assert [c.source for c in again.to_notebook().cells if c.cell_type == "code"] == ["print('k0')"]


async def test_a_kernel_taken_up_again_continues_its_notebook(workspace: Path, state_dir: Path) -> None:
    """Through the real client: a kernel stopped to make room (`--max-kernels 1`) and used again
    says so, and its notebook goes on where it was."""
    from mcp import StdioServerParameters
    from mcp.client.client import Client

    from .conftest import IPYBOX_COMMAND, NO_SPARE, server_env

    args = ["--workspace", str(workspace), *NO_SPARE, "--max-kernels", "1"]
    params = StdioServerParameters(
        command=IPYBOX_COMMAND[0], args=[*IPYBOX_COMMAND[1:], *args], env=server_env(state_dir)
    )
    async with Client(params, mode="auto") as client:
        for kernel in ("k0", "k1"):
            assert kernel in await output(client, f"print('{kernel}')", kernel=kernel)
        again = await output(client, "print('k0 again')", kernel="k0")
    assert "was stopped" in again
    sources = [c.source for c in _notebook(workspace, "k0").cells if c.cell_type == "code"]
    assert sources == ["print('k0')", "print('k0 again')"], sources
