"""Kernel-side file helpers for remote kernels (standard library only: it runs in the kernel).

ipybox copies this module, with the other modules generated code needs, into a directory
(`SITE`) that it puts first on the remote kernel's `sys.path`. Transfers send or print one
base64 chunk per cell, so neither side holds a whole file in memory.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import shutil
import sys
from typing import IO

#: Where ipybox's modules and the mirrored packages (`mcptools`) live in this kernel.
SITE = ""
#: The kernel's working directory at start: relative transfer paths are relative to it.
HOME = ""
_uploads: dict[str, IO[bytes]] = {}
_PART = ".ipybox-part"


def _path(path: str) -> str:
    return os.path.join(HOME or os.getcwd(), os.path.expanduser(path))


def mirror(name: str, files: dict[str, str], removed: list[str]) -> None:
    """Write `files` (relative path: text) under `SITE/name`, delete `removed`, forget stale imports."""
    root = os.path.join(SITE, name)
    for rel, text in files.items():
        target = os.path.join(root, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    for rel in removed:
        try:
            os.remove(os.path.join(root, rel))
        except FileNotFoundError:
            pass
    for directory, _, names in os.walk(root, topdown=False):  # packages whose modules are all gone
        if not names and directory != root:
            shutil.rmtree(directory, ignore_errors=True)
    importlib.invalidate_caches()


def begin_upload(path: str) -> None:
    """Start writing `path` (parents created); the data goes to a part file until `end_upload`."""
    target = _path(path)
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    abort_upload(path)
    _uploads[target] = open(target + _PART, "wb")  # noqa: SIM115 - closed by end/abort_upload


def write_chunk(path: str, data: str) -> None:
    _uploads[_path(path)].write(base64.b64decode(data))


def end_upload(path: str) -> None:
    target = _path(path)
    _uploads.pop(target).close()
    os.replace(target + _PART, target)


def abort_upload(path: str) -> None:
    target = _path(path)
    handle = _uploads.pop(target, None)
    if handle is not None:
        handle.close()
        try:
            os.remove(target + _PART)
        except FileNotFoundError:
            pass


def make_dir(path: str) -> None:
    os.makedirs(_path(path), exist_ok=True)


def describe(path: str) -> None:
    """Print what `path` is, as JSON: a file and its size, a directory and its files, or missing."""
    target = _path(path)
    if os.path.isfile(target):
        info: dict[str, object] = {"type": "file", "size": os.path.getsize(target)}
    elif os.path.isdir(target):
        files: list[list[object]] = []
        dirs: list[str] = []
        for directory, subdirs, names in os.walk(target):
            rel_dir = os.path.relpath(directory, target)
            dirs.extend(os.path.normpath(os.path.join(rel_dir, d)) for d in subdirs)
            for name in names:
                full = os.path.join(directory, name)
                if os.path.isfile(full):
                    files.append([os.path.normpath(os.path.join(rel_dir, name)), os.path.getsize(full)])
        info = {"type": "dir", "files": files, "dirs": dirs}
    else:
        info = {"type": "missing", "path": target}
    sys.stdout.write(json.dumps(info))


def read_chunk(path: str, offset: int, size: int) -> None:
    """Print `size` bytes of `path` from `offset`, base64-encoded."""
    with open(_path(path), "rb") as f:
        f.seek(offset)
        sys.stdout.write(base64.b64encode(f.read(size)).decode())
