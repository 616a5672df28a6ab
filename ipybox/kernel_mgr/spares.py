"""A bound on the warm spare kernels of many supervisors together (the MCP server's users)."""

from __future__ import annotations

import weakref


class SpareKernels:
    """At most `size` warm spares among the supervisors that share this object.

    A spare stays with the supervisor that started it: it has that kernel's working directory,
    sandbox policy, environment and tool server, so it is never handed to another one (nor to
    another user). What is shared is the right to keep one. Places go first come: a supervisor
    keeps its place across resets until it stops, and one that found none tries again at its
    next reset. (Taking places from others would start a spare for every kernel started, the
    cost this bound is there to avoid.)
    """

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"the number of spare kernels cannot be negative, got {size}")
        self.size = size
        self._holders: weakref.WeakSet[object] = weakref.WeakSet()  # a lost supervisor frees its place

    def take(self, holder: object) -> bool:
        """Whether `holder` may keep a spare: it has a place already, or got a free one."""
        if holder in self._holders:
            return True
        if len(self._holders) >= self.size:
            return False
        self._holders.add(holder)
        return True

    def give_back(self, holder: object) -> None:
        """`holder` keeps no spare any more."""
        self._holders.discard(holder)

    def __len__(self) -> int:
        return len(self._holders)
