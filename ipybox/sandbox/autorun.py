"""Paths in a kernel-writable directory that programs on the host run or trust on routine use.

A kernel must not write them: what it put there would run outside the sandbox the next time
the user runs `git status` (or a shell prompt runs it), starts a Python environment's
interpreter, opens the folder in an editor or starts Claude Code there. Protection is by
class, at any depth: every existing directory of a writable root is walked once per kernel
start. See docs/sandbox.md ("What the kernel may not write") for the threat model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ipybox import _safe_fs
from ipybox._programs import which
from ipybox.sandbox import reads

logger = logging.getLogger(__name__)

#: Project settings of other coding agents and editors that start programs they name when they
#: start in (or open) the folder: MCP servers, hooks, plugins, language servers, lint commands.
#: Gemini CLI (`.gemini/settings.json`), Codex (`.codex/config.toml`), Cursor (`.cursor/mcp.json`,
#: `hooks.json`), Zed (`.zed/settings.json`), opencode (`.opencode/` plugins, `opencode.json`),
#: Continue (`.continue/`), Roo Code (`.roo/mcp.json`), Kiro (`.kiro/settings/mcp.json`, hooks),
#: Amazon Q (`.amazonq/mcp.json`), Helix (`.helix/languages.toml`), aider (`.aider.conf.yml`:
#: `lint-cmd` runs after each edit), Windsurf (`.windsurf/hooks.json`), Cline
#: (`.clinerules/hooks/`), Qwen Code (`.qwen/settings.json`), Kilo Code (`.kilocode/mcp.json`),
#: Factory's droid (`.factory/`: MCP servers, hooks), Crush (`crush.json`, `.crush.json`: MCP
#: and language servers), Augment's Auggie (`.augment/settings.json`: hooks), Amp (`.amp/settings.json`,
#: found upward to the repository's top: MCP servers, which tools run without asking). Each maps to the
#: kind of stand-in that keeps a missing one absent for its program (see `CREATION_BLOCKED`): an
#: empty directory, or a file that sets nothing.
AGENT_SETTINGS = {
    **dict.fromkeys((".gemini", ".codex", ".cursor", ".zed", ".opencode", ".continue"), "dir"),
    **dict.fromkeys((".roo", ".kiro", ".amazonq", ".helix"), "dir"),
    **dict.fromkeys(
        (".windsurf", ".clinerules", ".qwen", ".kilocode", ".factory", ".augment", ".amp"), "dir"
    ),
    **dict.fromkeys(("opencode.json", "opencode.jsonc", "crush.json", ".crush.json"), "json"),
    ".aider.conf.yml": "json",  # `{}`: an empty mapping in YAML too
}

#: What the git hooks of hook managers run from the work tree on every commit: pre-commit's
#: configuration, husky's hook scripts (`.husky/pre-commit`, run by the stubs in `.husky/_` that
#: `core.hooksPath` names), lefthook's configuration (with its `-local` one merged in).
HOOK_MANAGERS = (
    ".pre-commit-config.yaml",
    ".husky",
    *(
        f"{dot}lefthook{local}.{ext}"
        for dot in ("", ".")
        for local in ("", "-local")
        for ext in ("yml", "yaml", "json", "jsonc", "toml")
    ),
)


def hook_standins(root: Path) -> dict[Path, str]:
    """Stand-ins (path: kind) for lefthook's local configurations at the top of `root` where
    lefthook's configuration is there: lefthook merges a new `lefthook-local.yml` into it, and
    its hooks would run what the kernel put there. `{}` (an empty mapping in YAML and JSON) and
    an empty TOML file change nothing."""
    names = [n for n in HOOK_MANAGERS if "lefthook" in n]
    if not any(os.path.lexists(root / n) for n in names if "-local" not in n):
        return {}
    return {root / n: "file" if n.endswith(".toml") else "json" for n in names if "-local" in n}


#: mise's project configuration: `mise.toml` and `.mise.toml` with their `.local` and per
#: environment (`MISE_ENV`: `mise.staging.toml`) variants, `.mise/` and `mise/` (their
#: `config.toml`), and `mise.toml` or `mise/` in `.config/`. mise trusts such a file by its path
#: (`mise trust`, or a `trusted_config_paths` prefix), not its content, so a shell with
#: `mise activate` runs what a trusted file's `[env]` (`_.source` scripts, `exec()` templates) and
#: `[hooks]` say on every prompt in the folder and below, whatever was written since.
_MISE = re.compile(r"\.?mise(?:\.[^/]+)?\.toml|\.?mise")


def _trusted_by_path(folder: Path, name: str) -> bool:
    """Whether `folder/name` is a configuration that a tool runs commands from once its path
    was trusted (see `_MISE`); cheap for other names (looked up for every entry)."""
    if "mise" not in name or not _MISE.fullmatch(name):
        return False
    return name != "mise" or folder.name == ".config" or os.path.lexists(folder / name / "config.toml")


#: Settings in a folder of a name that holds much else: GitHub Copilot CLI runs the hooks of
#: `.github/hooks/*.json` in the folder it starts in, on its own. Protected as the
#: `AUTORUN_NAMES` are; the rest of `.github` (workflows, templates) is the project's own.
NESTED_SETTINGS = (".github/hooks",)


def _nested_setting(folder: Path, name: str) -> bool:
    """Whether `folder/name` is one of `NESTED_SETTINGS` (cheap: looked up for every entry)."""
    return f"{folder.name}/{name}" in NESTED_SETTINGS


def nested_standins(root: Path) -> dict[Path, str]:
    """Stand-ins (path: kind) for the `NESTED_SETTINGS` at the top of `root` whose folder is there
    (an empty folder: no hooks); where it is not, the sweep sets aside one a kernel makes (a
    stand-in would make the folder, which would then be read-only to the agent)."""
    return {root / path: "dir" for path in NESTED_SETTINGS if os.path.isdir(root / path.split("/")[0])}


#: Other version control systems' repositories, whose configuration their tool runs from on
#: every command (a prompt's status included): Mercurial's `.hg/hgrc` (`[hooks]` such as
#: `pre-status`, `[extensions]` loaded from a path), Jujutsu's `.jj/repo/config.toml` (pager,
#: diff and merge tools, fsmonitor), Sapling's `.sl/config`.
OTHER_VCS = (".hg", ".jj", ".sl")

#: Names protected whole wherever they exist in a writable directory: git's repository (or a
#: `.git` file redirecting to one) and other version control systems' (`OTHER_VCS`); editors'
#: task and settings files; Claude Code's settings (hooks) and project MCP servers; direnv's
#: `.envrc` (an approved one may source other files); hook managers' files (`HOOK_MANAGERS`);
#: other agents' and editors' settings (`AGENT_SETTINGS`).
AUTORUN_NAMES = frozenset(
    (
        ".git",
        *OTHER_VCS,
        ".vscode",
        ".idea",
        ".claude",
        ".mcp.json",
        ".envrc",
        *HOOK_MANAGERS,
        *AGENT_SETTINGS,
    )
)

#: Names whose creation at the top of a writable directory is blocked while a sandbox runs, by
#: a stand-in that host programs pass over: an empty directory (git ignores empty directories,
#: an empty `.git` directory is no repository, a `HEAD` directory names no ref, editors find no
#: settings in an empty folder), except `.mcp.json`, a file naming no servers (Claude Code
#: reports a directory as a broken configuration), which git is told to ignore meanwhile,
#: `AGENT_SETTINGS` as their kinds say, and the hook managers' that a hook installed for every
#: repository (pre-commit's `init-templatedir`) would find. Each name: the kind of its stand-in.
CREATION_BLOCKED = {
    **dict.fromkeys((".git", "HEAD", ".vscode", ".idea", ".claude"), "dir"),
    ".mcp.json": "mcp",
    **AGENT_SETTINGS,
    ".husky": "dir",  # husky's stubs skip a hook whose script is missing
    ".pre-commit-config.yaml": "precommit",  # an installed hook runs no hook of an empty list
}

#: Settings that the sweep sets aside where a kernel adds one to a folder that existed when it
#: started, below the top (where `CREATION_BLOCKED` keeps them from being made): a folder's own
#: settings, which a program started in that folder runs (`claude` in a package of a monorepo,
#: an editor opening a subfolder, a nested repository's commit hooks). A stand-in for each in
#: every folder would cost a mount each (see `MAX_GUARDED`), so they are found from the host.
FOLDER_SETTINGS = frozenset(CREATION_BLOCKED) - {".git", "HEAD"} | frozenset(NESTED_SETTINGS)

#: Names whose creation is blocked in every existing directory below the top (same stand-ins):
#: together they keep any such directory from becoming a git work tree (`.git`) or a git
#: directory (`HEAD`; git takes a directory holding `HEAD`, `objects/` and `refs/` for one).
#: `HEAD` is left out when the user's git ignores bare repositories it is not pointed to
#: (`safe.bareRepository = explicit`).
EVERY_DIR_BLOCKED = (".git", "HEAD")

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

#: At most this many directories of one writable root are walked for paths to protect.
MAX_WALKED = 5000

#: At most this many auto-run paths of one writable root are kept read-only (the shallowest),
#: and at most `MAX_NAMED` that protected links and settings name: each is a mount, bubblewrap's
#: start grows faster than their number, and srt refuses a sandbox of more than about 3,000, so
#: a kernel that made 1,200 folders with a `.vscode` and an `.idea` failed every later start in
#: its workspace.
MAX_PROTECTED = 256
MAX_NAMED = 64

#: At most this many directories of one writable root are guarded (breadth first, so the
#: shallowest): each costs three mounts, and bubblewrap's time grows faster than their number
#: (measured on 2 busy cores: +0.4 s for 20 guarded directories, +1 s for 50, +35 s for 500).
MAX_GUARDED = 32

#: Directories not walked: dependency trees and caches that no host program treats as a
#: project, and `HEAD` (a stand-in, or a directory git cannot take for its `HEAD` anyway).
_NOT_WALKED = frozenset(("node_modules", "__pycache__", "HEAD"))

#: What marks a directory as a Python environment: a venv's `pyvenv.cfg`, a conda environment's
#: `conda-meta/`. Its `.pth` files and `sitecustomize.py` run on every start of its interpreter.
_ENVIRONMENT_MARKERS = ("pyvenv.cfg", "conda-meta")


#: Folders of data in a repository (git's objects, refs and logs, the stores of Mercurial,
#: Jujutsu and Sapling), not searched for links.
_REPO_DATA = frozenset(
    ("objects", "refs", "logs", "lfs", "rr-cache", "store", "op_store", "op_heads", "index")
)

#: At most this many repositories of one writable root (the shallowest) have git's
#: configuration read for the files it names (one `git config` each).
MAX_REPOSITORIES = 32

#: At most this many entries of one protected path are searched for links.
MAX_LINK_SEARCH = 1000

_told: set[Path] = set()  # roots whose unguarded directories were logged


@dataclass
class Scan:
    """What one walk of a writable directory found."""

    protected: list[Path] = field(default_factory=list)  # read-only whole
    folders: list[Path] = field(default_factory=list)  # every directory walked (they existed)
    directories: list[Path] = field(default_factory=list)  # guarded: pinned, `.git`/`HEAD` blocked
    missing: dict[Path, str] = field(default_factory=dict)  # named by git's config: stand-ins ("file", "dir")
    truncated: bool = False
    dropped: int = 0  # auto-run paths found past `MAX_PROTECTED`, not protected
    too_deep: int = 0  # folders past `reads.MAX_DEPTH`, not walked

    def protect(self, path: Path, *more: Path) -> bool:
        """Keep `path` (with `more` that belong to it) read-only, unless `MAX_PROTECTED` are."""
        if len(self.protected) >= MAX_PROTECTED:
            self.dropped += 1
            return False
        self.protected += [path, *more]
        return True


def scan(
    root: Path, off_limits: Iterable[Path] = (), limit: int = MAX_WALKED, guarded: int = MAX_GUARDED
) -> Scan:
    """Walk the writable directory `root` breadth first: the auto-run paths, git directories and
    Python environments in it (protected whole; not walked), plus what git's configuration
    names, and `root` with its first `guarded` - 1 other directories that are not hidden (to be
    guarded). The `off_limits` directories (ipybox's own, hidden ones) are not walked."""
    skipped = {str(p) for p in off_limits}
    found = Scan()
    if is_git_dir(root):
        found.protected += [root / name for name in GIT_DIR_NAMES]
    pending = deque([root])
    walked = 0
    trees: list[Path] = [root] if (root / ".git").exists() else []  # work trees: their git configuration
    while pending:
        folder = pending.popleft()
        if walked >= limit:
            break
        walked += 1
        found.folders.append(folder)
        if folder != root and folder.name.startswith("."):
            pass  # hidden folders are not guarded (see docs/sandbox.md); the root always is
        elif len(found.directories) < guarded:
            found.directories.append(folder)
        else:
            found.truncated = True
        for entry in reads.entries_of(folder):
            path = Path(entry.path)
            if (
                entry.name in AUTORUN_NAMES
                or _trusted_by_path(folder, entry.name)
                or _nested_setting(folder, entry.name)
            ):
                git = entry.name == ".git"
                if found.protect(path, *(_git_dirs(path) if git else ())) and git and folder != root:
                    trees.append(folder)
            elif (
                entry.name in _NOT_WALKED or entry.path in skipped or not entry.is_dir(follow_symlinks=False)
            ):
                continue
            elif is_git_dir(path) or is_environment(path):
                found.protect(path)  # a bare repository or a Python environment
            elif reads.too_deep(path, [root]):
                found.too_deep += 1  # each costs bubblewrap more than the last: see reads.MAX_DEPTH
            else:
                pending.append(path)
    _log_limits(root, found, limit if walked >= limit else 0, guarded)
    named, missing = _named_by_git(trees, root)
    found.protected += named + named_by_settings(found.protected, root)
    # a missing path inside a protected directory cannot be created anyway; none mounted deep
    # down (settings and git's configuration may name such paths; see reads.MAX_DEPTH)
    found.protected = [
        p for p in dict.fromkeys(found.protected) if os.path.lexists(p) and not reads.too_deep(p, [root])
    ]
    found.missing = {
        p: kind for p, kind in missing.items() if not any(p.is_relative_to(q) for q in found.protected)
    }
    return found


def link_targets(protected: Iterable[Path], roots: Iterable[Path]) -> tuple[list[Path], dict[Path, str]]:
    """Where the links in the `protected` paths lead in the writable `roots`: a mount keeps a link
    as it is, not what it leads to, and hooks are often shared that way (`.git/hooks/pre-commit`
    linked to a tracked `scripts/pre-commit`, which git then runs on every commit), as are
    settings (`.claude/settings.json` linked to a file beside it). Each hop of each link there:
    those that exist (to keep read-only; links among them are restored if replaced) and those
    missing (path: the kind of stand-in, an empty file, or folder for a `hooks` link).
    Python environments are not searched (their links lead to interpreters)."""
    writable = list(roots)
    found: list[Path] = []
    missing: dict[Path, str] = {}
    for path in protected:
        if is_environment(path):
            continue
        for link in _links_in(path):
            for hop in _hops(link):
                if not reads.within(hop, writable) or len(found) + len(missing) >= MAX_NAMED:
                    break
                if reads.too_deep(hop, writable):
                    continue  # not mounted: see reads.MAX_DEPTH
                if os.path.lexists(hop):
                    found.append(hop)
                else:
                    missing[hop] = "dir" if link.name == "hooks" else "file"
    return found, missing


def _links_in(path: Path) -> list[Path]:
    """The links in the protected `path` (itself, or below it: up to `MAX_LINK_SEARCH` entries,
    without a git directory's data)."""
    if os.path.islink(path):
        return [path]
    found: list[Path] = []
    pending, seen = deque([path]), 0
    while pending and seen < MAX_LINK_SEARCH:
        for entry in reads.entries_of(pending.popleft()):
            seen += 1
            if entry.is_symlink():
                found.append(Path(entry.path))
            elif entry.name not in _REPO_DATA and entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
    return found


def _hops(link: Path) -> list[Path]:
    """Each path the link `link` leads through, in turn (at most 40, as the system follows)."""
    hops: list[Path] = []
    current = link
    for _ in range(40):
        try:
            text = os.readlink(current)
        except OSError:
            break
        current = Path(os.path.abspath(os.path.join(os.path.realpath(current.parent), text)))
        hops.append(current)
    return hops


#: Claude Code's settings keys whose value is a command it runs on its own (hooks, the status
#: line, credential helpers), and `.mcp.json`'s server `command` and `args`.
_COMMAND_KEYS = frozenset(
    ("command", "args", "apiKeyHelper", "awsAuthRefresh", "awsCredentialExport", "otelHeadersHelper")
)


def named_by_settings(protected: Iterable[Path], root: Path) -> list[Path]:
    """The files in `root` that Claude Code's protected settings (`.claude/settings*.json`,
    `.mcp.json`) name as programs to run: a hook's command, the status line's, a credential
    helper, a project MCP server's script. Protecting the settings alone kept a hook such as
    `"$CLAUDE_PROJECT_DIR"/scripts/check.sh` writable, which Claude Code then ran on the host on
    every tool call. Only files that exist, named with a `/` (relative to the project)."""
    found: list[Path] = []
    for path in protected:
        if path.name == ".claude":
            files, project = [path / "settings.json", path / "settings.local.json"], path.parent
        elif path.name == ".mcp.json":
            files, project = [path], path.parent
        else:
            continue
        for settings in files:
            for word in _commands(settings):
                word = word.replace("${CLAUDE_PROJECT_DIR}", str(project)).replace(
                    "$CLAUDE_PROJECT_DIR", str(project)
                )
                if "/" in word:
                    named = Path(os.path.abspath(project / os.path.expanduser(word)))
                    if os.path.isfile(named) and reads.within(os.path.realpath(named), [root.resolve()]):
                        found.append(named)
    return found[:MAX_NAMED]


def _commands(settings: Path) -> list[str]:
    """The words of the commands in the JSON file `settings` (see `_COMMAND_KEYS`)."""
    text = _safe_fs.read_pointer(settings, 1 << 20)
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return []
    words: list[str] = []
    pending = [data]
    while pending and len(words) < 10_000:
        item = pending.pop()
        if isinstance(item, list):
            pending += item
        elif isinstance(item, dict):
            for key, value in item.items():
                if key in _COMMAND_KEYS and isinstance(value, str):
                    words += _words(value)
                elif key in _COMMAND_KEYS and isinstance(value, list):
                    words += [v for v in value if isinstance(v, str)]
                else:
                    pending.append(value)
    return words


def is_environment(path: Path) -> bool:
    """Whether `path` is a Python environment (a venv or a conda environment)."""
    return any(os.path.lexists(path / marker) for marker in _ENVIRONMENT_MARKERS)


def is_git_dir(path: Path) -> bool:
    """Whether git may take `path` for a git directory, now or once the kernel adds what is
    missing: it holds a non-empty `HEAD` file or link (git then checks that it names a ref, and
    that `objects/` and `refs/`, or a `commondir` pointing to them, are there)."""
    head = path / "HEAD"
    try:
        return head.is_symlink() or (head.is_file() and head.stat().st_size > 0)
    except OSError:
        return False


def bare_repositories_allowed() -> bool:
    """Whether the user's git takes a directory it was not pointed to for a bare repository
    (`safe.bareRepository` is not `explicit` in the system or global configuration)."""
    git = which("git")
    if git is None:
        return True  # no git here now; one installed later would
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(
            [git, "config", "--get", "safe.bareRepository"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd="/",
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    return done.stdout.strip().lower() != "explicit"


def _git_dirs(dot_git: Path) -> list[Path]:
    """The repository a `.git` file points to (`gitdir: ...`) and its common dir."""
    found: list[Path] = []
    git_dir = dot_git
    if dot_git.is_file() and not dot_git.is_symlink():
        text = _safe_fs.read_pointer(dot_git)  # the kernel's file, maybe a sparse terabyte
        if text is None:
            return found
        if text.startswith("gitdir:"):
            git_dir = (dot_git.parent / text.removeprefix("gitdir:").strip()).resolve()
            found.append(git_dir)
    common = _safe_fs.read_pointer(git_dir / "commondir")
    if common:
        found.append((git_dir / common).resolve())
    return found


def _log_limits(root: Path, found: Scan, cut: int, guarded: int) -> None:
    """Say what a scan of `root` passed over: directories past the first `cut` (0: none), folders
    past the `guarded` ones, auto-run paths past `MAX_PROTECTED`."""
    if cut:
        logger.warning("%s: searched the first %d directories for auto-run paths only", root, cut)
    if found.too_deep:
        logger.warning(
            "%s: %d folders more than %d folders down are not searched for auto-run paths (code in a "
            "kernel may have made them; remove those you do not use)",
            root,
            found.too_deep,
            reads.MAX_DEPTH,
        )
    if found.dropped:
        logger.warning(
            "%s: %d more auto-run paths (.git, .vscode, .claude, ...) past the shallowest %d are not kept "
            "read-only (each costs the sandbox's start a mount): code in a kernel may have made them in "
            "numbers; remove those you do not use",
            root,
            found.dropped,
            MAX_PROTECTED,
        )
    if found.truncated and root not in _told:
        _told.add(root)
        logger.info(
            "%s: the shallowest %d directories are kept from becoming git repositories, not the "
            "deeper ones (see docs/sandbox.md)",
            root,
            guarded,
        )


def _named_by_git(trees: list[Path], root: Path) -> tuple[list[Path], dict[Path, str]]:
    """What git's configuration names in `root` for the repositories with the work trees `trees`
    (the first `MAX_REPOSITORIES`), see `_git_config_paths`."""
    if len(trees) > MAX_REPOSITORIES:
        logger.info("%s: what git configurations name is kept for %d repositories", root, MAX_REPOSITORIES)
    named: list[Path] = []
    missing: dict[Path, str] = {}
    for tree in trees[:MAX_REPOSITORIES]:
        found, more = _git_config_paths(tree, root)
        named += found
        missing |= more
    return named, missing


def _git_config_paths(tree: Path, root: Path) -> tuple[list[Path], dict[Path, str]]:
    """Files and directories under the writable `root` that git's configuration (of the
    repository whose work tree is `tree`, at `root` or below it, and the user's) names as
    something to include, run or take hooks from; and those of them that are missing where git
    would look (an include file, a hooks directory), which the kernel must not create either:
    each with the kind of stand-in that keeps git as it was (an empty file includes nothing, an
    empty directory holds no hooks)."""
    git = which("git")
    if git is None:
        return [], {}
    try:
        done = subprocess.run(
            [git, "-C", str(tree), "config", "--list", "--includes", "--show-origin", "-z"],
            capture_output=True,
            text=True,
            timeout=10,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return [], {}
    found: list[Path] = []
    missing: dict[Path, str] = {}
    items = done.stdout.split("\0")
    for origin, item in zip(items[::2], items[1::2], strict=False):
        key, _, value = item.partition("\n")
        base = (tree / origin.removeprefix("file:")).parent if origin.startswith("file:") else tree
        for word in _words(value):
            if "/" not in word and not key.endswith(".path") and key != "core.hookspath":
                continue
            word = os.path.expanduser(word)
            for candidate in {base / word, tree / word}:
                if candidate.exists() and candidate.resolve().is_relative_to(root.resolve()):
                    found.append(candidate.resolve())
            # where git looks: an include relative to its file, hooks relative to the work tree
            where = base / word if key.endswith(".path") else tree / word if key == "core.hookspath" else None
            if where is not None and not os.path.lexists(where) and _within(where, root):
                missing[Path(os.path.abspath(where))] = "file" if key.endswith(".path") else "dir"
    return found, missing


def _within(path: Path, root: Path) -> bool:
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))


def _words(value: str) -> Iterable[str]:
    try:
        return shlex.split(value.removeprefix("!"))
    except ValueError:
        return value.split()
