"""The tool execution pieces on their own: a ToolServer that requires approval, an ApprovalClient
that decides, and a ToolRunner that calls a tool, as code in a kernel would.

Run with `uv run python examples/tool_server.py` (after `scripts/setup`), or copy it anywhere
ipybox is installed and `mcp-server-everything` is on PATH
(`npm install -g @modelcontextprotocol/server-everything`).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

from ipybox import ApprovalClient, ApprovalRequest, ToolRunner, ToolServer


def everything_command() -> str:
    """The `mcp-server-everything` command: on PATH, else the one of the ipybox clone this file is in."""
    in_clone = Path(__file__).resolve().parent.parent / "node_modules" / ".bin" / "mcp-server-everything"
    found = shutil.which("mcp-server-everything") or (str(in_clone) if in_clone.exists() else None)
    if found is None:
        sys.exit(
            "This example needs the mcp-server-everything command on PATH: install it with "
            "`npm install -g @modelcontextprotocol/server-everything`, or, in an ipybox clone after "
            '`scripts/setup`, run `export PATH="$PWD/node_modules/.bin:$PATH"`.'
        )
    return found


SERVER_PARAMS = {"command": everything_command(), "args": ["stdio"]}


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
