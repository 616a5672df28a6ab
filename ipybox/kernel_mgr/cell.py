"""One execution of a cell: what it yields (approvals, chunks, its result) and how it ends.

`Cell` runs code on a supervisor's kernel while tool calls and shell commands it makes are
decided through the tool server's approval channel; the time spent waiting for decisions does
not count against its timeout. A cancelled cell ends without a result, whenever the
cancellation comes (also before the cell started, or after its result came but before it was
passed on).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipybox import _safe_fs
from ipybox.errors import IpyboxError
from ipybox.kernel_mgr.backend import KernelStartError
from ipybox.kernel_mgr.deadline import Deadline
from ipybox.kernel_mgr.kernel import KernelDied, KernelReply
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.output import KernelEvent, LiveBudget, OutputBuffer
from ipybox.kernel_mgr.supervisor import KernelSupervisor
from ipybox.notebook.record import SessionRecord
from ipybox.tool_exec.approval.client import ApprovalRequest
from ipybox.tool_exec.calls import ToolCallEvent

if TYPE_CHECKING:
    from ipybox.tool_exec.server import ToolServer


@dataclass
class CodeExecutionChunk:
    """A piece of output, yielded by `CodeExecutor.stream(..., chunks=True)` as it is produced."""

    text: str


@dataclass
class CodeExecutionResult:
    """The output of a finished execution: its text (None if it printed nothing), image files and
    the images' bytes.

    The image files are in the executor's `images_dir`, by default inside the kernel's working
    directory, where code in the kernel can replace them (e.g. by a link to another file) as soon
    as they are written. `png` holds the PNG bytes the cell displayed, as ipybox received and saved
    them (also where they could not be saved): send those on rather than reading the files back.
    """

    text: str | None
    images: list[Path] = field(default_factory=list)
    png: list[bytes] = field(default_factory=list, repr=False, compare=False)


class CodeExecutionError(IpyboxError):
    """The code raised, a tool call was rejected or failed, or the kernel died.

    The message is the kernel's traceback (plain text); `output` holds what the code printed
    before it failed.
    """

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


#: What `CodeExecutor.stream()` yields.
StreamItem = ApprovalRequest | CodeExecutionChunk | CodeExecutionResult


@dataclass
class CellOutput:
    """A finished cell's text and the images it displayed (PNG bytes, not saved yet)."""

    text: str | None
    images: list[bytes]


_DONE = object()
_CANCELLED = object()


def save_images(images: list[bytes], images_dir: Path, workspace: Path) -> list[Path]:
    """Write each PNG to a new file in `images_dir`, never through a link the kernel planted in
    its working directory `workspace`."""
    paths: list[Path] = []
    for data in images:
        path = images_dir / f"{uuid.uuid4().hex[:12]}.png"
        _safe_fs.create_file(path, data, workspace)
        paths.append(path)
    return paths


def check_timeout(name: str, value: float | None) -> None:
    if value is not None and not value >= 0:  # also refuses NaN
        raise ValueError(f"{name} must be a number of seconds >= 0 or None, got {value!r}")


@dataclass(eq=False)  # identity: executors track their cells in a set
class Cell:
    """One execution of `code`; `cancelled` is set by `CodeExecutor.cancel()`."""

    code: str
    timeout: float | None
    chunks: bool = False
    #: Run tool calls and shell commands without asking.
    auto_approve: bool = False
    #: Ask for tool calls (False: only shell commands are asked for).
    approve_tool_calls: bool = True
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    #: Ends a running `run()` at once (set while it runs): a callback, not a task per cell.
    _on_cancel: Callable[[], None] | None = field(default=None, init=False, repr=False)

    def cancel(self) -> None:
        """End the cell: interrupted if it runs, never started if it has not."""
        self.cancelled.set()
        if self._on_cancel is not None:
            self._on_cancel()

    async def run(
        self, kernels: KernelSupervisor, tools: ToolServer
    ) -> AsyncIterator[ApprovalRequest | CodeExecutionChunk | CellOutput]:
        """Yield approval requests, chunks (if `chunks`) and, unless cancelled, the `CellOutput`.

        Raises `CodeExecutionError` if the code fails or the kernel is lost, `TimeoutError` at the
        timeout (the cell is interrupted, the kernel keeps its state). The cell's events (output,
        approvals, settled tool calls) also go to the session's record, `kernels.record`.
        """
        if self.cancelled.is_set():
            return
        approval = tools.approval
        queue: asyncio.Queue[Any] = asyncio.Queue()
        output = OutputBuffer(self.limits.output, self.limits.images, self.limits.image_bytes)
        deadline = Deadline(self.timeout)
        pending: list[ApprovalRequest] = []
        record = _Recording(kernels.record, self.code, self.limits)

        live = LiveBudget(self.limits.output)  # chunks a slow reader has not taken yet

        def on_event(event: KernelEvent) -> None:
            output.add(event)
            record.cell.add_event(event)
            if self.chunks and event.kind == "stream" and (text := live.admit(event.text)) is not None:
                queue.put_nowait(CodeExecutionChunk(text))

        async def on_approval(request: ApprovalRequest) -> None:
            pending.append(request)
            queue.put_nowait(request)

        tools.observers.append(record.on_call)
        approval.connect(on_approval)
        approval.auto_approve = self.auto_approve
        approval.auto_approve_kinds = frozenset() if self.approve_tool_calls else frozenset({"tool"})
        approval.on_wait = lambda waiting: deadline.pause() if waiting else deadline.resume()
        task = asyncio.create_task(kernels.execute(self.code, on_event, deadline))
        task.add_done_callback(lambda _: queue.put_nowait(_DONE))
        self._on_cancel = lambda: queue.put_nowait(_CANCELLED)
        try:
            while (item := await queue.get()) not in (_DONE, _CANCELLED):
                if isinstance(item, CodeExecutionChunk):
                    live.taken(item.text)
                yield item
            if self.cancelled.is_set():  # also when the result came first but is not passed on yet
                record.end("cancelled: CodeExecutor.cancel() interrupted it")
                return
            reply = record.ended(task, lambda: self._reply(task, output))
        finally:
            self._on_cancel = None
            record.end("interrupted: its caller stopped waiting for it")  # unless ended above
            tools.observers.remove(record.on_call)
            approval.disconnect(on_approval)
            approval.auto_approve = False
            approval.auto_approve_kinds = frozenset()
            approval.on_wait = None
            for request in pending:
                await request.reject()  # no effect on those already decided
            if not task.done():
                task.cancel()  # interrupts the cell; the kernel keeps its state
                with contextlib.suppress(BaseException):
                    await task
        if note := live.rest():
            yield CodeExecutionChunk(f"\n{note}\n")
        if reply.error is not None:
            raise CodeExecutionError(reply.error, output.text())
        yield CellOutput(output.text() or None, output.images)

    def _reply(self, task: asyncio.Task[KernelReply], output: OutputBuffer) -> KernelReply:
        """The finished task's reply; its failure in the words the caller gets."""
        try:
            return task.result()
        except TimeoutError:
            raise TimeoutError(
                f"Execution exceeded its timeout of {self.timeout:.2f}s (time spent waiting for approvals "
                "not counted) and was interrupted; the kernel kept its state."
            ) from None
        except KernelDied as e:
            raise CodeExecutionError(
                f"{e} Its state (variables, imports) is lost; the next execution runs on a fresh kernel.",
                output.text(),
            ) from None
        except KernelStartError as e:  # no kernel: e.g. the gateway is down, or refuses to start one
            raise CodeExecutionError(str(e), output.text()) from None


class _Recording:
    """One cell's entry in the session record: its outputs, its settled tool calls, and its end
    (with a restart mark after it when its kernel died)."""

    def __init__(self, session: SessionRecord, code: str, limits: ResourceLimits) -> None:
        self.session = session
        self.cell = session.begin_cell(code, limits)
        self._started = time.monotonic()
        self._open = True

    def on_call(self, event: ToolCallEvent) -> None:
        self.cell.add_tool_call(
            event.server_name,
            event.tool_name,
            event.tool_args,
            event.decision,
            event.decided_by,
            result=event.result,
            error=event.error,
            secrets=event.secrets,
        )

    def end(self, error: str | None) -> None:
        if self._open:
            self._open = False
            self.cell.finish(time.monotonic() - self._started, error)

    def ended(self, task: asyncio.Task[KernelReply], reply: Callable[[], KernelReply]) -> KernelReply:
        """`reply()`, the cell's end recorded with it: its error, or the kernel's death and restart."""
        try:
            result = reply()
        except BaseException as e:
            self.end(str(e))
            if isinstance(task.exception(), KernelDied):
                self.session.mark_restart(str(task.exception()))
            raise
        self.end(result.error)
        return result
