"""Other ipybox MCP servers in the same workspace, e.g. two codeact plugins enabled at once.

Each would run its own kernels and write the same mcptools/, and an agent may send one cell to
the sandboxed server and the next to the unsandboxed one. ipybox says so in its log and in the
reply of the first tool call, so the user can disable one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)

#: `python -m` modules that run ipybox's MCP server (else it runs as the `ipybox` console script).
_MODULES = ("ipybox", "ipybox.cli", "ipybox.mcp_server")


def _is_server(cmdline: list[str]) -> bool:
    """Whether a command line runs ipybox's MCP server (not a kernel, the front or a tool)."""
    head = cmdline[:2]
    if any(Path(arg).name == "ipybox" for arg in head):
        return True
    return any(a == "-m" and b in _MODULES for a, b in zip(cmdline, cmdline[1:], strict=False))


def _pid_namespace(pid: int | str) -> str | None:
    """The PID namespace of process `pid` (None where it cannot be read, or off Linux)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def find(workspace: Path) -> list[str]:
    """One line for each other ipybox server of this user that runs in `workspace`. A process in
    another PID namespace runs in a sandbox: a kernel's, whatever it calls itself (a sandboxed
    kernel could start one named `ipybox` to have the user told to disable a plugin)."""
    me, found, namespace = os.getpid(), [], _pid_namespace("self")
    for process in psutil.process_iter():
        try:
            if process.pid == me or process.uids().real != os.getuid():
                continue
            cmdline = process.cmdline()
            if not _is_server(cmdline) or Path(process.cwd()) != workspace:
                continue
            if _pid_namespace(process.pid) not in (None, namespace):
                continue
        except (psutil.Error, OSError):
            continue
        kind = "sandboxed" if "--sandbox" in cmdline else "not sandboxed"
        found.append(f"pid {process.pid}, {kind}")
    return found


class Siblings:
    """Says once, in a tool reply, that other ipybox servers run in the same workspace."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace.resolve()
        self._checked = False

    def check(self) -> str:
        """The warning if another server runs in the workspace ("" if none); logged too."""
        others = find(self.workspace)
        if not others:
            return ""
        text = (
            f"[ipybox: {len(others) + 1} ipybox servers run in {self.workspace} (the others: "
            f"{'; '.join(others)}), e.g. two codeact plugins enabled at once. Each has its own kernels, "
            "and all write mcptools/ here. Keep one: e.g. `claude plugin disable codeact-default@ipybox` "
            "(or codeact-sandbox@ipybox), then restart the session.]"
        )
        logger.warning("%s", text)
        return text

    def notice(self) -> str:
        """The warning, the first time a tool is called ("" later, or if no other server runs)."""
        if self._checked:
            return ""
        self._checked = True
        return self.check()
