"""ipybox's command line: its options, grouped as `--help` shows them, and their value types."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ipybox._version import __version__

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
  With --transport streamable-http and neither --auth-tokens nor JWTs, ipybox makes a token,
  keeps it in $IPYBOX_STATE_DIR (default ~/.local/state/ipybox)/http-token and prints at start
  how clients send it (Authorization: Bearer TOKEN).

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


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"not a port: {text!r} (a number from 1 to 65535)")
    return port


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


#: ipybox's options: group title (None: the general options) → (description, flag → the keywords
#: of `add_argument`). A table, as the declarations differ only in their values.
OPTIONS: dict[str | None, tuple[str | None, dict[str, dict[str, Any]]]] = {
    None: (
        None,
        {
            "--workspace": {
                "type": Path,
                "default": Path("."),
                "help": (
                    "working directory of the kernel; generated APIs go to WORKSPACE/mcptools/ (default: .)"
                ),
            },
            "--sandbox": {
                "action": "store_true",
                "help": (
                    "run the kernel under sandbox-runtime (srt): no network, writes only inside the workspace"
                ),
            },
            "--sandbox-config": {
                "type": Path,
                "metavar": "FILE",
                "help": (
                    "JSON sandbox policy replacing the default; without it, WORKSPACE/sandbox-config.json is "
                    "used if present (only with --sandbox)"
                ),
            },
            "--sandbox-gpus": {
                "metavar": "all|0,1",
                "help": (
                    "let the sandboxed kernel use NVIDIA GPUs: all, or some by index (0,1 or device=0,1); "
                    'overrides the policy\'s "gpus" setting (only with --sandbox; see docs/sandbox.md)'
                ),
            },
            "--resume": {
                "action": "store_true",
                "help": (
                    "rebuild each kernel that has a notebook in WORKSPACE/.ipybox/notebooks/ by running its "
                    "cells again, tool calls answered from the notebook (none is made or asked again)"
                ),
            },
            "--transport": {
                "choices": ["stdio", "streamable-http"],
                "default": "stdio",
                "help": (
                    "stdio for a local MCP client (default); streamable-http serves clients over HTTP, each "
                    "client session with its own kernel"
                ),
            },
            "--host": {"default": "127.0.0.1", "help": "address for streamable-http (default: 127.0.0.1)"},
            "--port": {"type": _port, "default": 8000, "help": "port for streamable-http (default: 8000)"},
            "--log-level": {
                "choices": ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                "default": "WARNING",
                "help": "log level; logs go to stderr (default: WARNING)",
            },
        },
    ),
    "kernels": (
        "Limits, audit log and environment of the kernels.",
        {
            "--memory-limit": {
                "type": _size,
                "metavar": "SIZE",
                "help": (
                    "memory a kernel and its processes may use together, e.g. 4G, or 'none' (default: none); "
                    "at the limit the largest process is killed (enforced with a cgroup: root or a delegated "
                    "cgroup v2, else RLIMIT_AS)"
                ),
            },
            "--process-limit": {
                "type": _count,
                "metavar": "N",
                "help": (
                    "processes and threads a kernel may run at once, or 'none' (default: none; enforced with "
                    "a cgroup: root or a delegated cgroup v2, else RLIMIT_NPROC)"
                ),
            },
            "--max-images": {
                "type": _count,
                "default": 200,
                "metavar": "N",
                "help": (
                    "images a cell's result keeps, or 'none' (default: 200); later ones are dropped and the "
                    "output says so"
                ),
            },
            "--max-image-bytes": {
                "type": _size,
                "default": 128 << 20,
                "metavar": "SIZE",
                "help": "bytes of images a cell's result keeps, or 'none' (default: 128M)",
            },
            "--max-message-bytes": {
                "type": _size,
                "default": 32 << 20,
                "metavar": "SIZE",
                "help": (
                    "largest output message ipybox takes from a kernel at once, or 'none' (default: 32M); a "
                    "larger one is dropped and the output says so"
                ),
            },
            "--max-tool-connections": {
                "type": _count,
                "default": 64,
                "metavar": "N",
                "help": (
                    "connections a kernel may hold to its tool server at once (one per thread calling "
                    "tools), or 'none' (default: 64); more are refused with an error"
                ),
            },
            "--max-tool-buffer": {
                "type": _size,
                "default": 128 << 20,
                "metavar": "SIZE",
                "help": (
                    "bytes of tool-call requests the tool server holds for a kernel at once, or 'none' "
                    "(default: 128M; a request counts as it parses, about 40 bytes per number); a "
                    "request past it is refused with an error"
                ),
            },
            "--max-spilled-outputs": {
                "type": _count,
                "default": 100,
                "metavar": "N",
                "help": (
                    "files of cut output kept in WORKSPACE/.ipybox/outputs/, the oldest removed first, or "
                    "'none' (default: 100)"
                ),
            },
            "--max-spilled-bytes": {
                "type": _size,
                "default": 256 << 20,
                "metavar": "SIZE",
                "help": "bytes those files may take together, or 'none' (default: 256M)",
            },
            "--allow-env": {
                "action": "append",
                "type": _names,
                "default": [],
                "metavar": "NAME,...",
                "help": (
                    "variables of ipybox's environment that ${VAR} placeholders in server_params may name "
                    "(repeatable); WORKSPACE/.env is always used, the rest of the environment never"
                ),
            },
            "--audit-log": {
                "type": Path,
                "metavar": "FILE",
                "help": "JSON Lines record of every tool call (default: WORKSPACE/.ipybox/audit.jsonl)",
            },
        },
    ),
    "remote kernels": (
        "Kernels on a Jupyter Kernel Gateway or Enterprise Gateway.",
        {
            "--kernel-gateway": {
                "metavar": "URL",
                "help": (
                    "run kernels on this Jupyter Kernel Gateway or Enterprise Gateway (http(s)://host:port), "
                    "one per client session; token from IPYBOX_KERNEL_GATEWAY_TOKEN (see "
                    "docs/remote-kernels.md)"
                ),
            },
            "--kernel-name": {
                "default": "python3",
                "help": "kernelspec to start on the gateway (default: python3)",
            },
            "--tool-server-host": {
                "default": "localhost",
                "help": "address the tool server listens on for gateway kernels (default: localhost)",
            },
            "--tool-server-port": {
                "type": int,
                "help": (
                    "TCP port of the tool server for gateway kernels (default: any free one; with stdio only,"
                    " as each HTTP session has a tool server of its own on a free port)"
                ),
            },
            "--kernel-tool-server-host": {
                "metavar": "HOST",
                "help": (
                    "how gateway kernels reach the tool server, e.g. a Kubernetes service name (default: "
                    "--tool-server-host)"
                ),
            },
        },
    ),
    "approval": (
        "Who approves tool calls, and how many kernels live how long.",
        {
            "--approval": {
                "default": "ask",
                "metavar": "ask|auto|FILE",
                "help": (
                    "who approves the tool calls code makes: ask the user through the client (default; tools "
                    "annotated read-only run without asking), auto (nobody), or the rules in a TOML FILE (see"
                    " docs/mcp-server.md)"
                ),
            },
            "--approve-shell-cmds": {
                "action": "store_true",
                "help": "shell commands (!cmd, %%%%bash) need approval too, the same way as tool calls",
            },
            "--kernel-idle-timeout": {
                "type": _seconds,
                "default": 3600.0,
                "metavar": "SECONDS",
                "help": "stop a kernel unused this long, or 'none' (default: 3600); its next call says so",
            },
            "--max-kernels": {
                "type": int,
                "default": 4,
                "metavar": "N",
                "help": (
                    "kernels each user may run at once (named with the tools' kernel argument; default: 4); "
                    "the warm spares of --spare-kernels come on top, for all users together"
                ),
            },
            "--spare-kernels": {
                "type": int,
                "default": 1,
                "metavar": "N",
                "help": (
                    "warm spare kernels kept for all users together, so that a reset or a crashed kernel "
                    "swaps instead of starting one; each belongs to one user's kernel (default: 1; 0: none)"
                ),
            },
        },
    ),
    "authentication": (
        "Authentication of HTTP clients.",
        {
            "--auth-tokens": {
                "type": Path,
                "metavar": "FILE",
                "help": (
                    "HTTP clients must send a bearer token from FILE: lines 'NAME TOKEN' or 'NAME "
                    "sha256:HEX'; NAME is the user (own kernels and workspace WORKSPACE/users/NAME)"
                ),
            },
            "--no-auth": {
                "action": "store_true",
                "help": (
                    "serve HTTP clients without a token (loopback only): every local user can then run code "
                    "as this user. Default: ipybox makes a token, keeps it in a file only this user can "
                    "read and prints how clients send it"
                ),
            },
            "--jwt-issuer": {"metavar": "URL", "help": "JWTs of this issuer (with --jwt-audience, --jwks)"},
            "--jwt-audience": {"metavar": "AUD", "help": "the audience JWTs must name (this server)"},
            "--jwks": {"metavar": "FILE|URL", "help": "the issuer's signing keys (JSON Web Key Set)"},
            "--shared-trust": {
                "action": "store_true",
                "help": (
                    "let several users (--auth-tokens with more than one NAME, or JWTs) share kernels' "
                    "operating-system user without --sandbox, so each can read the others' files, .env "
                    "secrets and kernel environments (without it ipybox refuses that setup); and let "
                    "users (also a single one) have programs run on the host as ipybox's user "
                    "(install_package, stdio MCP servers)"
                ),
            },
            "--shared-workspace": {
                "action": "store_true",
                "help": (
                    "authenticated users share WORKSPACE (and its registered servers and .env) instead of "
                    "each getting WORKSPACE/users/NAME; kernels stay per user"
                ),
            },
            "--public-url": {
                "metavar": "URL",
                "help": (
                    "the URL clients use for this server, for the authentication metadata (default: "
                    "http://HOST:PORT/mcp)"
                ),
            },
        },
    ),
}


def parser() -> argparse.ArgumentParser:
    """The parser of ipybox's command line."""
    p = argparse.ArgumentParser(
        prog="ipybox",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"ipybox {__version__}")
    for title, (description, options) in OPTIONS.items():
        group = p if title is None else p.add_argument_group(title, description)
        for flag, keywords in options.items():
            group.add_argument(flag, **keywords)
    return p
