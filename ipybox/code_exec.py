"""`CodeExecutor`: runs code in a kernel, with its tool calls approved by the application."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ipybox import _safe_fs
from ipybox.kernel_mgr import transfer
from ipybox.kernel_mgr.deadline import Deadline
from ipybox.kernel_mgr.gateway import (
    GATEWAY_TOKEN_VAR,
    DirectoryMirror,
    GatewayConfig,
    GatewayError,
    GatewayKernel,
    resolve_gateway_url,
    setup_code,
)
from ipybox.kernel_mgr.in_kernel import APPROVE_SHELL_VAR, REQUIRE_SHELL_ESCAPE_VAR, WORKING_DIR_VAR
from ipybox.kernel_mgr.kernel import KernelDied, kernel_environment
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.output import KernelEvent, OutputBuffer
from ipybox.kernel_mgr.supervisor import KernelLike, KernelSupervisor
from ipybox.sandbox import (
    check_sandbox,
    import_paths,
    release_sandbox,
    runtime_root,
    sandbox_command,
    sandboxed_environment,
)
from ipybox.tool_exec import registry
from ipybox.tool_exec.approval.client import ApprovalRequest
from ipybox.tool_exec.client import ENDPOINT_VAR, TOKEN_VAR
from ipybox.tool_exec.server import ToolServer

logger = logging.getLogger(__name__)


@dataclass
class CodeExecutionChunk:
    """A piece of output, yielded by `CodeExecutor.stream(..., chunks=True)` as it is produced."""

    text: str


@dataclass
class CodeExecutionResult:
    """The output of a finished execution: its text (None if it printed nothing) and image files."""

    text: str | None
    images: list[Path] = field(default_factory=list)


class CodeExecutionError(Exception):
    """The code raised, a tool call was rejected or failed, or the kernel died.

    The message is the kernel's traceback (plain text); `output` holds what the code printed
    before it failed.
    """

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


_DONE = object()
_CANCELLED = object()
#: Kernels have no terminal: programs that colour their output should not.
_QUIET_TERMINAL = {"NO_COLOR": "1"}


def _check_timeout(name: str, value: float | None) -> None:
    if value is not None and not value >= 0:  # also refuses NaN
        raise ValueError(f"{name} must be a number of seconds >= 0 or None, got {value!r}")


class CodeExecutor:
    """Executes Python code in a stateful IPython kernel whose MCP tool calls need approval.

    The kernel runs in a subprocess (optionally sandboxed) with the caller's working
    directory and only the environment given in `kernel_env`. Its tool calls go to an
    embedded `ToolServer` over a unix socket; `stream()` yields an `ApprovalRequest` for
    each one (unless `approve_tool_calls` is False), `execute()` approves them all.

    With `approve_shell_cmds`, each `!cmd` (`tool_name` "shell") and `%%bash`/`%%sh` cell
    ("shell_magic") also waits for approval, with `tool_args == {"cmd": ...}`; with
    `require_shell_escape` as well, starting programs from Python (`subprocess`, `os.system`,
    ...) raises, so they take that path. With `working_dir` given, the kernel starts there and
    a cell that changes directory is moved back after it ends; without, it starts in the current
    directory and a change persists. `approval_timeout=None` waits for decisions for ever.

    Tool servers start only MCP servers registered for `working_dir` (the workspace) or for a
    directory on `kernel_env`'s `PYTHONPATH` (where `generate_mcp_sources` wrote them). Their
    `${VAR}` placeholders take values from `working_dir/.env` and the environment (only the
    names in `allow_env`, if given), or from `placeholder_env` alone (see docs/tool-calls.md).

    With `kernel_gateway_url` (or `kernel_gateway_host` with `kernel_gateway_port`, meaning
    `http://host:port`) kernels run on that Jupyter Kernel Gateway or Enterprise Gateway instead
    (kernelspec `kernel_name`, token `kernel_gateway_token`, default: `IPYBOX_KERNEL_GATEWAY_TOKEN`);
    see docs/remote-kernels.md. Their tool calls reach the tool server over TCP at
    `tool_server_host:tool_server_port` (default port: any free one), as the kernels see it from
    `kernel_tool_server_host` (default: `tool_server_host`), with a per-executor secret. Without a
    gateway, kernels are local processes driven over ipc sockets; with `tool_server_port` set, the
    tool server also listens on TCP, for callers that send its `token`.
    """

    def __init__(
        self,
        tool_server_host: str = "localhost",
        tool_server_port: int | None = None,
        kernel_gateway_host: str = "localhost",
        kernel_gateway_port: int | None = None,
        kernel_env: dict[str, str] | None = None,
        images_dir: Path | None = None,
        approval_timeout: float | None = 60,
        connect_timeout: float = 30,
        sandbox: bool = False,
        sandbox_config: Path | None = None,
        log_level: str = "WARNING",
        *,
        approve_tool_calls: bool = True,
        approve_shell_cmds: bool = False,
        require_shell_escape: bool = False,
        kernel_init_timeout: float = 30,
        spare_kernel: bool = True,
        working_dir: Path | None = None,
        audit_log: Path | None = None,
        limits: ResourceLimits | None = None,
        tool_timeout: float | None = None,
        allow_env: Iterable[str] | None = None,
        placeholder_env: Mapping[str, str] | None = None,
        kernel_gateway_url: str | None = None,
        kernel_gateway_token: str | None = None,
        kernel_name: str = "python3",
        kernel_tool_server_host: str | None = None,
    ) -> None:
        self.kernel_gateway_url = resolve_gateway_url(
            kernel_gateway_url, kernel_gateway_host, kernel_gateway_port
        )
        if self.kernel_gateway_url is not None:
            GatewayConfig(self.kernel_gateway_url)  # a malformed URL fails here, not at start()
            if sandbox:
                raise ValueError(
                    "sandbox=True applies to local kernels; kernels on a gateway are isolated by how the "
                    "gateway launches them (e.g. one pod per kernel), see docs/remote-kernels.md."
                )
            if limits is not None and (limits.memory is not None or limits.processes is not None):
                raise ValueError(
                    "memory and process limits apply to local kernels; set them for kernels on a gateway "
                    "where the gateway launches them (e.g. the kernel pod's resources)."
                )
        self._gateway_token = kernel_gateway_token or os.environ.get(GATEWAY_TOKEN_VAR)
        self._kernel_name = kernel_name
        self._kernel_tool_server_host = kernel_tool_server_host
        if require_shell_escape and not approve_shell_cmds:
            raise ValueError(
                "require_shell_escape=True needs approve_shell_cmds=True: it sends programs through "
                "approved shell commands, which are only asked for with approve_shell_cmds."
            )
        for name, value in (
            ("approval_timeout", approval_timeout),
            ("connect_timeout", connect_timeout),
            ("kernel_init_timeout", kernel_init_timeout),
            ("tool_timeout", tool_timeout),
        ):
            _check_timeout(name, value)
        self.approve_tool_calls = approve_tool_calls
        self.approve_shell_cmds = approve_shell_cmds
        self.require_shell_escape = require_shell_escape
        self._kernel_init_timeout = kernel_init_timeout
        self._restore_working_dir = working_dir is not None
        self.working_dir = (working_dir or Path.cwd()).resolve()
        self.images_dir = images_dir or self.working_dir / "images"
        self._tool_server_host = tool_server_host
        self._tool_server_port = tool_server_port
        self._kernel_env = dict(kernel_env or {})
        self._allow_env = None if allow_env is None else tuple(allow_env)
        self._placeholder_env = placeholder_env
        self._approval_timeout = approval_timeout
        self._connect_timeout = connect_timeout
        self._sandbox = sandbox
        self._sandbox_config = sandbox_config
        self._spare_kernel = spare_kernel
        self.audit_log = audit_log
        self.limits = limits or ResourceLimits()
        self._tool_timeout = tool_timeout
        self._runtime_dir: Path | None = None
        self._tool_server: ToolServer | None = None
        self._kernels: KernelSupervisor | None = None
        self._lock = asyncio.Lock()
        self._cancel: asyncio.Event | None = None  # set by cancel() while an execution runs
        logging.getLogger("ipybox").setLevel(log_level)

    async def __aenter__(self) -> CodeExecutor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def tool_server(self) -> ToolServer:
        if self._tool_server is None:
            raise _not_started()
        return self._tool_server

    async def start(self) -> None:
        """Start the tool server and the kernel."""
        if self._kernels is not None:
            raise RuntimeError("CodeExecutor is already started")
        try:
            await self._start()
        except BaseException:
            await _finish(self._stop())
            raise

    async def _start(self) -> None:
        if self._sandbox:  # fail on a missing tool or a bad config before anything starts
            check_sandbox(self._sandbox_config)
        self._runtime_dir = _runtime_dir()
        kernels_dir = self._runtime_dir / "kernels"  # the only part of it a sandboxed kernel may write
        kernels_dir.mkdir()
        command_prefix: list[str] = []
        socket_path = self._runtime_dir / "tools.sock"
        if self._sandbox:
            protected = [self.audit_log] if self.audit_log is not None else []
            command_prefix = sandbox_command(
                self._sandbox_config,
                self._runtime_dir / "sandbox.json",
                kernels_dir,
                self.working_dir,
                protected,
                reachable=[socket_path],
                readable=import_paths(self._kernel_env),
            )
        remote = self.kernel_gateway_url is not None
        self._tool_server = ToolServer(
            host=self._tool_server_host,
            port=0 if remote and self._tool_server_port is None else self._tool_server_port,
            approval_required=True,
            approval_timeout=self._approval_timeout,
            connect_timeout=self._connect_timeout,
            path=socket_path,
            audit_log=self.audit_log,
            call_timeout=self._tool_timeout,
            workspace=self.working_dir,
            module_dirs=[] if remote else registry.module_dirs(self._kernel_env, self.working_dir),
            allow_env=self._allow_env,
            placeholder_env=self._placeholder_env,
        )
        await self._tool_server.start()
        if remote:
            self._kernels = self._gateway_supervisor(self._tool_server)
            await self._kernels.start()
            return
        env = kernel_environment(_QUIET_TERMINAL | self._kernel_env) | {ENDPOINT_VAR: str(socket_path)}
        if self._restore_working_dir:
            env[WORKING_DIR_VAR] = str(self.working_dir)
        if self.approve_shell_cmds:
            env[APPROVE_SHELL_VAR] = "1"
        if self.require_shell_escape:
            env[REQUIRE_SHELL_ESCAPE_VAR] = "1"
        if self._sandbox:  # temp, cache and IPython dirs in the kernel's private dir
            env = sandboxed_environment(env, kernels_dir)
        self._kernels = KernelSupervisor(
            kernels_dir,
            self.working_dir,
            env,
            command_prefix=command_prefix,
            limits=self.limits,
            spare=self._spare_kernel,
            start_timeout=self._kernel_init_timeout,
        )
        await self._kernels.start()

    def _gateway_supervisor(self, server: ToolServer) -> KernelSupervisor:
        """Kernels on the gateway, set up to call tools over TCP with this executor's secret."""
        assert self.kernel_gateway_url is not None and server.port is not None
        host = self._kernel_tool_server_host or self._tool_server_host
        if host in ("0.0.0.0", "::", ""):  # a wildcard is where it listens, not how to reach it
            host = socket.getfqdn()
        host = f"[{host}]" if ":" in host else host
        env = _QUIET_TERMINAL | self._kernel_env
        env |= {ENDPOINT_VAR: f"tcp://{host}:{server.port}", TOKEN_VAR: server.token}
        if self.approve_shell_cmds:
            env[APPROVE_SHELL_VAR] = "1"
        if self.require_shell_escape:
            env[REQUIRE_SHELL_ESCAPE_VAR] = "1"
        config = GatewayConfig(
            self.kernel_gateway_url,
            token=self._gateway_token,
            kernel_name=self._kernel_name,
            env={k: v for k, v in self._kernel_env.items() if k.startswith("KERNEL_")},
        )
        setup = setup_code(env, self._restore_working_dir, WORKING_DIR_VAR)
        mirror = DirectoryMirror(self.working_dir / "mcptools")

        def factory() -> KernelLike:
            return GatewayKernel(config, setup, mirror)

        return KernelSupervisor(
            self.working_dir,
            self.working_dir,
            {},
            spare=self._spare_kernel,
            start_timeout=self._kernel_init_timeout,
            factory=factory,
        )

    async def upload(self, local_path: str | os.PathLike[str], remote_path: str) -> None:
        """Copy a local file or directory into the kernel's file system.

        `remote_path` is relative to the kernel's working directory (its start directory on a
        gateway, `working_dir` locally); parents are created, a directory is merged into an
        existing one. Large files go in chunks, so memory stays flat.
        """
        local = Path(local_path).expanduser()
        async with self._lock:
            kernel = self._remote_kernel()
            if kernel is None:
                await transfer.copy_local(
                    local, self.working_dir / Path(remote_path).expanduser(), "target", self.working_dir
                )
            else:
                await transfer.upload(kernel, local, remote_path)

    async def download(self, remote_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a file or directory of the kernel's file system to `local_path` (see `upload`)."""
        local = Path(local_path).expanduser()
        async with self._lock:
            kernel = self._remote_kernel()
            if kernel is None:
                await transfer.copy_local(
                    self.working_dir / Path(remote_path).expanduser(), local, "source", self.working_dir
                )
            else:
                await transfer.download(kernel, remote_path, local)

    def _remote_kernel(self) -> GatewayKernel | None:
        kernel = self._require_kernels().kernel
        return kernel if isinstance(kernel, GatewayKernel) else None

    async def stop(self) -> None:
        """Stop the kernel(s), the tool server and its MCP servers; remove runtime files."""
        await _finish(self._stop())

    async def _stop(self) -> None:
        kernels, self._kernels = self._kernels, None
        server, self._tool_server = self._tool_server, None
        if kernels is not None:
            await kernels.stop()
        if self._runtime_dir is not None:
            release_sandbox(self._runtime_dir)  # its kernels are gone: remove the placeholders
        if server is not None:
            await server.stop()
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
            self._runtime_dir = None

    async def reset(self) -> None:
        """Start over with a fresh kernel and close all MCP servers (they restart on next use).

        Variables, imports and definitions are gone; installed packages and files stay.
        """
        async with self._lock:
            await self._require_kernels().replace()
            await self.tool_server.reset()

    async def execute(self, code: str, timeout: float | None = 120) -> CodeExecutionResult:
        """Run `code`, approving every tool call and shell command it makes, and return its result.

        After `cancel()` the result is empty (`text` None).
        """
        result = CodeExecutionResult(None)
        # Run the generator to its end rather than returning from the loop: it releases the
        # executor right away instead of whenever the abandoned generator gets finalized.
        async for item in self._run(code, timeout, chunks=False, auto_approve=True):
            if isinstance(item, CodeExecutionResult):
                result = item
        return result

    def stream(
        self, code: str, timeout: float | None = 120, chunks: bool = False, *, auto_approve: bool = False
    ) -> AsyncIterator[ApprovalRequest | CodeExecutionChunk | CodeExecutionResult]:
        """Run `code`, yielding approval requests, output chunks (if `chunks`) and the final result.

        With `auto_approve`, tool calls and shell commands run without asking (and no
        `ApprovalRequest` is yielded). Raises `CodeExecutionError` if the code fails, and
        `TimeoutError` if it runs longer than `timeout` seconds (None: no limit); time spent
        waiting for approvals does not count. On a timeout the cell is interrupted and the
        kernel keeps its state. After `cancel()` the stream ends without a result.
        """
        return self._run(code, timeout, chunks, auto_approve)

    async def cancel(self) -> None:
        """Stop the running `execute()` or `stream()`: interrupt the kernel, reject pending
        approvals, and end the call promptly. The kernel keeps its state. Does nothing when
        no execution runs."""
        if self._cancel is not None:
            self._cancel.set()

    async def _run(
        self, code: str, timeout: float | None, chunks: bool, auto_approve: bool
    ) -> AsyncIterator[ApprovalRequest | CodeExecutionChunk | CodeExecutionResult]:
        _check_timeout("timeout", timeout)
        async with self._lock:
            kernels = self._require_kernels()
            queue: asyncio.Queue[Any] = asyncio.Queue()
            output = OutputBuffer(self.limits.output)
            deadline = Deadline(timeout)
            pending: list[ApprovalRequest] = []
            cancel = self._cancel = asyncio.Event()

            def on_event(event: KernelEvent) -> None:
                output.add(event)
                if chunks and event.kind == "stream":
                    queue.put_nowait(CodeExecutionChunk(event.text))

            async def on_approval(request: ApprovalRequest) -> None:
                pending.append(request)
                queue.put_nowait(request)

            approval = self.tool_server.approval
            approval.connect(on_approval)
            approval.auto_approve = auto_approve
            approval.auto_approve_kinds = frozenset() if self.approve_tool_calls else frozenset({"tool"})
            approval.on_wait = lambda waiting: deadline.pause() if waiting else deadline.resume()
            task = asyncio.create_task(kernels.execute(code, on_event, deadline))
            task.add_done_callback(lambda _: queue.put_nowait(_DONE))
            cancelled = asyncio.create_task(cancel.wait())
            cancelled.add_done_callback(lambda _: queue.put_nowait(_CANCELLED))
            stopped = False
            try:
                while (item := await queue.get()) is not _DONE:
                    if item is _CANCELLED:
                        if task.done():  # finished before the cancel: report it as usual
                            continue
                        stopped = True
                        break
                    yield item
                else:
                    reply = task.result()
            except TimeoutError:
                raise TimeoutError(
                    f"Execution exceeded its timeout of {timeout:.2f}s (time spent waiting for approvals "
                    "not counted) and was interrupted; the kernel kept its state."
                ) from None
            except KernelDied as e:
                raise CodeExecutionError(
                    f"{e} Its state (variables, imports) is lost; the next execution runs on a fresh kernel.",
                    output.text(),
                ) from None
            except GatewayError as e:  # no kernel: the gateway is down, or refuses to start one
                raise CodeExecutionError(str(e), output.text()) from None
            finally:
                self._cancel = None
                cancelled.cancel()
                approval.disconnect(on_approval)
                approval.auto_approve = False
                approval.auto_approve_kinds = frozenset()
                approval.on_wait = None
                for request in pending:
                    await request.reject()  # no effect on those already decided
                if not task.done():
                    task.cancel()  # interrupts the cell; the kernel keeps its state
                    with contextlib.suppress(BaseException):
                        await task
            if stopped:
                return
            if reply.error is not None:
                raise CodeExecutionError(reply.error, output.text())
            yield CodeExecutionResult(output.text() or None, self._save_images(output.images))

    def _require_kernels(self) -> KernelSupervisor:
        if self._kernels is None:
            raise _not_started()
        return self._kernels

    def _save_images(self, images: list[bytes]) -> list[Path]:
        paths: list[Path] = []
        for data in images:  # never through a link the kernel planted in its working directory
            path = self.images_dir / f"{uuid.uuid4().hex[:12]}.png"
            _safe_fs.create_file(path, data, self.working_dir)
            paths.append(path)
        return paths


def _not_started() -> RuntimeError:
    return RuntimeError("The executor is not started: use `async with CodeExecutor()` or call start().")


#: ipc socket paths must fit in a unix socket address (108 bytes); ours add ~45 to the runtime dir.
_MAX_RUNTIME_DIR = 60


def _runtime_dir() -> Path:
    """A private directory for sockets and connection files, short enough for socket paths.

    It records the owning process, so that directories left by a killed ipybox are removed
    by the next one.
    """
    path = Path(tempfile.mkdtemp(prefix="ipybox-", dir=runtime_root()))  # hidden from every sandbox
    if len(str(path)) > _MAX_RUNTIME_DIR:
        path.rmdir()  # TMPDIR is too deep for socket paths: fall back to /tmp
        path = Path(tempfile.mkdtemp(prefix="ipybox-", dir=runtime_root(Path("/tmp"))))
    _remove_orphaned_runtime_dirs(path.parent)
    (path / "owner.pid").write_text(str(os.getpid()))
    return path


def _remove_orphaned_runtime_dirs(parent: Path) -> None:
    for candidate in parent.glob("ipybox-*/owner.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(candidate.read_text())
            if candidate.stat().st_uid == os.getuid() and not psutil.pid_exists(pid):
                logger.info("removing %s, left by a process that is gone", candidate.parent)
                shutil.rmtree(candidate.parent, ignore_errors=True)


async def _finish(coro: Coroutine[Any, Any, None]) -> None:
    """Run a cleanup coroutine to the end even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(coro)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise
