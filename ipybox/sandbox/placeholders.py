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
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)


class Placeholders:
    """The placeholders one executor relies on; `release()` when its kernels have ended."""

    def __init__(self, lock_dir: Path) -> None:
        self._lock_dir = lock_dir
        self._held: dict[Path, tuple[int, Path]] = {}  # path -> its locked lock file and its name

    def ensure(self, path: Path, kind: str) -> None:
        """Make sure `path` exists while this executor runs: create it empty ("dir" or
        "file") if missing and keep it from being removed by other executors meanwhile."""
        path = path.absolute()
        if path in self._held:
            return
        lock = self._lock_dir / hashlib.sha256(str(path).encode()).hexdigest()[:32]
        fd = _lock_shared(lock, self._lock_dir)
        self._held[path] = fd, lock
        if os.path.lexists(path):
            return
        try:
            if kind == "dir":
                path.mkdir(mode=0o755)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        except FileExistsError:
            return  # another executor was quicker; it recorded it
        except OSError as e:
            logger.warning("cannot create placeholder %s: %s", path, e)
            return
        os.pwrite(fd, f"{kind}\n{path}\n".encode(), 0)

    def release(self) -> None:
        """Give up this executor's hold; remove each placeholder no other executor holds."""
        held, self._held = self._held, {}
        for path, (fd, lock) in held.items():
            try:
                _remove_if_last(path, fd, lock)
            finally:
                os.close(fd)
        with contextlib.suppress(OSError):
            self._lock_dir.rmdir()  # only if no placeholder of any executor is left


def sweep(lock_dir: Path) -> None:
    """Remove placeholders recorded in `lock_dir` whose executors are all gone (killed)."""
    with contextlib.suppress(OSError):
        for lock in lock_dir.iterdir():
            with contextlib.suppress(OSError):
                fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
                try:
                    record = os.pread(fd, 4096, 0).decode(errors="replace").splitlines()
                    _remove_if_last(Path(record[1]) if len(record) == 2 else None, fd, lock)
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
    placeholder it records, if still empty, and the lock file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    record = os.pread(fd, 4096, 0).decode(errors="replace").splitlines()
    if path is not None and record[:1] in (["dir"], ["file"]) and record[1:2] == [str(path)]:
        _remove_empty(path, record[0])
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)


def _remove_empty(path: Path, kind: str) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    with contextlib.suppress(OSError):
        if kind == "dir" and path.is_dir() and not path.is_symlink():
            path.rmdir()  # fails if anything was put inside: then it is no longer ours
        elif kind == "file" and path.is_file() and not path.is_symlink() and info.st_size == 0:
            path.unlink()
