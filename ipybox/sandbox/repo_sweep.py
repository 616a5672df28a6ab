"""Repositories a sandboxed kernel makes in a writable directory, disarmed on the host.

git takes any directory holding a `HEAD` (with `objects/` and `refs/`) for a git directory, and
a `.git` file or directory for the way to one; run there on the host (by the user, a shell
prompt, an editor), it reads that repository's `config` and runs what it names (`core.fsmonitor`,
`core.pager`, `core.hooksPath`, filters, aliases, includes, ...) and its `hooks/`. Mounts cannot
keep a kernel from making one in a directory of its own (see `ipybox.sandbox.autorun` for the
directories that existed), so ipybox looks for them from the host instead: while a sandbox runs
(every `interval` seconds, more rarely in large trees) and once more after its kernels ended, it
walks the kernel's writable directories for git directories that the kernel made or changed.
In each, it keeps what git needs to work and what is data (objects, refs, remotes, branches,
the repository format) and disables what git would run: a `config` holding any other setting
is renamed `config.ipybox-disabled` and replaced by its safe settings, a `hooks/` holding a
live hook (a name without `.sample`) is renamed `hooks.ipybox-disabled`. An agent's
`git clone` or `git init` is left as it is; a repository whose settings run programs keeps
working without them.

A git directory is the kernel's if the sandbox did not keep it read-only (the existing ones
are, see `ipybox.sandbox.autorun`) and its `config`, `config.worktree`, `commondir`, `hooks/`
or a hook changed since the sandbox started (their inode change time, which no program can
set back, and which making, linking or moving a file sets).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from ipybox._programs import which
from ipybox.sandbox import links
from ipybox.sandbox.autorun import FOLDER_SETTINGS

logger = logging.getLogger(__name__)

#: At most this many directories of each writable directory are looked at per background sweep
#: (`node_modules` trees last), the next going on from there; the last sweep walks them all.
MAX_SWEPT = 20_000

#: Settings of a kernel's repository that are kept: data git needs (format, remotes, branches,
#: identity), none of which names a program to run or a file to read settings from.
_SAFE_SETTING = re.compile(
    r"core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode"
    r"|symlinks|autocrlf|eol|safecrlf|checkstat|trustctime|sparsecheckout|sparsecheckoutcone"
    r"|untrackedcache|splitindex|commitgraph|multipackindex|abbrev|quotepath)"
    r"|extensions\.[a-z0-9-]+"
    r"|remote\..*\.(url|pushurl|fetch|push|tagopt|mirror|prune|prunetags|promisor|partialclonefilter)"
    r"|branch\..*\.(remote|pushremote|merge|rebase|description)"
    r"|submodule\..*\.(url|active|branch)"
    r"|user\.(name|email)|init\.defaultbranch|pull\.(rebase|ff)|fetch\.prune|gc\.auto|index\.version"
    r"|lfs\.repositoryformatversion",
    re.DOTALL,
)

#: Files and directories of a git directory whose change marks it as changed by the kernel.
_WATCHED = ("config", "config.worktree", "hooks", "commondir")

_DISABLED = ".ipybox-disabled"

#: Slack on the start time: file times come from a clock that may lag the one read here.
_SLACK_NS = 1_000_000_000


class RepoSweep:
    """Finds and disarms the repositories kernels make in `roots` (absolute directories); the
    `read_only` paths (the sandbox keeps them read-only) are neither walked nor touched."""

    def __init__(
        self, roots: Iterable[Path] = (), read_only: Iterable[Path] = (), interval: float = 1.0
    ) -> None:
        self.since_ns = time.time_ns() - _SLACK_NS
        self.interval = self._every = interval
        #: The paths as given to `add()` (`roots`, `read_only`, `unwalked`, `existing`), in ipybox's record.
        self.given: dict[str, list[str]] = {"roots": [], "read_only": [], "unwalked": [], "existing": []}
        #: Protected links (path: what it names), made again if replaced (`ipybox.sandbox.links`).
        self.links: dict[str, str] = {}
        self._taken = 0  # how many of `given`'s read_only paths are in `_read_only`
        self._roots: dict[str, None] = {}
        self._writable: set[str] = set()  # roots and unwalked
        self._real: dict[str, str] = {}  # each root as given: its real path
        self._read_only: set[str] = set()
        self._existing: set[str] = set()  # folders that existed when a kernel started (real paths)
        #: The paths (real) the latest start kept read-only: a setting an earlier start kept may be
        #: past `autorun.MAX_PROTECTED` at the next (a kernel made many shallower ones), writable
        self._kept_now: set[str] = set()
        self._settings: list[str] = []  # `FOLDER_SETTINGS` found in them by the sweep under way
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._checked: dict[str, tuple[int, ...]] = {}  # git dir: the state it was last made safe in
        #: root: where the last sweep stopped (folders to walk, `node_modules` ones, links followed)
        self._unwalked: dict[str, tuple[deque[str], deque[str], set[str]]] = {}
        self.add(roots, read_only)

    def add(
        self,
        roots: Iterable[Path],
        read_only: Iterable[Path],
        unwalked: Iterable[Path] = (),
        kept_links: dict[str, str] | None = None,
        existing: Iterable[Path] = (),
    ) -> None:
        """Also watch `roots`, and leave the `read_only` paths alone. In the `existing` folders
        (they existed when a kernel started), settings a kernel adds (`FOLDER_SETTINGS`) are set
        aside. The `unwalked` directories
        (the kernel's private one) are writable too but not walked: only a repository there that
        a `.git` file or link in a root points to is disarmed. The `kept_links` (read-only paths
        that are links: path, what it names) are made again where replaced; what they lead to
        is read-only, their names are not; a link recorded already keeps what it named then (a
        kernel may have replaced it since, before a sweep), and is made again here, before the
        next kernel starts. Cheap (a kernel's start waits on it): the other paths are resolved
        by the next sweep."""
        read_only = list(read_only)
        with self._lock:
            self.links = {**(kept_links or {}), **self.links}
            for root in roots:
                self._roots[os.path.realpath(root)] = None
                self._real[os.path.abspath(root)] = os.path.realpath(root)
                self.given["roots"].append(str(root))
            links.restore(self.links, self._real_path)
            if read_only:  # a start's (the sweep as first made has none)
                self._kept_now = {self._real_path(os.path.abspath(p)) for p in read_only}
            self.given["unwalked"] += map(str, unwalked)
            self._writable |= {*self._roots, *(os.path.realpath(p) for p in unwalked)}
            for folder in map(os.path.abspath, existing):
                real = self._real_path(folder)
                if real not in self._existing:
                    self._existing.add(real)
                    self.given["existing"].append(folder)
        self.given["read_only"] += map(str, read_only)  # taken in by `_take_read_only()`

    def _take_read_only(self) -> None:
        """Resolve the read-only paths added since the last sweep: as named, and where each
        leads (they were found in a root without following links, but for the last part)."""
        given = self.given["read_only"]
        while self._taken < len(given):
            path = os.path.abspath(given[self._taken])
            named = self._real_path(path)
            self._taken += 1
            if path in self.links:  # its name is the kernel's to replace: what takes it is walked
                self._read_only.add(os.path.realpath(os.path.join(os.path.dirname(named), self.links[path])))
                continue
            self._read_only |= {named, os.path.realpath(named) if os.path.islink(named) else named}

    def _real_path(self, path: str) -> str:
        """`path` with a root's name as given replaced by its real path (cheaper than realpath)."""
        for named, real in self._real.items():
            if path == named or path.startswith(named + "/"):
                return real + path[len(named) :]
        return path

    def start(self) -> None:
        """Sweep in a background thread until `finish()`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ipybox-repo-sweep", daemon=True)
            self._thread.start()

    def finish(self) -> list[Path]:
        """Stop the background sweeps and sweep once more (call when the kernels have ended)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        return self.sweep()

    def sweep(self, limit: int | None = None) -> list[Path]:
        """Disarm every git directory the kernels made or changed; the ones disarmed now. With a
        `limit`, at most that many directories of each root are walked, and the next sweep goes
        on from there (every directory is reached in turn, however many a kernel makes)."""
        with self._lock:
            links.restore(self.links, self._real_path)  # first: what took a link's place is walked below
            self._take_read_only()
            disarmed = []
            self._settings = []
            for git_dir in dict.fromkeys(self._git_dirs(limit)):
                # the state before looking: a change the kernel makes while this sweep reads
                # (or after) differs from it, so the next sweep looks again
                state = _state(git_dir)
                try:
                    if self._theirs(git_dir, state) and _disarm(git_dir):
                        disarmed.append(Path(git_dir))
                        continue  # looked at again next time, as ipybox left it
                except Exception as e:  # the next sweep tries again; the others go on
                    logger.warning(
                        "cannot disarm the git repository %r a sandboxed kernel made: %s", git_dir, e
                    )
                    continue
                self._checked[git_dir] = state
            self._set_aside_settings()
            return disarmed

    def _set_aside_settings(self) -> None:
        """Set aside the settings the walk found in folders that existed (`add()`'s `existing`)
        that the kernels made or changed since the sandbox started: not kept read-only by the
        latest start (the user's are, but for those past `autorun.MAX_PROTECTED`), not a
        protected link ipybox made again, changed since (`_changed_since`)."""
        made_again = {self._real_path(os.path.abspath(p)) for p in self.links}
        for path in self._settings:
            if path in made_again:
                continue
            try:
                if not _changed_since(path, self.since_ns):
                    continue
                _set_aside_path(path)
            except OSError as e:  # gone meanwhile, say; the next sweep looks again
                logger.debug("cannot set aside %r: %s", path, e)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            began = time.monotonic()
            try:
                self.sweep(MAX_SWEPT)
            except Exception:  # never let the thread die: the final sweep still comes
                logger.exception("sweeping the sandbox's writable directories for repositories failed")
            # a large tree is swept more rarely: at most about 5% of a core
            self.interval = max(self._every, 20 * (time.monotonic() - began))

    def _git_dirs(self, limit: int | None) -> Iterator[str]:
        """Every git directory in the roots (walked breadth first, up to `limit` directories of
        each, going on from where the last sweep stopped), and where each `.git` file or link
        and `commondir` there points to, if writable. Links are not followed, but for one into
        an unwalked directory (a path to a repository there): what it leads to is walked too."""
        for root in self._roots:
            pending, later, followed = self._unwalked.pop(root, (deque([root]), deque[str](), set[str]()))
            walked = 0
            while (pending or later) and (limit is None or walked < limit):
                folder = pending.popleft() if pending else later.popleft()
                walked += 1
                try:
                    entries = list(os.scandir(folder))
                except OSError:
                    continue
                names = {e.name: e for e in entries}
                if folder in self._existing:
                    self._settings += _added_settings(folder, names, self._kept_now)
                head = names.get("HEAD")
                git_dir = head is not None and not head.is_dir(follow_symlinks=False)
                if git_dir:
                    yield folder
                    yield from self._writable_target(_pointed_to(folder, "commondir"))
                dot_git = names.get(".git")
                if dot_git is not None and not dot_git.is_dir(follow_symlinks=False):
                    yield from self._writable_target(target := _pointed_to(folder, ".git"))
                    pending += self._unwalked_target(target, followed)
                for entry in entries:
                    if entry.path in self._read_only:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        (later if entry.name == "node_modules" else pending).append(entry.path)
                    elif entry.is_symlink():
                        pending += self._unwalked_target(os.path.realpath(entry.path), followed)
            if pending or later:
                self._unwalked[root] = (pending, later, followed)
                if root not in _told:
                    _told.add(root)
                    logger.warning(
                        "%s: more than %d directories, swept for repositories in turns", root, walked
                    )

    def _unwalked_target(self, path: str | None, followed: set[str]) -> list[str]:
        """`path` if it is in a writable directory that is not walked, and not followed yet."""
        if path is None or path in followed or not self._writable_target(path) or _under(path, self._roots):
            return []
        followed.add(path)
        return [path]

    def _writable_target(self, path: str | None) -> list[str]:
        if path is None or not any(path == r or path.startswith(r.rstrip("/") + "/") for r in self._writable):
            return []
        return [path]

    def _theirs(self, git_dir: str, state: tuple[int, ...]) -> bool:
        """Whether the kernels may have written `git_dir` (now in `state`) and did, since the
        sandbox started."""
        if any(git_dir == p or git_dir.startswith(p + "/") for p in self._read_only):
            return False
        if self._checked.get(git_dir) == state:
            return False  # as it was when last looked at
        return any(t >= self.since_ns for t in state[1::2])


_told: set[str] = set()  # roots whose unswept directories were logged


def _under(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _state(git_dir: str) -> tuple[int, ...]:
    """Inode and change time of what in `git_dir` git reads settings or runs programs from, hooks
    one by one (0, 0 where missing). Not of `git_dir` itself: git changes it on every use."""
    hooks = os.path.join(git_dir, "hooks")
    try:
        live = sorted(n for n in os.listdir(hooks) if not n.endswith(".sample"))
    except OSError:
        live = []
    state: list[int] = []
    for path in [
        *(os.path.join(git_dir, name) for name in _WATCHED),
        *(os.path.join(hooks, n) for n in live),
    ]:
        try:
            info = os.lstat(path)
            state += [info.st_ino, info.st_ctime_ns]
        except OSError:
            state += [0, 0]
    return tuple(state)


def _pointed_to(folder: str, name: str) -> str | None:
    """The real path of what `folder/name` names: a link's target, or the directory a `.git` file
    (`gitdir: ...`) or `commondir` file names, relative to `folder` (None if it names none)."""
    path = os.path.join(folder, name)
    try:
        if os.path.islink(path):
            return os.path.realpath(path)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            text = os.read(fd, 4096).decode(errors="replace").strip()
        finally:
            os.close(fd)
    except OSError:
        return None
    if name == ".git":
        if not text.startswith("gitdir:"):
            return None
        text = text.removeprefix("gitdir:").strip()
    return os.path.realpath(os.path.join(folder, text)) if text else None


def _disarm(git_dir: str) -> bool:
    """Disable what git would run from `git_dir` (see the module's docstring); whether it had any."""
    try:
        fd = os.open(git_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False  # gone, or replaced by a link: the next sweep finds where it went
    try:
        if os.path.realpath(f"/proc/self/fd/{fd}") != git_dir:
            return False  # a folder on the way was swapped for a link meanwhile
        done = [_disarm_config(fd, name) for name in ("config", "config.worktree")]
        done.append(_disarm_hooks(fd))
    finally:
        os.close(fd)
    if any(done):
        logger.warning(
            "ipybox disabled settings and hooks that a sandboxed kernel wrote into the git repository %r "
            "(git would have run them on this machine); what was there is kept beside them as *%s",
            git_dir,
            _DISABLED,
        )
    return any(done)


def _added_settings(folder: str, names: dict[str, os.DirEntry[str]], read_only: set[str]) -> list[str]:
    """The `FOLDER_SETTINGS` in the existing `folder` (whose entries are `names`) that the
    sandbox did not keep read-only; for one inside a folder (`.github/hooks`) that is a link
    there, the link (the program follows it)."""
    found = []
    for setting in FOLDER_SETTINGS:
        first, _, rest = setting.partition("/")
        if first not in names:
            continue
        path = os.path.join(folder, setting)
        if rest and names[first].is_symlink():  # a link to a folder with the settings: set aside
            path = os.path.join(folder, first) if os.path.lexists(os.path.join(folder, setting)) else ""
        elif rest and not (names[first].is_dir(follow_symlinks=False) and os.path.lexists(path)):
            path = ""
        if path and path not in read_only:
            found.append(path)
    return found


#: At most this many entries of a settings folder are looked at for a change; one with more
#: counts as changed (a project's own settings folder holds a few files).
_MAX_SETTINGS_ENTRIES = 1000


def _changed_since(path: str, since_ns: int) -> bool:
    """Whether the setting `path` or anything in it (a folder's files, at any depth, and where
    links there lead) changed since `since_ns` (inode change time, which writing a file, making,
    linking or moving one sets). Not the name alone: a user's settings folder past
    `autorun.MAX_PROTECTED` is writable, and a kernel that rewrote a file in it in place left
    the folder's own change time as it was (the next kernel made 300 folders with a `.vscode`
    shallower than a package's, which was then not kept read-only)."""
    pending, seen = [path], 0
    while pending:
        current = pending.pop()
        info = os.lstat(current)
        if info.st_ctime_ns >= since_ns:
            return True
        if stat.S_ISLNK(info.st_mode):
            with contextlib.suppress(OSError):
                if os.stat(current).st_ctime_ns >= since_ns:
                    return True
        elif stat.S_ISDIR(info.st_mode):
            entries = os.listdir(current)
            seen += len(entries)
            if seen > _MAX_SETTINGS_ENTRIES:
                return True
            pending += (os.path.join(current, name) for name in entries)
    return False


def _set_aside_path(path: str) -> None:
    """Rename `path` (a folder's settings a kernel added) to `NAME.ipybox-disabled` beside it,
    never through a link on the way (a kernel may swap a folder for one meanwhile)."""
    folder, name = os.path.split(path)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.path.realpath(f"/proc/self/fd/{fd}") != folder:
            return  # a folder on the way became a link: the next sweep finds where it went
        _set_aside(fd, name)
    finally:
        os.close(fd)
    logger.warning(
        "ipybox set aside %r, which a sandboxed kernel added to a folder that was there before it "
        "(programs started in that folder would run what it says); it is kept beside it as *%s",
        path,
        _DISABLED,
    )


def _disarm_config(dir_fd: int, name: str) -> bool:
    """Replace the config file `name` in the git directory `dir_fd` by its safe settings, if it
    has others (or is not a regular file, or git cannot read it); whether it did."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError:
        fd = None  # a link, say: not read, disabled whole
    text = None  # not read: disabled whole (a link, not a regular file, or too large to read)
    if fd is not None:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                text = _read_all(fd)
        finally:
            os.close(fd)
    if text is not None and _plainly_safe(text):
        return False  # what git writes itself: no need to ask git
    settings = _settings(text) if text is not None else None
    if settings is not None and all(_SAFE_SETTING.fullmatch(key) for key, _ in settings):
        return False
    _set_aside(dir_fd, name)
    if settings:
        _write_new(dir_fd, name, _config_text([(k, v) for k, v in settings if _SAFE_SETTING.fullmatch(k)]))
    return True


#: The lines of a config file as git writes it: blank, comment, `[section]`, `[section "sub"]`,
#: `\tname = value` (a value's quoting does not matter here, a continuation line is read as a
#: line of its own, so nothing git reads as a setting is passed over).
_PLAIN_LINE = re.compile(
    r'[ \t]*(?:[#;][^\r]*)?|\[(?P<section>[A-Za-z0-9-]+)(?: "(?P<sub>(?:[^"\\\n\r]|\\.)*)")?\]'
    r"|[ \t]*(?P<name>[A-Za-z][A-Za-z0-9-]*)[ \t]*(?:=[^\r]*)?"
)


def _plainly_safe(text: bytes) -> bool:
    """Whether the config file `text` is in git's own plain layout and holds only safe settings
    (else git is asked what it holds)."""
    try:
        lines = text.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return False
    section = None
    for line in lines:
        found = _PLAIN_LINE.fullmatch(line)
        if found is None or any(c < " " and c != "\t" for c in line):
            return False
        if found["section"]:
            section = found["section"].lower() + ("" if found["sub"] is None else f".{found['sub']}")
        elif found["name"]:
            if section is None or not _SAFE_SETTING.fullmatch(f"{section}.{found['name'].lower()}"):
                return False
    return True


def _disarm_hooks(dir_fd: int) -> bool:
    """Rename `hooks/` aside if it holds a live hook or is not a plain directory; whether it did."""
    try:
        info = os.lstat("hooks", dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(info.st_mode):
        fd = os.open("hooks", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            if all(name.endswith(".sample") for name in os.listdir(fd)):
                return False
        finally:
            os.close(fd)
    _set_aside(dir_fd, "hooks")
    return True


def _set_aside(dir_fd: int, name: str) -> None:
    """Rename `name` in `dir_fd` to `name.ipybox-disabled` (over an earlier one). Nothing of the
    kernel's is removed (it may be a tree deeper than any walk): a folder in the way, or `name`
    where it cannot go there, moves to a name of its own beside it."""
    aside = name + _DISABLED
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(aside, dir_fd=dir_fd).st_mode):
            os.rename(aside, _unique(aside), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    try:
        os.replace(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        os.rename(name, _unique(aside), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _unique(name: str) -> str:
    return f"{name}-{secrets.token_hex(8)}"


def _read_all(fd: int, limit: int = 1 << 20) -> bytes | None:
    """The file's bytes, or None if it holds more than `limit`: far more than any config git
    writes, and what follows the part read is what git would run too, so it is disabled whole."""
    chunks, size = [], 0
    while chunk := os.read(fd, 65536):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _settings(text: bytes) -> list[tuple[str, str | None]] | None:
    """The settings in the config file `text`, read by git itself (what git would see), without
    following its includes; None if git cannot read them (or is not installed)."""
    git = which("git")
    if git is None:
        return None
    with tempfile.NamedTemporaryFile(prefix="ipybox-config-") as copy:
        copy.write(text)
        copy.flush()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        try:
            done = subprocess.run(
                [git, "config", "--file", copy.name, "--no-includes", "--list", "-z"],
                capture_output=True,
                timeout=30,
                env=env,
                cwd="/",
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    if done.returncode != 0:
        return None
    found: list[tuple[str, str | None]] = []
    for item in done.stdout.decode(errors="surrogateescape").split("\0")[:-1]:
        key, newline, value = item.partition("\n")
        found.append((key, value if newline else None))
    return found


def _config_text(settings: list[tuple[str, str | None]]) -> str:
    """A config file holding `settings` (as `git config --list` names them)."""
    sections: dict[tuple[str, str | None], list[str]] = {}
    for key, value in settings:
        section, _, rest = key.partition(".")
        sub, dot, name = rest.rpartition(".")
        line = f"\t{name}" if value is None else f"\t{name} = {_quoted(value)}"
        sections.setdefault((section, sub if dot else None), []).append(line)
    lines = [f"# ipybox kept the safe settings of the file a sandboxed kernel wrote (beside: *{_DISABLED})"]
    for (section, subsection), entries in sections.items():
        lines.append(f"[{section}]" if subsection is None else f'[{section} "{_escaped(subsection)}"]')
        lines += entries
    return "\n".join(lines) + "\n"


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _quoted(value: str) -> str:
    return '"' + _escaped(value).replace("\n", "\\n").replace("\t", "\\t").replace("\b", "\\b") + '"'


def _write_new(dir_fd: int, name: str, text: str) -> None:
    """Write `name` in `dir_fd` anew (never through a link: a new file renamed into place)."""
    tmp = f".{name}.ipybox-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


#: The sweep of each sandboxed executor, by its runtime dir, with the file recording it.
_sweeps: dict[Path, tuple[RepoSweep, Path]] = {}


def watch(
    runtime_dir: Path,
    records: Path,
    roots: Iterable[Path],
    read_only: Iterable[Path],
    unwalked: Iterable[Path] = (),
    kept_links: dict[str, str] | None = None,
    existing: Iterable[Path] = (),
) -> RepoSweep:
    """Start sweeping `roots` for the executor with `runtime_dir` (or add to its sweep, see
    `RepoSweep.add`); call before a kernel of it starts. What it sweeps is recorded in the
    directory `records` (private to this user, hidden from kernels) until `finish()`, so that if
    this process is killed, the next one to start a sandbox makes the last sweep."""
    if runtime_dir not in _sweeps:
        _recover(records)
        key = hashlib.sha256(str(runtime_dir).encode()).hexdigest()[:16]
        _sweeps[runtime_dir] = RepoSweep(), records / f"{os.getpid()}-{key}.json"
        _sweeps[runtime_dir][0].start()
    sweep, record = _sweeps[runtime_dir]
    sweep.add(roots, read_only, unwalked, kept_links, existing)
    record.parent.mkdir(mode=0o700, exist_ok=True)
    data = {"pid": os.getpid(), "since_ns": sweep.since_ns, **sweep.given, "links": sweep.links}
    record.with_suffix(".tmp").write_text(json.dumps(data))
    record.with_suffix(".tmp").replace(record)
    return sweep


def finish(runtime_dir: Path) -> list[Path]:
    """Sweep once more for the executor with `runtime_dir` and stop; call when its kernels ended."""
    sweep, record = _sweeps.pop(runtime_dir, (None, None))
    if sweep is None or record is None:
        return []
    disarmed = sweep.finish()
    record.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        record.parent.rmdir()  # only if no other executor's record is left
    return disarmed


def _recover(records: Path) -> None:
    """Make the last sweep of the executors whose ipybox process ended without it (killed)."""
    for record in sorted(records.glob("*.json")):
        try:
            data = json.loads(record.read_text())
            pid, since_ns = int(data["pid"]), int(data["since_ns"])
            given = [[Path(p) for p in data[key]] for key in ("roots", "read_only", "unwalked")]
            existing = [Path(p) for p in data.get("existing", [])]
            kept = {str(k): str(v) for k, v in data.get("links", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        sweep = RepoSweep()
        roots, read_only, unwalked = given
        sweep.add(roots, read_only, unwalked, kept, existing)
        sweep.since_ns = since_ns
        sweep.sweep()
        record.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _finish_all() -> None:
    """The last sweep of every executor still running when ipybox exits."""
    for runtime_dir in list(_sweeps):
        with contextlib.suppress(Exception):
            finish(runtime_dir)


atexit.register(_finish_all)
