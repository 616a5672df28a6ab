"""Moved to `ipybox.mcp_client.repair`; this module keeps the old import path working."""

from ipybox.mcp_client.repair import ToolRepair, ToolReport, UnusableToolError, repair_tool

__all__ = ["ToolRepair", "ToolReport", "UnusableToolError", "repair_tool"]
