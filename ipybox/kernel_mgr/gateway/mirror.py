"""`DirectoryMirror`: keeps a local package directory (e.g. `mcptools/`) copied into remote kernels."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

#: Largest batch of mirrored files sent in one cell (the gateway's websocket frames are bounded).
_MIRROR_BATCH = 2 << 20


class DirectoryMirror:
    """Keeps a local directory (e.g. `workspace/mcptools`) copied into each remote kernel's `SITE`.

    `changes()` yields cells that write what changed since the last `commit()`; each kernel holds
    its own copy, so a fresh kernel gets everything.
    """

    def __init__(self, source: Path, name: str | None = None) -> None:
        self.source = source
        self.name = name or source.name
        self._sent: dict[str, tuple[int, int]] = {}
        self._pending: dict[str, tuple[int, int]] | None = None

    def copy(self) -> DirectoryMirror:
        return DirectoryMirror(self.source, self.name)

    def _snapshot(self) -> dict[str, tuple[int, int]]:
        """Each `.py` file below `source` (relative path) with its mtime and size.

        It runs before every execution, so it walks with `os.scandir` (a fifth of what
        `Path.rglob` took: 0.18 ms instead of 0.92 ms for 100 tool modules).
        """
        files: dict[str, tuple[int, int]] = {}
        pending = [("", str(self.source))]
        while pending:
            prefix, directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:  # no such directory (yet), or it went away meanwhile
                continue
            for entry in entries:
                if entry.name.startswith(".") or entry.name == "__pycache__":
                    continue  # the generator's staging directories, byte code
                with contextlib.suppress(OSError):
                    if entry.is_dir():
                        pending.append((f"{prefix}{entry.name}/", entry.path))
                    elif entry.name.endswith(".py"):
                        stat = entry.stat()
                        files[prefix + entry.name] = (stat.st_mtime_ns, stat.st_size)
        return files

    def changes(self) -> list[str]:
        """Cells that bring the kernel's copy up to date (none if nothing changed)."""
        snapshot = self._snapshot()
        if snapshot == self._sent:
            self._pending = None
            return []
        self._pending = snapshot
        changed = [rel for rel, stamp in snapshot.items() if self._sent.get(rel) != stamp]
        removed = [rel for rel in self._sent if rel not in snapshot]
        cells: list[str] = []
        batch: dict[str, str] = {}
        size = 0
        for rel in changed:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                text = (self.source / rel).read_text(encoding="utf-8")
                batch[rel] = text
                size += len(text)
            if size > _MIRROR_BATCH:
                cells.append(self._cell(batch, []))
                batch, size = {}, 0
        cells.append(self._cell(batch, removed))
        return cells

    def commit(self) -> None:
        if self._pending is not None:
            self._sent, self._pending = self._pending, None

    def _cell(self, files: dict[str, str], removed: list[str]) -> str:
        return (
            "import ipybox.kernel_mgr.kernel_files as _ipybox_f\n"
            f"_ipybox_f.mirror({self.name!r}, {files!r}, {removed!r})\n"
            "del _ipybox_f"
        )
