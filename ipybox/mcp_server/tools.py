"""The four tools agents get: register_mcp_server, execute_ipython_cell, install_package, reset."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, InputRequiredResult, TextContent

from ipybox.code_exec import CodeExecutionError, CodeExecutionResult
from ipybox.mcp_apigen import generate_mcp_sources
from ipybox.mcp_client.params import transport_of
from ipybox.mcp_client.placeholders import PlaceholderError, placeholder_names
from ipybox.mcp_server import channels
from ipybox.mcp_server.approval import ApprovalPolicy, ReadOnlyTools, Verdict
from ipybox.mcp_server.auth import LocalAccessToken
from ipybox.mcp_server.cells import CellRun, Decider, Subscriber, audited
from ipybox.mcp_server.channels import ParkedRuns
from ipybox.mcp_server.homes import Homes
from ipybox.mcp_server.kernels import (
    DEFAULT_KERNEL,
    LOCAL,
    KernelPool,
    check_kernel_name,
    shown,
    user_name,
    user_principal,
)
from ipybox.mcp_server.live import LiveView, follow, interrupted_if_client_leaves
from ipybox.mcp_server.notebooks import Notebooks
from ipybox.mcp_server.output import Spill, truncate
from ipybox.mcp_server.siblings import Siblings
from ipybox.sandbox.owned import HomeError
from ipybox.tool_exec import registry
from ipybox.tool_exec.approval import display
from ipybox.tool_exec.approval.client import ApprovalRequest
from ipybox.tool_exec.audit import AuditLog

logger = logging.getLogger(__name__)

_NO_ELICITATION = (
    "[ipybox: this client cannot ask you (no elicitation support), so tool calls from code run "
    "without approval; see the audit log]"
)
_NO_USER_INSTALLS = (
    "install_package is off for the users of this server: it installs into ipybox's own Python "
    "environment, which every user's kernels (and ipybox itself, outside any sandbox) run, so a "
    "package one user installs would run its code in the others' kernels and on the host. Ask the "
    "operator to install {spec!r} into that environment, or to start ipybox with --shared-trust if "
    "its users may run programs as ipybox's user."
)
_NO_USER_STDIO = (
    "server_params name a command: a stdio MCP server runs as a program on the ipybox host, outside "
    "every sandbox, where it could read the files of ipybox's user and of every user, so on this "
    "server users register "
    "servers by URL only ({'url': 'https://…/mcp', 'headers': {…}}). Ask the operator to run this "
    "server and give you its URL, or to start ipybox with --shared-trust if the users may run "
    "programs as ipybox's user."
)
Content = list[TextContent | ImageContent]


def principal() -> str:
    """Who calls: the authenticated user, or LOCAL without authentication."""
    token = get_access_token()
    if token is None or isinstance(token, LocalAccessToken):
        return LOCAL
    return user_principal(token.client_id)


class Tools:
    """The tools, bound to the workspaces of principals (`home`) and their kernels (`kernels`)."""

    def __init__(
        self,
        kernels: KernelPool,
        home: Homes,
        *,
        policy: ApprovalPolicy,
        allow_env: tuple[str, ...],
        install: Callable[[str, str], Awaitable[str]],
        parked: ParkedRuns,
        spill: Spill,
        notebooks: Notebooks,
        users_run_on_host: bool = False,
    ) -> None:
        self.kernels = kernels
        self.home = home
        self.policy = policy
        self.allow_env = allow_env
        self._install = install
        self.parked = parked
        self.spill = spill
        self.notebooks = notebooks
        self.users_run_on_host = users_run_on_host
        self._told_no_elicitation: set[str] = set()  # principals whose reply said calls ran unasked
        self._untold: set[str] = set()  # principals whose calls ran unasked, not yet told
        self.siblings = Siblings(home.root)

    def add_to(self, server: MCPServer[Any]) -> None:
        for tool in (self.register_mcp_server, self.execute_ipython_cell, self.install_package, self.reset):
            description = " ".join(inspect.cleandoc(tool.__doc__ or "").split())
            server.add_tool(tool, description=description, structured_output=False)
        for info in server._tool_manager.list_tools():  # titles repeat the names: leave them out
            _drop_titles(info.parameters)

    async def register_mcp_server(self, server_name: str, server_params: dict[str, Any]) -> str:
        """Generate a Python API for an MCP server's tools: mcptools/<server_name>/<tool>.py with
        Params, Result, run(). server_params: {command, args, env} or {url, headers}; secrets as
        "${VAR}" (from .env)."""
        who = principal()
        root = self._workspace(who)
        self.kernels.prewarm(who)  # code that uses the API comes next: its kernel starts meanwhile
        try:
            if not self._runs_on_host(who) and transport_of(server_params) == "stdio":
                raise ValueError(_NO_USER_STDIO)
            modules = await generate_mcp_sources(
                server_name, server_params, root / "mcptools", workspace=root, allow_env=self.allow_env
            )
        except ValueError as e:  # bad name or parameters, or a refused ${VAR}: nothing was started
            _audit_refusal(AuditLog(self.home.audit_log(who), trusted=root), server_name, server_params, e)
            raise ToolError(str(e)) from None
        except ConnectionError as e:
            raise ToolError(str(e)) from None
        ReadOnlyTools(root).set(server_name, modules.read_only)
        for executor in self.kernels.executors(who):  # code importing the old API sees the new one
            with contextlib.suppress(Exception):
                await executor.execute(_forget_modules(server_name), timeout=10)
        lines = [n for n in (self.siblings.notice(),) if n]
        lines.append(f"Generated {len(modules)} tool modules in mcptools/{server_name}/:")
        lines += [f"- {m}: {_summary(modules.descriptions.get(m, ''))}" for m in modules]
        if modules.repaired:
            lines.append(f"Repaired {len(modules.repaired)} malformed tool definitions:")
            lines += [f"- {display.name(name)}: {what}" for name, what in modules.repaired.items()]
        if modules.skipped:
            lines.append(f"Skipped {len(modules.skipped)} tools (no module generated):")
            lines += [f"- {display.name(name)}: {why}" for name, why in modules.skipped.items()]
        # the server's names and descriptions are data to whoever the client shows the reply: a
        # name as the approval questions show it (a line break in it cannot add a line)
        return display.lines("\n".join(lines))

    async def execute_ipython_cell(
        self,
        code: str,
        ctx: Context[Any, Any],
        kernel: str = DEFAULT_KERNEL,
        timeout: float = 120,
        max_output_chars: int = 5000,
    ) -> Content | InputRequiredResult:
        """Run Python in a stateful IPython kernel (await, !shell ok). Code calls tools via
        mcptools.<server>.<tool>.run(); the user may approve each. kernel: an independent kernel's
        name (max 4, a 5th stops the LRU)."""
        who = principal()
        by = f"user ({shown(who)}) through the client"
        if ctx.request_state is not None:  # a later round: the user answered the approval requests
            parked = self.parked.take(ctx.request_state, who)
            if parked is None:
                raise ToolError("This cell's approval requests expired; run the cell again.")
            run, view = parked
            await channels.answer(run, ctx.input_responses, by)
        else:
            self._refuse_host_servers(who, self._workspace(who))
            run, view = self._start(code, ctx, who, kernel, timeout, max_output_chars)
            await self.parked.abandon(who, kernel)
        async with interrupted_if_client_leaves(run, ctx.request_context.request):
            channel = channels.channel_for(ctx, self.parked, by)  # the era's, chosen once
            if (asked := await follow(run, view, ctx, channel)) is not None:
                return asked  # parked for the user's answers: the client's next call brings them
            notices = (self.siblings.notice(), self._no_elicitation_notice(who), run.kernel_notice)
            notice = "\n".join(n for n in notices if n)
            return _reply(run, self.home.workspace(who), max_output_chars, notice, self.spill)
        raise ToolError("The client disconnected, so the cell was interrupted.")

    def _start(
        self, code: str, ctx: Context[Any, Any], who: str, kernel: str, timeout: float, max_output_chars: int
    ) -> tuple[CellRun, LiveView]:
        if not code.strip():
            raise ToolError("code is empty: pass the Python source to run.")
        if not timeout > 0:
            raise ToolError(f"timeout must be a positive number of seconds, got {timeout!r}.")
        if max_output_chars < 1:
            raise ToolError(f"max_output_chars must be at least 1, got {max_output_chars!r}.")
        try:
            check_kernel_name(kernel)
        except ValueError as e:
            raise ToolError(str(e)) from None
        capabilities = ctx.client_capabilities
        can_ask = capabilities is not None and capabilities.elicitation is not None
        view = LiveView()
        subscribers: list[Subscriber] = [view, self.notebooks.subscriber(who, kernel)]
        if (audit := self._audit(who)) is not None:
            subscribers.append(audited(audit))
        run = CellRun(
            self.kernels.use(who, kernel),
            code,
            timeout,
            principal=who,
            kernel_name=kernel,
            decide=None if self.policy.mode == "auto" else self._decider(who, can_ask),
            subscribers=subscribers,
        )
        return run, view

    def _runs_on_host(self, who: str) -> bool:
        """Whether ipybox may run programs on the host for `who` (see `ServerOptions.users_run_on_host`)."""
        return user_name(who) is None or self.users_run_on_host

    def _refuse_host_servers(self, who: str, root: Path) -> None:
        """A user who may not have programs run on the host, but whose workspace has stdio servers
        registered (while the server allowed it: one user, or --shared-trust), runs no code: the
        kernel's calls would start them on the host. A shared workspace's servers are the operator's
        to share (`--shared-workspace`)."""
        if self._runs_on_host(who) or self.home.shared:
            return
        stdio = sorted(
            name for name, known in registry.registered(root).items() if any("command" in p for p in known)
        )
        if stdio:
            raise ToolError(
                f"Your workspace has stdio MCP servers registered ({', '.join(map(display.name, stdio))}): "
                "programs that run "
                "on the ipybox host, registered while this server let users do that (--shared-trust). It "
                "no longer does, so your code does not run while they are registered: ask the operator to "
                f"remove them from {registry.registry_file(root)} (register them again by URL), or to "
                "start ipybox with --shared-trust if the users may run programs as ipybox's user."
            )

    def _workspace(self, who: str) -> Path:
        """The principal's workspace; a home ipybox refuses (one it did not make) is the tool's error."""
        try:
            return self.home.workspace(who)
        except HomeError as e:
            raise ToolError(str(e)) from None

    def _decider(self, who: str, can_ask: bool) -> Decider:
        read_only = ReadOnlyTools(self.home.workspace(who))

        def decide(request: ApprovalRequest) -> Verdict:
            verdict = self.policy.decide(
                request.server_name, request.tool_name, (request.server_name, request.tool_name) in read_only
            )
            if verdict.action == "ask" and not can_ask:
                if who not in self._told_no_elicitation:
                    self._untold.add(who)
                return Verdict("allow", "auto: the client has no elicitation support")
            return verdict

        return decide

    def _audit(self, who: str) -> AuditLog | None:
        try:
            return AuditLog(self.home.audit_log(who), trusted=self.home.workspace(who))
        except OSError as e:
            logger.error("cannot open the audit log: %s", e)
            return None

    def _no_elicitation_notice(self, who: str) -> str:
        """Said once, in the reply of the first cell whose tool call ran without asking the user
        (the client cannot ask); cells that call no such tool stay free of it."""
        if who not in self._untold:
            return ""
        self._untold.discard(who)
        self._told_no_elicitation.add(who)
        return _NO_ELICITATION

    async def install_package(self, package_name: str, ctx: Context[Any, Any]) -> str:
        """Install a package for the kernel, with network: "numpy>=1.26" or "git+https://..." (not !pip)."""
        who = principal()
        self._workspace(who)
        if not self._runs_on_host(who):
            raise ToolError(display.acting(_NO_USER_INSTALLS.format(spec=package_name)))
        # the reply quotes the installer, which quotes what a package's build printed (on a
        # gateway, the kernel's own output): data to the person the client shows it to
        try:
            return display.acting(await self._install(package_name, who))
        except ToolError as e:
            raise ToolError(display.acting(str(e))) from None

    async def reset(self, ctx: Context[Any, Any], kernel: str = DEFAULT_KERNEL) -> str:
        """Clear a kernel's variables and imports (files and mcptools/ stay)."""
        try:
            check_kernel_name(kernel)
        except ValueError as e:
            raise ToolError(str(e)) from None
        who = principal()
        self._workspace(who)
        async with self.kernels.use(who, kernel) as (executor, _):
            await executor.reset()
        self.notebooks.changed(who, kernel, executor)
        return f"Kernel {kernel!r} reset."


def _reply(run: CellRun, workspace: Path, max_output_chars: int, notice: str, spill: Spill) -> Content:
    spill_dir = workspace / ".ipybox" / "outputs"
    outcome = run.outcome
    prefix = display.acting(f"{notice}\n") if notice else ""  # a resume's notice quotes a cell's error
    # the client shows the reply to a person too: what would act on a terminal goes as escapes
    if isinstance(outcome, CodeExecutionError):
        output = f"{outcome.output}\n\n" if outcome.output else ""
        shown = display.as_shown(f"{output}{outcome}")
        text = truncate(shown, max_output_chars, spill_dir, trusted=workspace, spill=spill)
        raise ToolError(prefix + display.acting(text))
    if isinstance(outcome, (TimeoutError, RuntimeError, OSError, ValueError)):
        raise ToolError(prefix + display.acting(str(outcome)))
    if isinstance(outcome, BaseException):
        raise outcome
    if outcome is None:
        raise ToolError(prefix + "The cell was interrupted.")
    assert isinstance(outcome, CodeExecutionResult)
    shown = display.as_shown(outcome.text or "")
    text = display.acting(truncate(shown, max_output_chars, spill_dir, trusted=workspace, spill=spill))
    if outcome.images:
        text += "\n" if text else ""
        text += "\n".join(f"[image saved to {path}]" for path in outcome.images)
    content: Content = [TextContent(type="text", text=prefix + (text or "(no output)"))]
    # the bytes ipybox saved, never the files: the kernel can swap those for links or fifos
    content += [Image(data=png, format="png").to_image_content() for png in outcome.png]
    return content


def _drop_titles(schema: Any) -> None:
    if isinstance(schema, dict):
        schema.pop("title", None)
        for value in schema.get("properties", {}).values():
            _drop_titles(value)


def _audit_refusal(log: AuditLog, server_name: str, server_params: Any, error: ValueError) -> None:
    """Record a refused registration: the rule and the variables it names, never their values."""
    if isinstance(error, PlaceholderError):
        variables, rule = error.variables, error.rule
    else:
        variables, rule = sorted(placeholder_names(server_params)), "params"
    try:
        log.refused_registration(
            server_name=str(server_name), error=str(error), variables=variables, rule=rule
        )
    except OSError as e:
        logger.error("cannot write the audit log %s: %s", log.path, e)


def _forget_modules(server_name: str) -> str:
    return (
        f"# ipybox: mcptools/{server_name}/ was generated again; code imports the new modules\n"
        "import sys as _s, importlib as _i\n"
        f"[_s.modules.pop(_k) for _k in list(_s.modules) if _k == 'mcptools.{server_name}' "
        f"or _k.startswith('mcptools.{server_name}.')]\n"
        "_i.invalidate_caches(); del _s, _i"
    )


def _summary(description: str) -> str:
    """The first line of a tool's description, as generated (never read back from mcptools/,
    which code in the kernel can replace by a fifo or a link)."""
    lines = description.strip().splitlines()
    return lines[0].strip()[:120] if lines else "(no description)"
