"""Keeps one working kernel (plus a warm spare) alive across resets, timeouts and crashes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ipybox.kernel_mgr.backend import KernelLike
from ipybox.kernel_mgr.deadline import Deadline
from ipybox.kernel_mgr.kernel import KernelDied, KernelReply
from ipybox.kernel_mgr.output import KernelEvent
from ipybox.kernel_mgr.spares import SpareKernels
from ipybox.notebook.record import SessionRecord

__all__ = ["KernelLike", "KernelSupervisor", "SpareKernels"]

logger = logging.getLogger(__name__)


class KernelSupervisor:
    """Owns the kernel an executor runs code in.

    `factory` makes the (unstarted) kernels: a `KernelBackend`'s, or any that give `KernelLike`s.
    A spare kernel is started in the background after the first one is ready, so that
    `reset()` and recovery from a dead kernel only swap kernels instead of starting one.
    With `spare` a `SpareKernels`, the spare is kept only while it has a place there.
    `record` is the session's record that the cells run on these kernels add to (default: a new one).
    """

    def __init__(
        self,
        factory: Callable[[], KernelLike],
        spare: bool | SpareKernels = True,
        start_timeout: float = 30,
        *,
        record: SessionRecord | None = None,
    ) -> None:
        self.record = record if record is not None else SessionRecord()
        if self.record.entries:  # a session going on: the kernel that held its state is gone
            self.record.mark_restart("the executor was stopped and started again")
        self._new = factory
        self._spare_enabled = spare is not False
        self._places = spare if isinstance(spare, SpareKernels) else None
        self._start_timeout = start_timeout
        self._started = False
        self._kernel: KernelLike | None = None
        self._spare: asyncio.Task[KernelLike] | None = None
        self._retired: set[asyncio.Task[None]] = set()

    @property
    def kernel(self) -> KernelLike:
        if self._kernel is None:
            raise RuntimeError("No kernel is running: start() was not called, or stop() was.")
        return self._kernel

    async def start(self) -> None:
        self._kernel = await self._start_kernel()
        self._started = True
        self._prepare_spare()

    async def _start_kernel(self) -> KernelLike:
        kernel = self._new()
        await kernel.start(self._start_timeout)
        return kernel

    def _prepare_spare(self) -> None:
        if not self._spare_enabled or self._spare is not None:
            return
        if self._places is None or self._places.take(self):
            self._spare = asyncio.create_task(self._start_kernel())

    async def spare_ready(self) -> None:
        """Wait until the warm spare kernel (if enabled) is up."""
        if self._spare is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._spare)

    async def execute(
        self, code: str, on_event: Callable[[KernelEvent], None], deadline: Deadline
    ) -> KernelReply:
        """Run code on the current kernel; after a crash, swap in a fresh kernel and re-raise.

        If no fresh kernel could be started then (e.g. the gateway is down), the next call tries again.
        """
        if self._kernel is None and self._started:
            await self.replace()
        kernel = self.kernel
        try:
            return await kernel.execute(code, on_event, deadline)
        except KernelDied:
            if self._kernel is kernel:  # not replaced by a reset, nor stopped, meanwhile
                try:
                    await self.replace()
                except Exception as e:
                    logger.warning("could not start a fresh kernel (%s); the next execution tries again", e)
            raise

    async def replace(self) -> None:
        """Retire the current kernel and put a fresh one (the spare, if warm) in its place."""
        old, self._kernel = self._kernel, None
        if old is not None:
            self._retire(old)
        spare, self._spare = self._spare, None
        kernel: KernelLike | None = None
        if spare is not None:
            try:
                kernel = await spare
            except Exception as e:
                logger.warning("spare kernel failed to start (%s); starting another", e)
        if kernel is None or not kernel.alive:
            if kernel is not None:
                self._retire(kernel)  # a spare that died while waiting: release its sockets and files
            kernel = await self._start_kernel()
        self._kernel = kernel
        self._prepare_spare()

    async def reset(self) -> None:
        """`replace()` on request, marked as a reset in the session's record."""
        await self.replace()
        self.record.mark_reset()

    def _retire(self, kernel: KernelLike) -> None:
        task = asyncio.create_task(kernel.stop())
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)

    async def stop(self) -> None:
        """Stop every kernel this supervisor started, including the spare and retired ones."""
        kernels = [k for k in (self._kernel,) if k is not None]
        self._kernel = None
        self._started = False
        if self._places is not None:
            self._places.give_back(self)
        spare, self._spare = self._spare, None
        if spare is not None:
            if spare.done():
                with contextlib.suppress(BaseException):
                    kernels.append(spare.result())
            else:
                spare.cancel()
                with contextlib.suppress(BaseException):
                    await spare
        await asyncio.gather(*(k.stop() for k in kernels), *self._retired, return_exceptions=True)
