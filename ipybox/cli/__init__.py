"""Command line: `ipybox --workspace DIR` runs the ipybox MCP server."""

from ipybox.cli.main import main

__all__ = ["main"]
