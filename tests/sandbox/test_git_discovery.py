"""git's repository discovery: a sandboxed kernel cannot make the workspace itself (or its
`.git` stand-in) something `git` on the host takes for a repository with the kernel's config.

git, run in a directory, takes it for a (bare) git directory when it holds a `HEAD` naming a
ref, `objects/` and `refs/`; that directory's `config` then runs `core.fsmonitor` on the next
`git status`. Each attack plants such a repository with an fsmonitor that touches a marker on
the host; git is run on the host while the kernel runs and after the session.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox.autorun import bare_repositories_allowed

from .conftest import probe

pytestmark = [pytest.mark.usefixtures("srt_available"), pytest.mark.timeout(120)]

#: Kernel code: `plant(d)` makes `d` a git directory but for its `HEAD`, with an fsmonitor
#: that touches MARKER; the attacks then try to give it a `HEAD` (or a way round it).
PLANT = """
def plant(d, marker):
    os.makedirs(f'{d}/objects', exist_ok=True)
    os.makedirs(f'{d}/refs/heads', exist_ok=True)
    pathlib.Path(d, 'config').write_text(
        '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n'
        f'\\tfsmonitor = "touch {marker}; false"\\n'
    )
def head(path):
    pathlib.Path(path).write_text('ref: refs/heads/main\\n')
def renamed_head():
    head('staged-head')
    os.replace('staged-head', 'HEAD')
def linked_head():
    head('repo/HEAD')
    os.symlink('repo/HEAD', 'HEAD')
def git_file():
    head('repo/HEAD')
    pathlib.Path('.git').write_text('gitdir: repo\\n')
def git_file_in_placeholder():
    head('repo/HEAD')
    os.rmdir('.git')
    pathlib.Path('.git').write_text('gitdir: repo\\n')
def commondir():
    head('repo/HEAD')
    pathlib.Path('commondir').write_text('repo\\n')
    head('HEAD')
"""

ATTACKS = [
    "head('HEAD')",
    "renamed_head()",
    "linked_head()",
    "git_file()",
    "git_file_in_placeholder()",
    "commondir()",
]


def _init(path: Path, *options: str) -> None:
    subprocess.run(["git", "init", "-q", *options, str(path)], check=True)


def _commit_all(path: Path) -> None:
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    commit = ["-c", "user.name=a", "-c", "user.email=a@example.org", "commit", "-q", "-m", "x"]
    subprocess.run(["git", "-C", str(path), *commit], check=True)


def _git_runs_plant(cwd: Path, marker: Path) -> tuple[bool, str]:
    """Run `git status` on the host in `cwd`: whether it ran the planted fsmonitor, and the
    git directory it used (empty if none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status", "--short"], cwd=cwd, capture_output=True, env=env, timeout=30)
    done = subprocess.run(
        ["git", "rev-parse", "--absolute-git-dir"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    return marker.exists(), done.stdout.strip()


async def _attack(workspace: Path, marker: Path, checked: Path) -> list[str]:
    """Plant the repository at the workspace's top and in `repo/`, try every attack; check git
    on the host in `checked` while the kernel runs."""
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        outcomes = await probe(
            executor,
            PLANT
            + f"plant('.', {str(marker)!r}); plant('repo', {str(marker)!r})\n"
            + f"print(_json.dumps([attempt(lambda a=a: eval(a)) for a in {ATTACKS!r}]))",
        )
        ran, git_dir = _git_runs_plant(checked, marker)
        assert not ran, "git on the host ran the kernel's fsmonitor during the session"
        assert not git_dir.startswith(str(workspace)), git_dir
    return outcomes


async def test_workspace_cannot_become_a_git_directory(workspace: Path, tmp_path: Path) -> None:
    """Bare repository at the top, `HEAD` by rename or link, a `.git` file naming a kernel-made
    git dir (also in place of the `.git` stand-in), a `commondir` pointing to one."""
    marker = tmp_path / "fsmonitor-ran"
    outcomes = await _attack(workspace, marker, workspace)
    for outcome in outcomes:
        assert not outcome.startswith("ok"), outcomes
    assert (workspace / "config").is_file() and (workspace / "repo" / "HEAD").is_file()  # planted
    for cwd in (workspace, workspace / "objects"):  # after the session: HEAD and .git are gone
        ran, git_dir = _git_runs_plant(cwd, marker)
        assert not ran and not git_dir.startswith(str(workspace)), git_dir
    assert not (workspace / "HEAD").exists() and not (workspace / ".git").exists()


async def test_workspace_in_a_repository_stays_part_of_it(tmp_path: Path) -> None:
    """A workspace inside the user's repository: git there keeps using the user's `.git`."""
    repo = tmp_path / "project"
    workspace = repo / "agent"
    workspace.mkdir(parents=True)
    _init(repo)
    marker = tmp_path / "fsmonitor-ran"
    outcomes = await _attack(workspace, marker, workspace)
    assert not [o for o in outcomes if o.startswith("ok")], outcomes
    ran, git_dir = _git_runs_plant(workspace, marker)
    assert not ran and git_dir == str(repo / ".git")


async def test_an_existing_bare_repository_is_protected(workspace: Path, tmp_path: Path) -> None:
    """A bare repository in the workspace: its config, hooks and `commondir` are read-only
    to the kernel."""
    _init(workspace / "mirror.git", "--bare")
    marker = tmp_path / "fsmonitor-ran"
    hook = f"touch {marker}; false"
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        outcomes = await probe(
            executor,
            "import subprocess\n"
            + f"cmd = ['git', '-C', 'mirror.git', 'config', 'core.fsmonitor', {hook!r}]\n"
            + "cfg = lambda: subprocess.run(cmd, check=True, capture_output=True)\n"
            + "out = [attempt(cfg), attempt(lambda: open('mirror.git/config', 'a').write('x'))]\n"
            + "out.append(attempt(lambda: open('mirror.git/commondir', 'w').write('..')))\n"
            + "out.append(attempt(lambda: open('mirror.git/hooks/post-checkout', 'w').write('x')))\n"
            + "print(_json.dumps(out))",
        )
    assert not [o for o in outcomes if o.startswith("ok")], outcomes
    ran, git_dir = _git_runs_plant(workspace / "mirror.git", marker)
    assert not ran and git_dir == str(workspace / "mirror.git")


#: Kernel code: `repo(d, worktree)` makes `d` a complete git directory whose fsmonitor touches
#: MARKER (the files one by one, so each refused part shows in the outcome).
REPO = """
def repo(d, marker, worktree='.'):
    out = []
    for part in ('objects', 'refs/heads'):
        out.append(attempt(lambda: os.makedirs(f'{d}/{part}', exist_ok=True)))
    config = ('[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n'
              f'\\tworktree = {worktree}\\n\\tfsmonitor = "touch {marker}; false"\\n')
    out.append(attempt(lambda: pathlib.Path(d, 'config').write_text(config)))
    out.append(attempt(lambda: pathlib.Path(d, 'HEAD').write_text('ref: refs/heads/main\\n')))
    return out
def swap(d):
    os.rename(d, d + '-old')
    os.makedirs(d)
    return repo(d, MARKER)
"""


async def test_no_existing_folder_can_become_a_repository(workspace: Path, tmp_path: Path) -> None:
    """In a git project, the kernel tries to make existing folders at every depth repositories
    of its own: bare in a tracked folder and in a deep one, a `.git` directory in another, a
    `.git` file naming a repository it made in a new folder, the missing parts of a folder that
    already looks half like a git directory, and a folder moved away for one of its own. git on
    the host, run in each of them during and after the session, keeps using the project's
    repository and never runs the kernel's fsmonitor."""
    for folder in ("src/pkg", "docs/a/b", "half/refs/heads"):
        (workspace / folder).mkdir(parents=True)
        (workspace / folder / "keep.txt").write_text("tracked\n")
    (workspace / "half" / "HEAD").write_text("ref: refs/heads/main\n")  # user data that looks like git
    _init(workspace)
    _commit_all(workspace)
    marker = tmp_path / "fsmonitor-ran"
    attacks = {
        "bare in a tracked folder": "repo('src', MARKER)",
        "bare deep down": "repo('docs/a/b', MARKER)",
        ".git directory": "repo('src/pkg/.git', MARKER, '..')",
        ".git file to a new repository": "repo('new/deep/er', MARKER, '../../../docs/a') + "
        "[attempt(lambda: pathlib.Path('docs/a/.git').write_text('gitdir: ../../new/deep/er\\n'))]",
        "completing a half git directory": "repo('half', MARKER)",
        "folder swapped": "[attempt(lambda: swap('docs'))]",
    }
    checked = ["", "src", "src/pkg", "docs", "docs/a", "docs/a/b", "half"]
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        outcomes = await probe(
            executor,
            REPO
            + f"MARKER = {str(marker)!r}\n"
            + f"print(_json.dumps({{k: eval(v) for k, v in {attacks!r}.items()}}))",
        )
        during = {cwd: _git_runs_plant(workspace / cwd, marker) for cwd in checked}
    after = {cwd: _git_runs_plant(workspace / cwd, marker) for cwd in checked}
    # what makes a folder a repository was refused every time (the rest is ordinary files)
    if bare_repositories_allowed():  # else git ignores bare repositories it was not pointed to
        assert outcomes["bare in a tracked folder"][-1].startswith("IsADirectoryError"), outcomes
        assert outcomes["bare deep down"][-1].startswith("IsADirectoryError"), outcomes
    assert not outcomes[".git directory"][0].startswith("ok"), outcomes
    assert outcomes[".git file to a new repository"][-2] == "ok: 21", outcomes  # a new folder is the kernel's
    assert not outcomes[".git file to a new repository"][-1].startswith("ok"), outcomes
    objects, _, config, head = outcomes["completing a half git directory"]  # refs/heads was there
    assert not [o for o in (objects, config, head) if o.startswith("ok")], outcomes
    assert outcomes["folder swapped"][0].startswith("OSError"), outcomes  # busy: a mount point
    for cwd, (ran, git_dir) in [*during.items(), *after.items()]:
        assert not ran, f"git in {cwd or '.'} ran the kernel's fsmonitor"
        assert git_dir == str(workspace / ".git"), (cwd, git_dir)
