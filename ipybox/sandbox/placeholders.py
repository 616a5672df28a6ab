"""Empty stand-ins that keep a kernel from creating protected paths, removed after the sandbox.

A path that does not exist can only be kept from being created inside the sandbox by
mounting something at its name, and a mount needs the name to exist on the host. srt makes
such mount points itself, but removes them whenever one of its sandboxes ends, also while
others still rely on them (a kernel and its spare, or two executors in one workspace): the
mount then vanishes from the running sandbox and the path can be created after all. So ipybox
makes them: before a kernel starts it creates each missing protected path as an empty
directory or file (srt then mounts it read-only like any existing path), and removes it once
no sandbox of this user relies on it any more.

Every executor holds a shared `flock` on a lock file per placeholder (in this user's private
runtime root) while it runs; the one that can take the lock exclusively after its kernels
ended removes the placeholder, if it is still empty. A process killed outright leaves its
placeholders behind until the next sandbox that uses one of them ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from ipybox import _safe_fs

logger = logging.getLogger(__name__)


class Placeholders:
    """The placeholders one executor relies on; `release()` when its kernels have ended."""

    def __init__(self, lock_dir: Path) -> None:
        self._lock_dir = lock_dir
        self._held: dict[Path, tuple[int, Path]] = {}  # path -> its locked lock file and its name

    def ensure(self, path: Path, kind: str, roots: Sequence[Path] = ()) -> None:
        """Make sure `path` exists while this executor runs: create it if missing (an empty
        "dir" or "file", a "json" file holding `{}`, or an "mcp" file naming no MCP servers)
        and keep it from being removed by other executors meanwhile. A file stand-in in the
        git work tree of one of `roots` (default: its folder) is added to that repository's
        `info/exclude` meanwhile, so `git status` does not list it; a stand-in in another work
        tree is not (see `_exclude`)."""
        path = path.absolute()
        if path in self._held:
            return
        lock = self._lock_dir / hashlib.sha256(os.fsencode(path)).hexdigest()[:32]
        fd = _lock_shared(lock, self._lock_dir)
        self._held[path] = fd, lock
        if os.path.lexists(path):
            return
        try:
            if kind == "dir":
                path.mkdir(mode=0o755)
            else:
                made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                try:
                    os.write(made, _CONTENT[kind])
                finally:
                    os.close(made)
        except FileExistsError:
            return  # another executor was quicker; it recorded it
        except OSError as e:
            logger.warning("cannot create placeholder %s: %s", path, e)
            return
        made_as = os.lstat(path)  # what is removed later is this, never what takes its name
        exclude = _exclude(path, roots or [path.parent]) if kind != "dir" else None
        identity = f"{made_as.st_dev}:{made_as.st_ino}"
        os.pwrite(fd, json.dumps([kind, str(path), identity, *(exclude or ())]).encode(), 0)

    def release(self) -> None:
        """Give up this executor's hold; remove each placeholder no other executor holds."""
        held, self._held = self._held, {}
        # deepest first: a stand-in inside another one goes before it
        for path, (fd, lock) in sorted(held.items(), key=lambda item: -len(item[0].parts)):
            try:
                _remove_if_last(path, fd, lock)
            finally:
                os.close(fd)
        with contextlib.suppress(OSError):
            self._lock_dir.rmdir()  # only if no placeholder of any executor is left


def sweep(lock_dir: Path) -> None:
    """Remove placeholders recorded in `lock_dir` whose executors are all gone (killed)."""
    records: list[tuple[Path | None, Path]] = []
    with contextlib.suppress(OSError):
        for lock in lock_dir.iterdir():
            with contextlib.suppress(OSError):
                record = _record(lock.read_bytes())
                records.append((Path(record[1]) if len(record) >= 2 else None, lock))
    # deepest first: a stand-in inside another one goes before it
    for path, lock in sorted(records, key=lambda r: -len(r[0].parts) if r[0] else 0):
        with contextlib.suppress(OSError):
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
            try:
                _remove_if_last(path, fd, lock)
            finally:
                os.close(fd)


def _lock_shared(lock: Path, lock_dir: Path) -> int:
    """An open, shared-locked descriptor of the lock file `lock` (made if missing)."""
    while True:
        lock_dir.mkdir(mode=0o700, exist_ok=True)  # its last user may just have removed it
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:
            continue
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:  # the file may have been removed by its last holder while we waited: start over
            if os.fstat(fd).st_ino == os.stat(lock, follow_symlinks=False).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove_if_last(path: Path | None, fd: int, lock: Path) -> None:
    """With the exclusive lock on `fd` (else another executor still relies on it), remove the
    placeholder it records, if still as made, its `info/exclude` line, and the lock file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    record = _record(os.pread(fd, _RECORD_BYTES, 0))
    if path is not None and record[:1] in (["dir"], *([k] for k in _CONTENT)) and record[1:2] == [str(path)]:
        _remove_unchanged(path, record[0], record[2] if len(record) > 2 else "")
        if len(record) == 5:  # also if the file stays (someone wrote it): git should see it then
            _unexclude(Path(record[3]), record[4])
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)


#: At most this many bytes of a lock file's record are read (a path's bytes, JSON-escaped).
_RECORD_BYTES = 1 << 16


def _record(data: bytes) -> list[str]:
    """A lock file's record: the kind of stand-in, its path, its identity (`dev:inode`), and the
    `info/exclude` file and line added for it, if any. JSON, since a path (a kernel may choose
    its names) can hold a newline that would end a line of the record early, or bytes that are
    not UTF-8."""
    try:
        record = json.loads(data)
    except ValueError:
        return []
    return record if isinstance(record, list) and all(isinstance(r, str) for r in record) else []


#: What a file stand-in holds, by kind: `.mcp.json` names no servers (an empty one is reported
#: by Claude Code as invalid JSON), `.pre-commit-config.yaml` no hooks (pre-commit refuses an
#: empty one, and with it the commit).
_CONTENT = {"file": b"", "json": b"{}\n", "mcp": b'{"mcpServers": {}}\n', "precommit": b"repos: []\n"}


def _remove_unchanged(path: Path, kind: str, identity: str) -> None:
    """Remove the stand-in `path` if it is still the one made (`identity`: `dev:inode`) and as
    made (else it is no longer ours). Looked at and removed in its folder as opened once: a
    kernel may have put a link to a folder of the user's in the place of that folder, where
    a file or an empty folder of the stand-in's name is the user's."""
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        info = os.lstat(path.name, dir_fd=folder)
        if f"{info.st_dev}:{info.st_ino}" != identity:
            return
        if kind == "dir" and stat.S_ISDIR(info.st_mode):
            os.rmdir(path.name, dir_fd=folder)  # fails if anything was put inside
        elif kind in _CONTENT and stat.S_ISREG(info.st_mode) and info.st_size == len(_CONTENT[kind]):
            made = os.open(
                path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder
            )
            try:
                same = os.read(made, len(_CONTENT[kind]) + 1) == _CONTENT[kind]
            finally:
                os.close(made)
            if same:
                os.unlink(path.name, dir_fd=folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def _work_tree(folder: Path) -> tuple[Path, Path] | None:
    """The top of the git work tree holding `folder` and its repository's common directory,
    found as git does (the nearest `.git` directory with a `HEAD`, or `.git` file), or None."""
    for top in [folder, *folder.parents]:
        dot_git = top / ".git"
        if dot_git.is_file():
            text = _safe_fs.read_pointer(dot_git)
            if text is None or not text.startswith("gitdir:"):
                return None
            git_dir = (top / text.removeprefix("gitdir:").strip()).resolve()
        elif (dot_git / "HEAD").is_file():
            git_dir = dot_git
        else:
            continue
        if common := _safe_fs.read_pointer(git_dir / "commondir"):
            git_dir = (git_dir / common).resolve()
        return top, git_dir
    return None


def _exclude(path: Path, roots: Sequence[Path]) -> tuple[str, str] | None:
    """Add `path` to its repository's `info/exclude`: the file and the line added, or None if
    none was (not in a work tree, no `info/`, or the line is there already). Only where that
    work tree is the one of a writable root (the workspace's repository, which the kernel can
    neither change nor replace): a stand-in's folder is the kernel's choice (where a link of
    its own leads), and so is a `.git` file there, whose repository (another of the host's, or
    one whose `info` is a link) ipybox would otherwise have written, with a line naming a path
    of that repository."""
    try:
        found = _work_tree(path.parent)
        if found is None or found not in {_work_tree(root) for root in roots}:
            return None
        if not (found[1] / "info").is_dir():
            return None
        exclude = found[1] / "info" / "exclude"
        line = _literal_pattern("/" + path.relative_to(found[0]).as_posix())
        if line is None:
            logger.warning("cannot hide placeholder %r from git: a line break in its name", str(path))
            return None
        # never through a link: the repository may have been written by an earlier kernel
        fd = os.open(exclude, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a+", encoding="utf-8", errors="surrogateescape") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            text = f.read()
            if line in text.splitlines():
                return None
            f.write(("" if text.endswith("\n") or not text else "\n") + line + "\n")
        return str(exclude), line
    except (OSError, ValueError) as e:
        logger.warning("cannot hide placeholder %s from git: %s", path, e)
        return None


def _literal_pattern(path: str) -> str | None:
    """The line of `info/exclude` that matches `path` (from the top of the work tree) alone, or
    None if no line can (a line break in it). A kernel chooses the names of the paths stand-ins
    are made for (where the links in its protected folders lead): `*`, `[a-z]`, a leading `!`
    or `#` and trailing spaces are patterns to git, so the names are escaped character by
    character (a line `/*` hid every new file of the project from `git status`)."""
    if "\n" in path or "\r" in path:
        return None
    escaped = re.sub(r"([\\*?\[\]!#])", r"\\\1", path)
    stripped = escaped.rstrip(" ")
    return stripped + "\\ " * (len(escaped) - len(stripped))


def _unexclude(exclude: Path, line: str) -> None:
    """Take the `line` that `_exclude()` added out of `exclude` again."""
    try:
        fd = os.open(exclude, os.O_RDWR | os.O_NOFOLLOW)  # never through a link
    except OSError:
        return
    with contextlib.suppress(OSError), os.fdopen(fd, "r+", encoding="utf-8", errors="surrogateescape") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        lines = f.read().splitlines(keepends=True)
        ours = [i for i, text in enumerate(lines) if text.rstrip("\n") == line]
        if ours:
            del lines[ours[-1]]
            f.seek(0)
            f.truncate()
            f.write("".join(lines))
