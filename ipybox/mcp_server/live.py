"""The client's live view of a cell: its output as progress and log notifications while it runs,
tool calls to put to the user handed to the era's approval channel, and the run followed until
it ends, is parked for the next input-required round, or its client leaves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
from mcp.server.mcpserver import Context
from mcp_types import InputRequiredResult

from ipybox.kernel_mgr.output import LiveBudget
from ipybox.mcp_server.cells import Asked, CellEvent, CellRun, Finished, Output
from ipybox.tool_exec.approval import display
from ipybox.tool_exec.approval.client import ApprovalRequest

logger = logging.getLogger(__name__)

#: Characters of live output a run queues for its client and the client has not taken yet.
LIVE_LIMIT = 1_000_000
#: Characters of a cell's output streamed to the client while it runs.
STREAM_LIMIT = 1_000_000
#: Seconds between progress notifications while a cell runs silently.
HEARTBEAT = 5.0
#: Seconds between checks that the HTTP client of a running cell is still connected.
CLIENT_CHECK = 0.5
#: After a tool call to ask about, how long to wait for more made with it, to ask them in one
#: round: until none came for BATCH_QUIET s, and at most BATCH_LIMIT s in all.
BATCH_QUIET = 0.05
BATCH_LIMIT = 0.5
#: Characters of a live chunk escaped on the event loop (at most some milliseconds); more, in a thread.
_INLINE_ESCAPE = 4096
_STREAM_STOPPED = "[ipybox: live output stopped here; the result keeps the head and tail of the output]"

#: What the client is shown next: output text, a tool call to ask about, or the end.
Shown = str | ApprovalRequest | Finished


class ApprovalChannel(Protocol):
    """How tool calls are put to the user in a protocol era (`ipybox.mcp_server.channels`)."""

    async def ask(self, run: CellRun, request: ApprovalRequest, view: LiveView) -> InputRequiredResult | None:
        """Have `request` decided (None: the run goes on), or park the run and return what ends
        this request (the client answers in its next round)."""
        ...


class LiveView:
    """A run's subscriber queueing what its client is shown; output past `LIVE_LIMIT` not yet
    taken is dropped (a parked run's client takes nothing until its next round)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Shown] = asyncio.Queue()
        self.live = LiveBudget(LIVE_LIMIT)

    def __call__(self, event: CellEvent) -> None:
        if isinstance(event, Output):
            if (text := self.live.admit(event.text)) is not None:
                self.queue.put_nowait(text)
        elif isinstance(event, Asked):
            self.queue.put_nowait(event.request)
        elif isinstance(event, Finished):
            if not isinstance(event.outcome, BaseException) and (note := self.live.rest()):
                self.queue.put_nowait(f"\n{note}\n")
            self.queue.put_nowait(event)

    async def shown(self, heartbeat: float) -> AsyncIterator[Shown | None]:
        """What to show, up to the end; `None` when nothing happened for `heartbeat` seconds."""
        while True:
            try:
                item = await asyncio.wait_for(self.queue.get(), heartbeat)
            except TimeoutError:
                yield None
                continue
            if isinstance(item, str):
                self.live.taken(item)
            yield item
            if isinstance(item, Finished):
                return

    async def batch(self, first: ApprovalRequest) -> list[ApprovalRequest]:
        """`first` and the other tool calls made with it, to ask in one round (other items are kept)."""
        loop = asyncio.get_running_loop()
        limit = loop.time() + BATCH_LIMIT
        quiet = loop.time() + BATCH_QUIET
        batch: list[ApprovalRequest] = [first]
        kept: list[Shown] = []
        while True:
            if not self.queue.empty():  # already there: taken even past the limit, so none is reordered
                item = self.queue.get_nowait()
            elif (wait := min(quiet, limit) - loop.time()) > 0:
                try:
                    item = await asyncio.wait_for(self.queue.get(), wait)
                except TimeoutError:
                    break
            else:
                break
            if isinstance(item, ApprovalRequest):
                batch.append(item)
                quiet = loop.time() + BATCH_QUIET
            else:
                kept.append(item)
                if isinstance(item, Finished):
                    break
        for item in kept:
            self.queue.put_nowait(item)
        return batch


async def follow(
    run: CellRun, view: LiveView, ctx: Context[Any, Any], channel: ApprovalChannel
) -> InputRequiredResult | None:
    """Relay the run's output to the client until it ends (None; the run is over) or `channel`
    parks it for the user's answers (what ends this request). A client that cancels or goes away
    interrupts the cell."""
    progress = streamed = 0
    parked: InputRequiredResult | None = None
    try:
        async for item in view.shown(HEARTBEAT):
            if isinstance(item, Finished):
                break
            progress += 1
            if item is None:
                await _report(ctx, progress, "running")
            elif isinstance(item, str):
                if streamed < STREAM_LIMIT:  # the live view of a flood stops; the result keeps its ends
                    text = item[: STREAM_LIMIT - streamed]
                    streamed += len(item)
                    if streamed >= STREAM_LIMIT:
                        text += f"\n{_STREAM_STOPPED}"
                    await _stream_to_client(ctx, text, progress)
            elif (parked := await channel.ask(run, item, view)) is not None:
                return parked
    finally:
        if parked is None:
            await run.cancel()
    return None


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
    run: CellRun,
    is_disconnected: Callable[[], Awaitable[bool]],
    scope: anyio.CancelScope,
    left: asyncio.Event,
) -> None:
    while True:  # polled: starlette offers no awaitable for a disconnect
        if await is_disconnected():
            break
        await asyncio.sleep(CLIENT_CHECK)
    left.set()
    logger.info("the client of a running cell disconnected: interrupting the cell")
    await run.cancel()
    scope.cancel()  # what the request still waits for (an elicitation, say) never comes


async def _report(ctx: Context[Any, Any], progress: int, message: str) -> None:
    with contextlib.suppress(Exception):
        await ctx.report_progress(progress, message=message)


async def _stream_to_client(ctx: Context[Any, Any], text: str, progress: int) -> None:
    """Forward a chunk of output while the cell runs: as progress (if the client asked for it) and log.

    `progress` counts the notifications: the protocol requires it to increase with every one. Clients
    show both to a person, so the kernel's text goes as data (`display.lines`): the redraws, hidden
    characters and escape sequences of its output are shown as escapes, not acted on. A large chunk
    is escaped in a thread: a million characters never met before take seconds, which the event
    loop (every user's) must not wait for.
    """
    text = (
        display.lines(text) if len(text) <= _INLINE_ESCAPE else await asyncio.to_thread(display.lines, text)
    )
    await _report(ctx, progress, text)
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging notifications are deprecated in newer protocol versions
        await ctx.log("info", text, logger_name="ipybox.output")
