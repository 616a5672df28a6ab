"""Tests of the ipybox MCP server, driven by the real MCP client against the real `ipybox` command."""
