"""Sandboxing: runs kernels under Anthropic's sandbox-runtime with a filesystem and network policy."""

from ipybox.sandbox.config import (
    DEFAULT_CONFIG,
    WORKSPACE_CONFIG,
    Gpus,
    SandboxError,
    check_sandbox,
    load_config,
    release_sandbox,
    runtime_root,
    sandbox_policy,
    sandbox_problem,
    srt_prefix,
)
from ipybox.sandbox.env import SANDBOX_FIXED_VARS, sandboxed_environment
from ipybox.sandbox.reads import import_paths

__all__ = [
    "DEFAULT_CONFIG",
    "SANDBOX_FIXED_VARS",
    "WORKSPACE_CONFIG",
    "Gpus",
    "SandboxError",
    "check_sandbox",
    "import_paths",
    "load_config",
    "release_sandbox",
    "runtime_root",
    "sandbox_policy",
    "sandbox_problem",
    "sandboxed_environment",
    "srt_prefix",
]
