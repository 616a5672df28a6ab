"""File operations in directories that kernel code can write, without following links.

ipybox runs outside the kernel's sandbox, so a symbolic link the kernel plants in the workspace
(or swaps in between a check and an open) could make ipybox read or write any file the user
can. Here every path below a trusted directory (the workspace, which the application chose) is
walked one component at a time through directory file descriptors opened with `O_NOFOLLOW`, and
files are created with `O_EXCL` or replaced by renaming within one directory descriptor, so
there is no check-then-open for the kernel to win.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from ipybox.errors import IpyboxError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a planted fifo does not block
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


class UnsafePathError(IpyboxError, PermissionError):
    """A path in a kernel-writable directory that ipybox will not follow or read."""


def parts_below(path: Path, trusted: Path) -> tuple[str, ...] | None:
    """The components of `path` below `trusted` (both made absolute lexically), or None if outside."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(trusted)).parts
    except ValueError:
        return None


def _refuse(path: Path, error: OSError) -> UnsafePathError:
    if error.errno in (errno.ELOOP, errno.EMLINK):
        return UnsafePathError(
            f"{path} is, or goes through, a symbolic link; ipybox does not follow links in the "
            "workspace, because code in the kernel could have planted them. Use the real path instead."
        )
    raise error


@contextlib.contextmanager
def opendir(trusted: Path, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of `trusted/parts…`, walked without following links; missing ones made if `create`."""
    fd = os.open(trusted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    path = Path(trusted)
    try:
        for part in parts:
            path /= part
            try:
                child = _open_child(fd, part, create)
            except OSError as e:
                raise _refuse(path, e) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_child(fd: int, name: str, create: bool) -> int:
    if name in ("", ".", "..") or "/" in name:
        raise ValueError(f"not a single path component: {name!r}")
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except NotADirectoryError:  # Linux says so for a link to a directory, too
        if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile: the open below checks what it is
        os.mkdir(name, 0o777, dir_fd=fd)
    return os.open(name, _DIR, dir_fd=fd)


@contextlib.contextmanager
def subdir(fd: int, name: str, path: Path, *, create: bool = False) -> Iterator[int]:
    """A descriptor of the directory `name` in `fd` (`path` names it in errors), never a link."""
    try:
        child = _open_child(fd, name, create)
    except OSError as e:
        raise _refuse(path, e) from None
    try:
        yield child
    finally:
        os.close(child)


def create_file(path: Path, data: bytes, trusted: Path) -> None:
    """Create the new file `path` with `data`; directories below `trusted` are made, never followed."""
    parts = parts_below(path, trusted)
    if parts is None:  # a place the application chose
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("xb") as f:
            f.write(data)
        return
    with opendir(trusted, parts[:-1], create=True) as fd:
        write_new(fd, parts[-1], data, path)


def write_new(fd: int, name: str, data: bytes, path: Path) -> None:
    """Create the new file `name` in directory `fd` (`FileExistsError` if anything is there)."""
    try:
        out = os.open(name, _NEW, 0o666, dir_fd=fd)
    except OSError as e:
        raise _refuse(path, e) from None
    with os.fdopen(out, "wb") as f:
        f.write(data)


def replace_file(fd: int, name: str, source: BinaryIO) -> None:
    """Write `source` to `name` in directory `fd`, replacing what is there (a link itself, not its target)."""
    temp = f".{name[:100]}.{uuid.uuid4().hex[:8]}.ipybox-part"
    with os.fdopen(os.open(temp, _NEW, 0o666, dir_fd=fd), "wb") as out:
        try:
            shutil.copyfileobj(source, out, _CHUNK)
        except BaseException:
            os.unlink(temp, dir_fd=fd)
            raise
    try:
        os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        os.unlink(temp, dir_fd=fd)
        raise


@contextlib.contextmanager
def open_regular(fd: int, name: str, path: Path) -> Iterator[BinaryIO]:
    """Read the regular file `name` in `fd`: never a link, a fifo, a device, or a file with other hard links.

    A hard link is refused because it may share its content with a file the kernel could not
    read itself (its other name is in a place the sandbox hides).
    """
    try:
        file = os.open(name, _READ, dir_fd=fd)
    except OSError as e:
        raise _refuse(path, e) from None
    _checked(file, path, "read")
    with os.fdopen(file, "rb") as f:
        yield f


def open_append(fd: int, name: str, path: Path) -> int:
    """A descriptor appending to the regular file `name` in `fd` (made if missing), opened like
    `open_regular` checks it: never through a link, never a fifo, device or hard-linked file."""
    try:
        file = os.open(name, _APPEND, 0o600, dir_fd=fd)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a fifo nobody reads
            raise UnsafePathError(
                f"{path} is a fifo, not a regular file; ipybox does not write to it."
            ) from None
        raise _refuse(path, e) from None
    return _checked(file, path, "write to")


def _checked(file: int, path: Path, verb: str) -> int:
    """`file` once `_check_regular` passed it, made blocking; closed if either fails."""
    try:
        _check_regular(file, path, verb)
        os.set_blocking(file, True)
    except BaseException:
        os.close(file)
        raise
    return file


def _check_regular(file: int, path: Path, verb: str) -> None:
    info = os.fstat(file)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(
            f"{path} is not a regular file (a fifo, socket or device); ipybox does not {verb} it."
        )
    if info.st_nlink > 1:
        raise UnsafePathError(
            f"{path} has {info.st_nlink} hard links; ipybox does not {verb} such files on the kernel's "
            "side, as another name may be a file the kernel may not touch. Remove it (or copy it in "
            "the kernel) first."
        )


#: What `read_pointer` reads at most: git refuses a `.git` file of more than 4 PATH_MAX, and a
#: `commondir` longer than a path names nothing either.
POINTER_BYTES = 16 << 10


def read_pointer(path: Path, limit: int = POINTER_BYTES) -> str | None:
    """The text of the small file `path` (a `.git` file, a `commondir`, a settings file) that a
    kernel may have written, stripped; None if it is not a regular file (never opened as a fifo
    or device) or holds more than `limit` bytes: read in full, a sparse file of a terabyte would
    take the host's memory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if len(data) > limit else data.decode(errors="replace").strip()


def remove(fd: int, name: str) -> None:
    """Remove `name` in `fd`, a directory tree or anything else, without following links."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
