"""How a cell's tool calls are put to the user: one approval channel per MCP protocol era, chosen
once per request.

The handshake era asks each call with an elicitation request while the tool call waits
(`Elicitation`); the 2026-07-28 era has no server-to-client requests, so the cell is parked and
its calls are asked in an input-required round (`InputRequired`), the client answering with its
next call of the tool.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp.server.mcpserver import Context
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponses,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, ConfigDict

from ipybox.mcp_server.approval import QUESTION_TITLE, describe_call
from ipybox.mcp_server.cells import CellRun
from ipybox.mcp_server.live import ApprovalChannel, LiveView
from ipybox.tool_exec.approval.client import ApprovalRequest

logger = logging.getLogger(__name__)

INPUT_REQUIRED_VERSION = "2026-07-28"
#: What kernel code hears when the user declines a tool call's elicitation, dismisses it, or the
#: client leaves it unanswered: the agent must tell a person's no from a rule's.
_ANSWERS = {
    "decline": "declined by the user when asked",
    "cancel": "dismissed by the user without an answer (cancelled), so it did not run",
    None: "not answered: the client returned no answer for it, so it did not run",
}
_APPROVE_SCHEMA: dict[str, Any] = {"type": "object", "title": QUESTION_TITLE, "properties": {}}


class _Approve(BaseModel):
    """Accept runs the tool call; decline or cancel refuses it."""

    model_config = ConfigDict(title=QUESTION_TITLE)


def refusal(action: str | None) -> str:
    """What kernel code hears for a call the user did not accept (`action`: the elicitation's answer)."""
    return _ANSWERS.get(action, _ANSWERS[None])


def channel_for(ctx: Context[Any, Any], parked: ParkedRuns, by: str) -> ApprovalChannel:
    """The approval channel of the request's protocol era; decisions are audited as `by`'s."""
    version = ctx.protocol_version
    if version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION):
        return InputRequired(parked)
    return Elicitation(ctx, by)


class Elicitation:
    """Asks each call with an elicitation request to the client, the cell waiting for the answer."""

    def __init__(self, ctx: Context[Any, Any], by: str) -> None:
        self._ctx, self._by = ctx, by

    async def ask(self, run: CellRun, request: ApprovalRequest, view: LiveView) -> InputRequiredResult | None:
        message = describe_call(request.server_name, request.tool_name, request.tool_args)
        try:
            answer = await self._ctx.elicit(message, _Approve)
            accepted, why = answer.action == "accept", refusal(answer.action)
        except Exception as e:  # the client failed to ask: refuse rather than run unapproved
            logger.warning("elicitation failed: %s", e)
            accepted, why = False, f"not approved: the client failed to put the question to the user ({e})"
        await run.decide(request, accepted, self._by, why)
        return None


class InputRequired:
    """Parks the cell and asks `request`, with the calls made with it, in one input-required round."""

    def __init__(self, parked: ParkedRuns) -> None:
        self._parked = parked

    async def ask(self, run: CellRun, request: ApprovalRequest, view: LiveView) -> InputRequiredResult | None:
        requests = await view.batch(request)
        run.round += 1
        asked: dict[str, Any] = {}
        for number, each in enumerate(requests):
            key = f"approve-{run.round}-{number}"
            run.asking[key] = each
            message = describe_call(each.server_name, each.tool_name, each.tool_args)
            asked[key] = ElicitRequest(
                params=ElicitRequestFormParams(message=message, requested_schema=_APPROVE_SCHEMA)
            )
        self._parked.park(run, view)
        return InputRequiredResult(input_requests=asked, request_state=run.id)


async def answer(run: CellRun, responses: InputResponses | None, by: str) -> None:
    """Apply the user's answers of an input-required round to the run's parked calls (anything
    unanswered is declined)."""
    asking, run.asking = run.asking, {}
    for key, request in asking.items():
        response = (responses or {}).get(key)
        action = response.action if isinstance(response, ElicitResult) else None
        await run.decide(request, action == "accept", by, refusal(action))


class ParkedRuns:
    """Runs waiting for a client's next input-required round, by id; dropped (cancelled) after `ttl`."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._runs: dict[str, tuple[CellRun, LiveView]] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._cancelling: set[asyncio.Task[None]] = set()

    def park(self, run: CellRun, view: LiveView) -> None:
        self._runs[run.id] = (run, view)
        loop = asyncio.get_running_loop()
        self._expiry[run.id] = loop.call_later(self.ttl, self._expire, run.id, run.round)

    def take(self, run_id: str, principal: str) -> tuple[CellRun, LiveView] | None:
        parked = self._runs.get(run_id)
        if parked is None or parked[0].principal != principal:
            return None
        del self._runs[run_id]
        self._expiry.pop(run_id).cancel()
        return parked

    async def abandon(self, principal: str, kernel_name: str) -> None:
        """Interrupt the parked runs of a kernel: a new cell for it means its client moved on."""
        for run_id, (run, _) in list(self._runs.items()):
            if (run.principal, run.kernel_name) == (principal, kernel_name):
                logger.info(
                    "a new cell for kernel %r: interrupting the one waiting for approvals", kernel_name
                )
                del self._runs[run_id]
                self._expiry.pop(run_id).cancel()
                await run.cancel("refused: the client sent a new cell for this kernel instead of answering")

    def _expire(self, run_id: str, round_: int) -> None:
        run, _ = self._runs.get(run_id, (None, None))
        if run is not None and run.round == round_:
            logger.info("no answer to the approval requests of a cell in %g s: interrupting it", self.ttl)
            del self._runs[run_id]
            self._expiry.pop(run_id, None)
            why = f"not answered by the user within {self.ttl:g} s: the cell was interrupted"
            task = asyncio.create_task(run.cancel(why))
            self._cancelling.add(task)
            task.add_done_callback(self._cancelling.discard)

    async def close(self) -> None:
        runs = [run for run, _ in self._runs.values()]
        self._runs.clear()
        for handle in self._expiry.values():
            handle.cancel()
        await asyncio.gather(*(run.cancel() for run in runs), *self._cancelling, return_exceptions=True)
