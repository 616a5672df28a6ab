"""ipybox as an MCP server: register MCP servers, run code that calls them, install packages, reset."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import os
import shlex
import signal
import threading
import warnings
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from dotenv import dotenv_values
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent

from ipybox._version import __version__
from ipybox.code_exec import CodeExecutionChunk, CodeExecutionError, CodeExecutionResult, CodeExecutor
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.mcp_apigen import generate_mcp_sources
from ipybox.mcp_client.placeholders import PlaceholderError, placeholder_names
from ipybox.mcp_server import packages
from ipybox.mcp_server.output import truncate
from ipybox.tool_exec.audit import AuditLog

logger = logging.getLogger(__name__)

KERNEL_ENV_PREFIX = "KERNEL_ENV_"
#: Characters of a cell's output streamed to the client while it runs.
STREAM_LIMIT = 1_000_000
_STREAM_STOPPED = "[ipybox: live output stopped here; the result keeps the head and tail of the output]"
_LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

INSTRUCTIONS = """\
ipybox runs Python in a stateful IPython kernel (variables persist between calls) in the
workspace directory. Register an MCP server with register_mcp_server to get a typed Python API
for its tools under mcptools/<server_name>/, read a tool module to learn its Params and Result,
then call it from code with execute_ipython_cell: several tool calls, loops and data handling
can go in one cell so intermediate results stay out of your context. Print only what you need."""


@dataclass
class ServerOptions:
    """How the MCP server runs its kernels."""

    workspace: Path
    sandbox: bool = False
    sandbox_config: Path | None = None
    per_session: bool = False  # one kernel per client session (HTTP) instead of one for all
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    audit_log: Path | None = None  # default: WORKSPACE/.ipybox/audit.jsonl
    #: Variables of ipybox's environment that `${VAR}` may name (besides WORKSPACE/.env).
    allow_env: tuple[str, ...] = ()
    #: A kernel gateway to run the kernels on (token: `IPYBOX_KERNEL_GATEWAY_TOKEN`), and how.
    kernel_gateway: str | None = None
    kernel_name: str = "python3"
    tool_server_host: str = "localhost"
    tool_server_port: int | None = None
    kernel_tool_server_host: str | None = None


class Workspace:
    """The workspace's executors: one for stdio, one per client session over HTTP."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.root = options.workspace
        self._executors: dict[int, tuple[weakref.ref[Any], CodeExecutor]] = {}
        self._starting: dict[int, asyncio.Task[CodeExecutor]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    @property
    def mcptools(self) -> Path:
        return self.root / "mcptools"

    @property
    def audit_log(self) -> Path:
        return self.options.audit_log or self.root / ".ipybox" / "audit.jsonl"

    def kernel_env(self) -> dict[str, str]:
        """`KERNEL_ENV_<NAME>` variables (environment and workspace `.env`) as `<NAME>`."""
        values = {k: v for k, v in dotenv_values(self.root / ".env").items() if v is not None}
        values |= os.environ
        return {
            k[len(KERNEL_ENV_PREFIX) :]: v for k, v in values.items() if k.startswith(KERNEL_ENV_PREFIX) and v
        }

    def _new_executor(self) -> CodeExecutor:
        return CodeExecutor(
            kernel_env=self.kernel_env(),
            images_dir=self.root / "images",
            sandbox=self.options.sandbox,
            sandbox_config=self.options.sandbox_config,
            working_dir=self.root,
            audit_log=self.audit_log,
            allow_env=self.options.allow_env,
            limits=self.options.limits,
            log_level=logging.getLevelName(logging.getLogger("ipybox").getEffectiveLevel()),
            kernel_gateway_url=self.options.kernel_gateway,
            kernel_name=self.options.kernel_name,
            tool_server_host=self.options.tool_server_host,
            # one tool server per session over HTTP: a fixed port would fit only the first
            tool_server_port=None if self.options.per_session else self.options.tool_server_port,
            kernel_tool_server_host=self.options.kernel_tool_server_host,
        )

    async def executor(self, session: object) -> CodeExecutor:
        """The executor of a client session, started on first use."""
        key = id(session)
        async with self._lock:
            entry = self._executors.get(key)
            if entry is not None and entry[0]() is session:
                return entry[1]
            self._reap()
            task = self._starting.get(key)
            if task is None:
                task = self._starting[key] = asyncio.create_task(self._start(session))
        # shielded: a caller that gives up does not stop the start, and the started executor
        # is stored by _start either way, so nothing is left running unowned
        return await asyncio.shield(task)

    def release(self, session: object) -> None:
        """Stop the executor of a client session that has ended."""
        entry = self._executors.get(id(session))
        if entry is not None and entry[0]() is session:
            del self._executors[id(session)]
            self._stop_later(entry[1])

    def _stop_later(self, executor: CodeExecutor) -> None:
        task = asyncio.create_task(executor.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _start(self, session: object) -> CodeExecutor:
        key = id(session)
        try:
            executor = self._new_executor()
            await executor.start()
            self._executors[key] = (weakref.ref(session), executor)
            stack = getattr(session, "exit_stack", None)  # a client connection: stop its kernel on close
            if isinstance(stack, contextlib.AsyncExitStack):
                stack.callback(self.release, session)
            return executor
        finally:
            self._starting.pop(key, None)

    def prewarm(self, session: object) -> None:
        """Start the first executor early, so the first call does not wait for a kernel."""
        self._starting[id(session)] = asyncio.create_task(self._start(session))

    def _reap(self) -> None:
        """Stop executors whose client session has gone away."""
        for key, (ref, executor) in list(self._executors.items()):
            if ref() is None:
                del self._executors[key]
                self._stop_later(executor)

    def executors(self) -> list[CodeExecutor]:
        return [executor for _, executor in self._executors.values()]

    async def close(self) -> None:
        starting = list(self._starting.values())
        for task in starting:
            task.cancel()  # CodeExecutor.start() cleans up after itself when cancelled
        await asyncio.gather(*starting, return_exceptions=True)
        executors = self.executors()
        self._executors.clear()
        await asyncio.gather(*(e.stop() for e in executors), *self._stopping, return_exceptions=True)


def create_server(options: ServerOptions) -> MCPServer[Any]:
    """Build the ipybox MCP server for a workspace."""
    workspace = Workspace(options)
    stdio_session = _SharedSession()  # without per-session kernels, every call uses this key

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        if not options.per_session:
            workspace.prewarm(stdio_session)
            _close_on_signals(workspace)
        try:
            yield
        finally:
            await workspace.close()

    server: MCPServer[Any] = MCPServer(
        name="ipybox",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level=cast(_LogLevel, logging.getLevelName(logging.getLogger("ipybox").getEffectiveLevel())),
    )

    def session_of(ctx: Context[Any, Any]) -> object:
        if not options.per_session:
            return stdio_session
        # The SDK builds a new ServerSession for every request; the client's connection is what
        # lives as long as its (HTTP) session, so it keys the kernel.
        return getattr(ctx.session, "_connection", None) or ctx.session

    @server.tool()
    async def register_mcp_server(server_name: str, server_params: dict[str, Any]) -> str:
        """Connect to an MCP server and generate a typed Python API for its tools.

        Writes one module per tool to mcptools/<server_name>/<tool>.py in the workspace; each
        has a pydantic `Params` model, a `Result` model (or `str` output) and `run(params)`.
        Import it in execute_ipython_cell, e.g.
        `from mcptools.<server_name>.<tool> import Params, run`. Read a module's source to
        see its exact parameters before calling it. Registering again regenerates the API.

        server_name: a valid Python identifier, e.g. "github".
        server_params: {"command": ..., "args": [...], "env": {...}} for a local (stdio)
        server, or {"url": ..., "headers": {...}} for an HTTP server. Write secrets as
        "${VAR}" in args, env values or header values (never in a URL or the command); they
        are filled from the workspace .env file and the variables the user allowed.

        Returns the generated tool modules, each with a one-line summary, then any tools whose
        malformed definitions were repaired (what was assumed) or skipped (why).
        """
        try:
            modules = await generate_mcp_sources(
                server_name,
                server_params,
                workspace.mcptools,
                workspace=workspace.root,
                allow_env=options.allow_env,
            )
        except ValueError as e:  # bad name or parameters, or a refused ${VAR}: nothing was started
            _audit_refusal(workspace.audit_log, server_name, server_params, e)
            raise ToolError(str(e)) from None
        except ConnectionError as e:
            raise ToolError(str(e)) from None
        for executor in workspace.executors():  # code importing the old API sees the new one
            with contextlib.suppress(Exception):
                await executor.execute(_forget_modules(server_name), timeout=10)
        lines = [f"Generated {len(modules)} tool modules in mcptools/{server_name}/:"]
        lines += [f"- {m}: {_summary(workspace.mcptools / server_name / f'{m}.py')}" for m in modules]
        if modules.repaired:
            lines.append(f"Repaired {len(modules.repaired)} malformed tool definitions:")
            lines += [f"- {name}: {what}" for name, what in modules.repaired.items()]
        if modules.skipped:
            lines.append(f"Skipped {len(modules.skipped)} tools (no module generated):")
            lines += [f"- {name}: {why}" for name, why in modules.skipped.items()]
        return "\n".join(lines)

    @server.tool()
    async def execute_ipython_cell(
        code: str, ctx: Context[Any, Any], timeout: float = 120, max_output_chars: int = 5000
    ) -> list[TextContent | ImageContent]:
        """Run Python code in the workspace's stateful IPython kernel and return its output.

        Variables, imports and definitions persist between calls. Code can call the tools of
        registered MCP servers through mcptools.<server_name>.<tool>.run(...); those calls are
        approved automatically. Top-level `await` works, and so do shell escapes like `!ls`.
        Print what you need to see: output beyond max_output_chars keeps its head and tail and
        the full text is saved to a file in the workspace whose path is given. Plots
        (matplotlib plt.show()) come back as images. A cell running longer than `timeout`
        seconds is interrupted; the kernel keeps its state. If the kernel dies (e.g. out of
        memory), the error says so and the next call gets a fresh kernel.
        """
        if not code.strip():
            raise ToolError("code is empty: pass the Python source to run.")
        if not timeout > 0:
            raise ToolError(f"timeout must be a positive number of seconds, got {timeout!r}.")
        if max_output_chars < 1:
            raise ToolError(f"max_output_chars must be at least 1, got {max_output_chars!r}.")
        executor = await workspace.executor(session_of(ctx))
        spill = workspace.root / ".ipybox" / "outputs"
        result: CodeExecutionResult | None = None
        chunks = streamed = 0
        try:
            async for item in executor.stream(code, timeout=timeout, chunks=True, auto_approve=True):
                if isinstance(item, CodeExecutionChunk):
                    if streamed < STREAM_LIMIT:  # the live view of a flood stops; the result keeps its ends
                        chunks += 1
                        text = item.text[: STREAM_LIMIT - streamed]
                        streamed += len(item.text)
                        if streamed >= STREAM_LIMIT:
                            text += f"\n{_STREAM_STOPPED}"
                        await _stream_to_client(ctx, text, chunks)
                elif isinstance(item, CodeExecutionResult):
                    result = item
        except CodeExecutionError as e:
            output = f"{e.output}\n\n" if e.output else ""
            raise ToolError(truncate(f"{output}{e}", max_output_chars, spill)) from None
        except TimeoutError as e:
            raise ToolError(str(e)) from None
        assert result is not None
        content: list[TextContent | ImageContent] = []
        text = truncate(result.text or "", max_output_chars, spill)
        if result.images:
            text += "\n" if text else ""
            text += "\n".join(f"[image saved to {path}]" for path in result.images)
        content.append(TextContent(type="text", text=text or "(no output)"))
        content += [Image(path=path).to_image_content() for path in result.images]
        return content

    @server.tool()
    async def install_package(package_name: str, ctx: Context[Any, Any]) -> str:
        """Install a Python package into the kernel's environment with pip.

        Accepts a requirement such as "requests", "numpy>=1.26" or "git+https://…". The
        install runs outside the kernel (and its sandbox), so it works without network access
        from code. Import the package in execute_ipython_cell afterwards.
        """
        try:
            spec = packages.check_requirement(package_name)
        except packages.RequirementError as e:
            raise ToolError(str(e)) from None
        if options.kernel_gateway is not None:  # the kernel's environment is on the gateway's side
            executor = await workspace.executor(session_of(ctx))
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

    @server.tool()
    async def reset(ctx: Context[Any, Any]) -> str:
        """Start a fresh kernel: all variables, imports and definitions are cleared.

        Installed packages, files and the generated mcptools/ stay. Use it when the kernel's
        state is confused or after changing the code of an imported module.
        """
        executor = await workspace.executor(session_of(ctx))
        await executor.reset()
        return "The kernel was reset: a fresh namespace is ready."

    return server


def _audit_refusal(log: Path, server_name: str, server_params: Any, error: ValueError) -> None:
    """Record a refused registration: the rule and the variables it names, never their values."""
    if isinstance(error, PlaceholderError):
        variables, rule = error.variables, error.rule
    else:
        variables, rule = sorted(placeholder_names(server_params)), "params"
    try:
        AuditLog(log).refused_registration(
            server_name=str(server_name), error=str(error), variables=variables, rule=rule
        )
    except OSError as e:
        logger.error("cannot write the audit log %s: %s", log, e)


async def _stream_to_client(ctx: Context[Any, Any], text: str, progress: int) -> None:
    """Forward a chunk of output while the cell runs: as progress (if the client asked for it) and log.

    `progress` counts the chunks: the protocol requires it to increase with every notification.
    """
    with contextlib.suppress(Exception):
        await ctx.report_progress(progress, message=text)
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging notifications are deprecated in newer protocol versions
        await ctx.log("info", text, logger_name="ipybox.output")


def _close_on_signals(workspace: Workspace) -> None:
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
            await asyncio.wait_for(workspace.close(), 10)
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


class _SharedSession:
    """Stands for the single client of a server without per-session kernels."""


def _forget_modules(server_name: str) -> str:
    return (
        "import sys as _s, importlib as _i\n"
        f"[_s.modules.pop(_k) for _k in list(_s.modules) if _k == 'mcptools.{server_name}' "
        f"or _k.startswith('mcptools.{server_name}.')]\n"
        "_i.invalidate_caches(); del _s, _i"
    )


def _summary(module: Path) -> str:
    """The first line of a generated module's docstring (the tool's description)."""
    with contextlib.suppress(OSError, SyntaxError):
        doc = ast.get_docstring(ast.parse(module.read_text())) or ""
        return doc.strip().splitlines()[0][:200] if doc.strip() else "(no description)"
    return "(no description)"
