"""A stdio MCP server whose writing tools leave a visible trace: `add_note` (and `rate`, which takes
a JSON number) append to the file named by `NOTES_FILE`; `count_notes` (annotated
`readOnlyHint: true`) only reads it."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes")
NOTES = Path(os.environ.get("NOTES_FILE", "notes.txt"))


@server.tool()
def add_note(text: str) -> str:
    """Append a note."""
    with NOTES.open("a") as f:
        f.write(text + "\n")
    return "added"


@server.tool()
def rate(text: str, stars: float) -> str:
    """Append a rated note."""
    with NOTES.open("a") as f:
        f.write(f"{text} {stars:g}\n")
    return "added"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def count_notes() -> str:
    """How many notes there are."""
    return str(len(NOTES.read_text().splitlines()) if NOTES.exists() else 0)


if __name__ == "__main__":
    server.run("stdio")
