"""The tool server: runs MCP tool calls for kernel code, each after the application approves it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any

from ipybox._service import Service
from ipybox.mcp_client import placeholders
from ipybox.mcp_client.placeholders import PlaceholderError, Placeholders
from ipybox.tool_exec import registry
from ipybox.tool_exec.approval import display
from ipybox.tool_exec.approval.server import ApprovalChannel
from ipybox.tool_exec.approval_clients import serve_approval_client
from ipybox.tool_exec.audit import AuditLog
from ipybox.tool_exec.calls import LiveCalls, ToolCallEvent, ToolCalls, encode_result
from ipybox.tool_exec.connections import ConnectionPool, ToolCallError
from ipybox.tool_exec.listener import Listener

logger = logging.getLogger(__name__)

__all__ = ["SHELL_KINDS", "SHELL_SERVER", "ToolServer", "encode_result"]

#: The server name of shell-command approvals, and their tool names.
SHELL_SERVER = "ipybox"
SHELL_KINDS = ("shell", "shell_magic")
_REJECTED = "rejected by the application"  # unless the rejection says why
_CANCELLED = "cancelled: its caller stopped waiting (the cell was interrupted or the tool server stopped)"
#: Seconds a registration found in the registry is taken as still there without reading the file
#: again: its two stat calls took about 20 µs of each call. A registration removed by hand
#: stops calls within this time; a new one counts at once (a server not found is looked up anew).
_RECHECK_S = 1.0


class ToolServer(Service):
    """Executes MCP tools on behalf of kernel code, outside the kernel and its sandbox.

    It listens on a unix socket (`path`) and/or TCP (`host`, `port`) for one-line JSON
    requests. Tool calls and shell approvals over TCP must carry `token` (default: a fresh
    random secret, `ToolServer.token`), which `ToolRunner` sends from its `token` argument or
    the kernel's `IPYBOX_TOOL_SERVER_TOKEN`; the unix socket is private to its owner.
    MCP servers start on their first call and stay connected until `reset()`
    or `stop()`. Only servers registered by the application for `workspace` (default: the
    current directory) or for one of `module_dirs` (the directories the application puts on its
    kernels' `PYTHONPATH`), by `generate_mcp_sources` or the `servers` argument, are ever
    started, whatever parameters a request carries.

    `${VAR}` placeholders take values from `workspace/.env` and the environment (all of it by
    default, only the names in `allow_env` if given), or exactly from `placeholder_env`; they
    are filled only where `ipybox.mcp_client.placeholders.resolve` allows.

    What it holds for its kernel is bounded: `max_connections` open connections and
    `max_buffered` bytes of requests at once (the `tool_connections` and `tool_buffer` of
    `ResourceLimits`; None: no limit). Pending approvals are bounded with them, as each connection
    has at most one call running.
    """

    def __init__(
        self,
        host: str = "localhost",
        port: int | None = 8900,
        approval_required: bool = False,
        approval_timeout: float | None = 60,
        connect_timeout: float = 30,
        log_to_stderr: bool = False,
        log_level: str = "INFO",
        *,
        path: str | Path | None = None,
        servers: Mapping[str, Mapping[str, Any]] | None = None,
        call_timeout: float | None = None,
        audit_log: Path | None = None,
        module_dirs: Iterable[Path] = (),
        workspace: Path | None = None,
        allow_env: Iterable[str] | None = None,
        placeholder_env: Mapping[str, str] | None = None,
        token: str | None = None,
        max_connections: int | None = 64,
        max_buffered: int | None = 128 << 20,
    ) -> None:
        self.host, self.port = host, port
        self.token = token or secrets.token_urlsafe(32)
        self.workspace = (workspace or Path.cwd()).resolve()
        self.module_dirs = tuple(d.resolve() for d in map(Path, module_dirs) if d.resolve() != self.workspace)
        self.placeholders = Placeholders.of(self.workspace, allow_env, placeholder_env)
        self.path = Path(path) if path else None
        self.approval = ApprovalChannel(approval_required, approval_timeout)
        self.approval_token = secrets.token_urlsafe(32)
        trusted = Path(workspace or Path.cwd())
        self.audit = AuditLog(audit_log, trusted=trusted, keep_open=True) if audit_log is not None else None
        self._servers = {name: dict(params) for name, params in (servers or {}).items()}
        self._confirmed: dict[tuple[str, str], float] = {}  # (name, params) -> when found registered
        self._pool = ConnectionPool(connect_timeout, call_timeout)
        #: How allowed calls are decided and made (the seam a resume replaces, see `ToolCalls`).
        self.calls: ToolCalls = LiveCalls(self.approval, self._pool)
        #: Called with each settled call (`ToolCallEvent`), in the order they settle: those there
        #: when the call came (a cell's recorder gets the calls that came while it ran, also those
        #: that end after it; the next cell's recorder does not).
        self.observers: list[Callable[[ToolCallEvent], None]] = []
        self._listener = Listener(
            self._dispatch,
            self._serve_approvals,
            self.token,
            max_connections=max_connections,
            max_buffered=max_buffered,
        )
        self._stopped = asyncio.Event()
        if log_to_stderr:  # a standalone server; embedded in an application, logging is the app's
            logging.basicConfig(handlers=[display.log_handler()])
            logging.getLogger("ipybox.tool_exec").setLevel(log_level)

    async def start(self) -> None:
        """Start listening. Raises `RuntimeError` if already running."""
        if self._listener.listening:
            raise RuntimeError("ToolServer is already running")
        self._stopped.clear()
        try:
            if self.path is not None:
                await self._listener.listen_unix(self.path)
            if self.port is not None:
                self.port = await self._listener.listen_tcp(self.host, self.port)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop listening and close every MCP server this server started."""
        await self._listener.close()
        await self._pool.close()
        if self.audit is not None:
            self.audit.close()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self._stopped.set()

    async def join(self) -> None:
        """Wait until the server is stopped."""
        await self._stopped.wait()

    async def reset(self) -> None:
        """Close all started MCP servers; they restart on their next call."""
        await self._pool.close()

    def allows(
        self, server_name: str, server_params: Mapping[str, Any], canonical: str | None = None
    ) -> bool:
        """Whether the application registered this server with exactly these parameters here
        (`canonical`: the parameters in `registry.canonical` form, if the caller has them)."""
        if server_name == SHELL_SERVER:  # reserved: its requests would look like shell approvals
            return False
        if server_name in self._servers:
            return self._servers[server_name] == dict(server_params)
        canonical = canonical or registry.canonical(server_params)
        key, now = (server_name, canonical), time.monotonic()
        if now - self._confirmed.get(key, -_RECHECK_S) < _RECHECK_S:
            return True
        if registry.is_registered_in(server_name, canonical, (self.workspace, *self.module_dirs)):
            self._confirmed[key] = now
            return True
        self._confirmed.pop(key, None)
        return False

    def _unregistered(self, server_name: str) -> str:
        places = f"workspace {self.workspace}"
        if self.module_dirs:
            places += " or in " + ", ".join(map(str, self.module_dirs)) + " (the kernel's PYTHONPATH)"
        return (
            f"MCP server {server_name!r} is not registered with these parameters in {places}, so it "
            "will not be started. The application registers servers with generate_mcp_sources()."
        )

    async def run(
        self, server_name: str, server_params: Mapping[str, Any], tool_name: str, tool_args: dict[str, Any]
    ) -> dict[str, Any]:
        """Approve and execute one tool call; returns the encoded result or raises `ToolCallError`.

        Every call, refused or not, is written to the audit log if there is one, and reported to
        the `observers` there were when it came.
        """
        observers = tuple(self.observers)
        record = {
            "server_name": server_name,
            "tool_name": tool_name,
            "tool_args": tool_args,
            "started": time.time(),
        }
        call = f"{server_name}.{tool_name}"
        decision, by = "refused", None
        secrets: set[str] = set()
        refusal: dict[str, Any] = {}  # the variables and rule of a refused placeholder
        try:
            if not isinstance(server_params, Mapping):
                raise ToolCallError(self._unregistered(server_name))
            canonical = registry.canonical(server_params)
            if not self.allows(server_name, server_params, canonical):
                raise ToolCallError(self._unregistered(server_name))
            # the environment is read only for parameters with placeholders (most have none; JSON
            # never escapes "$" or "{", so the canonical form holds every "${" the params hold)
            env: dict[str, str] = {}
            if "${" in canonical and (names := placeholders.placeholder_names(server_params)):
                env = self.placeholders.values()
                secrets = {env[name] for name in names if name in env}
                if self.audit is not None:
                    self.audit.add_secrets(secrets)
                try:  # before anyone is asked: a server that may not start needs no approval
                    placeholders.resolve(server_params, env, self.placeholders.describe())
                except PlaceholderError as e:
                    refusal = {"variables": e.variables, "rule": e.rule}
                    raise ToolCallError(f"MCP server {server_name!r} will not be started: {e}") from None
            decision = "auto" if self.approval.is_automatic() else "timed_out"
            try:
                verdict = await self.calls.decide(server_name, tool_name, tool_args, kind="tool")
            except RuntimeError as e:
                decision = "refused"  # nobody is there to ask
                raise ToolCallError(f"Tool call {call} was not approved: {e}.") from None
            except TimeoutError as e:
                raise ToolCallError(f"Tool call {call} was not approved: {e}.") from None
            decision, by = verdict.decision, verdict.by
            if not verdict.accepted:
                raise ToolCallError(f"Tool call {call} was {verdict.reason or _REJECTED}.", rejected=True)
            encoded = await self.calls.call(server_name, server_params, tool_name, tool_args, env)
        except ToolCallError as e:
            # Errors go back to kernel code: never with what a ${VAR} placeholder resolved to.
            message = placeholders.redact(str(e), secrets)
            self._settle_soon(observers, record, decision, by, secrets, error=message, **refusal)
            raise ToolCallError(message, rejected=e.rejected) from None
        except BaseException:  # cancelled: the call may have been made (its tool ran, in part or all)
            self._settled(observers, record, decision, by, secrets, error=_CANCELLED, outcome="cancelled")
            raise
        self._settle_soon(observers, record, decision, by, secrets, result=encoded)
        return encoded

    def _settle_soon(self, *args: Any, **kwargs: Any) -> None:
        """`_settled`, in the event loop's next turn: after the kernel has its reply (which goes
        out in this turn), so that the audit record and the observers (the session notebook) add
        nothing to a call's latency. Nothing can observe the call's end in between."""
        asyncio.get_running_loop().call_soon(functools.partial(self._settled, *args, **kwargs))

    def _settled(
        self,
        observers: tuple[Callable[[ToolCallEvent], None], ...],
        record: dict[str, Any],
        decision: str,
        by: str | None,
        secrets: set[str],
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        outcome: str | None = None,
        **refusal: Any,
    ) -> None:
        """Audit a tool call that ended (`result` or `error`; `outcome` if neither ok nor error)
        and report it to the observers."""
        outcome = outcome or ("ok" if error is None else "error")
        audited = None if outcome == "cancelled" else error  # the log says so by its outcome alone
        self._audit(**record, decision=decision, outcome=outcome, error=audited, **refusal)
        fields = (record["server_name"], record["tool_name"], record["tool_args"], decision, by)
        self._report(ToolCallEvent("tool", *fields, result, error, tuple(secrets)), observers)

    async def approve_shell(self, kind: str, cmd: str) -> None:
        """Ask the application to approve a shell command a kernel is about to run.

        `kind` is "shell" (`!cmd`) or "shell_magic" (a `%%bash`/`%%sh` cell). Raises
        `ToolCallError` unless it is approved; audited like a tool call of server "ipybox".
        """
        observers = tuple(self.observers)
        record = {
            "server_name": SHELL_SERVER,
            "tool_name": kind,
            "tool_args": {"cmd": cmd},
            "started": time.time(),
        }
        try:
            verdict = await self.calls.decide(SHELL_SERVER, kind, {"cmd": cmd}, kind="shell")
        except (RuntimeError, TimeoutError, ToolCallError) as e:
            decision = "timed_out" if isinstance(e, TimeoutError) else "refused"
            self._audit(**record, decision=decision, outcome="error")
            error = str(e) if isinstance(e, ToolCallError) else f"Shell command was not approved: {e}."
            self._report(
                ToolCallEvent("shell", SHELL_SERVER, kind, {"cmd": cmd}, decision, None, None, error),
                observers,
            )
            raise ToolCallError(error) from None
        except BaseException:
            self._audit(**record, decision="pending", outcome="cancelled")
            raise
        self._audit(**record, decision=verdict.decision, outcome="ok" if verdict.accepted else "error")
        refused = None if verdict.accepted else f"Shell command {cmd!r} was {verdict.reason or _REJECTED}."
        self._report(
            ToolCallEvent(
                "shell", SHELL_SERVER, kind, {"cmd": cmd}, verdict.decision, verdict.by, None, refused
            ),
            observers,
        )
        if refused is not None:
            raise ToolCallError(refused, rejected=True)

    def _report(self, event: ToolCallEvent, observers: tuple[Callable[[ToolCallEvent], None], ...]) -> None:
        for observer in observers:
            try:
                observer(event)
            except Exception:  # an observer's bug must not fail the kernel's call
                logger.exception("a tool call observer failed")

    def _audit(self, **fields: Any) -> None:
        if self.audit is None:
            return
        try:
            self.audit.record(**fields)
        except OSError as e:
            logger.error("cannot write the audit log %s: %s", self.audit.path, e)

    def _dispatch(self, request: dict[str, Any]) -> Coroutine[Any, Any, Any] | dict[str, Any]:
        """The call a request asks for, or the reply that refuses it."""
        op = request.get("op")
        if op in ("run", "shell") and (stale := self._finished_execution(request)):
            return {"ok": False, "error": stale, "rejected": True}
        if op == "shell" and request.get("tool_name") in SHELL_KINDS:
            return self.approve_shell(str(request["tool_name"]), str(request.get("cmd", "")))
        if op == "run" and isinstance(request.get("tool_args") or {}, dict):
            return self.run(
                str(request.get("server_name")),
                request.get("server_params") or {},
                str(request.get("tool_name")),
                request.get("tool_args") or {},
            )
        return {"ok": False, "error": f"malformed request (op {op!r})"}

    async def _serve_approvals(
        self, hello: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await serve_approval_client(self.approval, self.approval_token, hello, reader, writer)

    def _finished_execution(self, request: dict[str, Any]) -> str | None:
        """Why a request from an execution that has finished is refused; None for a current one.

        Kernels tag each request with the execution (cell) the calling code belongs to and the
        one running now. An approval belongs to its execution: a thread or task a cell left behind
        never gets one given to (or granted automatically for) a later execution.
        """
        if "running" not in request or request.get("execution") == request.get("running"):
            return None
        server, tool = request.get("server_name", SHELL_SERVER), request.get("tool_name")
        args = request.get("tool_args") if request.get("op") == "run" else {"cmd": request.get("cmd", "")}
        what = f"Tool call {server}.{tool}" if request.get("op") == "run" else "Shell command"
        error = (
            f"{what} was refused: it comes from code that an earlier execution left running (a thread "
            "or task), and an approval belongs to the execution that asks for it. Make the call in the "
            "current cell, or wait for background work to finish before a cell ends."
        )
        self._audit(
            server_name=server,
            tool_name=tool,
            tool_args=args if isinstance(args, dict) else {},
            started=time.time(),
            decision="refused",
            outcome="error",
            error=error,
        )
        return error
