"""Stand-ins for missing protected paths: what git on the host sees of them, and what is left."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox.placeholders import Placeholders

from .conftest import probe


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


#: Kernel code: links in protected folders of its own making (protected from the next start on)
#: whose missing targets get file stand-ins, named as git ignore patterns would read them: a glob
#: at the top, a class, a negation, a comment, a trailing space, a backslash, and a newline that
#: would add a line of the kernel's.
TARGETS = ["*", "q[a-z]", "!keep", "#c", "sp ", "b\\*", "zz\n*.txt"]
PLANT = f"""
for i, name in enumerate({TARGETS!r}):
    os.makedirs(f"n{{i}}/.claude")
    os.symlink("../../" + name, f"n{{i}}/.claude/settings.json")
# folders whose stand-ins (.git, HEAD) have names not in UTF-8, or a line break
os.makedirs(b"latin-\\xe9")
os.makedirs("two\\nlines")
# folders whose stand-ins' repository is one the kernel names: elsewhere on the host (absolute,
# relative, through a commondir), or in the workspace with an `info` that leads elsewhere
def pointing(folder, gitdir, commondir=None):
    os.makedirs(folder + "/.claude")
    os.symlink("../hidden", folder + "/.claude/settings.json")
    if commondir is None:
        pathlib.Path(folder, ".git").write_text("gitdir: " + gitdir)
    else:
        os.makedirs(folder + "/.git")
        pathlib.Path(folder, ".git/HEAD").write_text("ref: refs/heads/main")
        pathlib.Path(folder, ".git/commondir").write_text(commondir)
pointing("p1", OTHER + "/.git")
pointing("p2", "../../other/.git")
pointing("p3", None, OTHER + "/.git")
pointing("p4", "../store")
os.makedirs("store")
pathlib.Path("store/HEAD").write_text("ref: refs/heads/main")
os.symlink(ODD + "/info", "store/info")
print(_json.dumps("ok"))
"""


def _untracked(project: Path) -> str:
    return _git(project, "status", "--porcelain", "--untracked-files=all")


@pytest.mark.usefixtures("srt_available")
async def test_names_a_kernel_chooses_never_become_git_ignore_patterns(tmp_path: Path) -> None:
    """A stand-in's line in `info/exclude` names that one path, whatever its name: a kernel that
    names missing link targets `*` or `zz<newline>*.txt` hid every new file of the project from
    `git status` while it ran, and `*.txt` for good (the line was never taken out again). A
    folder named in bytes that are not UTF-8 failed every later start. The line is written only
    to the workspace's repository or one in the workspace, never through a link: a `.git` file
    of the kernel's had ipybox add lines to another repository of the host, or make an
    `exclude` file in any folder named `info`."""
    project, other, odd = tmp_path / "project", tmp_path / "other", tmp_path / "odd"
    for repo in (project, other):
        repo.mkdir()
        _git(repo, "init", "-q")
    (odd / "info").mkdir(parents=True)
    exclude, outside = project / ".git" / "info" / "exclude", other / ".git" / "info" / "exclude"
    before, outside_before = exclude.read_text(), outside.read_text()
    async with CodeExecutor(sandbox=True, working_dir=project, spare_kernel=False) as executor:
        assert await probe(executor, f"OTHER, ODD = {str(other)!r}, {str(odd)!r}\n" + PLANT) == "ok"
        # the next start protects the kernel's .claude folders, with stand-ins for their targets
        await executor.reset()
        assert (project / "*").is_file() and (project / "zz\n*.txt").is_file()
        names = "('two\\nlines', b'latin-\\xe9')"
        listed = f"print(_json.dumps([sorted(map(os.fsdecode, os.listdir(n))) for n in {names}]))"
        assert await probe(executor, listed) == [[".git", "HEAD"]] * 2
        (project / "mine.txt").write_text("the user's\n")
        (project / "keep").write_text("the user's\n")
        assert "?? mine.txt\n" in _untracked(project) and "?? keep\n" in _untracked(project)
        others = _git(project, "ls-files", "-z", "--others", "--exclude-standard").split("\0")
        assert [n for n in TARGETS if n in others] == ["zz\n*.txt"]  # the rest are stand-ins git passes over
        assert all((project / f"p{i}" / "hidden").is_file() for i in range(1, 5))
        assert outside.read_text() == outside_before and not os.listdir(odd / "info")
    assert exclude.read_text() == before
    assert outside.read_text() == outside_before and not os.listdir(odd / "info")
    assert "?? mine.txt\n" in _untracked(project)


def test_a_stand_in_is_never_removed_through_a_link(tmp_path: Path) -> None:
    """A stand-in's folder may be the kernel's (where a link of its own leads): a kernel that
    replaced that folder with a link to a folder of the user's (another executor's kernel in the
    same workspace still runs when one releases its stand-ins) had ipybox remove the user's empty
    file or folder of the stand-in's name there. What lies there now is left alone."""
    project, mine = tmp_path / "project", tmp_path / "mine"
    (project / "evil").mkdir(parents=True)
    mine.mkdir()
    held = Placeholders(tmp_path / "locks")
    held.ensure(project / "evil" / "hidden", "file")
    held.ensure(project / "evil" / "folder", "dir")
    (project / "evil").rename(project / "moved")
    (project / "evil").symlink_to(mine)
    (mine / "hidden").touch()  # the user's, as the stand-ins were made
    (mine / "folder").mkdir()
    held.release()
    assert sorted(os.listdir(mine)) == ["folder", "hidden"]
