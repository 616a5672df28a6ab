"""API generation: typed Python modules for the tools of an MCP server, from their JSON schemas."""

from ipybox.mcp_apigen.generate import GeneratedModules, ToolGenerationError, generate_mcp_sources

__all__ = ["GeneratedModules", "ToolGenerationError", "generate_mcp_sources"]
