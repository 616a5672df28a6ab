"""`CodeExecutor`: runs code in a kernel, with its tool calls approved by the application."""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ipybox._service import Service
from ipybox.kernel_mgr.backend import KernelBackend, KernelSettings, ToolEndpoint
from ipybox.kernel_mgr.cell import (
    Cell,
    CellOutput,
    CodeExecutionChunk,
    CodeExecutionError,
    CodeExecutionResult,
    StreamItem,
    check_timeout,
    save_images,
)
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.shipped import backend_for
from ipybox.kernel_mgr.supervisor import KernelSupervisor, SpareKernels
from ipybox.tool_exec.server import ToolServer

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ipybox.notebook import SessionRecord
    from ipybox.notebook.replay import ResumeReport

__all__ = ["CodeExecutionChunk", "CodeExecutionError", "CodeExecutionResult", "CodeExecutor"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: What a path argument may be: `Path`, `str` or any other `os.PathLike`.
StrPath = str | os.PathLike[str]


def _path(value: StrPath | None) -> Path | None:
    return None if value is None else Path(value)


class CodeExecutor(Service):
    """Executes Python code in a stateful IPython kernel whose MCP tool calls need approval.

    The kernel runs in a subprocess (optionally sandboxed) with the caller's working directory and only the
    environment given in `kernel_env`. Its tool calls go to an embedded `ToolServer` over a unix socket;
    `stream()` yields an `ApprovalRequest` for each one (unless `approve_tool_calls` is False), `execute()`
    approves them all. `sandbox_gpus` ("all", "0,1" or [0, 1]) lets a sandboxed kernel use those NVIDIA GPUs.

    With `approve_shell_cmds`, each `!cmd` (`tool_name` "shell") and `%%bash`/`%%sh` cell ("shell_magic") also
    waits for approval (`tool_args == {"cmd": ...}`); with `require_shell_escape` as well, starting programs
    from Python (`subprocess`, `os.system`, ...) raises. With `working_dir`, the kernel starts there and a
    cell that changes directory is moved back after it ends; without, it starts in the current directory and
    a change persists. `approval_timeout=None` waits for ever. A warm spare kernel makes `reset()` a swap
    (`spare_kernel`; a `SpareKernels` bounds the spares of several executors together).

    Tool servers start only MCP servers registered for `working_dir` or (local kernels) for a directory on
    `kernel_env`'s `PYTHONPATH`; their `${VAR}` placeholders take values from `working_dir/.env` and the
    environment (only `allow_env`'s names, if given), or from `placeholder_env` alone (docs/tool-calls.md).
    `state_dirs` below `working_dir` (the application's own records) are made before a sandboxed kernel
    starts, read-only to it. Cells go to `record` (a `SessionRecord`, an earlier executor's say) or a new one.

    Kernels live where `backend` puts them (a `KernelBackend`, docs/architecture.md): in a local subprocess,
    or, with `kernel_gateway_url` (or `_host` and `_port`), on that Jupyter Kernel or Enterprise Gateway
    (kernelspec `kernel_name`, token `kernel_gateway_token`, default: `IPYBOX_KERNEL_GATEWAY_TOKEN`), calling
    tools over TCP at `tool_server_host:tool_server_port` (default: any free port) as reached from
    `kernel_tool_server_host`, with a per-executor secret (docs/remote-kernels.md). With `tool_server_port`,
    a local executor's tool server also listens on TCP for its `token`.
    """

    def __init__(
        self,
        tool_server_host: str = "localhost",
        tool_server_port: int | None = None,
        kernel_gateway_host: str = "localhost",
        kernel_gateway_port: int | None = None,
        kernel_env: dict[str, str] | None = None,
        images_dir: StrPath | None = None,
        approval_timeout: float | None = 60,
        connect_timeout: float = 30,
        sandbox: bool = False,
        sandbox_config: StrPath | None = None,
        log_level: str | None = None,
        *,
        sandbox_gpus: str | Sequence[int] | None = None,
        approve_tool_calls: bool = True,
        approve_shell_cmds: bool = False,
        require_shell_escape: bool = False,
        kernel_init_timeout: float = 30,
        spare_kernel: bool | SpareKernels = True,
        working_dir: StrPath | None = None,
        audit_log: StrPath | None = None,
        limits: ResourceLimits | None = None,
        tool_timeout: float | None = None,
        allow_env: Iterable[str] | None = None,
        placeholder_env: Mapping[str, str] | None = None,
        kernel_gateway_url: str | None = None,
        kernel_gateway_token: str | None = None,
        kernel_name: str = "python3",
        kernel_tool_server_host: str | None = None,
        backend: KernelBackend | None = None,
        state_dirs: Iterable[StrPath] = (),
        record: SessionRecord | None = None,
    ) -> None:
        working_dir, images_dir, sandbox_config, audit_log = map(
            _path, (working_dir, images_dir, sandbox_config, audit_log)
        )
        self.limits = limits or ResourceLimits()
        self.backend = backend or backend_for(
            gateway_url=kernel_gateway_url,
            gateway_host=kernel_gateway_host,
            gateway_port=kernel_gateway_port,
            gateway_token=kernel_gateway_token,
            kernel_name=kernel_name,
            tool_host=tool_server_host,
            kernel_tool_host=kernel_tool_server_host,
            sandbox=sandbox,
            sandbox_config=sandbox_config,
            limits=self.limits,
            sandbox_gpus=sandbox_gpus,
        )
        _check_options(
            require_shell_escape and not approve_shell_cmds,
            approval_timeout=approval_timeout,
            connect_timeout=connect_timeout,
            kernel_init_timeout=kernel_init_timeout,
            tool_timeout=tool_timeout,
        )
        self.approve_tool_calls = approve_tool_calls
        self.approve_shell_cmds = approve_shell_cmds
        self.require_shell_escape = require_shell_escape
        self.working_dir = (working_dir or Path.cwd()).resolve()
        self.images_dir = images_dir or self.working_dir / "images"
        self.audit_log = audit_log
        self._settings = KernelSettings(
            self.working_dir,
            dict(kernel_env or {}),
            restore_working_dir=working_dir is not None,
            approve_shell_cmds=approve_shell_cmds,
            require_shell_escape=require_shell_escape,
            audit_log=audit_log,
            state_dirs=tuple(Path(p) for p in state_dirs),
        )
        self._kernel_init_timeout = kernel_init_timeout
        self._spare_kernel = spare_kernel
        self._tool_server_port = tool_server_port
        self._tool_server_options: dict[str, Any] = {
            "host": tool_server_host,
            "approval_required": True,
            "approval_timeout": approval_timeout,
            "connect_timeout": connect_timeout,
            "audit_log": audit_log,
            "call_timeout": tool_timeout,
            "workspace": self.working_dir,
            "allow_env": None if allow_env is None else tuple(allow_env),
            "placeholder_env": placeholder_env,
            "max_connections": self.limits.tool_connections,
            "max_buffered": self.limits.tool_buffer,
        }
        self._tool_server: ToolServer | None = None
        self._kernels: KernelSupervisor | None = None
        self._record = record  # the session's, from the first start on
        self._lock = asyncio.Lock()
        #: The cells started or starting, for cancel(); a cell leaves when it ends.
        self._cells: weakref.WeakSet[Cell] = weakref.WeakSet()
        if log_level is not None:  # a library leaves logging alone unless asked
            logging.getLogger("ipybox").setLevel(log_level)

    @property
    def tool_server(self) -> ToolServer:
        return _started(self._tool_server)

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
        listener = await self.backend.prepare(self._settings, self._tool_server_port)
        self._tool_server = ToolServer(**listener.server_options(), **self._tool_server_options)
        await self._tool_server.start()
        assert self._tool_server.path is not None
        endpoint = ToolEndpoint(self._tool_server.path, self._tool_server.port, self._tool_server.token)
        self._kernels = KernelSupervisor(
            self.backend.kernel_factory(endpoint),
            spare=self._spare_kernel,
            start_timeout=self._kernel_init_timeout,
            record=self._record,
        )
        self._record = self._kernels.record
        await self._kernels.start()

    async def upload(self, local_path: str | os.PathLike[str], remote_path: str) -> None:
        """Copy a local file or directory into the kernel's file system.

        `remote_path` is relative to the kernel's working directory (its start directory on a
        gateway, `working_dir` locally); parents are created, a directory is merged into an
        existing one. Large files go in chunks, so memory stays flat.
        """
        async with self._lock:
            await self.backend.upload(
                _started(self._kernels).kernel, Path(local_path).expanduser(), remote_path
            )

    async def download(self, remote_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a file or directory of the kernel's file system to `local_path` (see `upload`)."""
        async with self._lock:
            await self.backend.download(
                _started(self._kernels).kernel, remote_path, Path(local_path).expanduser()
            )

    async def stop(self) -> None:
        """Stop the kernel(s), the tool server and its MCP servers; remove runtime files."""
        await _finish(self._stop())

    async def _stop(self) -> None:
        kernels, self._kernels = self._kernels, None
        server, self._tool_server = self._tool_server, None
        if kernels is not None:
            await kernels.stop()
        if server is not None:
            await server.stop()
        await self.backend.close()

    async def reset(self) -> None:
        """Start over with a fresh kernel and close all MCP servers (they restart on next use).

        Variables, imports and definitions are gone; installed packages and files stay.
        """
        async with self._lock:
            await _started(self._kernels).reset()
            await self.tool_server.reset()

    def execute(self, code: str, timeout: float | None = 120) -> Coroutine[Any, Any, CodeExecutionResult]:
        """Run `code`, approving every tool call and shell command it makes, and return its result.

        After `cancel()` the result is empty (`text` None).
        """
        return _last_result(self._run(code, timeout, chunks=False, auto_approve=True))

    def stream(
        self, code: str, timeout: float | None = 120, chunks: bool = False, *, auto_approve: bool = False
    ) -> AsyncIterator[StreamItem]:
        """Run `code`, yielding approval requests, output chunks (if `chunks`) and the final result.

        With `auto_approve`, tool calls and shell commands run without asking (and no
        `ApprovalRequest` is yielded). Raises `CodeExecutionError` if the code fails, and
        `TimeoutError` if it runs longer than `timeout` seconds (None: no limit); time spent
        waiting for approvals does not count. On a timeout the cell is interrupted and the
        kernel keeps its state. After `cancel()` the stream ends without a result.
        """
        return self._run(code, timeout, chunks, auto_approve)

    async def cancel(self) -> None:
        """Stop the running `execute()` or `stream()`, and those already called but still starting
        (waiting for the executor, say): interrupt the kernel, reject pending approvals, and end
        them promptly without a result. The kernel keeps its state. Does nothing when none runs."""
        for cell in list(self._cells):
            cell.cancel()

    def _run(
        self, code: str, timeout: float | None, chunks: bool, auto_approve: bool
    ) -> AsyncIterator[StreamItem]:
        check_timeout("timeout", timeout)
        # Registered now, not when the caller first iterates: a cancel() from then on is never lost.
        cell = Cell(code, timeout, chunks, auto_approve, self.approve_tool_calls, self.limits)
        self._cells.add(cell)
        return self._run_cell(cell)

    async def _run_cell(self, cell: Cell) -> AsyncIterator[StreamItem]:
        try:
            async with self._lock:
                kernels = _started(self._kernels)
                async for item in cell.run(kernels, self.tool_server):
                    if isinstance(item, CellOutput):
                        yield _result(item, self.images_dir, self.working_dir)
                    else:
                        yield item
        finally:
            self._cells.discard(cell)

    def notebook(self) -> NotebookNode:
        """The session so far as a Jupyter notebook (nbformat v4), see docs/notebooks.md."""
        return _started(self._record).to_notebook()

    def save_notebook(self, path: StrPath) -> None:
        """Write `notebook()` to `path` atomically; below `working_dir` no link is followed."""
        _started(self._record).save(path, trusted=self.working_dir)

    async def resume(self, path: StrPath) -> ResumeReport:
        """Rebuild the state of the session saved at `path` by running its cells again, each tool
        call answered from the notebook, not made or asked again (docs/notebooks.md)."""
        from ipybox.notebook import replay  # on use, as it reads notebooks (nbformat is slow to import)

        return await replay.resume(self, path, into=self._record)


def _check_options(shell_escape_alone: bool, **timeouts: float | None) -> None:
    if shell_escape_alone:
        raise ValueError(
            "require_shell_escape=True needs approve_shell_cmds=True: it sends programs through "
            "approved shell commands, which are only asked for with approve_shell_cmds."
        )
    for name, value in timeouts.items():
        check_timeout(name, value)


def _result(output: CellOutput, images_dir: Path, workspace: Path) -> CodeExecutionResult:
    """The cell's result with its images saved; one that cannot be saved (the directory unwritable,
    or replaced by a link that ipybox does not follow) is said in the text, which is kept."""
    try:
        paths = save_images(output.images, images_dir, workspace)
    except OSError as e:
        logger.warning("the images of a cell were not saved: %s", e)
        note = f"[ipybox: {len(output.images)} image(s) displayed by the cell could not be saved: {e}]"
        return CodeExecutionResult(f"{output.text}\n{note}" if output.text else note, [], output.images)
    return CodeExecutionResult(output.text, paths, output.images)


def _started(value: _T | None) -> _T:
    """`value`, a part the executor makes at its start; `RuntimeError` while not started."""
    if value is None:
        raise _not_started()
    return value


def _not_started() -> RuntimeError:
    return RuntimeError("The executor is not started: use `async with CodeExecutor()` or call start().")


async def _last_result(run: AsyncIterator[StreamItem]) -> CodeExecutionResult:
    result = CodeExecutionResult(None)
    # Run the generator to its end rather than returning from the loop: it releases the
    # executor right away instead of whenever the abandoned generator gets finalized.
    async for item in run:
        if isinstance(item, CodeExecutionResult):
            result = item
    return result


async def _finish(coro: Coroutine[Any, Any, None]) -> None:
    """Run a cleanup coroutine to the end even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(coro)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise
