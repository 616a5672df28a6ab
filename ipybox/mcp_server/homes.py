"""Where each principal's files live: its workspace, ipybox's records there, the audit log."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from dotenv import dotenv_values

from ipybox.mcp_server.kernels import user_name
from ipybox.sandbox import owned

KERNEL_ENV_PREFIX = "KERNEL_ENV_"
#: Names that are their principal's directory: lowercase, so no two meet on a case-insensitive disk.
_SAFE_DIR = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def principal_dir(name: str) -> str:
    """The directory in WORKSPACE/users/ of the user `name`: the name if `_SAFE_DIR` matches it,
    else `_` and a hash of it (no matching name starts with `_`, so no two users share one)."""
    if _SAFE_DIR.fullmatch(name):
        return name
    return "_" + hashlib.sha256(name.encode()).hexdigest()[:32]


class Homes:
    """Each principal's workspace (the kernel's directory, its mcptools/, registered servers and
    .env secrets) and audit log: WORKSPACE for the local principal, else WORKSPACE/users/<name>.

    Users' homes are made by ipybox, never taken over (see `ipybox.sandbox.owned`): a directory
    found there that ipybox did not make is refused, and no other kernel reaches them.
    """

    def __init__(self, root: Path, *, shared: bool = False, audit_log: Path | None = None) -> None:
        self.root = root
        self._shared = shared
        self._audit_log = audit_log

    @property
    def shared(self) -> bool:
        """Whether authenticated principals share WORKSPACE (and its registered servers)."""
        return self._shared

    @property
    def tree(self) -> Path:
        """Where the users' homes lie."""
        return self.root / "users"

    def prepare(self) -> None:
        """Record where users' homes lie before any kernel starts, so every sandboxed kernel
        started from now on (also of other ipybox sessions on this workspace) is kept out."""
        if not self._shared:
            owned.record_tree(self.tree)

    def workspace(self, principal: str) -> Path:
        """The principal's workspace; raises `HomeError` (saying what to do) for a home that ipybox
        did not make."""
        name = user_name(principal)
        if name is None or self._shared:
            return self.root
        return owned.home(self.tree, principal_dir(name))

    def state(self, principal: str) -> Path:
        """ipybox's records in the principal's workspace (cut outputs, notebooks, the audit log by
        default), written by ipybox only: read-only to sandboxed kernels."""
        return self.workspace(principal) / ".ipybox"

    def audit_log(self, principal: str) -> Path:
        return self._audit_log or self.state(principal) / "audit.jsonl"

    def notebook(self, principal: str, kernel: str) -> Path:
        """The notebook ipybox keeps of the principal's kernel `kernel` (a checked kernel name); in
        a shared workspace, a user's are in `notebooks/users/<name>/`."""
        folder = self.state(principal) / "notebooks"
        name = user_name(principal)
        if self._shared and name is not None:
            folder = folder / "users" / principal_dir(name)
        return folder / f"{kernel}.ipynb"

    def kernel_env(self, principal: str) -> dict[str, str]:
        """`KERNEL_ENV_<NAME>` variables (environment and the workspace's `.env`) as `<NAME>`."""
        env_file = self.workspace(principal) / ".env"
        # taken literally: `${VAR}` must not copy a variable of ipybox's own environment into a kernel
        values = {k: v for k, v in dotenv_values(env_file, interpolate=False).items() if v is not None}
        values |= os.environ
        return {
            k[len(KERNEL_ENV_PREFIX) :]: v for k, v in values.items() if k.startswith(KERNEL_ENV_PREFIX) and v
        }
