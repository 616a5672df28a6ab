"""A private directory per executor for sockets, connection files and the sandbox's settings."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import psutil

from ipybox.sandbox import runtime_root

logger = logging.getLogger(__name__)

#: ipc socket paths must fit in a unix socket address (108 bytes); ours add ~45 to the runtime dir.
_MAX_RUNTIME_DIR = 60


def make_runtime_dir() -> Path:
    """A new runtime directory, short enough for socket paths.

    It records the owning process, so that directories left by a killed ipybox are removed
    by the next one.
    """
    path = Path(tempfile.mkdtemp(prefix="ipybox-", dir=runtime_root()))  # hidden from every sandbox
    if len(str(path)) > _MAX_RUNTIME_DIR:
        path.rmdir()  # TMPDIR is too deep for socket paths: fall back to /tmp
        path = Path(tempfile.mkdtemp(prefix="ipybox-", dir=runtime_root(Path("/tmp"))))
    _remove_orphaned_runtime_dirs(path.parent)
    (path / "owner.pid").write_text(str(os.getpid()))
    return path


def remove_runtime_dir(path: Path | None) -> None:
    """Remove a runtime directory and what is in it (nothing if `path` is None)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _remove_orphaned_runtime_dirs(parent: Path) -> None:
    for candidate in parent.glob("ipybox-*/owner.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(candidate.read_text())
            if candidate.stat().st_uid == os.getuid() and not psutil.pid_exists(pid):
                logger.info("removing %s, left by a process that is gone", candidate.parent)
                shutil.rmtree(candidate.parent, ignore_errors=True)
