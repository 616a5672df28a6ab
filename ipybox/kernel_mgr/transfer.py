"""File transfer between the executor's machine and a kernel: files and directories, in chunks.

A local kernel shares the file system, so a transfer is a copy. A remote kernel gets one
base64 chunk per (silent) cell through its gateway connection, so memory stays flat for any
file size on both sides.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from ipybox.kernel_mgr.backend import QuietCells

#: Bytes per cell; base64 makes them a third larger, well below gateways' websocket frame limits.
CHUNK = 1 << 20
_HELPERS = "__import__('ipybox.kernel_mgr.kernel_files', fromlist=['_'])"


def _call(function: str, *args: Any) -> str:
    return f"{_HELPERS}.{function}({', '.join(repr(a) for a in args)})"


async def copy_local(source: Path, target: Path, kernel_side: str, workspace: Path) -> None:
    """Copy a file or directory (merged into an existing one), creating the target's parents.

    `kernel_side` ("source" or "target") is the side in the kernel's `workspace`. Symbolic links
    there are never followed: kernel code (even sandboxed) could plant one to make ipybox, which
    runs outside the sandbox, read or overwrite a file the kernel may not touch.
    """

    def copy() -> None:
        if kernel_side == "source":
            _no_links(source, workspace)
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            return
        if source.is_dir():
            for directory, _, names in os.walk(source):
                destination = target / Path(directory).relative_to(source)
                _no_links(destination, workspace)
                destination.mkdir(parents=True, exist_ok=True)
                for name in names:
                    _no_links(destination / name, workspace)
                    shutil.copyfile(Path(directory) / name, destination / name)
        else:
            _no_links(target, workspace)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)

    if not source.exists():
        raise FileNotFoundError(f"No such file or directory: {source}")
    await asyncio.to_thread(copy)


def _no_links(path: Path, workspace: Path) -> None:
    """Refuse `path` if it, or a directory on the way to it from `workspace`, is a symbolic link."""
    try:
        parts = Path(os.path.abspath(path)).relative_to(workspace).parts
    except ValueError:  # outside the workspace: a place the application chose, not the kernel
        return
    current = workspace
    for part in parts:
        current /= part
        if current.is_symlink():
            raise PermissionError(f"{path} goes through a symbolic link; ipybox does not follow it")


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
                if path.is_file():
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
