"""MCP server: exposes code execution and MCP tool registration to agents as MCP tools."""

from ipybox.mcp_server.approval import ApprovalPolicy
from ipybox.mcp_server.server import ExecutorOptions, ServerOptions, create_server

__all__ = ["ApprovalPolicy", "ExecutorOptions", "ServerOptions", "create_server"]
