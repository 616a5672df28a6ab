"""How deep JSON-like data nests: what a kernel sends the host is walked by recursion there (the
audit record, the session notebook, its validation and load), which must not fail on it."""

from __future__ import annotations

from typing import Any

#: How deep the lists and dicts of kernel-supplied data may nest; no tool argument or output needs
#: more, and every recursive walk of the host's stays far below Python's recursion limit with it.
MAX_NESTING = 100


def deeper_than(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether `value`'s lists and dicts nest more than `limit` levels deep (walked level by level,
    without recursion, looking into containers only)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [
            inner
            for item in level
            for inner in (item.values() if isinstance(item, dict) else item)
            if isinstance(inner, dict | list)
        ]
    return bool(level)
