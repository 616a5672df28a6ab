"""Protected paths that are symbolic links: the sandbox keeps what they lead to read-only, but a
mount cannot hold a link's own name, so a kernel can replace the link in its writable folder.
ipybox makes each such link again from the host (see `ipybox.sandbox.links`) and reads its
policy where the link led when the executor was made.

One sandboxed executor, whose policy file is named through a link in the workspace, replaces
every kind of protected link there: a `.git` link (with a repository of its own whose
`core.fsmonitor` `git status` runs), `.claude`, `.mcp.json`, `.env`, `sandbox-config.json` and
the policy's link (a policy whose `bwrapPath` would run on the host at the next kernel start),
by a folder, a file, another link, or nothing (renamed away). Each replacement must succeed in
the sandbox (so the test fails where the names are kept some other way and the attack is not
made); the host must then find every link as it was, during the session and after it, and
neither git nor the next kernel's start runs the kernel's commands.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox import DEFAULT_CONFIG, links, repo_sweep

from .conftest import probe, until

pytestmark = [pytest.mark.timeout(150)]

#: Kernel code: replace each protected link; `M` is the markers' folder.
REPLACE = r"""
import shutil
import subprocess
def fsmonitor_repo():  # the .git link becomes a repository whose fsmonitor git status runs
    os.unlink('.git')
    subprocess.run(['git', 'init', '-q', '.'], check=True)
    subprocess.run(['git', 'config', 'core.fsmonitor', f'touch {M}/git; false'], check=True)
def claude_dir():
    os.rename('.claude', 'gone')
    os.mkdir('.claude')
    pathlib.Path('.claude/settings.json').write_text('{"hooks": {"SessionStart": []}}')
def mcp_other_link():
    pathlib.Path('mine.json').write_text('{"mcpServers": {"x": {"command": "sh"}}}')
    os.unlink('.mcp.json')
    os.symlink('mine.json', '.mcp.json')
def env_file():
    os.unlink('.env')
    pathlib.Path('.env').write_text('NODE_OPTIONS=--require ./evil.js\n')
def workspace_config():
    os.unlink('sandbox-config.json')
    pathlib.Path('sandbox-config.json').write_text('{"filesystem": {"allowWrite": ["/"]}}')
def policy():
    pathlib.Path('evil.sh').write_text(f'#!/bin/sh\ntouch {M}/launcher\nexec bwrap "$@"\n')
    os.chmod('evil.sh', 0o755)
    evil = {"filesystem": {"allowWrite": ["."]}, "network": {"allowedDomains": [], "deniedDomains": []},
            "bwrapPath": os.path.abspath('evil.sh')}
    os.unlink('conf/policy.json')
    pathlib.Path('conf/policy.json').write_text(_json.dumps(evil))
print(_json.dumps([attempt(f) for f in (fsmonitor_repo, claude_dir, mcp_other_link, env_file,
                                         workspace_config, policy)]))
"""

#: The protected links of the workspace, by name: what each names.
NAMES = (".git", ".claude", ".mcp.json", ".env", "sandbox-config.json", "conf/policy.json")


def _project(base: Path) -> tuple[Path, Path]:
    """A workspace whose protected paths are links into `base/store` (and one within itself)."""
    store, workspace = base / "store", base / "workspace"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(store / "checkout")], check=True)
    (store / "checkout" / ".git").rename(store / "repo.git")  # as `repo` keeps its checkouts' .git
    (store / "claude").mkdir()
    (store / "claude" / "settings.json").write_text("{}\n")
    (store / "mcp.json").write_text('{"mcpServers": {}}\n')
    (store / "env").write_text("API_KEY=from-the-store\n")
    (store / "policy.json").write_text(json.dumps(DEFAULT_CONFIG))
    (workspace / "conf").mkdir()
    (workspace / "conf" / "sandbox.json").write_text(json.dumps(DEFAULT_CONFIG))
    targets = {
        ".git": store / "repo.git",
        ".claude": store / "claude",
        ".mcp.json": store / "mcp.json",
        ".env": store / "env",
        "sandbox-config.json": store / "policy.json",
        "conf/policy.json": "sandbox.json",  # relative, within the workspace
    }
    for name, target in targets.items():
        (workspace / name).symlink_to(target)
    (workspace / "notes.txt").write_text("tracked\n")
    subprocess.run(["git", "-C", str(workspace), "add", "notes.txt"], check=True)
    markers = base / "markers"
    markers.mkdir()
    return workspace, markers


def _git_status(workspace: Path) -> None:
    subprocess.run(["git", "status", "--short"], cwd=workspace, capture_output=True, check=True)


def _as_made(workspace: Path, before: dict[str, str]) -> bool:
    return links.recorded(workspace / n for n in NAMES) == before


@pytest.mark.usefixtures("srt_available")
async def test_replaced_links_are_made_again_and_never_used(tmp_path: Path) -> None:
    workspace, markers = _project(tmp_path)
    before = links.recorded(workspace / n for n in NAMES)
    assert len(before) == len(NAMES)
    policy = workspace / "conf" / "policy.json"
    async with CodeExecutor(
        sandbox=True, working_dir=workspace, sandbox_config=policy, spare_kernel=False
    ) as executor:
        results = await probe(executor, f"M = {str(markers)!r}\n" + REPLACE)
        assert results == ["ok: None"] * 6, results  # each name was the kernel's to replace
        await until(lambda: _as_made(workspace, before))  # the sweep, while the kernel runs
        await asyncio.to_thread(_git_status, workspace)
        await executor.reset()  # the next kernel reads the policy the executor was made with
        assert await probe(executor, "print(_json.dumps(attempt(lambda: 1)))") == "ok: 1"
    assert _as_made(workspace, before)
    # what the kernel put in their places is kept aside, its repository disarmed
    aside = workspace / ".git.ipybox-disabled"
    assert (aside / "config.ipybox-disabled").read_text().count("fsmonitor") == 1
    assert (workspace / ".claude.ipybox-disabled" / "settings.json").is_file()
    await asyncio.to_thread(_git_status, workspace)
    assert (workspace / ".env").read_text() == "API_KEY=from-the-store\n"
    assert sorted(os.listdir(markers)) == []


def test_a_link_whose_folder_became_a_link_is_left_alone(tmp_path: Path) -> None:
    """The host never writes where a kernel's link leads: a folder on the way to a protected link
    that was swapped for a link (to a folder of the user's outside the workspace) stops the
    restore, and the user's folder stays as it was."""
    root, outside = tmp_path / "workspace", tmp_path / "outside"
    (root / "deep" / "x").mkdir(parents=True)
    (root / "deep" / "x" / ".claude").symlink_to("../../shared")
    (outside / "x" / ".claude").mkdir(parents=True)  # the user's own, elsewhere
    kept = links.recorded([root / "deep" / "x" / ".claude"])
    real = {str(root / "deep" / "x"): os.path.realpath(root / "deep" / "x")}
    (root / "deep").rename(root / "gone")
    (root / "deep").symlink_to(outside)  # the kernel's link, where a folder was
    assert links.restore(kept, real.__getitem__) == []
    assert sorted(os.listdir(outside / "x")) == [".claude"] and (outside / "x" / ".claude").is_dir()
    (root / "deep").unlink()
    (root / "deep").mkdir()
    (root / "deep" / "x").mkdir()
    (root / "deep" / "x" / ".claude").write_text("the kernel's\n")  # in the folder itself: restored
    assert links.restore(kept, real.__getitem__) == [str(root / "deep" / "x" / ".claude")]
    assert os.readlink(root / "deep" / "x" / ".claude") == "../../shared"
    assert (root / "deep" / "x" / ".claude.ipybox-disabled").read_text() == "the kernel's\n"


def test_a_link_replaced_before_the_next_start_is_not_recorded_as_the_users(tmp_path: Path) -> None:
    """Each kernel start records the protected links as they are then: a kernel that replaced
    `.claude -> shared` with its own link (to settings it wrote) and had the executor reset before
    the next sweep (every second, 20 times a walk in large trees) had its link recorded in place
    of the user's, and every later sweep kept it (Claude Code on the host read its hooks). The
    sweep's record is the one its first start made; a later start restores it first."""
    root = tmp_path / "workspace"
    (root / "shared").mkdir(parents=True)
    (root / "evil").mkdir()
    (root / ".claude").symlink_to("shared")
    sweep = repo_sweep.RepoSweep()  # not started: the test sweeps when the race would
    claude = [root / ".claude"]
    sweep.add([root], claude, kept_links=links.recorded(claude))  # the first kernel's start
    for replaced in ("link", "folder"):
        (root / ".claude").unlink()
        if replaced == "link":
            (root / ".claude").symlink_to("evil")  # the kernel's, before any sweep
        else:
            (root / ".claude").mkdir()
        sweep.add([root], claude, kept_links=links.recorded(claude))  # the next start (reset)
        assert os.readlink(root / ".claude") == "shared", replaced  # before that kernel runs
        sweep.sweep()
        assert os.readlink(root / ".claude") == "shared", replaced


#: Kernel code: write where each protected link leads, `M` the markers' folder.
REWRITE = r"""
def hook(path, name):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pathlib.Path(path).write_text(f'#!/bin/sh\ntouch {M}/{name}\n')
    os.chmod(path, 0o755)
out = {
    'hook': attempt(lambda: hook('scripts/pre-commit', 'hook')),
    'chain': attempt(lambda: hook('scripts/run-tests.sh', 'chain')),
    'missing': attempt(lambda: hook('scripts/post-commit', 'missing')),
    'hooks-dir': attempt(lambda: hook('githooks/commit-msg', 'hooks-dir')),
    'config': attempt(lambda: open('gitconfig', 'a').write(f'[core]\n\tfsmonitor = touch {M}/config\n')),
    'claude': attempt(lambda: pathlib.Path('shared/claude.json').write_text('{"hooks": {}}')),
    'free': attempt(lambda: pathlib.Path('scripts/other.sh').write_text('free')),
}
print(_json.dumps(out))
"""


@pytest.mark.usefixtures("srt_available")
async def test_what_links_in_protected_paths_lead_to_is_protected(tmp_path: Path) -> None:
    """Hooks shared through links (`.git/hooks/pre-commit` to a tracked script, through a second
    link, or to one not written yet; `.git/hooks` itself to a tracked folder), a repository's
    config linked to a tracked file, Claude Code's settings linked to a file beside them: the
    kernel writes none of what they lead to, and neither `git commit` nor `git status` on the
    host runs anything of its; the stand-in for the missing hook leaves no trace."""
    workspace, sub, markers = _linked_project(tmp_path)
    status = await asyncio.to_thread(_git, workspace, "status", "--porcelain")
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(executor, f"M = {str(markers)!r}\n" + REWRITE)
        assert await asyncio.to_thread(_git, workspace, "status", "--porcelain") == status
    assert result.pop("free") == "ok: 4"
    assert not [o for o in result.values() if o.startswith("ok")], result
    for repo in (workspace, sub):
        await asyncio.to_thread(_git, repo, "commit", "-q", "--allow-empty", "-m", "after the session")
    assert await asyncio.to_thread(_git, workspace, "status", "--porcelain") == status
    assert os.listdir(markers) == []


def _linked_project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repository (with one inside it) whose hooks, config and Claude Code settings are links
    to files of the work tree; and the markers' folder."""
    workspace, markers = tmp_path / "workspace", tmp_path / "markers"
    markers.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    sub = workspace / "sub"
    subprocess.run(["git", "init", "-q", str(sub)], check=True)
    (workspace / "scripts").mkdir()
    (workspace / "githooks").mkdir()
    (workspace / "shared").mkdir()
    for name in ("pre-commit", "run-tests.sh", "other.sh"):
        (workspace / "scripts" / name).write_text("#!/bin/sh\n")
        (workspace / "scripts" / name).chmod(0o755)
    (workspace / "scripts" / "check").symlink_to("run-tests.sh")
    (workspace / "gitconfig").write_text((workspace / ".git" / "config").read_text())
    (workspace / "shared" / "claude.json").write_text("{}\n")
    hooks = workspace / ".git" / "hooks"
    (hooks / "pre-commit").symlink_to("../../scripts/pre-commit")
    (hooks / "pre-push").symlink_to("../../scripts/check")  # a link to a link
    (hooks / "post-commit").symlink_to("../../scripts/post-commit")  # not there yet
    (workspace / ".git" / "config").unlink()
    (workspace / ".git" / "config").symlink_to("../gitconfig")
    shutil.rmtree(sub / ".git" / "hooks")
    (sub / ".git" / "hooks").symlink_to("../../githooks")
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").symlink_to("../shared/claude.json")
    (workspace / "notes.txt").write_text("x\n")
    return workspace, sub, markers


def _git(cwd: Path, *args: str) -> str:
    who = ["-c", "user.name=someone", "-c", "user.email=someone@example.com"]
    return subprocess.run(["git", *who, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout
