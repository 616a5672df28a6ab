"""Audit trail: one JSON line per tool call with its approval decision, duration and outcome."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ipybox.mcp_client.placeholders import redact

_MAX_FIELD = 2000


class AuditLog:
    """Appends tool call records to a JSON Lines file.

    Values of secrets (whatever `${VAR}` placeholders resolved to) are replaced by `***`
    wherever they would appear in a record.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._secrets: set[str] = set()

    def add_secrets(self, values: Iterable[str]) -> None:
        """Never write these values (e.g. resolved `${VAR}` placeholders)."""
        self._secrets.update(values)

    def _redact(self, value: Any) -> Any:
        if isinstance(value, str):
            value = redact(value, self._secrets)
            return value[:_MAX_FIELD] + ("…" if len(value) > _MAX_FIELD else "")
        if isinstance(value, dict):
            return {k: self._redact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._redact(v) for v in value]
        return value

    def record(
        self,
        *,
        server_name: str,
        tool_name: str,
        tool_args: dict[str, Any],
        decision: str,
        outcome: str,
        started: float,
        error: str | None = None,
        variables: Sequence[str] = (),
        rule: str | None = None,
    ) -> None:
        """Write one record. `decision`: accepted, rejected, timed_out, auto or refused.

        A call refused over a `${VAR}` placeholder names the `variables` and the `rule` it broke.
        """
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "server": server_name,
            "tool": tool_name,
            "args": tool_args,
            "decision": decision,
            "outcome": outcome,
            "duration_ms": round((time.time() - started) * 1000, 2),
        }
        if error is not None:
            entry["error"] = error
        if rule is not None:
            entry |= {"rule": rule, "variables": list(variables)}
        self._write(entry)

    def decided(self, *, server_name: str, tool_name: str, decision: str, by: str) -> None:
        """Record who or what decided a tool call (`by`: the user through the client, a rule, auto).

        The call's own record (`record()`, written by the tool server) has its arguments, redacted.
        """
        self._write(
            {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "event": "approval",
                "server": server_name,
                "tool": tool_name,
                "decision": decision,
                "by": by,
            }
        )

    def refused_registration(
        self, *, server_name: str, error: str, variables: Sequence[str] = (), rule: str = "params"
    ) -> None:
        """Record a refused server registration: its name, the rule it broke and the variables
        (names only) its `${VAR}` placeholders named; never their values."""
        self._write(
            {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "event": "registration",
                "server": server_name,
                "decision": "refused",
                "rule": rule,
                "variables": list(variables),
                "error": error,
            }
        )

    def _write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(self._redact(entry), default=str) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
