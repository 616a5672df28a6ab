"""Where each principal's files live: its workspace and audit log."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from dotenv import dotenv_values

from ipybox.mcp_server.kernels import LOCAL

KERNEL_ENV_PREFIX = "KERNEL_ENV_"
_SAFE_DIR = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Homes:
    """Each principal's workspace (the kernel's directory, its mcptools/, registered servers and
    .env secrets) and audit log: WORKSPACE for the local principal, else WORKSPACE/users/<name>."""

    def __init__(self, root: Path, *, shared: bool = False, audit_log: Path | None = None) -> None:
        self.root = root
        self._shared = shared
        self._audit_log = audit_log

    def workspace(self, principal: str) -> Path:
        if principal == LOCAL or self._shared:
            return self.root
        name = principal
        if not _SAFE_DIR.fullmatch(name):
            name = hashlib.sha256(principal.encode()).hexdigest()[:24]
        path = self.root / "users" / name
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def audit_log(self, principal: str) -> Path:
        return self._audit_log or self.workspace(principal) / ".ipybox" / "audit.jsonl"

    def kernel_env(self, principal: str) -> dict[str, str]:
        """`KERNEL_ENV_<NAME>` variables (environment and the workspace's `.env`) as `<NAME>`."""
        values = {k: v for k, v in dotenv_values(self.workspace(principal) / ".env").items() if v is not None}
        values |= os.environ
        return {
            k[len(KERNEL_ENV_PREFIX) :]: v for k, v in values.items() if k.startswith(KERNEL_ENV_PREFIX) and v
        }
