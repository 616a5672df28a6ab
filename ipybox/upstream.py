"""Every use of a dependency's private API, each behind one named function.

Private names change without notice; `tests/test_upstream.py` checks each of them by name, so
an upgrade that removes one fails there, saying which helper to update, instead of somewhere
deep in a kernel start or a tool call. (The generated API's runtime, which runs inside
kernels, also uses pydantic's model metaclasses; the same test checks those names.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx2
    from jupyter_client.asynchronous.client import AsyncKernelClient
    from mcp.server.lowlevel import Server
    from mcp.server.mcpserver import MCPServer


def adopt_kernel_info(client: AsyncKernelClient, reply: dict[str, Any]) -> None:
    """Let a jupyter_client client learn the kernel's protocol version from a kernel_info reply
    it did not wait for itself (ipybox polls for it while the kernel starts)."""
    client._handle_kernel_info_reply(reply)


def mcp_http_client(headers: Mapping[str, str] | None) -> httpx2.AsyncClient:
    """The HTTP client the MCP SDK configures for streamable HTTP (its timeouts and redirects),
    with the server's `headers`."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    return create_mcp_http_client(headers=dict(headers) if headers is not None else None)


def lowlevel_server(server: MCPServer[Any]) -> Server[Any]:
    """The low-level server an `MCPServer` runs on a transport's streams (its `run_stdio_async`
    serves this on the SDK's own stdio streams; ipybox serves it on its own)."""
    return server._lowlevel_server
