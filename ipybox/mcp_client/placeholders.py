"""The `${VAR}` secrets policy: where placeholders may stand in server parameters, where their
values come from (`Placeholders`), and keeping those values out of logs (`redact`)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

from dotenv import dotenv_values
from dotenv.variables import parse_variables

from ipybox.mcp_client.params import ServerParamsError

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: Where a `${VAR}` placeholder may stand; anywhere else it is refused.
SECRET_PLACES = "elements of 'args' and values of 'env' and 'headers'"


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
    if not S_ISREG(stat.st_mode):  # a directory: a running sandbox's stand-in for a missing `.env`
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
    for secret in redacted_values(secrets):
        text = text.replace(secret, "***")
    return text


def redacted_values(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets `redact` replaces (4 characters or more), in the order it replaces them: the
    longest first, so that a secret holding another is replaced whole."""
    return tuple(sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True))
