"""Sandboxing: runs kernels under Anthropic's sandbox-runtime with a filesystem and network policy."""

from ipybox.sandbox.config import (
    DEFAULT_CONFIG,
    WORKSPACE_CONFIG,
    SandboxError,
    check_sandbox,
    load_config,
    runtime_root,
    sandbox_command,
    sandbox_problem,
)

__all__ = [
    "DEFAULT_CONFIG",
    "WORKSPACE_CONFIG",
    "SandboxError",
    "check_sandbox",
    "load_config",
    "runtime_root",
    "sandbox_command",
    "sandbox_problem",
]
