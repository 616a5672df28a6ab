"""The server's kernels, keyed by (principal, kernel name): started on first use, stopped when idle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from ipybox.code_exec import CodeExecutor

logger = logging.getLogger(__name__)

#: The principal of a server without authentication (stdio, or HTTP on loopback).
LOCAL = "local"
#: Authenticated principals are named `user:<name>`: no token-file entry or JWT subject is LOCAL.
_USER = "user:"


def user_principal(name: str) -> str:
    """The principal of an authenticated user called `name` (a token-file name, a JWT's `sub`)."""
    return _USER + name


def user_name(principal: str) -> str | None:
    """The name of an authenticated principal; None for the local principal."""
    if principal.startswith(_USER):
        return principal[len(_USER) :]
    if principal != LOCAL:
        raise ValueError(f"not a principal: {principal!r}")
    return None


#: User names shown as they are; any other (`local`, empty, not ASCII, with spaces or brackets) is
#: shown quoted, with JSON escapes, so it cannot read as the local principal or as another user.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")


def shown(principal: str) -> str:
    """A principal as people read it (in the audit log's `by`): `local`, or its user's name,
    quoted where it could pass for another principal."""
    name = user_name(principal)
    if name is None:
        return LOCAL
    if name != LOCAL and _PLAIN_NAME.fullmatch(name):
        return name
    return json.dumps(name)


DEFAULT_KERNEL = "default"
_KERNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")


def check_kernel_name(name: str) -> str:
    """A kernel name an agent chose: 1-32 letters, digits, `_`, `.` or `-`."""
    if not isinstance(name, str) or not _KERNEL_NAME.fullmatch(name):
        raise ValueError(
            f"kernel must be a short name of letters, digits, '_', '.' or '-' (at most 32), got {name!r}; "
            f"omit it to use the {DEFAULT_KERNEL!r} kernel."
        )
    return name


@dataclass
class _Kernel:
    executor: CodeExecutor
    last_used: float = field(default_factory=time.monotonic)
    users: int = 0


ExecutorFactory = Callable[[str, str], CodeExecutor]
"""Makes the (not yet started) executor of a principal's named kernel."""
StartHook = Callable[[str, str, CodeExecutor], Awaitable[str]]
"""Runs on a principal's named kernel once started, before its first use: a notice for that use, or ""."""
StopHook = Callable[[str, str, CodeExecutor], None]
"""Runs when a principal's named kernel is stopped (idle, or making room), before it stops."""


class KernelPool:
    """Executors per (principal, kernel name); at most `max_kernels` per principal.

    A kernel unused for `idle_timeout` seconds is stopped, and so is the least recently used
    one when a principal starts one more than allowed; the next call for it gets a fresh kernel
    and a notice saying why (`use()`). Principals never see each other's kernels.
    """

    def __init__(
        self,
        factory: ExecutorFactory,
        *,
        idle_timeout: float | None,
        max_kernels: int,
        on_start: StartHook | None = None,
        on_stop: StopHook | None = None,
    ) -> None:
        if max_kernels < 1:
            raise ValueError(f"max_kernels must be at least 1, got {max_kernels}")
        self._factory = factory
        self._on_start = on_start
        self._on_stop = on_stop
        self.idle_timeout = idle_timeout
        self.max_kernels = max_kernels
        self._kernels: dict[tuple[str, str], _Kernel] = {}
        self._starting: dict[tuple[str, str], asyncio.Task[_Kernel]] = {}
        self._gone: dict[tuple[str, str], str] = {}  # why a kernel was stopped, until its next use
        self._stopping: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def use(
        self, principal: str, name: str = DEFAULT_KERNEL
    ) -> AsyncIterator[tuple[CodeExecutor, str]]:
        """The executor of `principal`'s kernel `name`, kept from idle-stopping while in use, and a
        notice for the reply ("" unless the kernel was stopped since its last use)."""
        key = (principal, name)
        kernel = await self._get(key)
        kernel.users += 1
        try:
            yield kernel.executor, self._gone.pop(key, "")
        finally:
            kernel.users -= 1
            kernel.last_used = time.monotonic()

    def executors(self, principal: str) -> list[CodeExecutor]:
        """The running executors of a principal."""
        return [k.executor for (p, _), k in self._kernels.items() if p == principal]

    def names(self, principal: str) -> list[str]:
        return [n for (p, n) in self._kernels if p == principal]

    def prewarm(self, principal: str, name: str = DEFAULT_KERNEL) -> None:
        """Start a kernel now unless it runs or is starting, so a later call does not wait for it."""
        key = (principal, name)
        if key not in self._kernels and key not in self._starting:
            task = self._start_task(key)
            task.add_done_callback(_log_failed_start)

    async def _get(self, key: tuple[str, str]) -> _Kernel:
        if self._reaper is None and self.idle_timeout is not None:
            self._reaper = asyncio.create_task(self._reap_idle(self.idle_timeout))
        if (kernel := self._kernels.get(key)) is not None:
            return kernel
        task = self._starting.get(key) or self._start_task(key)
        # shielded: a caller that gives up does not stop the start; the kernel is kept either way
        return await asyncio.shield(task)

    def _start_task(self, key: tuple[str, str]) -> asyncio.Task[_Kernel]:
        task = self._starting[key] = asyncio.create_task(self._start(key))
        return task

    async def _start(self, key: tuple[str, str]) -> _Kernel:
        try:
            self._make_room(key[0])
            executor = self._factory(*key)
            await executor.start()
            if self._on_start is not None:
                try:
                    notice = await self._on_start(*key, executor)
                except BaseException:
                    await executor.stop()
                    raise
                if notice:
                    self._gone[key] = "\n".join(n for n in (self._gone.get(key), notice) if n)
            kernel = self._kernels[key] = _Kernel(executor)
            return kernel
        finally:
            self._starting.pop(key, None)

    def _make_room(self, principal: str) -> None:
        """Stop the least recently used idle kernel of a principal that has its maximum running."""
        own = [(k, v) for k, v in self._kernels.items() if k[0] == principal]
        if len(own) + sum(1 for k in self._starting if k[0] == principal) <= self.max_kernels:
            return
        idle = sorted(((k, v) for k, v in own if v.users == 0), key=lambda kv: kv[1].last_used)
        if not idle:
            names = ", ".join(repr(k[1]) for k, _ in own)
            raise RuntimeError(
                f"All {len(own)} kernels allowed per user are busy ({names}): wait for one to finish, "
                "or run this code in one of them."
            )
        key, _ = idle[0]
        self._stop(key, f"it was the least recently used of the {self.max_kernels} kernels allowed")

    def _stop(self, key: tuple[str, str], why: str) -> None:
        kernel = self._kernels.pop(key)
        self._gone[key] = (
            f"[ipybox: kernel {key[1]!r} was stopped ({why}); this ran on a fresh kernel: "
            "variables and imports from before are gone]"
        )
        logger.info("stopping kernel %r of %r: %s", key[1], key[0], why)
        if self._on_stop is not None:
            self._on_stop(*key, kernel.executor)
        task = asyncio.create_task(kernel.executor.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _reap_idle(self, idle_timeout: float) -> None:
        while True:
            await asyncio.sleep(min(max(idle_timeout / 4, 0.2), 30))
            now = time.monotonic()
            for key, kernel in list(self._kernels.items()):
                if kernel.users == 0 and now - kernel.last_used >= idle_timeout:
                    self._stop(key, f"unused for {_duration(idle_timeout)}")

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        starting = list(self._starting.values())
        for task in starting:
            task.cancel()  # CodeExecutor.start() cleans up after itself when cancelled
        await asyncio.gather(*starting, return_exceptions=True)
        kernels = list(self._kernels.values())
        self._kernels.clear()
        await asyncio.gather(*(k.executor.stop() for k in kernels), *self._stopping, return_exceptions=True)


def _log_failed_start(task: asyncio.Task[_Kernel]) -> None:
    """A prewarmed kernel nobody awaited yet: its failure is logged (the next use tries again)."""
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.warning("starting a kernel ahead of use failed: %s", error)


def _duration(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
