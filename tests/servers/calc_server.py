"""A stdio MCP server whose tools are named like Python's builtins (`sum`, `min`, `max`, `list`,
`open`, `type`, `id`) and whose fields carry units only in their descriptions and constraints
(`calculate_tariff`), as real servers' tools do."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

server = MCPServer("calc")


@server.tool(name="sum")
def sum_(numbers: list[float]) -> str:
    """Add numbers."""
    return f"{sum(numbers):g}"


@server.tool(name="min")
def min_(numbers: list[float]) -> str:
    """The smallest of numbers."""
    return f"{min(numbers):g}"


@server.tool(name="max")
def max_(numbers: list[float]) -> str:
    """The largest of numbers."""
    return f"{max(numbers):g}"


@server.tool(name="list")
def list_() -> str:
    """The names of the stored values."""
    return "a, b"


@server.tool(name="open")
def open_(name: str) -> str:
    """Open a stored value by name."""
    return f"opened {name}"


@server.tool(name="type")
def type_(name: str) -> str:
    """The type of a stored value."""
    return "number"


@server.tool(name="id")
def id_(name: str) -> str:
    """The id of a stored value."""
    return f"id-{name}"


@server.tool()
def calculate_tariff(
    price: Annotated[float, Field(description="Price of the goods in USD.")],
    tariff_rate: Annotated[float, Field(description="Tariff rate in percent, e.g. 25.", ge=0, le=100)],
    since: Annotated[str, Field(description="Date the tariff applies from (YYYY-MM-DD).")] = "2026-01-01",
) -> str:
    """The tariff on goods."""
    return f"{price * tariff_rate / 100:g}"


if __name__ == "__main__":
    server.run("stdio")
