"""How deep JSON-like data nests: what a kernel sends the host is walked by recursion there (the
audit record, the session notebook, its validation and load), which must not fail on it."""

from __future__ import annotations

from typing import Any

#: How deep the lists and dicts of kernel-supplied data may nest; no tool argument or output needs
#: more, and every recursive walk of the host's stays far below Python's recursion limit with it.
MAX_NESTING = 100


def deeper_than(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether `value`'s lists and dicts nest more than `limit` levels deep (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth == limit:
                return True
            stack.extend((inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return False
