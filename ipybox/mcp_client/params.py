"""Server parameters: which transport they name, and whether they are well formed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ipybox.errors import IpyboxError


class ServerParamsError(IpyboxError, ValueError):
    """Server parameters are malformed or reference a variable that is not set."""


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
