"""ipybox as an MCP server, driven by the MCP Python SDK client as an agent's host would drive it.

Starts `ipybox` over stdio, registers the `everything` MCP server (which generates a typed Python
API for its tools in the workspace), then runs a cell that calls two of those tools, printing
its output as it streams in.

    uv run python examples/mcp_client.py [--workspace DIR]

Needs the node test servers (`npm ci`) or `npx` for server-everything.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from ipybox.tool_exec.approval import display

REPO = Path(__file__).resolve().parent.parent
LOCAL_EVERYTHING = REPO / "node_modules" / ".bin" / "mcp-server-everything"

CODE = """
from mcptools.everything import echo, get_sum

print(echo.run(echo.Params(message="hello from ipybox")), flush=True)
total = get_sum.run(get_sum.Params(a=19, b=23))
print(total)
"""


def everything_params() -> dict[str, Any]:
    if LOCAL_EVERYTHING.exists():
        return {"command": str(LOCAL_EVERYTHING), "args": ["stdio"]}
    return {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything", "stdio"]}


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def on_progress(progress: float, total: float | None, message: str | None) -> None:
    """Output of the running cell, as it is printed."""
    for line in (message or "").splitlines():
        print(f"   | {line}")


async def main(workspace: Path) -> None:
    ipybox = shutil.which("ipybox")
    command = [ipybox] if ipybox else [sys.executable, "-m", "ipybox.mcp_server"]
    server = StdioServerParameters(
        command=command[0],
        args=[*command[1:], "--workspace", str(workspace)],
        # ipybox fills ${VAR} in server params from WORKSPACE/.env and the variables named with
        # --allow-env; the kernel gets only the KERNEL_ENV_<NAME> variables.
        env=dict(os.environ),
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        print(f"1. ipybox tools: {', '.join(tool.name for tool in tools)}\n")

        result = await session.call_tool(
            "register_mcp_server", {"server_name": "everything", "server_params": everything_params()}
        )
        if result.is_error:
            sys.exit(f"register_mcp_server failed: {text_of(result)}")
        print(f"2. register_mcp_server:\n{text_of(result)}\n")

        print(f"3. execute_ipython_cell:{CODE}")
        result = await session.call_tool(
            "execute_ipython_cell", {"code": CODE}, progress_callback=on_progress
        )
        if result.is_error:
            sys.exit(f"execute_ipython_cell failed: {text_of(result)}")
        print(f"\n4. Result returned to the agent:\n{display.lines(text_of(result))}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, help="workspace directory (default: a temporary one)")
    args = parser.parse_args()
    if args.workspace is not None:
        asyncio.run(main(args.workspace.resolve()))
    else:
        with tempfile.TemporaryDirectory(prefix="ipybox-example-") as tmp:
            asyncio.run(main(Path(tmp)))
