"""A running execute_ipython_cell as one pipeline of events that consumers subscribe to.

The cell's executor stream is driven by a task of its own (so a cell can wait, paused, for the
user's answers across 2026-07-28 input-required rounds) and each thing that happens to the cell
is published, in order, to the run's subscribers: the client's live view (`ipybox.mcp_server.live`),
the audit log, the notebook recorder (`ipybox.mcp_server.notebooks`). Tool calls go through the
approval policy here; those it leaves to the user are published as `Asked`, and an approval
channel (`ipybox.mcp_server.channels`, one per protocol era) puts them to the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import cast

from ipybox.code_exec import CodeExecutionChunk, CodeExecutionResult, CodeExecutor
from ipybox.mcp_server.approval import Verdict
from ipybox.tool_exec.approval.client import ApprovalRequest
from ipybox.tool_exec.audit import AuditLog

logger = logging.getLogger(__name__)

Outcome = CodeExecutionResult | BaseException | None


@dataclass(frozen=True, slots=True)
class Started:
    """`executor`'s kernel took the cell (`notice`: why the kernel is fresh, if it was stopped since
    its last use)."""

    code: str
    notice: str
    executor: CodeExecutor


@dataclass(frozen=True, slots=True)
class Output:
    """Text the cell printed, as it came."""

    text: str


@dataclass(frozen=True, slots=True)
class Asked:
    """A tool call the policy leaves to the user: an approval channel puts it to them."""

    request: ApprovalRequest


@dataclass(frozen=True, slots=True)
class Decided:
    """A tool call accepted or rejected, `by` whom or what; `reason`: what a rejected call's code hears."""

    request: ApprovalRequest
    accepted: bool
    by: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class Finished:
    """The cell ended: its result, its error (a timeout is a `TimeoutError`), or None if interrupted."""

    outcome: Outcome


CellEvent = Started | Output | Asked | Decided | Finished
#: A consumer of a cell's events; called in order, on the event loop, and must not block.
Subscriber = Callable[[CellEvent], None]
#: Decides a tool call without the user: the policy's verdict for (server, tool).
Decider = Callable[[ApprovalRequest], Verdict]


class CellRun:
    """One cell on its kernel, publishing its events to `subscribers`; `outcome` is the result or
    the error once `Finished`."""

    def __init__(
        self,
        kernel: AbstractAsyncContextManager[tuple[CodeExecutor, str]],
        code: str,
        timeout: float,
        *,
        principal: str,
        kernel_name: str,
        decide: Decider | None,
        subscribers: list[Subscriber],
    ) -> None:
        self.id = secrets.token_urlsafe(18)
        self.principal = principal
        self.kernel_name = kernel_name
        self.outcome: Outcome = None
        self.kernel_notice = ""  # why the kernel is fresh, if it was stopped since its last use
        #: Tool calls put to the user and not yet decided, by the key the client answers with.
        self.asking: dict[str, ApprovalRequest] = {}
        self.round = 0  # input-required rounds so far
        self._subscribers = subscribers
        self._decide = decide
        self._task = asyncio.create_task(self._drive(kernel, code, timeout))

    def _publish(self, event: CellEvent) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except Exception:  # one consumer's failure never stops the cell or the others
                logger.exception("a consumer of a cell's events failed on %s", type(event).__name__)

    async def _drive(
        self, kernel: AbstractAsyncContextManager[tuple[CodeExecutor, str]], code: str, timeout: float
    ) -> None:
        try:
            async with kernel as (executor, self.kernel_notice):
                self._publish(Started(code, self.kernel_notice, executor))
                # an async generator, typed as an iterator
                stream = cast(
                    AsyncGenerator[object, None],
                    executor.stream(code, timeout=timeout, chunks=True, auto_approve=self._decide is None),
                )
                async with contextlib.aclosing(stream):  # closed at once when cancelled: the kernel is freed
                    async for item in stream:
                        if isinstance(item, CodeExecutionChunk):
                            self._publish(Output(item.text))
                        elif isinstance(item, ApprovalRequest):
                            await self._route(item)
                        elif isinstance(item, CodeExecutionResult):
                            self.outcome = item
        except asyncio.CancelledError:  # cancel(): interrupted, without a result
            self.outcome = None
            raise
        except BaseException as e:  # reported to whoever follows the run
            self.outcome = e
        finally:
            self._publish(Finished(self.outcome))

    async def _route(self, request: ApprovalRequest) -> None:
        assert self._decide is not None
        verdict = self._decide(request)
        if verdict.action == "ask":
            self._publish(Asked(request))
        else:
            await self.decide(request, verdict.action == "allow", verdict.reason, verdict.refusal)

    async def decide(
        self, request: ApprovalRequest, accepted: bool, by: str, reason: str | None = None
    ) -> None:
        """Accept or reject `request` (a rejection's `reason` reaches the calling code), `by` whom."""
        self._publish(Decided(request, accepted, by, None if accepted else reason))
        await (request.accept(by=by) if accepted else request.reject(reason, by=by))

    async def cancel(self, why: str = "refused: the cell was interrupted before the user answered") -> None:
        """Interrupt the cell (the kernel keeps its state) and wait for the run to end; calls still
        waiting for the user are refused saying `why`.

        Only this run's cell: another one already queued for the same kernel (the next call of
        the client that gave up on this one, say) is left alone.
        """
        if self._task.done():
            return
        asking, self.asking = self.asking, {}
        for request in asking.values():
            await request.reject(why)
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


def audited(log: AuditLog) -> Subscriber:
    """A subscriber that writes each decision on a tool call to the audit log."""

    def on_event(event: CellEvent) -> None:
        if isinstance(event, Decided):
            with contextlib.suppress(OSError):
                log.decided(
                    server_name=event.request.server_name,
                    tool_name=event.request.tool_name,
                    decision="accepted" if event.accepted else "rejected",
                    by=event.by,
                )

    return on_event
