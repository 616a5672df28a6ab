"""How deep JSON-like data nests: what a kernel sends the host is walked by recursion there (the
audit record, the session notebook, its validation and load), which must not fail on it."""

from __future__ import annotations

from typing import Any

#: How deep the lists and dicts of kernel-supplied data may nest; no tool argument or output needs
#: more, and every recursive walk of the host's stays far below Python's recursion limit with it.
MAX_NESTING = 100


def deeper_than(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether `value`'s lists and dicts nest more than `limit` levels deep (walked level by level,
    without recursion, looking into containers only; one that holds none is passed over at C
    speed, as most are)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        inner: list[Any] = []
        for item in level:
            items = item.values() if isinstance(item, dict) else item
            if not _SCALARS.issuperset(map(type, items)):
                inner.extend(x for x in items if isinstance(x, dict | list))
        level = inner
    return bool(level)


_SCALARS = frozenset((str, int, float, bool, type(None)))
