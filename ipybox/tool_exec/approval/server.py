"""The tool server's side of approval: asks the application and waits for its answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ipybox.tool_exec.approval.client import ApprovalRequest

ApprovalHandler = Callable[[ApprovalRequest], Awaitable[None]]
#: Who decided a call granted without asking anyone.
NOT_REQUIRED, AUTO_APPROVED = "ipybox (approval not required)", "the application (approved without asking)"


@dataclass(frozen=True)
class Decision:
    """What became of an approval request: `decision` is "auto" (granted without asking),
    "accepted" or "rejected"; `by` who or what decided; `reason` why a rejection refused it."""

    accepted: bool
    decision: str
    by: str
    reason: str | None = None


class ApprovalChannel:
    """Routes approval requests to the connected application handler.

    With `approval_required=False` every request is granted at once. Otherwise the
    request goes to the handler set with `connect()`, and the call waits up to
    `approval_timeout` seconds (None: for ever) for `accept()` or `reject()`.

    Requests are of a `kind`: "tool" (MCP tool calls) or "shell" (shell commands in a kernel).
    `auto_approve` grants every kind for a stretch of calls the application approves wholesale;
    `auto_approve_kinds` grants only those kinds.
    """

    def __init__(self, approval_required: bool = False, approval_timeout: float | None = 60) -> None:
        self.approval_required = approval_required
        self.approval_timeout = approval_timeout
        self._handler: ApprovalHandler | None = None
        self.auto_approve = False
        self.auto_approve_kinds: frozenset[str] = frozenset()
        #: Called with True when a request starts waiting for a decision and False when it has one.
        self.on_wait: Callable[[bool], None] | None = None

    def is_automatic(self, kind: str = "tool") -> bool:
        """Whether requests of `kind` are granted without asking anyone."""
        return not self.approval_required or self.auto_approve or kind in self.auto_approve_kinds

    @property
    def automatic(self) -> bool:
        """Whether tool calls are granted without asking anyone."""
        return self.is_automatic("tool")

    @property
    def open(self) -> bool:
        """Whether an application handler is connected."""
        return self._handler is not None

    def connect(self, handler: ApprovalHandler) -> None:
        """Send future approval requests to `handler`."""
        self._handler = handler

    def disconnect(self, handler: ApprovalHandler | None = None) -> None:
        """Stop sending requests to the handler (only if it is still `handler`, when given)."""
        if handler is None or self._handler is handler:
            self._handler = None

    async def request(
        self, server_name: str, tool_name: str, tool_args: dict[str, Any], *, kind: str = "tool"
    ) -> bool:
        """Ask for approval; True if accepted, False if rejected.

        Raises `RuntimeError` when no application is connected and `TimeoutError` when
        no decision arrives in time.
        """
        accepted, _ = await self.decide(server_name, tool_name, tool_args, kind=kind)
        return accepted

    async def decide(
        self, server_name: str, tool_name: str, tool_args: dict[str, Any], *, kind: str = "tool"
    ) -> tuple[bool, str | None]:
        """Like `request()`, with the reason a rejection gave (None if it gave none).

        Raises `RuntimeError` when no application is connected and `TimeoutError` when
        no decision arrives in time.
        """
        decision = await self.ask(server_name, tool_name, tool_args, kind=kind)
        return decision.accepted, decision.reason

    async def ask(
        self, server_name: str, tool_name: str, tool_args: dict[str, Any], *, kind: str = "tool"
    ) -> Decision:
        """Like `decide()`, saying who decided: the handler's `by` (default "application"), or
        that nobody was asked."""
        if self.is_automatic(kind):
            return Decision(True, "auto", AUTO_APPROVED if self.approval_required else NOT_REQUIRED)
        handler = self._handler
        if handler is None:
            raise RuntimeError("no application is connected to approve tool calls")
        decision: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        async def respond(accepted: bool) -> None:
            if not decision.done():
                decision.set_result(accepted)

        self._waiting(True)
        try:
            request = ApprovalRequest(server_name, tool_name, tool_args, respond)
            await handler(request)
            accepted = await asyncio.wait_for(decision, self.approval_timeout)
            verdict = "accepted" if accepted else "rejected"
            return Decision(accepted, verdict, request.decided_by or "application", request.rejection)
        except TimeoutError:
            raise TimeoutError(
                f"no approval decision within {self.approval_timeout:g} s (approval_timeout)"
            ) from None
        finally:
            self._waiting(False)

    def _waiting(self, waiting: bool) -> None:
        if self.on_wait is not None:
            self.on_wait(waiting)
