"""Each principal's kernels as notebooks in their workspace: `.ipybox/notebooks/<kernel>.ipynb`.

The record of a kernel's session lives in its executor (`CodeExecutor.notebook()`). `Notebooks`
is one more subscriber of a cell's events: when a cell ends (or the kernel is reset) it has the
kernel's notebook written, atomically and without following links, coalesced to at most one
write per `DELAY` seconds per kernel, off the cell's round trip, and flushed when the server
stops. Nothing of it reaches the agent's context.

A kernel's record goes on across its executors: a kernel started again (stopped when idle, or
by an earlier ipybox) continues the notebook after a restart mark. With `resume`, a kernel's first
start also runs the cells after the notebook's last reset or restart again, tool calls answered
from it (`CodeExecutor.resume()`); how that went is the notice of the kernel's first use.
"""

from __future__ import annotations

import asyncio
import logging

from ipybox.code_exec import CodeExecutor
from ipybox.errors import IpyboxError
from ipybox.mcp_server.cells import CellEvent, Finished, Started, Subscriber
from ipybox.mcp_server.homes import Homes
from ipybox.mcp_server.kernels import check_kernel_name
from ipybox.notebook import SessionRecord
from ipybox.sandbox.owned import HomeError

logger = logging.getLogger(__name__)

#: Seconds a kernel's notebook waits to be written after a cell ends, so a burst of cells costs one write.
DELAY = 1.0


class Notebooks:
    """Writes the notebooks of the principals' kernels, and resumes kernels from them (see the module)."""

    def __init__(self, homes: Homes, *, resume: bool = False, delay: float = DELAY) -> None:
        self._homes = homes
        self._resume = resume
        self._delay = delay
        self._due: dict[tuple[str, str], tuple[CodeExecutor, asyncio.TimerHandle]] = {}
        self._writing: set[asyncio.Task[None]] = set()
        #: The record of each kernel so far, continued by its next executor.
        self._records: dict[tuple[str, str], SessionRecord] = {}
        self._started: set[tuple[str, str]] = set()  # the kernels started once (resumed then, if asked)

    def kernels(self, principal: str) -> list[str]:
        """The kernels of `principal` that have a notebook, by name."""
        try:
            folder = self._homes.notebook(principal, "default").parent
            names = sorted(p.stem for p in folder.glob("*.ipynb"))
        except (OSError, HomeError):
            return []
        return [name for name in names if _is_kernel_name(name)]

    def record(self, principal: str, kernel: str) -> SessionRecord:
        """The record the kernel's next executor continues (`CodeExecutor(record=...)`): its
        previous executor's, else its notebook's (one that cannot be read is logged and set
        aside), else a new one."""
        key = (principal, kernel)
        if key not in self._records:
            self._records[key] = self._load(principal, kernel) or SessionRecord()
        return self._records[key]

    def _load(self, principal: str, kernel: str) -> SessionRecord | None:
        path = self._homes.notebook(principal, kernel)
        if not path.exists():
            return None
        try:
            return SessionRecord.load(path, trusted=self._homes.workspace(principal))
        except (OSError, IpyboxError, ValueError) as e:
            logger.error("starting a new notebook for kernel %r: %s", kernel, e)
            return None

    async def started(self, principal: str, kernel: str, executor: CodeExecutor) -> str:
        """Keep the started kernel's record; resume it on its first start if asked to. The notice
        for the kernel's first use: how the resume went, or ""."""
        key = (principal, kernel)
        first = key not in self._started
        self._started.add(key)
        path = self._homes.notebook(principal, kernel)
        if not (first and self._resume and path.exists()):
            return ""
        shown = path.relative_to(self._homes.workspace(principal))
        try:
            report = await executor.resume(path)
        except Exception as e:  # ResumeError: stopped at a cell; NotebookError: unreadable
            logger.warning("resuming kernel %r: %s", kernel, e)
            notice = f"[ipybox: kernel {kernel!r} was resumed from {shown} only in part: {e}]"
        else:
            before = f", {report.cells_skipped} from before its last reset or restart left out"
            notice = (
                f"[ipybox: kernel {kernel!r} was resumed from {shown}: {report.cells_run} cells ran again, "
                f"{report.tool_calls} tool calls answered from the notebook (none made again)"
                f"{before if report.cells_skipped else ''}]"
            )
        self.changed(principal, kernel, executor)
        return notice

    def subscriber(self, principal: str, kernel: str) -> Subscriber:
        """A cell's subscriber that has the kernel's notebook written once the cell ends."""
        executor: CodeExecutor | None = None

        def on_event(event: CellEvent) -> None:
            nonlocal executor
            if isinstance(event, Started):
                executor = event.executor
            elif isinstance(event, Finished) and executor is not None:
                self.changed(principal, kernel, executor)

        return on_event

    def changed(self, principal: str, kernel: str, executor: CodeExecutor) -> None:
        """Have the kernel's notebook written soon (once for the changes of the next `delay` s)."""
        key = (principal, kernel)
        if key in self._due:
            return
        handle = asyncio.get_running_loop().call_later(self._delay, self._write_due, key)
        self._due[key] = (executor, handle)

    def stopped(self, principal: str, kernel: str, executor: CodeExecutor) -> None:
        """A stopped kernel's notebook is written now and its record let go (its next start reads
        the notebook back): records of stopped kernels kept in memory (up to `--max-image-bytes`
        each) would let a user who cycles kernel names grow ipybox without bound. A record whose
        notebook cannot be written is kept."""
        key = (principal, kernel)
        if (due := self._due.pop(key, None)) is not None:
            due[1].cancel()
        if self._write_now(key, executor):
            self._records.pop(key, None)

    def _write_due(self, key: tuple[str, str]) -> None:
        executor, _ = self._due.pop(key)
        task = asyncio.create_task(self._write(key, executor))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _write(self, key: tuple[str, str], executor: CodeExecutor) -> None:
        self._write_now(key, executor)

    def _write_now(self, key: tuple[str, str], executor: CodeExecutor) -> bool:
        """Write the kernel's notebook; whether it was written."""
        principal, kernel = key
        try:
            path = self._homes.notebook(principal, kernel)
            executor.save_notebook(path)  # on the loop, which fills the record: atomic, no link followed
        except (OSError, HomeError, IpyboxError, ValueError) as e:  # a link planted there, say
            logger.error("not writing the notebook of kernel %r: %s", kernel, e)
            return False
        return True

    async def close(self) -> None:
        """Write the notebooks still due, and wait for those being written."""
        due, self._due = self._due, {}
        for _, handle in due.values():
            handle.cancel()
        await asyncio.gather(
            *(self._write(key, executor) for key, (executor, _) in due.items()),
            *self._writing,
            return_exceptions=True,
        )


def _is_kernel_name(name: str) -> bool:
    try:
        check_kernel_name(name)
    except ValueError:
        return False
    return True
