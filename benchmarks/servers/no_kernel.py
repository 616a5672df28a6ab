"""The floor for bench_mcp_server.py: a bare `mcp` MCPServer whose `execute_ipython_cell` runs
nothing and answers "2" at once. What it takes is the SDK's share of any server's launch and
round trip: importing `mcp`, the stdio loop, JSON-RPC."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("no-kernel")


@server.tool(structured_output=False)
async def execute_ipython_cell(code: str) -> str:
    """Answer "2" without running `code`."""
    return "2"


if __name__ == "__main__":
    server.run("stdio")
