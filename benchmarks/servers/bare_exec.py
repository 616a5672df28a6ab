"""The baseline for bench_mcp_server.py: a bare `mcp` MCPServer whose one tool runs code in a
jupyter_client kernel (started at launch) and returns its output, with nothing else around it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from mcp.server.mcpserver import MCPServer

_kernel: dict[str, Any] = {}


@contextlib.asynccontextmanager
async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
    manager = AsyncKernelManager(kernel_name="python3")
    await manager.start_kernel(
        extra_arguments=["--IPKernelApp.log_level=ERROR", "--HistoryManager.enabled=False"]
    )
    client = manager.client()
    client.start_channels()
    await client.wait_for_ready(timeout=30)
    _kernel["client"] = client
    try:
        yield
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)


server = MCPServer("bare", lifespan=lifespan)


@server.tool(structured_output=False)
async def execute_ipython_cell(code: str) -> str:
    """Run code in a kernel and return its text output."""
    out: list[str] = []
    reply = await _kernel["client"].execute_interactive(
        code,
        store_history=False,
        output_hook=lambda msg: out.append(
            msg["content"].get("text") or msg["content"].get("data", {}).get("text/plain", "")
        ),
    )
    return "".join(out) if reply["content"]["status"] == "ok" else "error"


if __name__ == "__main__":
    server.run("stdio")
