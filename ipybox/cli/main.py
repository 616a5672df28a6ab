"""Parses the command line and runs the MCP server on the chosen transport."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path

from dotenv import load_dotenv

from ipybox._version import __version__
from ipybox.kernel_mgr.limits import ResourceLimits

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
    p.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="log level; logs go to stderr (default: WARNING)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("ipybox").setLevel(args.log_level)

    workspace = args.workspace.expanduser().resolve()
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        reason = "it is not a directory" if isinstance(e, FileExistsError) else e.strerror or str(e)
        sys.exit(f"ipybox: cannot use {workspace} as the workspace: {reason}")
    if args.sandbox_config is not None:
        args.sandbox_config = args.sandbox_config.expanduser().resolve()
    os.chdir(workspace)  # the kernel's working directory, and where `.env` is read
    load_dotenv(workspace / ".env", override=False)

    from ipybox.kernel_mgr.gateway import gateway_option_problem
    from ipybox.mcp_server import ServerOptions, create_server
    from ipybox.sandbox import WORKSPACE_CONFIG, SandboxError, check_sandbox

    if args.sandbox and args.sandbox_config is None and (workspace / WORKSPACE_CONFIG).is_file():
        args.sandbox_config = workspace / WORKSPACE_CONFIG
    limits = ResourceLimits(memory=args.memory_limit, processes=args.process_limit)
    if args.kernel_gateway and (problem := gateway_option_problem(args.sandbox, limits)):
        sys.exit(f"ipybox: {problem}")
    if args.sandbox:
        try:
            check_sandbox(args.sandbox_config)
        except SandboxError as e:
            sys.exit(f"ipybox: {e}")

    options = ServerOptions(
        workspace=workspace,
        sandbox=args.sandbox,
        sandbox_config=args.sandbox_config,
        per_session=args.transport != "stdio",
        limits=limits,
        audit_log=args.audit_log.expanduser().resolve() if args.audit_log else None,
        allow_env=tuple(dict.fromkeys(name for names in args.allow_env for name in names)),
        kernel_gateway=args.kernel_gateway,
        kernel_name=args.kernel_name,
        tool_server_host=args.tool_server_host,
        tool_server_port=args.tool_server_port,
        kernel_tool_server_host=args.kernel_tool_server_host,
    )
    server = create_server(options)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)
