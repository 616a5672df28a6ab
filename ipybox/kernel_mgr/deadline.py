"""`Deadline`: a time limit that does not run while paused (e.g. while a tool call awaits approval),
and `race()`, which runs work against a deadline and a future that ends it early."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from ipybox.errors import IpyboxError

T = TypeVar("T")

#: While paused, waiters look again this often (the pause may end at any time).
_POLL_WHILE_PAUSED = 0.25


class Deadline:
    """`seconds` from now, not counting the time spent paused; `None` never expires.

    Pauses nest: the clock stops at the first `pause()` and runs again at the last `resume()`.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._start = time.monotonic()
        self._paused_total = 0.0
        self._paused_at = 0.0
        self._pauses = 0

    def pause(self) -> None:
        if self._pauses == 0:
            self._paused_at = time.monotonic()
        self._pauses += 1

    def resume(self) -> None:
        if self._pauses == 0:
            return
        self._pauses -= 1
        if self._pauses == 0:
            self._paused_total += time.monotonic() - self._paused_at

    def remaining(self) -> float | None:
        """Seconds left (negative once expired), or None without a limit."""
        if self.seconds is None:
            return None
        now = time.monotonic()
        paused = self._paused_total + (now - self._paused_at if self._pauses else 0.0)
        return self.seconds - (now - self._start - paused)

    def wait_time(self, grace: float = 0) -> float | None:
        """How long to wait before looking again whether the deadline (plus `grace`) has passed."""
        remaining = self.remaining()
        if remaining is None:
            return None
        if self._pauses:
            return max(remaining + grace, _POLL_WHILE_PAUSED)
        return max(remaining + grace, 0.0)

    def expired(self, grace: float = 0) -> bool:
        remaining = self.remaining()
        return remaining is not None and not self._pauses and remaining + grace <= 0


class Overtaken(IpyboxError):
    """`race()`'s watched future finished before the work did (e.g. the kernel died)."""


async def race(
    aw: Awaitable[T], watched: asyncio.Future[Any], limit: float | Deadline | None, grace: float = 0
) -> asyncio.Future[T]:
    """Run `aw` until it is done, `watched` finishes (`Overtaken`) or `limit` passes (`TimeoutError`).

    Returns the finished task (its `result()` may still raise, or it may have been cancelled);
    the work is cancelled when it loses, also when the caller is cancelled, so no reader is left
    behind to consume the next request's messages.
    """
    deadline = limit if isinstance(limit, Deadline) else Deadline(limit)
    task = asyncio.ensure_future(aw)
    try:
        while True:
            done, _ = await asyncio.wait(
                {task, watched}, timeout=deadline.wait_time(grace), return_when=asyncio.FIRST_COMPLETED
            )
            if done or deadline.expired(grace):
                break
    except BaseException:
        task.cancel()
        raise
    if task in done:
        return task
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    if watched in done:
        raise Overtaken
    raise TimeoutError
