"""Who approves the tool calls a cell makes: the user (asked through the client), rules, or nobody."""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ipybox.tool_exec.approval import display
from ipybox.tool_exec.registry import state_dir
from ipybox.tool_exec.server import SHELL_SERVER

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
    #: What the calling code hears when a rule denies the call (the agent must know no person said no).
    refusal: str | None = None


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
                where = f"rule {number} of {self.source}"
                return Verdict(rule.action, where, _refusal(where, rule) if rule.action == "deny" else None)
        if read_only:
            return Verdict("allow", "read-only tool (readOnlyHint)")
        return Verdict("ask", "ask")


def _refusal(where: str, rule: Rule) -> str:
    return (
        f"denied by a standing approval rule, not by a person: {where} (server = {json.dumps(rule.server)}, "
        f'tool = {json.dumps(rule.tool)}, action = "deny"). Every such call is denied until the user '
        "changes that rule: do not retry it; tell the user which call the rule stopped"
    )


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


#: The title of every question (elicitation form) about a call.
QUESTION_TITLE = "Allow this call from code running in ipybox?"
#: Characters of each argument's value shown in a question (each argument has its own).
QUESTION_VALUE_LIMIT = 500
#: Characters all arguments of a question take before each gets an equal share (see `display`).
QUESTION_ARGS_LIMIT = 3000
#: Seconds the full arguments of a question stay in the state directory, and how many files and
#: bytes of them at most (the newest kept): a kernel can ask any number of questions.
_SPILL_KEEP = 86400
_SPILL_FILES = 200
_SPILL_BYTES = 64 << 20


def describe_call(server: str, tool: str, args: dict[str, Any]) -> str:
    """The question put to the user: every name and value escaped (see `display`) and set in a
    fenced code block, so a client that renders the message as Markdown shows them as text (no
    image fetched, no link, no heading or emphasis); a value too long to show is cut with a note
    naming the file, outside the workspace, that holds all of them."""
    spill = _Spill(args)
    if server == SHELL_SERVER and isinstance(args.get("cmd"), str):  # --approve-shell-cmds
        kind, shown = display.name(tool), display.command(args["cmd"], spill.hint)
        return _question(f"Code running in ipybox wants to run a shell command ({kind}):", shown)
    lines = [
        f"  {arg}" for arg in display.arguments(args, spill.hint, QUESTION_VALUE_LIMIT, QUESTION_ARGS_LIMIT)
    ]
    call = display.tool_name(server, tool)
    shown = f"{call}()" if not lines else "\n".join([f"{call}(", *lines, ")"])
    return _question("Code running in ipybox wants to make this tool call:", shown)


def _question(intro: str, shown: str) -> str:
    """`intro`, then `shown` in a code fence longer than any run of backticks in it, then the ask."""
    fence = "`" * max(3, 1 + max(map(len, re.findall("`+", shown)), default=0))
    return f"{intro}\n{fence}\n{shown}\n{fence}\nAllow it?"


class _Spill:
    """Where all of a question's arguments can be read when one is cut: a file written on the first
    `hint()`, as ASCII-only JSON (so printing it is safe too), in ipybox's state directory."""

    def __init__(self, args: dict[str, Any]) -> None:
        self._args = args
        self._where: str | None = None

    def hint(self, label: str | None) -> str:
        if self._where is None:
            self._where = _spill(self._args)
        return self._where


def _spill(args: dict[str, Any]) -> str:
    text = json.dumps(args, ensure_ascii=True, indent=1, default=repr)
    if len(text) > _SPILL_BYTES // 4:  # one question may not push out all the others
        return f"all of it ({len(text):,} characters) is too much to keep: decline unless you know what it is"
    folder = state_dir() / "approvals"
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _prune(folder, room=len(text))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except OSError as e:
        return f"all of it could not be saved ({e.strerror or e}): decline unless you know what it holds"
    return f"all arguments, in full: {display.escape(str(path))} on the ipybox host"


def _prune(folder: Path, room: int) -> None:
    """Remove the saved questions older than a day, then the oldest until one more file of `room`
    bytes stays within `_SPILL_FILES` and `_SPILL_BYTES`."""
    saved = []
    for entry in folder.glob("*.json"):
        with contextlib.suppress(OSError):
            info = entry.stat()
            if info.st_mtime < time.time() - _SPILL_KEEP:
                entry.unlink()
            else:
                saved.append((info.st_mtime, info.st_size, entry))
    saved.sort()
    total = sum(size for _, size, _ in saved)
    while saved and (len(saved) >= _SPILL_FILES or total + room > _SPILL_BYTES):
        _, size, entry = saved.pop(0)
        total -= size
        with contextlib.suppress(OSError):
            entry.unlink()


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
