"""Fits cell output into an agent's context: head and tail kept, the whole saved in the workspace.

What is saved is bounded: a `Spill` keeps its newest files within a count and a total size, and
removes the oldest, so a kernel cutting its output on every cell cannot fill the disk through ipybox.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ipybox import _safe_fs
from ipybox.kernel_mgr.output import DROPPED_MARK

_SPILLED = re.compile(r"output-[0-9a-f]{12}\.txt")


@dataclass(frozen=True)
class Spill:
    """How many files of cut output a directory keeps (`files`), and their bytes together (`size`).

    None: no limit. The newest file is always kept, whatever its size.
    """

    files: int | None = 100
    size: int | None = 256 << 20


def truncate(
    text: str, limit: int, spill_dir: Path, *, trusted: Path | None = None, spill: Spill = Spill()
) -> str:
    """`text` if within `limit` characters, else its head and tail around a marker.

    The marker says how much was cut and where the full text was saved, so an agent can
    read or grep that file instead of printing everything again. The part of `spill_dir` below
    `trusted` (the workspace; default: the current directory, where `ipybox` runs) is
    kernel-writable, so it is walked without following links. Older files there go as `spill` says.
    """
    if len(text) <= limit:
        return text
    name = f"output-{uuid.uuid4().hex[:12]}.txt"
    with _open_dir(spill_dir, Path.cwd() if trusted is None else trusted) as fd:
        _safe_fs.write_new(fd, name, text.encode(), spill_dir / name)
        _prune(fd, spill, name)
    head = max(limit // 2, 0)
    tail = max(limit - head, 0)
    cut = len(text) - head - tail
    # output the kernel's limit already cut in the middle is saved as it reached ipybox, not whole
    what = "the output as kept (past the output limit)" if DROPPED_MARK in text else "full output"
    marker = f"\n\n[... {cut} of {len(text)} characters cut; {what} saved to {spill_dir / name} ...]\n\n"
    return text[:head] + marker + (text[-tail:] if tail else "")


@contextlib.contextmanager
def _open_dir(path: Path, trusted: Path) -> Iterator[int]:
    """A descriptor of `path`, made if missing; below `trusted` walked without following links."""
    parts = _safe_fs.parts_below(path, trusted)
    if parts is None:  # a place the application chose
        path.mkdir(parents=True, exist_ok=True)
        trusted, parts = path, ()
    with _safe_fs.opendir(trusted, parts, create=True) as fd:
        yield fd


def _prune(fd: int, spill: Spill, newest: str) -> None:
    """Remove the oldest spilled files in directory `fd` past `spill`'s count or size (never `newest`)."""
    if spill.files is None and spill.size is None:
        return
    found: list[tuple[int, str, int]] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if not _SPILLED.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode):
                    found.append((info.st_mtime_ns, entry.name, info.st_size))
    found.sort(key=lambda item: (item[1] != newest, -item[0]))  # the newest first, then by age
    count = total = 0
    for _, name, size in found:
        count += 1
        total += size
        over = (spill.files is not None and count > spill.files) or (
            spill.size is not None and total > spill.size
        )
        if over and name != newest:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
