"""Parses the command line and runs the MCP server on the chosen transport."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotenv import load_dotenv

from ipybox.cli.options import parser
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.tool_exec.approval import display

if TYPE_CHECKING:
    from ipybox.mcp_server import ExecutorOptions


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, handlers=[display.log_handler()])
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
    from ipybox.mcp_server.auth import LocalToken
    from ipybox.sandbox import WORKSPACE_CONFIG, SandboxError, check_sandbox

    approval = ApprovalPolicy.parse(args.approval)  # files named relative to where ipybox started
    if args.sandbox:
        _refuse_kernel_writable(workspace, approval.source, args.auth_tokens, args.jwks)
    verifier, auth = _authentication(args)
    audit_log = args.audit_log.expanduser().resolve() if args.audit_log else None
    os.chdir(workspace)  # the kernel's working directory, and where `.env` is read
    # WORKSPACE/.env is the local principal's: where users have homes of their own, it stays out of
    # ipybox's environment, which every user's kernels (KERNEL_ENV_*) and `--allow-env` draw on
    users_homes = verifier is not None and not isinstance(verifier, LocalToken) and not args.shared_workspace
    if (workspace / ".env").is_file() and not users_homes:  # a directory: a running sandbox's stand-in
        load_dotenv(workspace / ".env", override=False, interpolate=False)  # `${VAR}` is kept as written

    if args.sandbox and args.sandbox_config is None and (workspace / WORKSPACE_CONFIG).is_file():
        # where it leads now: a kernel may replace a link by a policy of its own (put back, see
        # ipybox.sandbox.links), which sessions started later must not read
        args.sandbox_config = (workspace / WORKSPACE_CONFIG).resolve()
    limits = _limits(args)
    if args.kernel_gateway and (problem := gateway_option_problem(args.sandbox, limits)):
        raise ValueError(problem)
    if args.sandbox:
        try:
            check_sandbox(args.sandbox_config, args.sandbox_gpus, workspace)
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
        spare_kernels=args.spare_kernels,
        shared_workspace=args.shared_workspace,
        resume=args.resume,
        spilled_outputs=args.max_spilled_outputs,
        spilled_bytes=args.max_spilled_bytes,
        users_run_on_host=args.shared_trust,
    )
    if args.transport == "streamable-http":
        _check_listen(args.host, args.port)  # before the server: a port in use is one clear line
    return create_server(options, token_verifier=verifier, auth=auth), _runner(args, workspace, verifier)


def _serve_stdio(server: Any) -> None:
    import anyio

    from ipybox.mcp_server import stdio

    anyio.run(stdio.serve, server)


def _limits(args: argparse.Namespace) -> ResourceLimits:
    return ResourceLimits(
        memory=args.memory_limit,
        processes=args.process_limit,
        images=args.max_images,
        image_bytes=args.max_image_bytes,
        message_bytes=args.max_message_bytes,
        tool_connections=args.max_tool_connections,
        tool_buffer=args.max_tool_buffer,
    )


def _runner(args: argparse.Namespace, workspace: Path, verifier: Any) -> Callable[[Any], None]:
    """How to run the server on its transport, telling the person who started it where it serves."""
    from ipybox.mcp_server.auth import LocalToken

    if args.transport == "stdio":
        if sys.stdin.isatty():  # started by hand: say what it waits for, as no client will
            _say(
                f"MCP server on stdio for the workspace {workspace}: MCP clients start this command "
                "and speak JSON-RPC on its stdin; Ctrl-C stops it"
            )
        return _serve_stdio

    def serve(s: Any) -> None:
        url = _url(args.host, args.port)
        _say(f"serving MCP at {url} for the workspace {workspace}; Ctrl-C stops it")
        if verifier is not None and args.public_url is None and args.host in ("0.0.0.0", "::"):
            _say(
                f"warning: the 401 answer tells clients to authenticate for {_public_url(args)}, an "
                "address they cannot reach; pass --public-url with the URL clients use"
            )
        if isinstance(verifier, LocalToken):
            _announce_token(verifier, _public_url(args))
        s.run("streamable-http", host=args.host, port=args.port)

    return serve


def _say(line: str) -> None:
    """One line for the person who started ipybox, on stderr (stdout may be the protocol)."""
    sys.stderr.write(f"ipybox: {line}\n")
    sys.stderr.flush()


def _url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"


def _check_listen(host: str, port: int) -> None:
    """Refuse to start where the HTTP server could not listen (the port taken, the host unknown)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.create_server((host, port), family=family):
            pass
    except OSError as e:
        raise ValueError(
            f"cannot listen on {host}:{port}: {e.strerror or e}; choose another --port (or --host), "
            "or stop the program that uses it"
        ) from None


def _workspace(args: argparse.Namespace) -> Path:
    """The workspace, created if missing, after checking the options that need no import."""
    workspace: Path = args.workspace.expanduser().resolve()
    try:
        workspace.mkdir(parents=True, exist_ok=True)
        _check_writable(workspace)
    except OSError as e:
        reason = "it is not a directory" if isinstance(e, FileExistsError) else e.strerror or str(e)
        raise ValueError(
            f"cannot use {workspace} as the workspace: {reason}. ipybox writes there (mcptools/, the "
            "kernel's files): pass --workspace with a directory you can write"
        ) from None
    if args.sandbox_gpus is not None and not args.sandbox:
        raise ValueError("--sandbox-gpus applies only with --sandbox: add --sandbox, or drop it")
    if args.sandbox_config is not None:
        if not args.sandbox:
            raise ValueError("--sandbox-config applies only with --sandbox: add --sandbox, or drop it")
        args.sandbox_config = args.sandbox_config.expanduser().resolve()
        if not args.sandbox_config.is_file():
            raise ValueError(f"--sandbox-config: file not found: {args.sandbox_config}")
    if args.max_kernels < 1:
        raise ValueError(f"--max-kernels must be at least 1, got {args.max_kernels}")
    if args.spare_kernels < 0:
        raise ValueError(f"--spare-kernels must be 0 or more, got {args.spare_kernels}")
    return workspace


def _check_writable(workspace: Path) -> None:
    """OSError unless this user can create files in `workspace` (tried: permissions, read-only
    mounts and ACLs all count); the file is removed at once."""
    fd, probe = tempfile.mkstemp(prefix=".ipybox-write-check-", dir=workspace)
    os.close(fd)
    os.unlink(probe)


def _executor_options(args: argparse.Namespace, limits: ResourceLimits) -> ExecutorOptions:
    """What each kernel's `CodeExecutor` is built with."""
    from ipybox.mcp_server import ExecutorOptions

    return ExecutorOptions(
        sandbox=args.sandbox,
        sandbox_config=args.sandbox_config,
        sandbox_gpus=args.sandbox_gpus,
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
    from ipybox.mcp_server.auth import JwtVerifier, LocalToken, TokenFile, auth_settings, local_token_file

    jwt_options = (args.jwt_issuer, args.jwt_audience, args.jwks)
    if any(jwt_options) and not all(jwt_options):
        raise ValueError("JWT authentication needs all of --jwt-issuer, --jwt-audience and --jwks")
    if args.auth_tokens and all(jwt_options):
        raise ValueError("choose one of --auth-tokens and the --jwt-* options")
    if args.transport == "stdio":
        if args.auth_tokens or all(jwt_options) or args.no_auth:
            raise ValueError("authentication applies to --transport streamable-http; stdio has one user")
        return None, None
    if args.no_auth and (args.auth_tokens or all(jwt_options)):
        raise ValueError("--no-auth contradicts --auth-tokens and the --jwt-* options: choose one")
    verifier: Any = None
    if args.auth_tokens:
        verifier = TokenFile(args.auth_tokens.expanduser())
    elif all(jwt_options):
        verifier = JwtVerifier(args.jwt_issuer, args.jwt_audience, args.jwks)
    elif args.no_auth:
        if args.host not in _LOOPBACK:
            raise ValueError(
                f"refusing --no-auth on {args.host}: anyone who reaches the port could run code as this "
                "user. Drop --no-auth (ipybox then makes a token and prints how to send it), add "
                "--auth-tokens FILE (or --jwt-issuer/--jwt-audience/--jwks), or listen on 127.0.0.1"
            )
        return None, None
    elif args.host not in _LOOPBACK:
        raise ValueError(
            f"refusing to serve {args.host} with only ipybox's own token: give each user a token with "
            "--auth-tokens FILE (or use --jwt-issuer/--jwt-audience/--jwks), or listen on 127.0.0.1"
        )
    else:
        verifier = LocalToken(local_token_file())
    _refuse_shared_trust(args, verifier)
    return verifier, auth_settings(_public_url(args), args.jwt_issuer)


def _public_url(args: argparse.Namespace) -> str:
    return str(args.public_url or _url(args.host, args.port))


def _refuse_shared_trust(args: argparse.Namespace, verifier: Any) -> None:
    """Several users without `--sandbox` read each other's secrets, unless the operator said that is fine."""
    from ipybox.mcp_server.auth import JwtVerifier

    if _several_users(verifier) and not args.sandbox and not args.shared_trust:
        who = "JWTs of many users" if isinstance(verifier, JwtVerifier) else "several users in --auth-tokens"
        raise ValueError(
            f"refusing {who} without --sandbox: every user's kernels would run as this operating-system "
            "user, so any user's code could read the others' workspaces (WORKSPACE/users/NAME, their .env "
            "secrets) and their kernels' environments (/proc/PID/environ). Add --sandbox, which confines "
            "each user's kernels to their own workspace and hides other users' processes; or add "
            "--shared-trust if these users may see each other's files and secrets"
        )


def _several_users(verifier: Any) -> bool:
    """Whether the verifier admits more than one user (JWTs, or a token file of several names)."""
    from ipybox.mcp_server.auth import JwtVerifier, TokenFile

    return isinstance(verifier, JwtVerifier) or (isinstance(verifier, TokenFile) and len(verifier.names) > 1)


def _announce_token(verifier: Any, url: str) -> None:
    """Tell the user, on stderr, how clients send the server's own token."""
    header = f"Authorization: Bearer {verifier.token}"
    sys.stderr.write(
        f"ipybox: clients of {url} must send the header\n"
        f"  {header}\n"
        f"(the token is kept in {verifier.path}, readable by this user only). Claude Code:\n"
        f'  claude mcp add --transport http ipybox {url} --header "{header}"\n'
        f'or in .mcp.json: "headers": {{"Authorization": "Bearer {verifier.token}"}}\n'
    )
    sys.stderr.flush()


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
