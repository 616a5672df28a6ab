"""Paths in a kernel-writable directory that programs on the host run or trust on routine use.

A kernel must not write them: what it put there would run outside the sandbox the next time
the user runs `git status`, opens the folder in an editor or starts Claude Code there. See
docs/sandbox.md ("What the kernel may not write") for the list and the reasoning.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from ipybox._programs import which

logger = logging.getLogger(__name__)

#: Names protected wherever they exist in a writable directory (down to `SCAN_DEPTH`):
#: git's repository (config, hooks, commondir, worktrees, modules, info, index) or a `.git`
#: file redirecting to one; editors' task and settings files; Claude Code's settings (hooks)
#: and project MCP servers; direnv's `.envrc` (an approved one may source other files); the
#: pre-commit configuration (its hooks run on every commit).
AUTORUN_NAMES = (".git", ".vscode", ".idea", ".claude", ".mcp.json", ".envrc", ".pre-commit-config.yaml")

#: Names whose creation at the top of a writable directory is blocked, with the kind of
#: placeholder that stands in for them while a sandbox runs: "dir" (git, finding an empty
#: `.git` directory, looks further up as if it were not there) or "file".
#: `HEAD`: git's discovery takes a directory with a `HEAD` naming a ref, `objects/` and `refs/`
#: for a (bare) git directory, config and all; an empty `HEAD` names none, so git looks
#: further up, and the kernel's `config` (`core.fsmonitor`) next to it is never read.
#: `.envrc` and `.pre-commit-config.yaml` are left out: direnv runs a new `.envrc` only once
#: the user approves it, pre-commit runs only when the user installed it (and its config
#: then exists).
CREATION_BLOCKED = {
    ".git": "dir",
    "HEAD": "file",
    ".vscode": "dir",
    ".idea": "dir",
    ".claude": "dir",
    ".mcp.json": "file",
}

#: What git reads and runs from a git directory: protected at the top of a writable directory
#: that is one (a bare repository as workspace); a git directory below it is protected whole.
GIT_DIR_NAMES = ("config", "config.worktree", "commondir", "hooks", "info", "worktrees", "modules")

#: Shell and tool start-up files in the user's home, protected (with placeholders where
#: missing) if a policy makes the home directory writable.
HOME_NAMES = {
    **dict.fromkeys(
        (".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile")
        + (".zshrc", ".zshenv", ".zprofile", ".zlogin", ".gitconfig"),
        "file",
    ),
    **dict.fromkeys((".config", ".local", ".ssh"), "dir"),
}

#: How deep below a writable directory existing auto-run paths are looked for.
SCAN_DEPTH = 3

#: Directories not searched: dependency trees that no host program treats as a project.
_SKIP = frozenset(("node_modules", "__pycache__", ".venv", "venv", "site-packages"))


def protected_paths(root: Path) -> list[Path]:
    """The auto-run paths that exist in the writable directory `root`, plus what git's
    configuration there names (a `.git` file's git dir, commondir, hooks path, scripts)."""
    found: list[Path] = []
    if is_git_dir(root):
        found += [root / name for name in GIT_DIR_NAMES]
    for path in _scan(root, SCAN_DEPTH):
        found.append(path)
        if path.name == ".git":
            found += _git_dirs(path)
    found += _git_config_paths(root)
    # a missing path inside a protected directory cannot be created anyway
    return [p for p in dict.fromkeys(found) if os.path.lexists(p)]


def _scan(root: Path, depth: int) -> Iterator[Path]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        if entry.name in AUTORUN_NAMES:
            yield Path(entry.path)
        elif depth > 1 and entry.name not in _SKIP and entry.is_dir(follow_symlinks=False):
            if is_git_dir(Path(entry.path)):
                yield Path(entry.path)  # a bare repository: protected like a `.git`
            else:
                yield from _scan(Path(entry.path), depth - 1)


def is_git_dir(path: Path) -> bool:
    """Whether git's discovery may take `path` itself for a git directory: it holds a
    non-empty `HEAD` file (git then checks that it names a ref) and `objects/` and `refs/`
    (or a `commondir` pointing to them)."""
    head = path / "HEAD"
    try:
        if head.is_symlink() or not head.is_file() or head.stat().st_size == 0:
            return False
    except OSError:
        return False
    return (path / "commondir").exists() or ((path / "objects").is_dir() and (path / "refs").is_dir())


def _git_dirs(dot_git: Path) -> list[Path]:
    """The repository a `.git` file points to (`gitdir: ...`) and its common dir."""
    found: list[Path] = []
    git_dir = dot_git
    if dot_git.is_file() and not dot_git.is_symlink():
        try:
            text = dot_git.read_text(errors="replace").strip()
        except OSError:
            return found
        if text.startswith("gitdir:"):
            git_dir = (dot_git.parent / text.removeprefix("gitdir:").strip()).resolve()
            found.append(git_dir)
    common = git_dir / "commondir"
    if common.is_file():
        try:
            found.append((git_dir / common.read_text().strip()).resolve())
        except OSError:
            pass
    return found


def _git_config_paths(root: Path) -> list[Path]:
    """Files and directories under `root` that git's configuration (of the repository at
    `root` and the user's) names as something to include, run or take hooks from."""
    git = which("git")
    if git is None or not (root / ".git").exists():
        return []
    try:
        done = subprocess.run(
            [git, "-C", str(root), "config", "--list", "--includes", "--show-origin", "-z"],
            capture_output=True,
            text=True,
            timeout=10,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    found: list[Path] = []
    items = done.stdout.split("\0")
    for origin, item in zip(items[::2], items[1::2], strict=False):
        key, _, value = item.partition("\n")
        base = (root / origin.removeprefix("file:")).parent if origin.startswith("file:") else root
        for word in _words(value):
            if "/" not in word and not key.endswith(".path") and key != "core.hookspath":
                continue
            word = os.path.expanduser(word)
            for candidate in {base / word, root / word}:
                if candidate.exists() and candidate.resolve().is_relative_to(root.resolve()):
                    found.append(candidate.resolve())
    return found


def _words(value: str) -> Iterable[str]:
    try:
        return shlex.split(value.removeprefix("!"))
    except ValueError:
        return value.split()
