"""Who approves the tool calls a cell makes: the user (asked through the client), rules, or nobody."""

from __future__ import annotations

import fnmatch
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ipybox.tool_exec.registry import state_dir

Action = Literal["allow", "ask", "deny"]
_ACTIONS = ("allow", "ask", "deny")


@dataclass(frozen=True)
class Rule:
    """Tool calls whose server and tool names match these globs get `action`."""

    server: str
    tool: str
    action: Action


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str  # what decided, for the audit log


@dataclass(frozen=True)
class ApprovalPolicy:
    """`ask` (the default), `auto`, or ordered rules read from a TOML file.

    Tools that declare `readOnlyHint: true` run without asking, unless a rule says otherwise.
    """

    mode: Literal["ask", "auto", "rules"] = "ask"
    rules: tuple[Rule, ...] = ()
    source: str = ""

    @classmethod
    def parse(cls, value: str) -> ApprovalPolicy:
        """`ask`, `auto` or the path of a rules file; raises ValueError naming what is wrong."""
        if value == "ask":
            return cls(mode="ask")
        if value == "auto":
            return cls(mode="auto")
        path = Path(value).expanduser()
        try:
            data = tomllib.loads(path.read_text())
        except OSError as e:
            raise ValueError(f"cannot read the approval rules file {path}: {e.strerror or e}") from None
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"the approval rules file {path} is not valid TOML: {e}") from None
        return cls(mode="rules", rules=_rules(data, path), source=str(path.resolve()))

    def decide(self, server: str, tool: str, read_only: bool) -> Verdict:
        if self.mode == "auto":
            return Verdict("allow", "auto (--approval auto)")
        for number, rule in enumerate(self.rules, 1):
            if fnmatch.fnmatchcase(server, rule.server) and fnmatch.fnmatchcase(tool, rule.tool):
                return Verdict(rule.action, f"rule {number} of {self.source}")
        if read_only:
            return Verdict("allow", "read-only tool (readOnlyHint)")
        return Verdict("ask", "ask")


def _rules(data: dict[str, Any], path: Path) -> tuple[Rule, ...]:
    entries = data.get("rule", [])
    unknown = set(data) - {"rule"}
    if unknown or not isinstance(entries, list):
        raise ValueError(
            f"{path}: expected only [[rule]] tables (server, tool, action), found {sorted(unknown) or 'rule'}"
        )
    rules: list[Rule] = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: rule {number} is not a table")
        extra = set(entry) - {"server", "tool", "action"}
        server, tool, action = entry.get("server", "*"), entry.get("tool", "*"), entry.get("action")
        if extra or not isinstance(server, str) or not isinstance(tool, str) or action not in _ACTIONS:
            raise ValueError(
                f'{path}: rule {number} must have action = "allow", "ask" or "deny" and optional '
                f"server and tool globs (strings); got {entry!r}"
            )
        rules.append(Rule(server, tool, action))
    return tuple(rules)


def describe_call(server: str, tool: str, args: dict[str, Any]) -> str:
    """The question put to the user."""
    shown = json.dumps(args, ensure_ascii=False, default=str)
    if len(shown) > 1500:
        shown = shown[:1500] + " …"
    if server == "ipybox":  # shell commands (--approve-shell-cmds)
        return f"Code running in ipybox wants to run a shell command: {args.get('cmd', shown)}\nAllow it?"
    return f"Code running in ipybox wants to call {server}.{tool} with {shown}\nAllow it?"


class ReadOnlyTools:
    """Which registered tools declare `readOnlyHint: true`, per workspace.

    Kept in ipybox's state directory, outside every workspace, so code in a kernel cannot mark
    a tool read-only to skip the question.
    """

    def __init__(self, workspace: Path) -> None:
        self._file = state_dir() / "read-only-tools.json"
        self._key = str(workspace.resolve())

    def _load(self) -> dict[str, dict[str, list[str]]]:
        try:
            data = json.loads(self._file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def set(self, server: str, tools: frozenset[str]) -> None:
        data = self._load()
        data.setdefault(self._key, {})[server] = sorted(tools)
        self._file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_suffix(f".{id(self)}.tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self._file)

    def __contains__(self, call: tuple[str, str]) -> bool:
        server, tool = call
        return tool in self._load().get(self._key, {}).get(server, [])
