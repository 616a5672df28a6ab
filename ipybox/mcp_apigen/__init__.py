"""API generation: typed Python modules for the tools of an MCP server, from their JSON schemas.

The names are imported lazily: generated modules import `ipybox.mcp_apigen.runtime` in the
kernel, which must not pay for the generator and the MCP SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ipybox.mcp_apigen.generate import GeneratedModules, ToolGenerationError, generate_mcp_sources

__all__ = ["GeneratedModules", "ToolGenerationError", "generate_mcp_sources"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("ipybox.mcp_apigen.generate"), name)
    raise AttributeError(f"module 'ipybox.mcp_apigen' has no attribute {name!r}")
