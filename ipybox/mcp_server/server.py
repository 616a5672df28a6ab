"""ipybox as an MCP server: register MCP servers, run code that calls them, install packages, reset."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shlex
import signal
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, cast

from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ipybox._version import __version__
from ipybox.code_exec import CodeExecutionError, CodeExecutor
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.spares import SpareKernels
from ipybox.mcp_server import packages
from ipybox.mcp_server.approval import ApprovalPolicy
from ipybox.mcp_server.channels import ParkedRuns
from ipybox.mcp_server.homes import Homes
from ipybox.mcp_server.kernels import DEFAULT_KERNEL, LOCAL, KernelPool
from ipybox.mcp_server.notebooks import Notebooks
from ipybox.mcp_server.output import Spill
from ipybox.mcp_server.tools import Tools

logger = logging.getLogger(__name__)

_LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

INSTRUCTIONS = """\
register_mcp_server makes an MCP server's tools a Python API (mcptools/<server>/); call them
from execute_ipython_cell, many per cell, printing only what you need."""


@dataclass
class ExecutorOptions:
    """Keyword arguments of every kernel's `CodeExecutor`, as the operator set them."""

    sandbox: bool = False
    sandbox_config: Path | None = None
    sandbox_gpus: str | None = None  # "all", "0,1": NVIDIA GPUs for sandboxed kernels
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    allow_env: tuple[str, ...] = ()  # variables of ipybox's environment that `${VAR}` may name
    kernel_gateway_url: str | None = None  # token: IPYBOX_KERNEL_GATEWAY_TOKEN
    kernel_name: str = "python3"
    tool_server_host: str = "localhost"
    tool_server_port: int | None = None  # used by the local principal's default kernel only
    kernel_tool_server_host: str | None = None
    approve_shell_cmds: bool = False
    approval_timeout: float | None = 600


@dataclass
class ServerOptions:
    """How the MCP server runs its kernels and who may use them."""

    workspace: Path
    executor: ExecutorOptions = field(default_factory=ExecutorOptions)
    audit_log: Path | None = None  # default: <principal's workspace>/.ipybox/audit.jsonl
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    kernel_idle_timeout: float | None = 3600
    max_kernels: int = 4
    #: Warm spare kernels kept for all principals' kernels together (each serves one kernel only).
    spare_kernels: int = 1
    #: Authenticated principals share WORKSPACE instead of each getting WORKSPACE/users/<name>.
    shared_workspace: bool = False
    #: Rebuild each kernel with a notebook from it when it first starts (`ipybox --resume`).
    resume: bool = False
    #: Seconds a cell waits, paused, for a 2026-07-28 client to answer its approval requests.
    approval_ttl: float = 600
    #: Files of cut output kept in each workspace's .ipybox/outputs/, and their bytes together
    #: (None: no limit); the oldest go first.
    spilled_outputs: int | None = 100
    spilled_bytes: int | None = 256 << 20
    #: Authenticated users may have ipybox run programs on the host for them: install_package
    #: (into ipybox's own environment, which every principal's kernels run) and stdio MCP servers
    #: (outside every sandbox). Either reaches ipybox's user's files and the other users' homes:
    #: only where the operator trusts the users with that (`--shared-trust`).
    users_run_on_host: bool = False


def create_server(
    options: ServerOptions, *, token_verifier: TokenVerifier | None = None, auth: AuthSettings | None = None
) -> MCPServer[Any]:
    """Build the ipybox MCP server for a workspace (with `token_verifier` and `auth`: for principals)."""
    homes = Homes(options.workspace, shared=options.shared_workspace, audit_log=options.audit_log)
    if token_verifier is not None:  # users' homes: out of every kernel's reach from now on
        homes.prepare()
    executor_options = options.executor
    spares = SpareKernels(options.spare_kernels)
    notebooks = Notebooks(homes, resume=options.resume)

    kernels = KernelPool(
        functools.partial(_new_executor, homes, executor_options, spares, notebooks),
        idle_timeout=options.kernel_idle_timeout,
        max_kernels=options.max_kernels,
        on_start=notebooks.started,
        on_stop=notebooks.stopped,
    )
    parked = ParkedRuns(options.approval_ttl)
    on_gateway = executor_options.kernel_gateway_url is not None
    tools = Tools(
        kernels,
        homes,
        policy=options.approval,
        allow_env=executor_options.allow_env,
        install=functools.partial(_install, kernels=kernels, on_gateway=on_gateway),
        parked=parked,
        spill=Spill(options.spilled_outputs, options.spilled_bytes),
        notebooks=notebooks,
        users_run_on_host=options.users_run_on_host,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        # No kernel starts before the first tool call: a client that only connects (`claude mcp
        # list`, a session that never uses ipybox) costs no kernel and leaves nothing in the
        # workspace, and the handshake does not share the CPU with kernel starts.
        _close_on_signals(kernels, parked, notebooks)
        looking = asyncio.create_task(asyncio.to_thread(tools.siblings.check))  # logs what it finds
        if options.resume:  # the local principal's kernels start resuming now (others' on first use)
            _prewarm(kernels, notebooks.kernels(LOCAL)[: options.max_kernels])
        try:
            yield
        finally:
            looking.cancel()
            await _close(kernels, parked, notebooks)

    server: MCPServer[Any] = MCPServer(
        name="ipybox",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level=cast(_LogLevel, logging.getLevelName(logging.getLogger("ipybox").getEffectiveLevel())),
        token_verifier=token_verifier,
        auth=auth,
    )
    tools.add_to(server)
    return server


def _prewarm(kernels: KernelPool, names: list[str]) -> None:
    for name in names:
        kernels.prewarm(LOCAL, name)


def _new_executor(
    homes: Homes,
    executor_options: ExecutorOptions,
    spares: SpareKernels,
    notebooks: Notebooks,
    principal: str,
    name: str,
) -> CodeExecutor:
    """The executor for a principal's named kernel; its spare kernel (if any) has a place in
    `spares`; it goes on with the kernel's notebook."""
    root = homes.workspace(principal)
    kwargs = {f.name: getattr(executor_options, f.name) for f in fields(executor_options)}
    if (principal, name) != (LOCAL, DEFAULT_KERNEL):  # a fixed port fits one tool server
        kwargs["tool_server_port"] = None
    return CodeExecutor(
        **kwargs,
        spare_kernel=spares,
        kernel_env=homes.kernel_env(principal),
        images_dir=root / "images",
        working_dir=root,
        audit_log=homes.audit_log(principal),
        log_level=logging.getLevelName(logging.getLogger("ipybox").getEffectiveLevel()),
        state_dirs=[homes.state(principal)],  # ipybox's records (notebooks, cut outputs)
        record=notebooks.record(principal, name),
    )


async def _install(package_name: str, principal: str, *, kernels: KernelPool, on_gateway: bool) -> str:
    """Install a requirement for the principal's kernels (on a gateway: inside the kernel)."""
    try:
        spec = packages.check_requirement(package_name)
    except packages.RequirementError as e:
        raise ToolError(str(e)) from None
    if on_gateway:  # the kernel's environment is on the gateway's side
        async with kernels.use(principal) as (executor, _):
            try:
                result = await executor.execute(f"%pip install -q {shlex.quote(spec)}", timeout=600)
            except (CodeExecutionError, TimeoutError) as e:
                raise ToolError(f"Installing {spec!r} in the kernel failed:\n{str(e)[-3000:]}") from None
        return f"Installed {spec!r} in the kernel.\n{(result.text or '')[-1000:]}"
    try:
        return await packages.install(spec)
    except TimeoutError:
        raise ToolError(f"Installing {spec!r} took longer than 10 minutes and was stopped.") from None
    except RuntimeError as e:
        raise ToolError(str(e)) from None


def _close_on_signals(kernels: KernelPool, parked: ParkedRuns, notebooks: Notebooks) -> None:
    """On SIGTERM (how clients stop a stdio server) or Ctrl-C, stop the kernels, then exit.

    A sandboxed kernel does not notice that ipybox is gone, so dying without stopping it would
    leave it running; and a stdio server blocked on reading stdin would not stop on Ctrl-C.
    A signal is only taken over if nothing but Python's (or asyncio's) default handles it.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    closing: set[asyncio.Task[None]] = set()

    async def close_and_exit(signum: signal.Signals) -> None:
        try:
            await asyncio.wait_for(_close(kernels, parked, notebooks), 10)
        finally:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)  # exit with the signal's default action

    def on_signal(signum: signal.Signals) -> None:
        logger.info("%s: stopping the kernels", signum.name)
        for taken in (signal.SIGTERM, signal.SIGINT):  # a second signal ends ipybox at once
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(taken)
                signal.signal(taken, signal.SIG_DFL)
        task = loop.create_task(close_and_exit(signum))
        closing.add(task)

    for signum in (signal.SIGTERM, signal.SIGINT):
        if _is_default_handler(signal.getsignal(signum)):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # none on Windows
                loop.add_signal_handler(signum, on_signal, signum)


def _is_default_handler(handler: object) -> bool:
    """Python's default handling, or asyncio.run's own SIGINT handler (which cancels the main task)."""
    if handler in (signal.SIG_DFL, signal.default_int_handler):
        return True
    owner = getattr(getattr(handler, "func", None), "__self__", None)
    return isinstance(owner, asyncio.Runner)


async def _close(kernels: KernelPool, parked: ParkedRuns, notebooks: Notebooks) -> None:
    await parked.close()
    # The kernels first: a signal's close has a deadline, and a kernel left running (on a gateway,
    # in a sandbox) costs more than a notebook written late; the records are in memory, so the
    # notebooks, written after, still get every cell, also those that ended as the kernels stopped.
    await kernels.close()
    await notebooks.close()
