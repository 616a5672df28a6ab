"""Audit trail: one JSON line per tool call with its approval decision, duration and outcome."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

from ipybox import _safe_fs
from ipybox.mcp_client.placeholders import redacted_values

logger = logging.getLogger(__name__)

_MAX_FIELD = 2000
#: Items (list elements and dict entries, at any depth) a record keeps of one value: what a kernel
#: sends is walked in Python here, on the host's event loop, and written to disk, so both stay
#: bounded whatever its size. The rest is counted, not walked.
MAX_ITEMS = 10_000
#: Ends a list cut to `MAX_ITEMS` (with the count of the items left out), or is the key of the
#: entry that ends a dict cut so.
MORE = "…"


def left_out(count: int, of_list: bool) -> str:
    """What ends a list (`of_list`) or dict a record cut short, leaving out `count` items."""
    return f"{MORE} {count} more items not kept" if of_list else f"{count} more entries not kept"


def redact_value(
    value: Any, secrets: Iterable[str], limit: int | None = _MAX_FIELD, items: int = MAX_ITEMS
) -> Any:
    """`value` (JSON-like) as a record keeps it: each secret in its strings (keys too) replaced by
    `***`, each string (keys too) cut to `limit` characters (None: not cut) with `…` marking the cut, and at
    most `items` list elements and dict entries in all, each list or dict cut short ending with
    `MORE` and how many it left out.

    The audit log and the session notebooks (`ipybox.notebook`) keep tool calls by these rules.
    """
    return _Redaction(tuple(secrets), limit, items).walk(value)


class _Redaction:
    def __init__(self, secrets: tuple[str, ...], limit: int | None, items: int) -> None:
        self.secrets = redacted_values(secrets)  # sorted once, not for each string
        self.limit, self.left = limit, items

    def walk(self, value: Any) -> Any:
        if isinstance(value, str):
            for secret in self.secrets:
                value = value.replace(secret, "***")
            return value if self.limit is None or len(value) <= self.limit else value[: self.limit] + "…"
        if isinstance(value, dict):  # its keys are taken before any value is walked, as a list's items
            keys = list(islice(value, max(self.left, 0)))
            self.left -= len(keys)
            kept = {self.walk(k) if isinstance(k, str) else k: self.walk(value[k]) for k in keys}
            if len(keys) < len(value):
                kept[MORE] = left_out(len(value) - len(keys), of_list=False)
            return kept
        if isinstance(value, list | tuple):
            cut = value[: max(self.left, 0)]
            self.left -= len(cut)
            walked = [self.walk(item) for item in cut]
            if len(cut) < len(value):
                walked.append(left_out(len(value) - len(cut), of_list=True))
            return walked
        return value


class AuditLog:
    """Appends tool call records to a JSON Lines file.

    Values of secrets (whatever `${VAR}` placeholders resolved to) are replaced by `***`
    wherever they would appear in a record.

    Below `trusted` (the kernel's working directory, which its code can write) the log's
    directories are walked and the file opened without following links, and only a regular
    file with no other hard link is written: else code from an earlier session could have
    planted a link that makes ipybox append to some other file. Such a record is not written;
    the error is logged, naming the path.

    With `keep_open` (a tool server's log: a tool call writes one record, and the safe open costs
    more than the call's own work) the file checked and opened so stays open across records until
    `close()`; each record first checks that the path still names that file, and opens it afresh,
    checked again, when it does not (moved, deleted, or replaced by whatever a kernel planted).
    """

    def __init__(self, path: Path, *, trusted: Path | None = None, keep_open: bool = False) -> None:
        self.path = Path(path)
        self._keep_open = keep_open
        self._trusted = trusted
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._file: BinaryIO | None = None  # the checked file, open for appending
        self._identity: tuple[int, int] | None = None  # its (st_dev, st_ino)

    def add_secrets(self, values: Iterable[str]) -> None:
        """Never write these values (e.g. resolved `${VAR}` placeholders)."""
        self._secrets.update(values)

    def _redact(self, value: Any) -> Any:
        return redact_value(value, self._secrets)

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

    def create(self) -> None:
        """Make the log file (empty if new) and its directories now, before a sandbox starts.

        A sandbox keeps its kernel from writing the log by mounting what lies at its path
        read-only; for a missing path `srt` makes an empty mode-0444 file on the host itself,
        which ipybox, run as a normal user, then may not append to (root may: so only normal
        users lost their audit trail).
        """
        with self._lock:
            try:
                os.close(self._open())
            except OSError as e:  # UnsafePathError too
                logger.error("cannot create the audit log %s: %s", self.path, e)

    def close(self) -> None:
        """Close the log file until the next record (which opens it again)."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._identity = None, None

    def _write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(self._redact(entry), default=str) + "\n"
        with self._lock:
            if self._file is None or not self._still_names_file():
                self._forget()
                try:
                    fd = self._open()
                except _safe_fs.UnsafePathError as e:
                    logger.error("not writing the audit log %s: %s", self.path, e)
                    return
                info = os.fstat(fd)
                self._file, self._identity = os.fdopen(fd, "ab", buffering=0), (info.st_dev, info.st_ino)
            try:
                self._file.write(line.encode())
            finally:
                if not self._keep_open:
                    self._forget()

    def _still_names_file(self) -> bool:
        """Whether the path names the open file still (only to notice a replaced one: what is
        written goes to the open file, never through the path)."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity

    def _open(self) -> int:
        trusted = self._trusted
        bases = (trusted, trusted.resolve()) if trusted is not None else ()
        for base in bases:
            parts = _safe_fs.parts_below(self.path, base)
            if parts:
                break
        else:  # a place the application chose: only the file itself is not followed
            self.path.parent.mkdir(parents=True, exist_ok=True)
            base, parts = self.path.parent, (self.path.name,)
        with _safe_fs.opendir(base, parts[:-1], create=True) as fd:
            return _safe_fs.open_append(fd, parts[-1], self.path)
