"""Stand-ins for missing protected paths: what git on the host sees of them, and what is left."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ipybox.sandbox.placeholders import Placeholders


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_file_stand_ins_are_invisible_to_git_and_leave_nothing(tmp_path: Path) -> None:
    """A file stand-in (`.mcp.json`, naming no servers) in a work tree is in the repository's
    `info/exclude` while it exists: `git status` and `git add -A` pass over it. Afterwards the
    stand-in and the line are gone; a stand-in someone wrote into stays, and git sees it again."""
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    exclude = project / ".git" / "info" / "exclude"
    before = exclude.read_text()
    for written in (False, True):
        held = Placeholders(tmp_path / "locks")
        held.ensure(project / ".mcp.json", "mcp")
        held.ensure(project / "docs", "dir")
        assert (project / ".mcp.json").read_text() == '{"mcpServers": {}}\n'
        assert _git(project, "status", "--porcelain", "--untracked-files=all") == ""
        if written:
            (project / ".mcp.json").write_text('{"mcpServers": {"mine": {"command": "x"}}}\n')
        held.release()
        assert exclude.read_text() == before
        assert not (project / "docs").exists()
        assert (project / ".mcp.json").exists() == written
    assert _git(project, "status", "--porcelain") == "?? .mcp.json\n"


def test_info_exclude_is_never_written_through_a_link(tmp_path: Path) -> None:
    """A repository an earlier (unsandboxed) kernel could write may hold `info/exclude` as a link
    to another file of the user's: ipybox writes neither it nor the file it names."""
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    exclude = project / ".git" / "info" / "exclude"
    target = tmp_path / "bashrc"
    target.write_text("echo hello\n")
    exclude.unlink()
    exclude.symlink_to(target)
    held = Placeholders(tmp_path / "locks")
    held.ensure(project / ".mcp.json", "mcp")
    assert target.read_text() == "echo hello\n"  # while the stand-in exists
    held.release()
    assert target.read_text() == "echo hello\n"
    assert exclude.is_symlink()
