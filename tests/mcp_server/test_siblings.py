"""Two ipybox servers in one workspace (e.g. codeact-default and codeact-sandbox enabled at once):
the first tool reply says so, once, and how to keep one; servers elsewhere and kernels don't count."""

from __future__ import annotations

from pathlib import Path

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
