"""Homes: directories ipybox makes, each for one owner (the MCP server's principals), in a tree
that no kernel but each home's own reaches.

A tree (`WORKSPACE/users`) and every home in it are recorded, with their file identities, in
ipybox's state dir, which no sandboxed kernel can read or write. A home is made fresh by ipybox
(`mkdir`, never an existing directory: one a kernel could have filled beforehand with a `.env`
or `mcptools/` would steer its owner's kernel) and used only while it is the directory recorded.
Every sandboxed kernel that does not run in one of a tree's homes gets the whole tree hidden and
read-only (`confinement`): the local principal's kernel, whose workspace holds the tree, cannot
seed or change another principal's files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ipybox import _safe_fs
from ipybox.errors import IpyboxError
from ipybox.tool_exec.registry import state_dir

logger = logging.getLogger(__name__)


class HomeError(IpyboxError, PermissionError):
    """A home that ipybox did not make, or that was replaced since; the message says what to do."""


def _records() -> Path:
    return state_dir() / "homes"


def _record_file(tree: Path) -> Path:
    return _records() / f"{hashlib.sha256(str(tree).encode()).hexdigest()[:32]}.json"


def trees() -> list[Path]:
    """Every recorded tree of homes."""
    found = []
    for path in sorted(_records().glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            found.append(Path(json.loads(path.read_text())["tree"]))
    return found


@contextlib.contextmanager
def _locked(tree: Path) -> Iterator[dict[str, Any]]:
    """The record of `tree` (created empty), written back when the block ends; one process at a time."""
    _records().mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(_records() / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = _record_file(tree)
        try:
            record: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            record = {"tree": str(tree), "homes": {}}
        before = json.dumps(record, sort_keys=True)
        yield record
        if json.dumps(record, sort_keys=True) != before:
            fd, temp = tempfile.mkstemp(dir=_records(), prefix=".record-")
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(temp, path)


def _identity(fd: int) -> list[int]:
    info = os.fstat(fd)
    return [info.st_dev, info.st_ino]


@contextlib.contextmanager
def _tree(tree: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """A descriptor of `tree` (made and recorded if new) and its record, locked."""
    with _locked(tree) as record:
        # the tree may lie in a kernel's reach until recorded (an earlier session's): no links
        with _safe_fs.opendir(tree.parent, (tree.name,), create=True) as fd:
            if record.get("identity") != _identity(fd):
                if record.get("identity") is not None:  # removed or replaced: what is in it is not ours
                    logger.warning("%s is not the directory recorded before; no home in it is taken", tree)
                record.update(identity=_identity(fd), homes={})
            yield fd, record


def record_tree(tree: Path) -> None:
    """Make and record `tree`, so that kernels started from now on are kept out of it."""
    with _tree(Path(os.path.abspath(tree))):
        pass


def home(tree: Path, name: str) -> Path:
    """`tree/name`, the home ipybox made for one owner: made now if it has none. Raises `HomeError`
    for a directory there that ipybox did not make, or not the one it made (replaced since)."""
    tree = Path(os.path.abspath(tree))
    path = tree / name
    again = f"Move it away (e.g. mv {path} {path}.old), check what is in it, and reconnect: ipybox then"
    with _tree(tree) as (fd, record):
        expected = record["homes"].get(name)
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
            made = True
        except FileExistsError:
            made = False
            if expected is None:
                raise HomeError(
                    f"{path} exists, but ipybox did not make it: it may hold files (a .env, mcptools/) that "
                    f"code in another session put there for this user's kernel to use. {again} makes a fresh "
                    "home, into which you can copy back what you trust; see 'Migrating homes' in "
                    "docs/mcp-server.md."
                ) from None
        with _safe_fs.subdir(fd, name, path) as child:
            if made:
                record["homes"][name] = _identity(child)
            elif expected != _identity(child):
                raise HomeError(
                    f"{path} is not the home ipybox made for this user (it was replaced since). {again} "
                    "makes a fresh one."
                )
    return path


def confinement(workspace: Path, writable: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """What a sandboxed kernel in `workspace` that may write `writable` must not read and not write:
    every recorded tree of homes but the one it runs in, as `(hidden, protected)`. Raises
    `HomeError` if it runs in a home but may write beyond it, over the others."""
    workspace = Path(os.path.abspath(workspace))
    hidden: list[Path] = []
    protected: list[Path] = []
    for tree in trees():
        if workspace.is_relative_to(tree):
            wider = [w for w in writable if tree.is_relative_to(w)]
            if workspace == tree or wider:
                raise HomeError(
                    f"A kernel in {workspace} may write {(wider or [tree])[0]}, which holds the homes of "
                    "other users of the ipybox MCP server; let its sandbox policy write the kernel's own "
                    "home only (allowWrite: ['.'])."
                )
            continue
        if os.path.isdir(tree):  # one made again later is not the recorded one: `home` refuses it
            hidden.append(tree)
            protected.append(tree)
    return hidden, protected
