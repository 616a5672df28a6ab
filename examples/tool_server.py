"""The tool execution pieces on their own: a ToolServer that requires approval, an ApprovalClient
that decides, and a ToolRunner that calls a tool, as code in a kernel would.

Run with `uv run python examples/tool_server.py` (after `scripts/setup`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ipybox import ApprovalClient, ApprovalRequest, ToolRunner, ToolServer

EVERYTHING = Path(__file__).resolve().parent.parent / "node_modules" / ".bin" / "mcp-server-everything"
SERVER_PARAMS = {"command": str(EVERYTHING), "args": ["stdio"]}


async def decide(request: ApprovalRequest) -> None:
    """The application's policy: sums are fine, everything else is refused."""
    print(f"approval requested: {request}")
    if request.tool_name == "get-sum":
        await request.accept()
    else:  # the calling code's error gives the reason
        await request.reject("refused by this application's policy: only get-sum may run")


async def main() -> None:
    # The application tells the tool server which MCP servers it may start.
    async with ToolServer(port=0, approval_required=True, servers={"everything": SERVER_PARAMS}) as server:
        async with ApprovalClient(decide, port=server.port or 0, token=server.approval_token):
            runner = ToolRunner("everything", SERVER_PARAMS, port=server.port, token=server.token)
            print("get-sum:", await runner.run("get-sum", {"a": 2, "b": 3}))
            try:
                await runner.run("echo", {"message": "hello"})
            except Exception as e:
                print(f"echo: {type(e).__name__}: {e}")


if __name__ == "__main__":
    asyncio.run(main())
