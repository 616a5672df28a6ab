"""Opens MCP client sessions from ipybox server parameters (stdio, streamable HTTP, SSE)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotenv import dotenv_values
from dotenv.variables import parse_variables

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import Tool

    from ipybox.mcp_repair import ToolReport

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: Where a `${VAR}` placeholder may stand; anywhere else it is refused.
SECRET_PLACES = "elements of 'args' and values of 'env' and 'headers'"


class ServerStartError(ConnectionError):
    """A stdio MCP server failed before its session was ready; the message ends with its stderr."""


class ServerParamsError(ValueError):
    """Server parameters are malformed or reference a variable that is not set."""


class PlaceholderError(ServerParamsError):
    """A `${VAR}` placeholder was refused: the message names the variables and the rule, never a value.

    `rule` is "placement" (a placeholder where no secret may go) or "source" (a variable that
    is not available for substitution).
    """

    def __init__(self, message: str, variables: Sequence[str], rule: str) -> None:
        super().__init__(message)
        self.variables = sorted(set(variables))
        self.rule = rule


@dataclass(frozen=True)
class Placeholders:
    """Where `${VAR}` placeholders in server parameters take their values from.

    - `mapping` given: exactly these values (an application's explicit, trusted choice);
    - else the workspace's `.env` file plus the variables of ipybox's environment named in
      `allow_env` (the environment wins where both set a name); `allow_env=None` allows the whole
      environment, for applications that write their server parameters themselves.

    `.env` values may refer to earlier `.env` entries and to allowed variables as `${VAR}`.
    """

    workspace: Path
    allow_env: frozenset[str] | None = None
    mapping: Mapping[str, str] | None = None

    @classmethod
    def of(
        cls, workspace: Path, allow_env: Iterable[str] | None = None, mapping: Mapping[str, str] | None = None
    ) -> Placeholders:
        allowed = None if allow_env is None else frozenset(allow_env)
        return cls(Path(workspace), allowed, None if mapping is None else dict(mapping))

    def values(self) -> dict[str, str]:
        """The values placeholders may take now (`.env` is re-read when it changes)."""
        if self.mapping is not None:
            return dict(self.mapping)
        allowed = {
            name: value
            for name, value in os.environ.items()
            if self.allow_env is None or name in self.allow_env
        }
        return _dotenv_values(self.workspace / ".env", allowed) | allowed

    def describe(self) -> str:
        """Where values come from, for error messages (names only)."""
        if self.mapping is not None:
            return "the placeholder_env mapping the application passed"
        dotenv = self.workspace / ".env"
        if self.allow_env is None:
            return f"ipybox's environment and {dotenv}"
        allowed = ", ".join(sorted(self.allow_env)) or "none so far"
        return (
            f"{dotenv} and the variables of ipybox's environment allowed with --allow-env / allow_env "
            f"(allowed: {allowed})"
        )


def _dotenv_values(path: Path, context: Mapping[str, str]) -> dict[str, str]:
    """The values of a `.env` file, `${VAR}` in them resolved from earlier entries and `context` only
    (python-dotenv would use the whole process environment)."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    values: dict[str, str] = {}
    for name, raw in _dotenv(str(path), stat.st_mtime_ns, stat.st_size):
        env = values | dict(context)
        values[name] = "".join(atom.resolve(env) for atom in parse_variables(raw))
    return values


@functools.lru_cache(maxsize=8)
def _dotenv(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, str], ...]:
    """Raw entries of one version of a `.env` file (the arguments after `path` identify the version);
    cached because every tool call resolves placeholders."""
    entries = dotenv_values(path, interpolate=False).items()
    return tuple((k, v) for k, v in entries if v is not None)


def _strings(params: Mapping[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """Every string in (validated) server parameters: where it is, the text, whether a secret may go there."""
    for key, value in params.items():
        where = f"server_params[{key!r}]"
        if key == "args" and isinstance(value, list):
            for i, arg in enumerate(value):
                yield f"{where}[{i}]", str(arg), True
        elif key in ("env", "headers") and isinstance(value, Mapping):
            for name, item in value.items():
                yield f"the name {name!r} in {where}", str(name), False
                yield f"{where}[{name!r}]", str(item), True
        else:
            yield where, str(value), False


def resolve(
    params: Mapping[str, Any], env: Mapping[str, str], source: str = "the environment"
) -> dict[str, Any]:
    """`params` with `${VAR}` placeholders filled from `env`, in one pass (values are not re-scanned).

    A placeholder may stand only in elements of `args` and in values of `env` and `headers`:
    never in a URL (host, path, query or anything else), a command, `cwd`, `type` or a name, so a
    secret never becomes part of an address or a command line, where logs, process lists and the
    host a URL names would see it. (A header value still goes to the server that is registered:
    which variables may be used at all is the allow-list's job.) Raises `PlaceholderError`
    naming the variables and the rule (never a value); `source` says where values come from.
    """
    misplaced = [(n, w) for w, text, ok in _strings(params) if not ok for n in _PLACEHOLDER.findall(text)]
    if misplaced:
        raise PlaceholderError(
            "; ".join(f"${{{name}}} in {where}" for name, where in misplaced)
            + f" is refused: placeholders are filled only in {SECRET_PLACES}, never in a URL, a "
            "command, 'cwd', 'type' or a name, so a secret never becomes part of an address or a command "
            "line. Pass a secret in a header or in the server's env instead.",
            [name for name, _ in misplaced],
            "placement",
        )
    missing = [(n, w) for w, text, _ in _strings(params) for n in _PLACEHOLDER.findall(text) if n not in env]
    if missing:
        raise PlaceholderError(
            "; ".join(f"${{{name}}} in {where}" for name, where in missing)
            + f" cannot be filled: placeholders take values only from {source}, and "
            + ("these variables are" if len({n for n, _ in missing}) > 1 else "this variable is")
            + " not among them.",
            [name for name, _ in missing],
            "source",
        )
    return {key: _fill(key, value, env) for key, value in params.items()}


def _fill(key: str, value: Any, env: Mapping[str, str]) -> Any:
    def lookup(match: re.Match[str]) -> str:
        return env[match.group(1)]

    if key == "args" and isinstance(value, list):
        return [_PLACEHOLDER.sub(lookup, arg) for arg in value]
    if key in ("env", "headers") and isinstance(value, Mapping):
        return {name: _PLACEHOLDER.sub(lookup, item) for name, item in value.items()}
    return value


def placeholder_names(params: Any) -> set[str]:
    """The variables `${VAR}` placeholders anywhere in `params` name."""
    if isinstance(params, str):
        return set(_PLACEHOLDER.findall(params))
    if isinstance(params, Mapping):
        return set().union(*(placeholder_names(k) | placeholder_names(v) for k, v in params.items()))
    if isinstance(params, list):
        return set().union(*(placeholder_names(v) for v in params))
    return set()


def placeholder_values(value: Any, env: Mapping[str, str]) -> set[str]:
    """The values that `${VAR}` placeholders in `value` resolve to (to keep them out of logs)."""
    return {env[name] for name in placeholder_names(value) if name in env}


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
        _check_strings(params, "env")
        return "stdio"
    if "url" in params:
        _check(params, {"url": str, "headers": dict, "type": str})
        _check_strings(params, "headers")
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


def _check_strings(params: Mapping[str, Any], key: str) -> None:
    if not all(isinstance(v, str) for v in params.get(key, {}).values()):
        raise ServerParamsError(f"server_params[{key!r}] must map names to strings (no nested values).")


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
    params: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    report: ToolReport | None = None,
    source: str = "the values given",
) -> AsyncIterator[ClientSession]:
    """Connect to an MCP server and yield an initialized session.

    `${VAR}` placeholders are resolved from `env` (default: `.env` in the current directory plus
    the environment) by the rule of `resolve()`; `source` names where `env` came from.
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
    if env is None:
        placeholders = Placeholders.of(Path.cwd())
        env, source = placeholders.values(), placeholders.describe()
    resolved = resolve(params, env, source)
    stderr: StderrTail | None = None
    async with contextlib.AsyncExitStack() as stack:
        if kind == "stdio":
            # never the current directory, which may be the kernel-writable workspace: a planted
            # node_modules/, srv.py or .npmrc there would run with the server, on the host
            cwd = resolved.get("cwd")
            if not cwd:
                cwd = stack.enter_context(tempfile.TemporaryDirectory(prefix="ipybox-mcp-"))
            server = StdioServerParameters(
                command=resolved["command"],
                args=resolved.get("args", []),
                env=passed_through_env() | (resolved.get("env") or {}),
                cwd=cwd,
            )
            stderr = stack.enter_context(StderrTail())
            read, write = await stack.enter_async_context(stdio_client(server, errlog=stderr.file))
            stderr.file.close()  # the server holds its own copy; EOF comes when it exits
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
        try:
            await session.initialize()
        except Exception as e:
            if stderr is not None and (lines := stderr.lines()):
                reason = f"{describe_error(e)}; the server's stderr ended with:\n{lines}"
                raise ServerStartError(reason) from e
            raise
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


# --- what stdio servers get besides their params' env ----------------------------------------------

#: Variables a stdio server gets from ipybox's environment besides the MCP SDK's minimal set
#: (HOME, LOGNAME, PATH, SHELL, TERM, USER): where to find CA certificates and the proxy, without
#: which a server behind a TLS-intercepting proxy cannot reach the network. Its params' `env` wins.
PASSED_THROUGH = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)


def passed_through_env() -> dict[str, str]:
    """The `PASSED_THROUGH` variables set in ipybox's environment."""
    return {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}


class StderrTail(contextlib.AbstractContextManager["StderrTail"]):
    """Keeps the last lines a stdio server writes to stderr (`file`), to explain why it failed.

    Read on the running event loop from a pipe, so a chatty server costs a bounded buffer; the
    pipe is closed when the context ends.
    """

    def __init__(self, keep: int = 20) -> None:
        import asyncio
        from collections import deque

        self._loop = asyncio.get_running_loop()
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        self.file = os.fdopen(write, "w")
        self._keep = keep
        self._tail: deque[bytes] = deque(maxlen=keep)
        self._partial = b""
        self._loop.add_reader(self._read, self._drain)

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._loop.remove_reader(self._read)
                return
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            self._tail.extend(line for line in complete if line.strip())
            self._partial = self._partial[-4096:]

    def lines(self) -> str:
        """What the server wrote last (up to `keep` lines), indented."""
        self._drain()
        last = [*self._tail, *([self._partial] if self._partial.strip() else [])][-self._keep :]
        return "\n".join("  " + line.decode(errors="replace").rstrip() for line in last)

    def __exit__(self, *exc: object) -> None:
        self._loop.remove_reader(self._read)
        os.close(self._read)
        self.file.close()
