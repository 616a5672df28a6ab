"""Parses the command line and runs the MCP server on the chosen transport."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotenv import load_dotenv

from ipybox._version import __version__
from ipybox.kernel_mgr.limits import ResourceLimits

if TYPE_CHECKING:
    from ipybox.mcp_server import ExecutorOptions

DESCRIPTION = """\
Run ipybox as an MCP server. Agents get four tools: register_mcp_server (generate a typed
Python API for another MCP server's tools), execute_ipython_cell (run code in a stateful
IPython kernel that can call those APIs), install_package and reset."""

EPILOG = """\
environment:
  ${VAR} placeholders in the server_params of register_mcp_server are filled from
  WORKSPACE/.env and from the variables of ipybox's environment named with --allow-env, and
  only in args, env values and header values (never in a URL or command). Only variables
  named KERNEL_ENV_<NAME> reach the kernel, as <NAME>.
  With --kernel-gateway, the gateway's token is read from IPYBOX_KERNEL_GATEWAY_TOKEN.

example (Claude Code / Claude Desktop config):
  {"mcpServers": {"ipybox": {"command": "uvx",
    "args": ["--from", "/path/to/ipybox", "ipybox", "--workspace", "/path/to/ws"]}}}
"""


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(text: str) -> int | None:
    """'4G', '512M', '1073741824' or 'none'."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    if value in ("NONE", "0"):
        return None
    unit = value[-1] if value and value[-1] in _UNITS else ""
    try:
        return int(float(value[: len(value) - len(unit)]) * _UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 4G, 512M or none)") from None


def _count(text: str) -> int | None:
    if text.strip().lower() in ("none", "0"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names(text: str) -> list[str]:
    """'GITHUB_TOKEN,BRAVE_API_KEY': environment variable names."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if not _NAME.fullmatch(name)]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"not a list of variable names: {text!r} (e.g. GITHUB_TOKEN,API_KEY)"
        )
    return names


def _seconds(text: str) -> float | None:
    if text.strip().lower() in ("none", "0"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not value > 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r} (or 'none')")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ipybox",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"ipybox {__version__}")
    p.add_argument(
        "--workspace",
        type=Path,
        default=Path("."),
        help="working directory of the kernel; generated APIs go to WORKSPACE/mcptools/ (default: .)",
    )
    p.add_argument(
        "--sandbox",
        action="store_true",
        help="run the kernel under sandbox-runtime (srt): no network, writes only inside the workspace",
    )
    p.add_argument(
        "--sandbox-config",
        type=Path,
        metavar="FILE",
        help="JSON sandbox policy replacing the default; without it, WORKSPACE/sandbox-config.json "
        "is used if present (only with --sandbox)",
    )
    p.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="stdio for a local MCP client (default); streamable-http serves clients over HTTP, "
        "each client session with its own kernel",
    )
    p.add_argument("--host", default="127.0.0.1", help="address for streamable-http (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port for streamable-http (default: 8000)")
    _add_kernel_arguments(p)
    _add_gateway_arguments(p)
    _add_approval_arguments(p)
    _add_auth_arguments(p)
    p.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="log level; logs go to stderr (default: WARNING)",
    )
    return p


def _add_kernel_arguments(p: argparse.ArgumentParser) -> None:
    """Limits, audit log and environment of the kernels."""
    p.add_argument(
        "--memory-limit",
        type=_size,
        default=ResourceLimits().memory,
        metavar="SIZE",
        help="memory a kernel and its processes may use together, e.g. 4G, or 'none' (default: none); "
        "at the limit the largest process is killed (enforced with a cgroup: root or a delegated "
        "cgroup v2, else RLIMIT_AS)",
    )
    p.add_argument(
        "--process-limit",
        type=_count,
        default=ResourceLimits().processes,
        metavar="N",
        help="processes and threads a kernel may run at once, or 'none' (default: none; enforced "
        "with a cgroup: root or a delegated cgroup v2, else RLIMIT_NPROC)",
    )
    p.add_argument(
        "--audit-log",
        type=Path,
        metavar="FILE",
        help="JSON Lines record of every tool call (default: WORKSPACE/.ipybox/audit.jsonl)",
    )
    p.add_argument(
        "--allow-env",
        type=_names,
        action="append",
        default=[],
        metavar="NAME,...",
        help="variables of ipybox's environment that ${VAR} placeholders in server_params may name "
        "(repeatable); WORKSPACE/.env is always used, the rest of the environment never",
    )


def _add_gateway_arguments(p: argparse.ArgumentParser) -> None:
    """Kernels on a Jupyter Kernel Gateway or Enterprise Gateway."""
    p.add_argument(
        "--kernel-gateway",
        metavar="URL",
        help="run kernels on this Jupyter Kernel Gateway or Enterprise Gateway (http(s)://host:port), "
        "one per client session; token from IPYBOX_KERNEL_GATEWAY_TOKEN (see docs/remote-kernels.md)",
    )
    p.add_argument(
        "--kernel-name", default="python3", help="kernelspec to start on the gateway (default: python3)"
    )
    p.add_argument(
        "--tool-server-host",
        default="localhost",
        help="address the tool server listens on for gateway kernels (default: localhost)",
    )
    p.add_argument(
        "--tool-server-port",
        type=int,
        help="TCP port of the tool server for gateway kernels (default: any free one; with stdio only, "
        "as each HTTP session has a tool server of its own on a free port)",
    )
    p.add_argument(
        "--kernel-tool-server-host",
        metavar="HOST",
        help="how gateway kernels reach the tool server, e.g. a Kubernetes service name "
        "(default: --tool-server-host)",
    )


def _add_approval_arguments(p: argparse.ArgumentParser) -> None:
    """Who approves tool calls, and how many kernels live how long."""
    p.add_argument(
        "--approval",
        default="ask",
        metavar="ask|auto|FILE",
        help="who approves the tool calls code makes: ask the user through the client (default; "
        "tools annotated read-only run without asking), auto (nobody), or the rules in a TOML FILE "
        "(see docs/mcp-server.md)",
    )
    p.add_argument(
        "--approve-shell-cmds",
        action="store_true",
        help="shell commands (!cmd, %%%%bash) need approval too, the same way as tool calls",
    )
    p.add_argument(
        "--kernel-idle-timeout",
        type=_seconds,
        default=3600.0,
        metavar="SECONDS",
        help="stop a kernel unused this long, or 'none' (default: 3600); its next call says so",
    )
    p.add_argument(
        "--max-kernels",
        type=int,
        default=4,
        metavar="N",
        help="kernels each user may run at once (named with the tools' kernel argument; default: 4)",
    )


def _add_auth_arguments(p: argparse.ArgumentParser) -> None:
    """Authentication of HTTP clients."""
    p.add_argument(
        "--auth-tokens",
        type=Path,
        metavar="FILE",
        help="HTTP clients must send a bearer token from FILE: lines 'NAME TOKEN' or 'NAME sha256:HEX'; "
        "NAME is the user (own kernels and workspace WORKSPACE/users/NAME)",
    )
    p.add_argument("--jwt-issuer", metavar="URL", help="JWTs of this issuer (with --jwt-audience, --jwks)")
    p.add_argument("--jwt-audience", metavar="AUD", help="the audience JWTs must name (this server)")
    p.add_argument("--jwks", metavar="FILE|URL", help="the issuer's signing keys (JSON Web Key Set)")
    p.add_argument(
        "--shared-workspace",
        action="store_true",
        help="authenticated users share WORKSPACE (and its registered servers and .env) instead of "
        "each getting WORKSPACE/users/NAME; kernels stay per user",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="the URL clients use for this server, for the authentication metadata "
        "(default: http://HOST:PORT/mcp)",
    )


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("ipybox").setLevel(args.log_level)
    try:
        server, run = _build(args)
    except ValueError as e:
        sys.exit(f"ipybox: {e}")
    run(server)


def _refuse_kernel_writable(workspace: Path, *files: str | Path | None) -> None:
    """Option files that decide who may do what must lie where sandboxed code cannot write them."""
    for name in files:
        if not name or "://" in str(name):
            continue
        path = Path(name).expanduser().resolve()
        if path.is_relative_to(workspace.resolve()):
            raise ValueError(
                f"{path} lies in the workspace {workspace}, which sandboxed code can write, so a kernel "
                "could change who may do what at the next start; keep it outside the workspace "
                "(e.g. ~/.config/ipybox/)."
            )


def _build(args: argparse.Namespace) -> tuple[Any, Callable[[Any], None]]:
    """The configured server and how to run it; ValueError says what in the configuration is wrong."""
    workspace = _workspace(args)
    from ipybox.kernel_mgr.gateway import gateway_option_problem
    from ipybox.mcp_server import ApprovalPolicy, ServerOptions, create_server
    from ipybox.sandbox import WORKSPACE_CONFIG, SandboxError, check_sandbox

    approval = ApprovalPolicy.parse(args.approval)  # files named relative to where ipybox started
    if args.sandbox:
        _refuse_kernel_writable(workspace, approval.source, args.auth_tokens, args.jwks)
    verifier, auth = _authentication(args)
    audit_log = args.audit_log.expanduser().resolve() if args.audit_log else None
    os.chdir(workspace)  # the kernel's working directory, and where `.env` is read
    load_dotenv(workspace / ".env", override=False)

    if args.sandbox and args.sandbox_config is None and (workspace / WORKSPACE_CONFIG).is_file():
        args.sandbox_config = workspace / WORKSPACE_CONFIG
    limits = ResourceLimits(memory=args.memory_limit, processes=args.process_limit)
    if args.kernel_gateway and (problem := gateway_option_problem(args.sandbox, limits)):
        raise ValueError(problem)
    if args.sandbox:
        try:
            check_sandbox(args.sandbox_config)
        except SandboxError as e:
            raise ValueError(str(e)) from None
    if args.kernel_gateway:
        _check_gateway(args.kernel_gateway, args.kernel_name)

    options = ServerOptions(
        workspace=workspace,
        executor=_executor_options(args, limits),
        audit_log=audit_log,
        approval=approval,
        kernel_idle_timeout=args.kernel_idle_timeout,
        max_kernels=args.max_kernels,
        shared_workspace=args.shared_workspace,
    )
    server = create_server(options, token_verifier=verifier, auth=auth)
    if args.transport == "stdio":
        return server, lambda s: s.run("stdio")
    return server, lambda s: s.run("streamable-http", host=args.host, port=args.port)


def _workspace(args: argparse.Namespace) -> Path:
    """The workspace, created if missing, after checking the options that need no import."""
    workspace: Path = args.workspace.expanduser().resolve()
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        reason = "it is not a directory" if isinstance(e, FileExistsError) else e.strerror or str(e)
        raise ValueError(f"cannot use {workspace} as the workspace: {reason}") from None
    if args.sandbox_config is not None:
        if not args.sandbox:
            raise ValueError("--sandbox-config applies only with --sandbox: add --sandbox, or drop it")
        args.sandbox_config = args.sandbox_config.expanduser().resolve()
        if not args.sandbox_config.is_file():
            raise ValueError(f"--sandbox-config: file not found: {args.sandbox_config}")
    if args.max_kernels < 1:
        raise ValueError(f"--max-kernels must be at least 1, got {args.max_kernels}")
    return workspace


def _executor_options(args: argparse.Namespace, limits: ResourceLimits) -> ExecutorOptions:
    """What each kernel's `CodeExecutor` is built with."""
    from ipybox.mcp_server import ExecutorOptions

    return ExecutorOptions(
        sandbox=args.sandbox,
        sandbox_config=args.sandbox_config,
        limits=limits,
        allow_env=tuple(dict.fromkeys(name for names in args.allow_env for name in names)),
        kernel_gateway_url=args.kernel_gateway,
        kernel_name=args.kernel_name,
        tool_server_host=args.tool_server_host,
        tool_server_port=args.tool_server_port,
        kernel_tool_server_host=args.kernel_tool_server_host,
        approve_shell_cmds=args.approve_shell_cmds,
    )


_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _authentication(args: argparse.Namespace) -> tuple[Any, Any]:
    """The token verifier and auth settings the options ask for (None, None without any)."""
    from ipybox.mcp_server.auth import JwtVerifier, TokenFile, auth_settings

    jwt_options = (args.jwt_issuer, args.jwt_audience, args.jwks)
    if any(jwt_options) and not all(jwt_options):
        raise ValueError("JWT authentication needs all of --jwt-issuer, --jwt-audience and --jwks")
    if args.auth_tokens and all(jwt_options):
        raise ValueError("choose one of --auth-tokens and the --jwt-* options")
    if args.transport == "stdio":
        if args.auth_tokens or all(jwt_options):
            raise ValueError("authentication applies to --transport streamable-http; stdio has one user")
        return None, None
    verifier: Any = None
    if args.auth_tokens:
        verifier = TokenFile(args.auth_tokens.expanduser())
    elif all(jwt_options):
        verifier = JwtVerifier(args.jwt_issuer, args.jwt_audience, args.jwks)
    if verifier is None:
        if args.host not in _LOOPBACK:
            raise ValueError(
                f"refusing to serve {args.host} without authentication: anyone who reaches the port could "
                "run code as this user. Add --auth-tokens FILE (or --jwt-issuer/--jwt-audience/--jwks), "
                "or listen on 127.0.0.1"
            )
        return None, None
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = args.public_url or f"http://{host}:{args.port}/mcp"
    return verifier, auth_settings(url, args.jwt_issuer)


def _check_gateway(url: str, kernel_name: str) -> None:
    """Refuse to start with a gateway that does not answer or lacks the kernelspec."""
    import httpx2 as httpx

    from ipybox.kernel_mgr.gateway import GATEWAY_TOKEN_VAR

    token = os.environ.get(GATEWAY_TOKEN_VAR)
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        response = httpx.get(url.rstrip("/") + "/api/kernelspecs", headers=headers, timeout=10)
    except (httpx.HTTPError, ValueError) as e:
        raise ValueError(
            f"--kernel-gateway {url}: cannot reach it ({e.__class__.__name__}: {e}); check the URL and that "
            "the gateway runs"
        ) from None
    if response.status_code in (401, 403):
        raise ValueError(f"--kernel-gateway {url} refused the token: set {GATEWAY_TOKEN_VAR} to its token")
    try:
        specs = response.json()["kernelspecs"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"--kernel-gateway {url} is not a Jupyter kernel gateway (no kernelspecs)") from None
    if kernel_name not in specs:
        raise ValueError(
            f"--kernel-name {kernel_name!r} is not offered by the gateway; it has: {', '.join(sorted(specs))}"
        )
