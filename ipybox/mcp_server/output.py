"""Fits cell output into an agent's context: head and tail kept, the whole saved in the workspace."""

from __future__ import annotations

import uuid
from pathlib import Path

from ipybox import _safe_fs


def truncate(text: str, limit: int, spill_dir: Path, *, trusted: Path | None = None) -> str:
    """`text` if within `limit` characters, else its head and tail around a marker.

    The marker says how much was cut and where the full text was saved, so an agent can
    read or grep that file instead of printing everything again. The part of `spill_dir` below
    `trusted` (the workspace; default: the current directory, where `ipybox` runs) is
    kernel-writable, so it is walked without following links.
    """
    if len(text) <= limit:
        return text
    path = spill_dir / f"output-{uuid.uuid4().hex[:12]}.txt"
    _safe_fs.create_file(path, text.encode(), Path.cwd() if trusted is None else trusted)
    head = max(limit // 2, 0)
    tail = max(limit - head, 0)
    cut = len(text) - head - tail
    marker = f"\n\n[... {cut} of {len(text)} characters cut; full output saved to {path} ...]\n\n"
    return text[:head] + marker + (text[-tail:] if tail else "")
