"""A running execute_ipython_cell: the executor's stream driven by a task of its own, so a cell can
wait, paused, for the user's answers across 2026-07-28 input-required rounds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import anyio
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequest, InputResponses

from ipybox.code_exec import CodeExecutionChunk, CodeExecutionResult, CodeExecutor
from ipybox.kernel_mgr.output import LiveBudget
from ipybox.mcp_server.approval import QUESTION_TITLE, Verdict, describe_call
from ipybox.tool_exec.approval.client import ApprovalRequest
from ipybox.tool_exec.audit import AuditLog

logger = logging.getLogger(__name__)

DONE = object()
#: Characters of live output a run queues for its client and the client has not taken yet.
LIVE_LIMIT = 1_000_000
#: What kernel code hears when the user declines a tool call's elicitation, dismisses it, or the
#: client leaves it unanswered: the agent must tell a person's no from a rule's.
_ANSWERS = {
    "decline": "declined by the user when asked",
    "cancel": "dismissed by the user without an answer (cancelled), so it did not run",
    None: "not answered: the client returned no answer for it, so it did not run",
}
Event = CodeExecutionChunk | ApprovalRequest | object
#: Decides a tool call without the user: the policy's verdict for (server, tool).
Decider = Callable[[ApprovalRequest], Verdict]
_APPROVE_SCHEMA: dict[str, Any] = {"type": "object", "title": QUESTION_TITLE, "properties": {}}


def refusal(action: str | None) -> str:
    """What kernel code hears for a call the user did not accept (`action`: the elicitation's answer)."""
    return _ANSWERS.get(action, _ANSWERS[None])


class CellRun:
    """One cell on its kernel. `events` yields output chunks, tool calls to put to the user, then
    `DONE`; `outcome` is then the result or the error."""

    def __init__(
        self,
        kernel: AbstractAsyncContextManager[tuple[CodeExecutor, str]],
        code: str,
        timeout: float,
        *,
        principal: str,
        kernel_name: str,
        decide: Decider | None,
        audit: AuditLog | None,
    ) -> None:
        self.id = secrets.token_urlsafe(18)
        self.principal = principal
        self.kernel_name = kernel_name
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.outcome: CodeExecutionResult | BaseException | None = None
        self.kernel_notice = ""  # why the kernel is fresh, if it was stopped since its last use
        self.asking: dict[str, ApprovalRequest] = {}
        self.round = 0
        self.live = LiveBudget(LIVE_LIMIT)  # a parked run's client takes nothing until its next round
        self._decide, self._audit = decide, audit
        self._task = asyncio.create_task(self._drive(kernel, code, timeout))

    async def _drive(
        self, kernel: AbstractAsyncContextManager[tuple[CodeExecutor, str]], code: str, timeout: float
    ) -> None:
        try:
            async with kernel as (executor, self.kernel_notice):
                auto = self._decide is None
                # an async generator, typed as an iterator
                stream = cast(
                    AsyncGenerator[Event, None],
                    executor.stream(code, timeout=timeout, chunks=True, auto_approve=auto),
                )
                async with contextlib.aclosing(stream):  # closed at once when cancelled: the kernel is freed
                    async for item in stream:
                        if isinstance(item, CodeExecutionResult):
                            self.outcome = item
                        elif isinstance(item, ApprovalRequest):
                            await self._route(item)
                        elif isinstance(item, CodeExecutionChunk):
                            if (text := self.live.admit(item.text)) is not None:
                                self.events.put_nowait(CodeExecutionChunk(text))
                        else:
                            self.events.put_nowait(item)
                    if note := self.live.rest():
                        self.events.put_nowait(CodeExecutionChunk(f"\n{note}\n"))
        except asyncio.CancelledError:  # cancel(): interrupted, without a result
            self.outcome = None
            raise
        except BaseException as e:  # reported to whoever follows the run
            self.outcome = e
        finally:
            self.events.put_nowait(DONE)

    async def _route(self, request: ApprovalRequest) -> None:
        assert self._decide is not None
        verdict = self._decide(request)
        if verdict.action == "ask":
            self.events.put_nowait(request)
        else:
            await self.decide(request, verdict.action == "allow", verdict.reason, verdict.refusal)

    async def decide(
        self, request: ApprovalRequest, accept: bool, by: str, reason: str | None = None
    ) -> None:
        """Accept or reject `request` (a rejection's `reason` reaches the calling code), audited as `by`'s."""
        if self._audit is not None:
            with contextlib.suppress(OSError):
                self._audit.decided(
                    server_name=request.server_name,
                    tool_name=request.tool_name,
                    decision="accepted" if accept else "rejected",
                    by=by,
                )
        await (request.accept() if accept else request.reject(reason))

    def input_requests(self, requests: list[ApprovalRequest]) -> dict[str, InputRequest]:
        """Park `requests` for the next round; what to ask the client."""
        self.round += 1
        asked: dict[str, InputRequest] = {}
        for number, request in enumerate(requests):
            key = f"approve-{self.round}-{number}"
            self.asking[key] = request
            message = describe_call(request.server_name, request.tool_name, request.tool_args)
            asked[key] = ElicitRequest(
                params=ElicitRequestFormParams(message=message, requested_schema=_APPROVE_SCHEMA)
            )
        return asked

    async def answer(self, responses: InputResponses | None, by: str) -> None:
        """Apply the user's answers to the parked requests (anything unanswered is declined)."""
        asking, self.asking = self.asking, {}
        for key, request in asking.items():
            response = (responses or {}).get(key)
            action = response.action if isinstance(response, ElicitResult) else None
            await self.decide(request, action == "accept", by, refusal(action))

    async def cancel(self, why: str = "refused: the cell was interrupted before the user answered") -> None:
        """Interrupt the cell (the kernel keeps its state) and wait for the run to end; calls still
        waiting for the user are refused saying `why`.

        Only this run's cell: another one already queued for the same kernel (the next call of
        the client that gave up on this one, say) is left alone.
        """
        if self._task.done():
            return
        for request in self.asking.values():
            await request.reject(why)
        self.asking.clear()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


class ParkedRuns:
    """Runs waiting for a client's next input-required round, by id; dropped (cancelled) after `ttl`."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._runs: dict[str, CellRun] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._cancelling: set[asyncio.Task[None]] = set()

    def park(self, run: CellRun) -> None:
        self._runs[run.id] = run
        loop = asyncio.get_running_loop()
        self._expiry[run.id] = loop.call_later(self.ttl, self._expire, run.id, run.round)

    def take(self, run_id: str, principal: str) -> CellRun | None:
        run = self._runs.get(run_id)
        if run is None or run.principal != principal:
            return None
        del self._runs[run_id]
        self._expiry.pop(run_id).cancel()
        return run

    async def abandon(self, principal: str, kernel_name: str) -> None:
        """Interrupt the parked runs of a kernel: a new cell for it means its client moved on."""
        for run_id, run in list(self._runs.items()):
            if (run.principal, run.kernel_name) == (principal, kernel_name):
                logger.info(
                    "a new cell for kernel %r: interrupting the one waiting for approvals", kernel_name
                )
                del self._runs[run_id]
                self._expiry.pop(run_id).cancel()
                await run.cancel("refused: the client sent a new cell for this kernel instead of answering")

    def _expire(self, run_id: str, round_: int) -> None:
        run = self._runs.get(run_id)
        if run is not None and run.round == round_:
            logger.info("no answer to the approval requests of a cell in %g s: interrupting it", self.ttl)
            del self._runs[run_id]
            self._expiry.pop(run_id, None)
            why = f"not answered by the user within {self.ttl:g} s: the cell was interrupted"
            task = asyncio.create_task(run.cancel(why))
            self._cancelling.add(task)
            task.add_done_callback(self._cancelling.discard)

    async def close(self) -> None:
        runs = list(self._runs.values())
        self._runs.clear()
        for handle in self._expiry.values():
            handle.cancel()
        await asyncio.gather(*(run.cancel() for run in runs), *self._cancelling, return_exceptions=True)


#: Seconds between checks that the HTTP client of a running cell is still connected.
CLIENT_CHECK = 0.5


@contextlib.asynccontextmanager
async def interrupted_if_client_leaves(run: CellRun, request: object) -> AsyncIterator[None]:
    """Interrupt `run`, and cancel the block, once the HTTP client that sent `request` disconnects.

    On the handshake era the SDK goes on serving a request whose connection dropped (a client could
    resume it from an event store; ipybox keeps none, so nobody ever would): without this, a
    vanished client's cell would hold its kernel to the end. The block is cancelled (and the
    cancellation swallowed) when this happens. Without an HTTP request (stdio) nothing is watched.
    """
    is_disconnected = getattr(request, "is_disconnected", None)
    if is_disconnected is None:
        yield
        return
    with anyio.CancelScope() as scope:
        left = asyncio.Event()
        watcher = asyncio.create_task(_interrupt_when_gone(run, is_disconnected, scope, left))
        try:
            yield
        finally:
            if not left.is_set():
                watcher.cancel()
            with anyio.CancelScope(shield=True):  # an interruption under way is seen through
                await asyncio.wait([watcher])


async def _interrupt_when_gone(
    run: CellRun, is_disconnected: Callable[[], Any], scope: anyio.CancelScope, left: asyncio.Event
) -> None:
    while True:  # polled: starlette offers no awaitable for a disconnect
        if await is_disconnected():
            break
        await asyncio.sleep(CLIENT_CHECK)
    left.set()
    logger.info("the client of a running cell disconnected: interrupting the cell")
    await run.cancel()
    scope.cancel()  # what the request still waits for (an elicitation, say) never comes


async def events(run: CellRun, heartbeat: float) -> AsyncIterator[Event | None]:
    """The run's events; `None` when nothing happened for `heartbeat` seconds."""
    while True:
        try:
            item = await asyncio.wait_for(run.events.get(), heartbeat)
        except TimeoutError:
            yield None
            continue
        if isinstance(item, CodeExecutionChunk):
            run.live.taken(item.text)
        yield item
        if item is DONE:
            return


#: After a tool call to ask about, how long to wait for more made with it, to ask them in one
#: round: until none came for BATCH_QUIET s, and at most BATCH_LIMIT s in all.
BATCH_QUIET = 0.05
BATCH_LIMIT = 0.5


async def pending_approvals(run: CellRun, first: ApprovalRequest) -> list[ApprovalRequest]:
    """`first` and the other tool calls made with it, to ask in one round (other events are kept)."""
    loop = asyncio.get_running_loop()
    limit = loop.time() + BATCH_LIMIT
    quiet = loop.time() + BATCH_QUIET
    batch: list[ApprovalRequest] = [first]
    kept: list[Event] = []
    while True:
        if not run.events.empty():  # already there: taken even past the limit, so none is reordered
            item = run.events.get_nowait()
        elif (wait := min(quiet, limit) - loop.time()) > 0:
            try:
                item = await asyncio.wait_for(run.events.get(), wait)
            except TimeoutError:
                break
        else:
            break
        if isinstance(item, ApprovalRequest):
            batch.append(item)
            quiet = loop.time() + BATCH_QUIET
        else:
            kept.append(item)
            if item is DONE:
                break
    for item in kept:
        run.events.put_nowait(item)
    return batch
