"""Where each principal's files live: its workspace and audit log."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path

from dotenv import dotenv_values

from ipybox import _safe_fs
from ipybox.mcp_server.kernels import LOCAL

KERNEL_ENV_PREFIX = "KERNEL_ENV_"
#: Names that are their principal's directory: lowercase, so no two meet on a case-insensitive disk.
_SAFE_DIR = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def principal_dir(principal: str) -> str:
    """The directory name of a principal in WORKSPACE/users/: its name if `_SAFE_DIR` matches it,
    else `_` and a hash of it (no matching name starts with `_`, so no two principals share one)."""
    if _SAFE_DIR.fullmatch(principal):
        return principal
    return "_" + hashlib.sha256(principal.encode()).hexdigest()[:32]


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
        name = principal_dir(principal)
        path = self.root / "users" / name
        # users/ may be in an earlier kernel's reach (a session without principals): no links
        with _safe_fs.opendir(self.root, ("users",), create=True) as users:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=users)
            with _safe_fs.subdir(users, name, path):
                pass
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
