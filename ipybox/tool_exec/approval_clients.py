"""Remote approval clients: a process that knows the approval token decides on tool calls."""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
from typing import Any

from ipybox.tool_exec.approval.client import ApprovalRequest
from ipybox.tool_exec.approval.server import ApprovalChannel
from ipybox.tool_exec.listener import send

logger = logging.getLogger(__name__)


async def serve_approval_client(
    channel: ApprovalChannel,
    token: str,
    hello: dict[str, Any],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Forward `channel`'s requests to a remote `ApprovalClient` until it hangs up.

    Requests still open when it goes are rejected: nobody is left to decide on them.
    """
    if not hmac.compare_digest(str(hello.get("token", "")), token):
        logger.warning("refused an approval client with a wrong token")
        await send(writer, {"ok": False, "error": "wrong approval token"})
        return
    await send(writer, {"ok": True})
    pending: dict[int, ApprovalRequest] = {}
    ids = itertools.count()

    async def forward(request: ApprovalRequest) -> None:
        request_id = next(ids)
        pending[request_id] = request
        message = {
            "id": request_id,
            "server_name": request.server_name,
            "tool_name": request.tool_name,
            "tool_args": request.tool_args,
        }
        await send(writer, message)

    channel.connect(forward)
    try:
        while line := await reader.readline():
            answer = json.loads(line)
            request = pending.pop(answer.get("id"), None)
            if request is not None:
                reason = answer.get("reason")
                if answer.get("accepted") is True:
                    await request.accept()
                else:
                    await request.reject(reason if isinstance(reason, str) and reason else None)
    finally:
        channel.disconnect(forward)
        for request in pending.values():
            await request.reject("refused: the approval client disconnected before deciding")
