"""File transfer between the executor's machine and a kernel: files and directories, in chunks.

A local kernel shares the file system, so a transfer is a copy. A remote kernel gets one
base64 chunk per (silent) cell through its gateway connection, so memory stays flat for any
file size on both sides.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from ipybox import _safe_fs
from ipybox.kernel_mgr.backend import QuietCells
from ipybox.sandbox import repo_sweep

#: Bytes per cell; base64 makes them a third larger, well below gateways' websocket frame limits.
CHUNK = 1 << 20
_HELPERS = "__import__('ipybox.kernel_mgr.kernel_files', fromlist=['_'])"

logger = logging.getLogger(__name__)


def _call(function: str, *args: Any) -> str:
    return f"{_HELPERS}.{function}({', '.join(repr(a) for a in args)})"


async def copy_local(
    source: Path, target: Path, kernel_side: str, workspace: Path, *, disarm: bool = False
) -> None:
    """Copy a file or directory (merged into an existing one), creating the target's parents.

    `kernel_side` ("source" or "target") is the side in the kernel's `workspace`. Symbolic links
    there are never followed, and nothing is checked and then opened: kernel code (even
    sandboxed) could plant or swap in a link to make ipybox, which runs outside the sandbox,
    read or overwrite a file the kernel may not touch (see `ipybox._safe_fs`). With `disarm` (a
    sandboxed kernel's files), git repositories in a downloaded tree are disarmed as the sweep
    of the workspace does (`ipybox.sandbox.repo_sweep`): the sweep never reaches the copy, and
    the kernel may have made them in the moment before its next sweep.
    """
    side = source if kernel_side == "source" else target
    parts = _safe_fs.parts_below(side, workspace)
    if parts is not None and kernel_side == "source":
        await asyncio.to_thread(_download_local, workspace, parts, target, disarm)
        return
    if not source.exists():
        raise FileNotFoundError(f"No such file or directory: {source}")
    if parts is None:  # both sides are places the application chose
        await asyncio.to_thread(_copy_plain, source, target)
    else:
        await asyncio.to_thread(_upload_local, source, workspace, parts)


def _copy_plain(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def _upload_local(source: Path, workspace: Path, parts: tuple[str, ...]) -> None:
    if source.is_dir():
        with _safe_fs.opendir(workspace, parts, create=True) as fd:
            _put_tree(source, fd, workspace.joinpath(*parts))
        return
    if not parts:
        raise IsADirectoryError(f"Cannot replace the workspace {workspace} with the file {source}")
    with _safe_fs.opendir(workspace, parts[:-1], create=True) as fd, source.open("rb") as f:
        _safe_fs.replace_file(fd, parts[-1], f)


def _put_tree(source: Path, fd: int, path: Path) -> None:
    """Copy the tree `source` into the kernel's folder `fd` (at `path`). A link in it is not
    followed (it may be one a download copied out of the kernel's workspace: what it names on
    the host is not the tree's) and not copied."""
    for entry in os.scandir(source):
        if entry.is_dir(follow_symlinks=False):
            with _safe_fs.subdir(fd, entry.name, path / entry.name, create=True) as sub:
                _put_tree(Path(entry.path), sub, path / entry.name)
        elif entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb", opener=_no_follow) as f:
                _safe_fs.replace_file(fd, entry.name, f)
        elif entry.is_symlink():
            logger.warning(
                "not uploading the link %r: links in an uploaded folder are not followed", entry.path
            )


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def _download_local(workspace: Path, parts: tuple[str, ...], target: Path, disarm: bool) -> None:
    sweep = repo_sweep.RepoSweep() if disarm else None  # what the copy writes from now on
    _copy_out(workspace, parts, target)
    if sweep is not None and target.is_dir() and not target.is_symlink():
        sweep.add([target], [])
        sweep.sweep()


def _copy_out(workspace: Path, parts: tuple[str, ...], target: Path) -> None:
    path = workspace.joinpath(*parts)
    if not parts:
        with _safe_fs.opendir(workspace, ()) as fd:
            _get_tree(fd, path, target)
        return
    try:
        with _safe_fs.opendir(workspace, parts[:-1]) as parent:
            try:
                with _safe_fs.subdir(parent, parts[-1], path) as fd:
                    _get_tree(fd, path, target)
                    return
            except NotADirectoryError:
                pass
            _get_file(parent, parts[-1], path, target)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such file or directory: {path}") from None


def _get_tree(fd: int, path: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(fd):
        try:
            _get_entry(fd, entry, path / entry.name, target / entry.name)
        except FileNotFoundError:
            if _still_there(fd, entry):
                raise
            # Removed (or replaced) since the listing: the kernel is still changing the tree (as `tar` and
            # `rsync` do, the copy goes on without it rather than losing everything else).
            logger.warning(
                "%r was removed while it was being downloaded; the copy goes on without it",
                str(path / entry.name),  # the kernel's name, shown as data (repr), never as terminal control
            )


def _get_entry(fd: int, entry: os.DirEntry[str], path: Path, target: Path) -> None:
    if entry.is_symlink():  # copied as a link, never followed; only one that stays in the tree
        link = os.readlink(entry.name, dir_fd=fd)
        target.unlink(missing_ok=True)
        if _stays_in_folder(link):
            target.symlink_to(link)
        else:
            logger.warning(
                "not copying the link %r (to %r): it leads out of the downloaded folder", str(path), link
            )
        return
    _drop_link(target)
    if entry.is_dir(follow_symlinks=False):
        try:
            with _safe_fs.subdir(fd, entry.name, path) as sub:
                _get_tree(sub, path, target)
                return
        except NotADirectoryError:  # replaced by a file since the listing
            pass
    _get_file(fd, entry.name, path, target)


def _stays_in_folder(link: str) -> bool:
    """Whether the link text `link` names a path below the link's folder, whatever links it
    passes through there (each of which must do the same): relative, without `..`. A kernel's
    link copied to the host as it was (`keys -> ~/.ssh`, `../../..`) had ipybox's later
    downloads into the copy write, and its uploads of the copy read, where it named."""
    return not os.path.isabs(link) and ".." not in link.split("/")


def _still_there(fd: int, entry: os.DirEntry[str]) -> bool:
    try:
        return os.stat(entry.name, dir_fd=fd, follow_symlinks=False).st_ino == entry.inode()
    except FileNotFoundError:
        return False


def _drop_link(target: Path) -> None:
    """A link an earlier download copied from the kernel is replaced, never written through."""
    if target.is_symlink():
        target.unlink()


def _get_file(fd: int, name: str, path: Path, target: Path) -> None:
    with _safe_fs.open_regular(fd, name, path) as f:
        target.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(target, flags, 0o666), "wb") as out:
            _copy_data(f.fileno(), out.fileno())


def _copy_data(source: int, target: int) -> None:
    """Copy the file `source` to the empty file `target` as it lies on disk: its holes stay holes.
    A kernel makes a sparse file of a terabyte for nothing (`truncate`); copied byte by byte, it
    filled the host's disk with zeros, and took hours. Only what the file held when opened is
    copied (a file the kernel keeps growing is not followed)."""
    size = os.fstat(source).st_size
    offset = 0
    while offset < size:
        try:
            start = os.lseek(source, offset, os.SEEK_DATA)
            end = min(os.lseek(source, start, os.SEEK_HOLE), size)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break  # only a hole is left
            start, end = offset, size  # holes not known here: copy it all
        offset = end
        while start < end:
            data = os.pread(source, min(CHUNK, end - start), start)
            if not data:
                offset = size  # cut short meanwhile
                break
            os.pwrite(target, data, start)
            start += len(data)
    os.ftruncate(target, min(size, os.fstat(source).st_size))


def _inside(root: Path, rel: str) -> Path:
    """`root / rel` for a relative path `rel` reported by kernel code, which may not leave `root`."""
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts:
        raise PermissionError(f"the kernel reported a path outside the download target: {rel!r}")
    return root / path


async def upload(kernel: QuietCells, local: Path, remote: str) -> None:
    """Copy the local file or directory `local` to `remote` (relative to the kernel's working dir)."""
    if local.is_dir():
        await kernel.run_quiet(_call("make_dir", remote))
        for directory, subdirs, names in os.walk(local):
            rel = Path(directory).relative_to(local)
            for name in subdirs:
                await kernel.run_quiet(_call("make_dir", _join(remote, rel / name)))
            for name in names:
                path = Path(directory) / name
                if path.is_file() and not path.is_symlink():  # links are not followed, see _put_tree
                    await _upload_file(kernel, path, _join(remote, rel / name))
    elif local.is_file():
        await _upload_file(kernel, local, remote)
    else:
        raise FileNotFoundError(f"No such file or directory: {local}")


async def _upload_file(kernel: QuietCells, local: Path, remote: str) -> None:
    await kernel.run_quiet(_call("begin_upload", remote))
    try:
        with local.open("rb") as f:
            while data := await asyncio.to_thread(f.read, CHUNK):
                await kernel.evaluate(_call("write_chunk", remote, base64.b64encode(data).decode()))
        await kernel.run_quiet(_call("end_upload", remote))
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.shield(kernel.run_quiet(_call("abort_upload", remote)))
        raise


async def download(kernel: QuietCells, remote: str, local: Path) -> None:
    """Copy the kernel's file or directory `remote` to the local path `local`."""
    info = json.loads(await kernel.run_quiet(_call("describe", remote)))
    if info["type"] == "missing":
        raise FileNotFoundError(f"No such file or directory in the kernel: {info['path']}")
    if info["type"] == "file":
        await _download_file(kernel, remote, local, int(info["size"]))
        return
    local.mkdir(parents=True, exist_ok=True)
    for rel in info["dirs"]:  # what the kernel reports is checked: kernel code may lie
        _inside(local, rel).mkdir(parents=True, exist_ok=True)
    for rel, size in info["files"]:
        await _download_file(kernel, _join(remote, Path(rel)), _inside(local, rel), int(size))


async def _download_file(kernel: QuietCells, remote: str, local: Path, size: int) -> None:
    local.parent.mkdir(parents=True, exist_ok=True)
    part = local.with_name(local.name + ".ipybox-part")
    try:
        with part.open("wb") as f:
            offset = 0
            while offset < size or offset == 0:
                text = await kernel.run_quiet(_call("read_chunk", remote, offset, CHUNK))
                data = base64.b64decode(text)
                if not data:
                    break
                await asyncio.to_thread(f.write, data)
                offset += len(data)
        part.replace(local)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _join(remote: str, rel: Path) -> str:
    return f"{remote.rstrip('/')}/{rel.as_posix()}" if remote else rel.as_posix()
