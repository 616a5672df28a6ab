"""Opens MCP client sessions from ipybox server parameters (stdio, streamable HTTP, SSE)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotenv import dotenv_values

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import Tool

    from ipybox.mcp_repair import ToolReport

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ServerParamsError(ValueError):
    """Server parameters are malformed or reference a variable that is not set."""


def environment(dotenv_dir: Path | None = None) -> dict[str, str]:
    """Variables for `${VAR}` substitution: a `.env` file, overridden by the process environment."""
    path = (dotenv_dir or Path.cwd()) / ".env"
    try:
        stat = path.stat()
    except OSError:
        return dict(os.environ)
    return _dotenv(str(path), stat.st_mtime_ns, stat.st_size) | os.environ


@functools.lru_cache(maxsize=8)
def _dotenv(path: str, mtime_ns: int, size: int) -> dict[str, str]:
    """Values of one version of a `.env` file (the arguments after `path` identify the version);
    cached because every tool call resolves placeholders."""
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def substitute(value: Any, env: Mapping[str, str]) -> Any:
    """Replace `${VAR}` placeholders in every string inside `value`."""
    if isinstance(value, str):

        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ServerParamsError(
                    f"Environment variable {name!r} is referenced as ${{{name}}} in the server parameters "
                    "but is not set; set it in the environment or in a .env file."
                )
            return env[name]

        return _PLACEHOLDER.sub(lookup, value)
    if isinstance(value, dict):
        return {k: substitute(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, env) for v in value]
    return value


def placeholder_values(value: Any, env: Mapping[str, str]) -> set[str]:
    """The values that `${VAR}` placeholders in `value` resolve to (to keep them out of logs)."""
    if isinstance(value, str):
        return {env[name] for name in _PLACEHOLDER.findall(value) if name in env}
    if isinstance(value, Mapping):
        return set().union(*(placeholder_values(v, env) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(placeholder_values(v, env) for v in value))
    return set()


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value (of 4 characters or more) replaced by `***`."""
    for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def transport_of(params: Mapping[str, Any]) -> str:
    """Return "stdio", "streamable_http" or "sse", validating the parameters on the way."""
    if not isinstance(params, Mapping):
        raise ServerParamsError(f"server_params must be a dict, not {type(params).__name__}.")
    if "command" in params and "url" in params:
        raise ServerParamsError("server_params must have either 'command' (stdio) or 'url' (HTTP), not both.")
    if "command" in params:
        _check(params, {"command": str, "args": list, "env": dict, "cwd": str, "type": str})
        if not params["command"]:
            raise ServerParamsError("server_params['command'] is empty.")
        if not all(isinstance(a, str) for a in params.get("args", [])):
            raise ServerParamsError("server_params['args'] must be a list of strings.")
        return "stdio"
    if "url" in params:
        _check(params, {"url": str, "headers": dict, "type": str})
        url = params["url"]
        if not url.startswith(("http://", "https://")):
            raise ServerParamsError(f"server_params['url'] must be an http(s) URL, got {url!r}.")
        kind = params.get("type")
        if kind is None:
            return "sse" if "/sse" in url else "streamable_http"
        kind = {"streamable-http": "streamable_http", "http": "streamable_http"}.get(kind, kind)
        if kind not in ("streamable_http", "sse"):
            raise ServerParamsError(
                f"server_params['type'] must be 'streamable_http' or 'sse', got {kind!r}."
            )
        return str(kind)
    raise ServerParamsError(
        "server_params needs 'command' (and optional 'args', 'env', 'cwd') for a stdio server, "
        "or 'url' (and optional 'headers', 'type') for an HTTP server."
    )


def _check(params: Mapping[str, Any], types: Mapping[str, type]) -> None:
    for key, value in params.items():
        if key not in types:
            raise ServerParamsError(f"Unknown key {key!r} in server_params; allowed: {', '.join(types)}.")
        if not isinstance(value, types[key]):
            raise ServerParamsError(
                f"server_params[{key!r}] must be {types[key].__name__}, not {type(value).__name__}."
            )


@contextlib.asynccontextmanager
async def open_session(
    params: Mapping[str, Any], env: Mapping[str, str] | None = None, *, report: ToolReport | None = None
) -> AsyncIterator[ClientSession]:
    """Connect to an MCP server and yield an initialized session.

    `${VAR}` placeholders are resolved from `env` (default: `.env` plus the environment).
    Tools the SDK would reject are repaired or left out of every listing (see `ipybox.mcp_repair`),
    so one malformed tool does not cost the others; `report` records which and why.
    """
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.sse import sse_client
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from ipybox.mcp_repair import ToolRepair

    kind = transport_of(params)
    resolved = substitute(dict(params), environment() if env is None else env)
    async with contextlib.AsyncExitStack() as stack:
        if kind == "stdio":
            server = StdioServerParameters(
                command=resolved["command"],
                args=resolved.get("args", []),
                env=resolved.get("env"),
                cwd=resolved.get("cwd"),
            )
            with open(os.devnull, "w") as devnull:
                read, write = await stack.enter_async_context(stdio_client(server, errlog=devnull))
        elif kind == "sse":
            read, write = await stack.enter_async_context(
                sse_client(resolved["url"], headers=resolved.get("headers"))
            )
        else:
            http = await stack.enter_async_context(create_mcp_http_client(headers=resolved.get("headers")))
            read, write = await stack.enter_async_context(
                streamable_http_client(resolved["url"], http_client=http)
            )
        session = await stack.enter_async_context(ClientSession(*ToolRepair(report).streams(read, write)))
        await session.initialize()
        yield session


async def list_all_tools(session: ClientSession) -> list[Tool]:
    """Every tool of a server, following pagination cursors."""
    from mcp.types import PaginatedRequestParams

    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def describe_error(error: BaseException | None) -> str:
    """One readable line for an error, flattening the exception groups of anyio task groups."""
    if error is None:
        return ""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe_error(e) for e in error.exceptions)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
