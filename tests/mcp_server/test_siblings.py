"""Two ipybox servers in one workspace (e.g. codeact-default and codeact-sandbox enabled at once):
the first tool reply says so, once, and how to keep one; servers elsewhere and kernels don't count."""

from __future__ import annotations

from pathlib import Path

import pytest
from servers.launch import SANDBOX_PATH, require_sandbox

from ipybox import CodeExecutor
from ipybox.mcp_server.siblings import find

from .conftest import open_ipybox, text_of

WARNING = "2 ipybox servers run in"


async def test_a_second_server_in_the_workspace_is_named_once(tmp_path: Path) -> None:
    workspace, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    async with (
        open_ipybox(workspace, tmp_path / "state-a", args=["--approval", "auto"]),
        open_ipybox(elsewhere, tmp_path / "state-c", args=["--approval", "auto"]),
        open_ipybox(workspace, tmp_path / "state-b", args=["--approval", "auto"]) as second,
    ):
        first = text_of(await second.run("print('hi')"))
        assert WARNING in first and "not sandboxed" in first and "claude plugin disable" in first, first
        assert first.endswith("hi")  # the cell's own output follows the warning
        again = text_of(await second.run("print('again')"))
        assert again == "again"  # said once
        # the kernel second started runs in the workspace too, and is no server; the test process
        # is none either; the server in another directory belongs to another workspace
        assert len(find(workspace.resolve())) == 2
        assert len(find(elsewhere.resolve())) == 1
    assert find(workspace.resolve()) == []


async def test_a_sandboxed_process_named_ipybox_is_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandboxed kernel's processes run in the workspace and may call themselves anything: one
    named `ipybox` (and `python -m ipybox`, and a path ending in `ipybox`) would have the user told
    to disable a plugin. They run in the sandbox's own PID namespace, so they never count."""
    require_sandbox()
    monkeypatch.setenv("PATH", SANDBOX_PATH)
    workspace = tmp_path / "project"
    workspace.mkdir()
    code = (
        "import subprocess, sys, time\n"
        "ps = [subprocess.Popen(['bash', '-c', 'exec -a ipybox sleep 60']),\n"
        "      subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '-m', 'ipybox']),\n"
        "      subprocess.Popen(['bash', '-c', 'exec -a /x/ipybox sleep 60'])]\n"
        "for p in ps:  # once each shows as ipybox\n"
        "    while 'ipybox' not in open(f'/proc/{p.pid}/cmdline').read():\n"
        "        time.sleep(0.01)\n"
        "print('started')"
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        assert (await executor.execute(code)).text == "started"
        assert find(workspace.resolve()) == []
