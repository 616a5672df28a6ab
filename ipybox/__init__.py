"""ipybox: a code-action sandbox for AI agents.

The public names are imported lazily so that kernel code importing a generated tool API
(which needs only `ipybox.tool_exec.client`) does not pay for the MCP SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ipybox._lazy import lazy_getattr

if TYPE_CHECKING:
    from ipybox._version import __version__
    from ipybox.code_exec import CodeExecutionChunk, CodeExecutionError, CodeExecutionResult, CodeExecutor
    from ipybox.kernel_mgr.limits import ResourceLimits
    from ipybox.mcp_apigen import GeneratedModules, ToolGenerationError, generate_mcp_sources
    from ipybox.sandbox import SandboxError
    from ipybox.tool_exec.approval.client import ApprovalClient, ApprovalRequest
    from ipybox.tool_exec.approval.server import ApprovalChannel
    from ipybox.tool_exec.client import ApprovalRejectedError, ToolOutput, ToolRunner, ToolRunnerError
    from ipybox.tool_exec.server import ToolServer

_EXPORTS = {
    "__version__": "ipybox._version",
    "CodeExecutor": "ipybox.code_exec",
    "CodeExecutionChunk": "ipybox.code_exec",
    "CodeExecutionError": "ipybox.code_exec",
    "CodeExecutionResult": "ipybox.code_exec",
    "generate_mcp_sources": "ipybox.mcp_apigen",
    "GeneratedModules": "ipybox.mcp_apigen",
    "ApprovalClient": "ipybox.tool_exec.approval.client",
    "ApprovalRequest": "ipybox.tool_exec.approval.client",
    "ApprovalChannel": "ipybox.tool_exec.approval.server",
    "ToolRunner": "ipybox.tool_exec.client",
    "ToolRunnerError": "ipybox.tool_exec.client",
    "ApprovalRejectedError": "ipybox.tool_exec.client",
    "ToolServer": "ipybox.tool_exec.server",
    "ToolOutput": "ipybox.tool_exec.client",
    "ToolGenerationError": "ipybox.mcp_apigen",
    "ResourceLimits": "ipybox.kernel_mgr.limits",
    "SandboxError": "ipybox.sandbox",
}

__all__ = [
    "ApprovalRejectedError",
    "ApprovalChannel",
    "ApprovalClient",
    "ApprovalRequest",
    "CodeExecutionChunk",
    "CodeExecutionError",
    "CodeExecutionResult",
    "CodeExecutor",
    "GeneratedModules",
    "ResourceLimits",
    "SandboxError",
    "ToolGenerationError",
    "ToolOutput",
    "ToolRunner",
    "ToolRunnerError",
    "ToolServer",
    "__version__",
    "generate_mcp_sources",
]


__getattr__ = lazy_getattr(__name__, _EXPORTS)
