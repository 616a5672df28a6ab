"""MCP server: exposes code execution and MCP tool registration to agents as MCP tools."""

from ipybox.mcp_server.server import ServerOptions, create_server

__all__ = ["ServerOptions", "create_server"]
