"""Fits cell output into an agent's context: head and tail kept, the whole saved in the workspace."""

from __future__ import annotations

import uuid
from pathlib import Path


def truncate(text: str, limit: int, spill_dir: Path) -> str:
    """`text` if within `limit` characters, else its head and tail around a marker.

    The marker says how much was cut and where the full text was saved, so an agent can
    read or grep that file instead of printing everything again.
    """
    if len(text) <= limit:
        return text
    spill_dir.mkdir(parents=True, exist_ok=True)
    path = spill_dir / f"output-{uuid.uuid4().hex[:12]}.txt"
    path.write_text(text)
    head = max(limit // 2, 0)
    tail = max(limit - head, 0)
    cut = len(text) - head - tail
    marker = f"\n\n[... {cut} of {len(text)} characters cut; full output saved to {path} ...]\n\n"
    return text[:head] + marker + (text[-tail:] if tail else "")
