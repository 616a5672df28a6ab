"""An MCP client that starts a cell and is then killed: it connects to URL over streamable HTTP with
the real `mcp` `Client` in MODE ("auto" or "legacy"), calls execute_ipython_cell with CODE on kernel
KERNEL and prints `started` once the cell's first output arrives as progress, or `asked` when the
server asks the user to approve a tool call (a question this client never answers). It never ends
the call itself; the test kills it (SIGKILL), so no cancel notification and no session DELETE are sent.

    python dropped_client.py URL MODE KERNEL CODE
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp.client.client import Client
from mcp.types import ElicitRequestParams, ElicitResult


async def main(url: str, mode: str, kernel: str, code: str) -> None:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message and "started" in message:
            _say("started")

    async def never_answer(context: Any, params: ElicitRequestParams) -> ElicitResult:
        _say("asked")
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with Client(url, mode=mode, elicitation_callback=never_answer) as client:  # type: ignore[arg-type]
        await client.call_tool(
            "execute_ipython_cell", {"code": code, "kernel": kernel}, progress_callback=on_progress
        )
    _say("the call ended before the client was killed")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
