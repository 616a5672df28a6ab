"""The seam between an executor and where its kernels live: `KernelBackend`.

`CodeExecutor` knows nothing of local processes, sandboxes or gateways: it gives a backend
its `KernelSettings`, starts its tool server where the backend asks (`ToolListener`), and then
gets kernels from the backend's factory and file transfers from the backend. `LocalBackend`
(`kernel_mgr.local`) and `GatewayBackend` (`kernel_mgr.gateway`) are the two that ship; any
object with these methods works (see docs/architecture.md for a container-per-kernel sketch).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ipybox.errors import IpyboxError
from ipybox.kernel_mgr.deadline import Deadline
from ipybox.kernel_mgr.in_kernel import APPROVE_SHELL_VAR, REQUIRE_SHELL_ESCAPE_VAR
from ipybox.kernel_mgr.kernel import KernelReply
from ipybox.kernel_mgr.output import KernelEvent

if TYPE_CHECKING:
    pass

#: Receives a kernel's output events as they come.
OnEvent = Callable[[KernelEvent], None]
#: Kernels have no terminal: programs that colour their output should not.
_QUIET_TERMINAL = {"NO_COLOR": "1"}


class KernelStartError(IpyboxError, RuntimeError):
    """A backend could not start a kernel (e.g. its gateway is down); the next execution tries again."""


@dataclass(frozen=True)
class KernelSettings:
    """What an executor asks of its kernels, wherever they run."""

    working_dir: Path
    #: The application's `kernel_env`.
    env: Mapping[str, str]
    #: Whether the kernel moves a cell that changed directory back to `working_dir`.
    restore_working_dir: bool = False
    approve_shell_cmds: bool = False
    require_shell_escape: bool = False
    #: The audit log, which a sandboxed kernel must not reach.
    audit_log: Path | None = None
    #: Directories of ipybox's own records below `working_dir` (the MCP server's `.ipybox/`, with
    #: its notebooks): made before a sandboxed kernel starts, then read-only to it, so a kernel
    #: cannot forge what ipybox records of it.
    state_dirs: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        # relative ones are taken below the working directory; others must lie below it
        top = Path(os.path.abspath(self.working_dir))
        dirs = tuple(Path(os.path.abspath(top / p)) for p in self.state_dirs)
        if outside := [str(d) for d in dirs if d == top or not d.is_relative_to(top)]:
            raise ValueError(
                f"state_dirs must lie below the working directory {str(self.working_dir)!r}: {outside}"
            )
        object.__setattr__(self, "state_dirs", dirs)

    def kernel_env(self) -> dict[str, str]:
        """The variables every kernel gets: the application's and the shell-approval switches."""
        return _QUIET_TERMINAL | dict(self.env) | self.switches()

    def switches(self) -> dict[str, str]:
        """ipybox's variables that the application's do not override: the shell-approval switches."""
        env = {}
        if self.approve_shell_cmds:
            env[APPROVE_SHELL_VAR] = "1"
        if self.require_shell_escape:
            env[REQUIRE_SHELL_ESCAPE_VAR] = "1"
        return env


@dataclass(frozen=True)
class ToolListener:
    """Where a backend's kernels need the executor's tool server (a unix socket, and a TCP port,
    0 for any free one, when they run elsewhere) and which registrations it trusts for them."""

    path: Path
    port: int | None = None
    #: Directories besides the workspace whose registered MCP servers the kernels may use
    #: (where the application's `generate_mcp_sources` wrote modules the kernels import).
    module_dirs: tuple[Path, ...] = ()

    def server_options(self) -> dict[str, Any]:
        """These settings as `ToolServer` keyword arguments."""
        return {"path": self.path, "port": self.port, "module_dirs": self.module_dirs}


@dataclass(frozen=True)
class ToolEndpoint:
    """The started tool server: its socket, TCP port (if any) and the secret TCP callers send."""

    path: Path
    port: int | None
    token: str


class KernelLike(Protocol):
    """What the supervisor needs of a kernel, local or remote."""

    @property
    def pid(self) -> int | None: ...

    @property
    def alive(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    async def start(self, timeout: float = 30) -> None: ...

    async def execute(
        self, code: str, on_event: OnEvent, deadline: Deadline, interrupt_grace: float = 5
    ) -> KernelReply: ...

    async def stop(self, grace: float = 2) -> None: ...


class QuietCells(Protocol):
    """A kernel that runs ipybox's own code without output or history: what remote transfers use."""

    async def run_quiet(self, code: str, deadline: Deadline | None = None) -> str: ...

    async def evaluate(self, expression: str, deadline: Deadline | None = None) -> str: ...


class KernelBackend(Protocol):
    """Where an executor's kernels live: how they start, reach the tool server and move files.

    The executor calls `prepare()` once per start, before its tool server starts, then
    `kernel_factory()` with the started server's endpoint, and `close()` after its kernels stopped.
    """

    async def prepare(self, settings: KernelSettings, tool_port: int | None) -> ToolListener:
        """Check the options and make what the kernels need; where the tool server must listen.

        `tool_port` is the TCP port the application asked for (None: none asked for).
        """
        ...

    def kernel_factory(self, endpoint: ToolEndpoint) -> Callable[[], KernelLike]:
        """Makes (unstarted) kernels whose tool calls reach `endpoint`."""
        ...

    async def upload(self, kernel: KernelLike, local: Path, remote: str) -> None:
        """Copy a local file or directory to `remote`, relative to the kernel's working directory."""
        ...

    async def download(self, kernel: KernelLike, remote: str, local: Path) -> None:
        """Copy the kernel's file or directory `remote` to `local`."""
        ...

    async def close(self) -> None:
        """Remove what `prepare()` made; the kernels are stopped by then."""
        ...
