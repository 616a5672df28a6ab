"""Repositories a sandboxed kernel makes where no mount can stop it (new folders, existing folders
beyond the guarded ones, routes through links, a process that outlives its cell) are disarmed
from the host: git on the host, run there, never runs what the kernel configured.

Each attack is a shell function that makes a repository whose `core.fsmonitor` (run by
`git status`), include, common dir or hook (run by `git commit`) touches a marker. The same
script is first run on the host, where every marker appears (the payloads are live), then by a
sandboxed kernel: once the sweep has been, git on the host runs in each repository during the
session and after it, and no marker appears. An agent's ordinary `git clone`/`git init` stays
as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox import autorun, repo_sweep

from .conftest import run, until

pytestmark = [pytest.mark.timeout(180)]

#: bash, with $1 the project to clone, $2 the markers' folder, $3 seconds before the background
#: attack; run in the project. Each attack leaves a repository whose payload touches $2/NAME.
PLANT = r"""
src=$1 m=$2 delay=$3
fs() { printf 'touch %s/%s; false' "$m" "$1"; }
bare_layout() {  # a git directory by hand, run as its own work tree
    mkdir -p "$1/objects" "$1/refs/heads"
    printf 'ref: refs/heads/main\n' > "$1/HEAD"
    printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = "%s"\n' \
        "$(fs "$2")" > "$1/config"
}
git_dir_only() {  # the same, but its work tree is wherever a .git file points from
    mkdir -p "$1/objects" "$1/refs/heads"
    printf 'ref: refs/heads/main\n' > "$1/HEAD"
    printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "%s"\n' "$(fs "$2")" \
        > "$1/config"
}
init_with() { mkdir -p "$1" && git init -q "$1" && git -C "$1" config "$2" "$3"; }

init_with new/init core.fsmonitor "$(fs init)"
bare_layout new/bare bare
git clone -q --bare "$src" new/clone.git
git -C new/clone.git config core.bare false
git -C new/clone.git config core.worktree .
git -C new/clone.git config core.fsmonitor "$(fs clone-bare)"
git_dir_only .store/g gitfile && mkdir -p new/wt && printf 'gitdir: ../../.store/g\n' > new/wt/.git
init_with tree/t39/leaf core.fsmonitor "$(fs deep-existing)"
init_with new/real core.fsmonitor "$(fs linked-folder)" && ln -s new/real linked
git_dir_only .store/g2 dot-git-link && mkdir -p new/sl && ln -s ../../.store/g2 new/sl/.git
git init -q new/inc && printf '[core]\n\tfsmonitor = "%s"\n' "$(fs include)" > new/inc.cfg
git -C new/inc config include.path ../../inc.cfg
mkdir -p .store/common/objects .store/common/refs/heads new/cd/.git
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "%s"\n' "$(fs commondir)" \
    > .store/common/config
printf 'ref: refs/heads/main\n' > new/cd/.git/HEAD
printf '../../../.store/common\n' > new/cd/.git/commondir
git init -q new/hook && printf '#!/bin/sh\ntouch %s/hook\n' "$m" > new/hook/.git/hooks/pre-commit
chmod +x new/hook/.git/hooks/pre-commit
init_with new/obst core.fsmonitor "$(fs obstacle)" && mkdir -p new/obst/.git/config.ipybox-disabled/x
init_with new/cl core.fsmonitor "$(fs config-link)" && mv new/cl/.git/config .store/cl-config
ln -s ../../../.store/cl-config new/cl/.git/config
git_dir_only "$TMPDIR/g3" private-dir && mkdir -p new/tp && printf 'gitdir: %s/g3\n' "$TMPDIR" > new/tp/.git
mkdir -p out && printf 'x\n' > out/HEAD && init_with out/logs/run core.fsmonitor "$(fs data-dir)"
init_with "$TMPDIR/lp" core.fsmonitor "$(fs link-private)" && ln -s "$TMPDIR/lp" new/lp
mkdir -p "$TMPDIR/pc/objects" "$TMPDIR/pc/refs/heads" "$TMPDIR/pw" new/pcw
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "%s"\n' "$(fs private-common)" \
    > "$TMPDIR/pc/config"
printf 'ref: refs/heads/main\n' > "$TMPDIR/pw/HEAD" && printf '../pc\n' > "$TMPDIR/pw/commondir"
printf 'gitdir: %s/pw\n' "$TMPDIR" > new/pcw/.git
git init -q new/long  # the setting after more than the sweep reads of a config in git's layout
{ printf '[core]\n\trepositoryformatversion = 0\n#'; head -c 1200000 /dev/zero | tr '\0' a
  printf '\n\tfsmonitor = "%s"\n' "$(fs long-config)"; } > new/long/.git/config
(sleep "$delay"; init_with new/bg core.fsmonitor "$(fs background)") > /dev/null 2>&1 &

# ordinary work: a clone, a repository of one's own, source files
git clone -q "$src" work/clone
init_with work/mine user.name agent
mkdir -p mcpparse gentools && echo 'x = 1' > mcpparse/a.py && echo 'y = 2' > gentools/b.py
"""

#: Where host git runs after each attack, the command, and the git directory whose disarming
#: the sweep leaves a trace in.
CHECKS = {
    "init": ("new/init", "new/init/.git"),
    "bare": ("new/bare", "new/bare"),
    "clone-bare": ("new/clone.git", "new/clone.git"),
    "gitfile": ("new/wt", ".store/g"),
    "deep-existing": ("tree/t39/leaf", "tree/t39/leaf/.git"),
    "linked-folder": ("linked", "new/real/.git"),
    "dot-git-link": ("new/sl", ".store/g2"),
    "include": ("new/inc", "new/inc/.git"),
    "commondir": ("new/cd", ".store/common"),
    "hook": ("new/hook", "new/hook/.git"),
    "background": ("new/bg", "new/bg/.git"),
    "private-dir": ("new/tp", "$TMPDIR/g3"),  # the kernel's own temp dir, outside the project
    "obstacle": ("new/obst", "new/obst/.git"),  # where ipybox sets the config aside, taken
    "config-link": ("new/cl", "new/cl/.git"),  # the config a link to a file elsewhere
    "data-dir": ("out/logs/run", "out/logs/run/.git"),  # in a folder named like git's data, beside a HEAD
    "link-private": ("new/lp", "$TMPDIR/lp/.git"),  # a link to a repository in the kernel's temp dir
    "private-common": ("new/pcw", "$TMPDIR/pc"),  # a common dir named from the kernel's temp dir
    "long-config": ("new/long", "new/long/.git"),  # the payload past the first MiB of the config
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def _project(path: Path) -> Path:
    """A git project with more folders than are guarded (`tree/t00` ... `tree/t39`, each with a
    `leaf/`), committed."""
    for i in range(40):
        (path / "tree" / f"t{i:02}" / "leaf").mkdir(parents=True)
        (path / "tree" / f"t{i:02}" / "leaf" / "keep.txt").write_text("tracked\n")
    git = ["git", "-C", str(path), "-c", "user.name=a", "-c", "user.email=a@example.org"]
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=_env())
    subprocess.run([*git, "add", "-A"], check=True, env=_env())
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True, env=_env())
    return path


def _host_git(project: Path) -> None:
    """Run git on the host where each attack left its repository, as a user (or prompt) would."""
    for name, (cwd, _) in CHECKS.items():
        if not (project / cwd).exists():
            continue  # a link into the kernel's temp dir, gone with the kernel
        if name == "hook":
            command = ["git", "-c", "user.name=a", "-c", "user.email=a@example.org", "commit", "-q"]
            command += ["--allow-empty", "-m", "x"]
        else:
            command = ["git", "status", "--short"]
        subprocess.run(command, cwd=project / cwd, capture_output=True, env=_env(), timeout=60)


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=_env())
    return done.stdout.strip()


def _ran(markers: Path) -> set[str]:
    return {p.name for p in markers.iterdir()} if markers.exists() else set()


def _expected() -> set[str]:
    # a user who set safe.bareRepository=explicit has git ignore the bare ones anyway
    return set(CHECKS) - (set() if autorun.bare_repositories_allowed() else {"bare", "clone-bare"})


def test_the_attacks_run_code_on_the_host_without_ipybox(tmp_path: Path) -> None:
    """The control: planted by a process on the host, every payload runs on git's next use."""
    project, markers = _project(tmp_path / "project"), tmp_path / "markers"
    markers.mkdir()
    plant = ["bash", "-e", "-c", PLANT, "plant", str(project), str(markers), "0"]
    (tmp_path / "tmp").mkdir()
    subprocess.run(plant, cwd=project, check=True, env={**_env(), "TMPDIR": str(tmp_path / "tmp")})
    background = project / "new" / "bg" / ".git" / "config"
    for _ in range(600):  # a polling limit for the background attack (no delay here)
        if background.exists() and "fsmonitor" in background.read_text():
            break
        time.sleep(0.05)
    _host_git(project)
    assert _ran(markers) >= _expected()


@pytest.mark.usefixtures("srt_available")
async def test_repositories_the_kernel_makes_run_nothing_on_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every attack succeeds inside the sandbox (nothing there stops a new repository), and is
    disarmed by the sweep while the kernel runs (the background one after its cell ended) and
    still after the session; the agent's own clone and repository stay as they were. The last
    sweep, which walks every directory the kernel made (millions, if it made them), runs off
    the event loop, which the other executors of the process (an MCP server's) share."""
    project, markers = _project(tmp_path / "project"), tmp_path / "markers"
    markers.mkdir()
    finished_in: list[threading.Thread] = []
    finish = repo_sweep.RepoSweep.finish

    def recorded(self: repo_sweep.RepoSweep) -> list[Path]:
        finished_in.append(threading.current_thread())
        return finish(self)

    monkeypatch.setattr(repo_sweep.RepoSweep, "finish", recorded)
    code = (
        "import os, subprocess\n"
        f"done = subprocess.run(['bash', '-e', '-c', {PLANT!r}, 'plant', '.', {str(markers)!r}, '2'],"
        " capture_output=True, text=True)\n"
        "print(os.environ['TMPDIR'], done.returncode, repr(done.stderr[-2000:]))"
    )
    async with CodeExecutor(sandbox=True, working_dir=project, spare_kernel=False) as executor:
        tmpdir, returncode, _ = (await run(executor, code)).split(" ", 2)
        assert returncode == "0", "the attacks did not run in the sandbox"
        git_dirs = [project / v[1].replace("$TMPDIR", tmpdir) for v in CHECKS.values()]

        def disarmed() -> bool:
            return all(
                (git_dir / "config.ipybox-disabled").is_file() or (git_dir / "hooks.ipybox-disabled").is_dir()
                for git_dir in git_dirs
            )

        await until(disarmed, timeout=60)
        _host_git(project)
        assert _ran(markers) == set(), "git on the host ran a kernel's payload during the session"
    assert finished_in and threading.main_thread() not in finished_in
    _host_git(project)
    assert _ran(markers) == set(), "git on the host ran a kernel's payload after the session"
    # ordinary work: untouched, and usable from the host
    for repo in ("work/clone", "work/mine"):
        assert not list((project / repo / ".git").glob("*.ipybox-disabled")), repo
    head = _git(project, "rev-parse", "HEAD")
    assert _git(project / "work/clone", "rev-parse", "HEAD") == head
    assert _git(project / "work/mine", "config", "user.name") == "agent"
    assert (project / "mcpparse" / "a.py").read_text() == "x = 1\n"
    # the disarmed repositories keep their data: the bare clone still has its remote and commits
    assert _git(project / "new/clone.git", "config", "remote.origin.url") == f"{project}/."
    assert _git(project / "new/clone.git", "rev-parse", "HEAD") == head


def test_kept_settings_survive_being_written_again(tmp_path: Path) -> None:
    """The safe settings are written back as git reads them, whatever characters they hold;
    the rest goes."""
    settings = [
        ("core.bare", "false"),
        ("core.logallrefupdates", None),
        ('remote.we"ird\\name.url', 'https://h/x "q" \\ end\n2\tt'),
        ("branch.a.b.merge", "refs/heads/a.b"),
    ]
    config = tmp_path / "config"
    config.write_text(repo_sweep._config_text(settings))
    assert repo_sweep._settings(config.read_bytes()) == settings
    config.write_text('[core]\n\tfsmonitor = x\n[remote "o"]\n\turl = u\n\tuploadpack = y\n')
    config.write_text(config.read_text() + "[include]\n\tpath = z\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert repo_sweep._disarm_config(fd, "config")
    finally:
        os.close(fd)
    assert repo_sweep._settings(config.read_bytes()) == [("remote.o.url", "u")]
    assert "fsmonitor" in (tmp_path / "config.ipybox-disabled").read_text()


def test_the_last_sweep_of_a_killed_ipybox_comes_with_the_next_sandbox(
    tmp_path: Path, state_dir: Path
) -> None:
    """ipybox killed outright, before its last sweep, with a kernel's repository left armed: the
    next sandbox this user starts (in any workspace) disarms it first."""
    root, other, markers, records = (
        tmp_path / "ws",
        tmp_path / "other",
        tmp_path / "markers",
        tmp_path / "rec",
    )
    for path in (root, other, markers):
        path.mkdir()
    repo = root / "r"
    killed = (
        "import os, pathlib, subprocess\n"
        "from ipybox.sandbox import repo_sweep\n"
        "repo_sweep.RepoSweep.start = lambda self: None  # killed before any sweep\n"
        f"repo_sweep.watch(pathlib.Path({str(tmp_path / 'rt')!r}), pathlib.Path({str(records)!r}), "
        f"[pathlib.Path({str(root)!r})], [])\n"
        f"subprocess.run(['git', 'init', '-q', {str(repo)!r}], check=True)\n"
        f"subprocess.run(['git', '-C', {str(repo)!r}, 'config', 'core.fsmonitor', "
        f"'touch {markers}/killed; false'], check=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    assert subprocess.run([sys.executable, "-c", killed], env=_env()).returncode == -9
    assert _git(repo, "config", "core.fsmonitor")  # left armed
    repo_sweep.watch(tmp_path / "rt2", records, [other], [])
    repo_sweep.finish(tmp_path / "rt2")
    subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True, env=_env(), timeout=60)
    assert _ran(markers) == set()
    assert not _git(repo, "config", "core.fsmonitor")
    assert not records.exists()  # nothing left to do


def test_your_own_repository_is_left_alone_until_something_changes_what_git_runs(tmp_path: Path) -> None:
    """A repository that was there before (not kept read-only: deeper than the sandbox looks,
    say), with its own hook: using it (git writes its index, refs, logs) leaves it as it is; a
    hook or setting written after the sandbox started is disarmed."""
    repo, markers = tmp_path / "ws" / "deep" / "repo", tmp_path / "markers"
    markers.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=_env())
    (repo / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".git" / "hooks" / "pre-commit").chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "config", "core.pager", "less"], check=True, env=_env())
    sweep = repo_sweep.RepoSweep([tmp_path / "ws"])
    sweep.since_ns = time.time_ns()
    probe = tmp_path / "probe"
    for _ in range(1000):  # until file times (a coarser clock) are past the start
        probe.write_text("x")
        if probe.stat().st_ctime_ns > sweep.since_ns:
            break
        time.sleep(0.01)
    commit = ["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@example.org", "commit"]
    subprocess.run([*commit, "-q", "--allow-empty", "-m", "x"], check=True, env=_env())
    assert sweep.sweep() == []
    assert _git(repo, "config", "core.pager") == "less"
    (repo / ".git" / "hooks" / "pre-commit").write_text(f"#!/bin/sh\ntouch {markers}/hook\n")  # in place
    assert sweep.sweep() == [repo / ".git"]
    subprocess.run([*commit, "-q", "--allow-empty", "-m", "y"], check=True, env=_env())
    assert _ran(markers) == set()
    assert not _git(repo, "config", "core.pager")


@pytest.mark.parametrize(
    "text",
    [
        '[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote "origin"]\n\turl = u\n',
        "[core] fsmonitor = x\n",  # a setting on the section's line
        '[core]\n\tbare = "false\\\n\tfsmonitor = x"\n',  # a continued value that looks like one
        "[core]\n\tbare = false\\\nfsmonitor = x\n",
        "\ufeff[core]\n\tfsmonitor = x\n",  # git skips a byte-order mark
        "[core.x]\n\tbare = false\n",  # the old way of writing a subsection
        "[CORE]\n\tFsMonitor = x\n",
        "[core]\r\n\tfsmonitor = x\r\n",
        "[core]\n\tbare = false\n[include]\n\tpath = x\n",
        '[includeIf "gitdir:/"]\n\tpath = x\n',
        "  [core]\n\tfsmonitor = x\n",
        "[core]\n\tbare = false ; fsmonitor = x\n",
        "[core]\n\tbare\n\tfsmonitor\n",
    ],
)
def test_a_config_passed_without_git_is_one_git_finds_safe(text: str) -> None:
    """The shortcut for configs in git's own layout never calls safe what git reads otherwise."""
    data = text.encode()
    settings = repo_sweep._settings(data)
    git_says_safe = settings is not None and all(repo_sweep._SAFE_SETTING.fullmatch(k) for k, _ in settings)
    assert not repo_sweep._plainly_safe(data) or git_says_safe
    if text.startswith("[core]\n\trepositoryformatversion"):
        assert repo_sweep._plainly_safe(data)  # what git writes: no need to ask it


@pytest.mark.parametrize(
    "padding",
    [
        "#" + "a" * (2 << 20) + "\n",  # one comment line
        "\tbare = false\n" * 200_000,  # safe settings
        '[remote "o"]\n\turl = ' + "u" * (2 << 20) + "\n[core]\n",  # one long safe value
    ],
)
def test_a_config_too_large_to_read_is_disabled_whole(tmp_path: Path, padding: str) -> None:
    """What git would run may follow whatever part of the config the sweep reads: a file that
    large is set aside unread, whatever its first MiB holds."""
    config = tmp_path / "config"
    config.write_text(f"[core]\n\trepositoryformatversion = 0\n{padding}\tfsmonitor = x\n")
    assert any(k == "core.fsmonitor" for k, _ in repo_sweep._settings(config.read_bytes()) or [])
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert repo_sweep._disarm_config(fd, "config")
    finally:
        os.close(fd)
    assert not config.exists() and (tmp_path / "config.ipybox-disabled").stat().st_size > 2 << 20


def _armed(repo: Path, markers: Path, name: str) -> None:
    """A repository whose `git status` on the host touches `markers/name` (fsmonitor)."""
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=_env())
    subprocess.run(
        ["git", "-C", str(repo), "config", "core.fsmonitor", f"touch {markers}/{name}; false"], env=_env()
    )


def _status(*repos: Path) -> None:
    for repo in repos:
        subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True, env=_env(), timeout=60)


def test_more_directories_than_a_sweep_walks_hide_no_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel that makes more directories than one sweep walks (MAX_SWEPT, made small here)
    puts its repository beyond them: shallow, deep, in a `node_modules` tree (walked last). The
    background sweeps go on where the last one stopped, and the last sweep walks everything."""
    monkeypatch.setattr(repo_sweep, "MAX_SWEPT", 30)
    ws, markers = tmp_path / "ws", tmp_path / "markers"
    markers.mkdir()
    for i in range(40):
        (ws / f"d{i:02}" / "sub").mkdir(parents=True)
    repos = {
        "shallow": ws / "zz",
        "deep": ws / "d39" / "sub" / "a" / "b" / "c",
        "node-modules": ws / "node_modules" / "pkg" / "x",
    }
    for name, repo in repos.items():
        _armed(repo, markers, name)
    sweep = repo_sweep.RepoSweep([ws])
    sweep.since_ns = 0  # everything here is the kernel's
    found: set[Path] = set()
    for _ in range(10):  # each walks at most 30 of the ~90 directories
        found |= set(sweep.sweep(repo_sweep.MAX_SWEPT))
    assert found >= {repo / ".git" for repo in repos.values()}
    _status(*repos.values())
    assert _ran(markers) == set()
    late = ws / "d39" / "sub" / "late"  # made after those sweeps: the last one walks it all
    _armed(late, markers, "late")
    assert sweep.finish() == [late / ".git"]
    _status(late)
    assert _ran(markers) == set()


#: A `git` first on PATH that runs $IPYBOX_TEST_RACE once (the kernel, acting while the sweep
#: asks git what a config holds), then the real git.
_RACING_GIT = (
    '#!/bin/sh\n[ -f "$IPYBOX_TEST_RACE" ] && sh "$IPYBOX_TEST_RACE" && rm "$IPYBOX_TEST_RACE"\n'
    'exec {git} "$@"\n'
)


@pytest.mark.parametrize(
    "swap",
    [
        "mv {evil} {git_dir}/config",  # a config renamed into place
        "cat {evil} > {git_dir}/config",  # written in place
        "{git} -C {git_dir} config extensions.worktreeConfig true && mv {evil} {git_dir}/config.worktree",
        "printf '#!/bin/sh\\ntouch {markers}/status\\n' > {git_dir}/hooks/pre-commit"
        " && chmod +x {git_dir}/hooks/pre-commit",
    ],
)
def test_a_change_made_while_the_sweep_reads_is_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    """The kernel sees the sweep read its config (the file's access time) and, while the sweep
    asks git what it holds, arms the repository: the next sweep disarms it (the state a sweep
    keeps is the one it looked at, not the one after)."""
    ws, markers, bin_dir = tmp_path / "ws", tmp_path / "markers", tmp_path / "bin"
    for path in (markers, bin_dir):
        path.mkdir()
    repo = ws / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=_env())
    git_dir = repo / ".git"
    (git_dir / "config").write_text("[core] repositoryformatversion = 0\n\tbare = false\n")  # git is asked
    evil = tmp_path / "evil"
    evil.write_text(f'[core]\n\tbare = false\n\tfsmonitor = "touch {markers}/status; false"\n')
    race = tmp_path / "race.sh"
    real_git = repo_sweep.which("git")
    race.write_text(swap.format(evil=evil, git_dir=git_dir, markers=markers, git=real_git))
    (bin_dir / "git").write_text(_RACING_GIT.format(git=real_git))
    (bin_dir / "git").chmod(0o755)
    sweep = repo_sweep.RepoSweep([ws])
    sweep.since_ns = 0
    monkeypatch.setenv("IPYBOX_TEST_RACE", str(race))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    sweep.sweep()
    assert not race.exists(), "the kernel's change did not come while the sweep read"
    monkeypatch.undo()
    sweep.sweep()
    subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True, env=_env(), timeout=60)
    commit = ["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@example.org", "commit"]
    subprocess.run([*commit, "-q", "--allow-empty", "-m", "x"], capture_output=True, env=_env(), timeout=60)
    assert _ran(markers) == set()


def _deep(folder: Path, depth: int = 1200) -> None:
    """`folder` holding a chain of `depth` folders (deeper than Python recurses)."""
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


def test_no_tree_of_the_kernels_stops_the_sweep(tmp_path: Path) -> None:
    """Deep trees where ipybox sets a config or hooks aside (in the way of the name, or as the
    hooks themselves, with a file in the way) are moved beside it, never walked to be removed: the
    repository is disarmed, and so is every other one (a sweep that failed at one stopped them all)."""
    ws, markers = tmp_path / "ws", tmp_path / "markers"
    markers.mkdir()
    repos = [ws / "a", ws / "b", ws / "c", ws / "later"]
    for repo in repos:
        _armed(repo, markers, repo.name)
    _deep(ws / "a" / ".git" / "config.ipybox-disabled")
    _deep(ws / "b" / ".git" / "hooks.ipybox-disabled")
    (ws / "b" / ".git" / "hooks" / "pre-commit").write_text(f"#!/bin/sh\ntouch {markers}/b-hook\n")
    (ws / "b" / ".git" / "hooks" / "pre-commit").chmod(0o755)
    hooks = ws / "c" / ".git" / "hooks"
    for sample in hooks.iterdir():
        sample.unlink()
    hooks.rmdir()
    _deep(hooks)  # a deep hooks folder, and a file where it would go
    (hooks / "post-checkout").write_text(f"#!/bin/sh\ntouch {markers}/c-hook\n")
    (ws / "c" / ".git" / "hooks.ipybox-disabled").write_text("x")
    sweep = repo_sweep.RepoSweep([ws])
    sweep.since_ns = 0
    try:
        assert set(sweep.sweep()) == {repo / ".git" for repo in repos}
        _status(*repos)
        commit = [
            "git",
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@example.org",
            "commit",
            "-q",
            "--allow-empty",
        ]
        for repo in repos:
            subprocess.run([*commit, "-m", "x"], cwd=repo, capture_output=True, env=_env(), timeout=60)
        assert _ran(markers) == set()
        assert len(list((ws / "a" / ".git").glob("config.ipybox-disabled-*"))) == 1  # the kernel's, kept
    finally:  # rm walks any depth; pytest's own clean-up (shutil.rmtree) recurses and would fail
        subprocess.run(["rm", "-rf", str(ws)], check=True)


#: bash, with $1 the markers' folder: arms three repositories in out/ (a `.git`, out/ itself as a
#: git directory, a `.git` file naming one) and keeps arming them again in the background, so
#: that a download copies them armed whenever it comes, however soon the sweep disarmed them.
ARM_OUT = r"""
m=$1
fs() { printf 'touch %s/%s; false' "$m" "$1"; }
layout() {  # $1: a git directory by hand with fsmonitor $2, its work tree $3
    mkdir -p "$1/objects" "$1/refs/heads" && printf 'ref: refs/heads/main\n' > "$1/HEAD"
    printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = %s\n\tfsmonitor = "%s"\n' \
        "$3" "$(fs "$2")" > "$1/config.new" && mv "$1/config.new" "$1/config"
}
arm() {
    git init -q out/inner && git -C out/inner config core.fsmonitor "$(fs dl-inner)"
    layout out dl-top .
    layout out/store dl-gitfile ../wt && mkdir -p out/wt && printf 'gitdir: ../store\n' > out/wt/.git
}
arm
(while :; do arm; sleep 0.02; done) > /dev/null 2>&1 &
"""


@pytest.mark.usefixtures("srt_available")
async def test_a_download_carries_no_armed_repository_out(tmp_path: Path) -> None:
    """The sweep only reaches the writable directories: repositories in a tree downloaded from a
    sandboxed kernel are disarmed in the copy (here armed again all the time, so the copy is
    taken armed), and git run there on the host runs nothing of the kernel's."""
    project, markers, target = _project(tmp_path / "project"), tmp_path / "markers", tmp_path / "results"
    markers.mkdir()
    code = f"import subprocess\nsubprocess.run(['bash', '-e', '-c', {ARM_OUT!r}, 'arm', {str(markers)!r}])"
    async with CodeExecutor(sandbox=True, working_dir=project, spare_kernel=False) as executor:
        await run(executor, code)
        await executor.download("out", target)
    assert (
        (target / "inner" / ".git").is_dir()
        and (target / "HEAD").is_file()
        and (target / "wt" / ".git").is_file()
    )
    _status(target / "inner", target, target / "wt")
    assert _ran(markers) == set(), "git on the host ran a payload of a downloaded repository"
    for git_dir in (target / "inner" / ".git", target, target / "store"):
        assert (git_dir / "config.ipybox-disabled").is_file(), git_dir
