"""How a tool call is shown to the person who approves it, and any other text a kernel or an MCP
server supplies that a person reads (live output, a server's stderr, log lines, replies).

Every name and value comes from kernel code, so it is data: characters a terminal or a form would
act on or hide (controls, escape sequences, bidirectional overrides, zero-width and other format
characters, line separators, unassigned code points) are shown as escapes, and nothing is cut
without saying how much is hidden and where all of it can be seen. Each argument has a budget of
its own, so a long one cannot push another out of view, and all of them one they share, so many
cannot scroll the call's name off the screen. Values keep their JSON form: 2 is `2`, "2" is `"2"`,
nested values are compact JSON. Names past plain ASCII show every other character as an escape.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import unicodedata
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

#: Characters of one argument's value shown; the rest is summarised with its size.
VALUE_LIMIT = 200
#: Characters of an argument's name shown (where all of it is, is said).
NAME_LIMIT = 80
#: Characters of a server's or tool's name shown: whole within what MCP allows (128), since
#: nothing else says which tool a call runs (cut at 80, "..._safe" and "..._wipe" read the same).
TOOL_NAME_LIMIT = 200
#: Arguments shown; more are counted, never silently left out.
ARGS_LIMIT = 40
#: Characters all arguments of a one-line prompt take before each gets an equal share of them, so
#: that many long ones cannot scroll the call's name and its first arguments off the screen.
PROMPT_LIMIT = 1200
#: Characters of a shell command shown (as escaped), and its lines.
COMMAND_LIMIT = 2000
COMMAND_LINES = 40

#: Says where the whole of an argument can be seen, given its (escaped) name; None: all of them.
Hint = Callable[[str | None], str]

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
#: Letters and symbols that draw nothing (Hangul fillers, the blank braille pattern).
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800")
#: Marks that draw nothing (Unicode's default-ignorable ones outside the hidden categories): the
#: combining grapheme joiner, Khmer inherent vowels, Mongolian and other variation selectors.
#: Each may follow any character, so a run of them would carry data a person cannot see.
_INVISIBLE_MARKS = frozenset("\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f") | frozenset(
    map(chr, [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])
)
_DRAW_NOTHING = _BLANK | _INVISIBLE_MARKS
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
#: Combining marks shown on one character; more are escaped.
_MARKS = 2
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]*")


def _visible(char: str) -> str:
    """`char` itself, or its escape if a terminal or form would act on it or draw nothing."""
    if char == " " or (" " < char < "\x7f"):
        return char
    if char in _SHORT:
        return _SHORT[char]
    if char not in _DRAW_NOTHING and unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    return _escaped(char)


def _escaped(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # as JSON writes it: a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def escape(text: str) -> str:
    """`text` with every character a person could not see, or a terminal would act on, escaped;
    combining marks past `_MARKS` on one character too (a stack of them smears over other text).

    At C speed (a kernel's output passes here on the event loop): each character's form is looked
    up in a table filled as characters are first met, and so is whether it is a mark."""
    if text.isascii() and text.isprintable():
        return text
    for table in (_SHOWN, _MARK):
        if len(table) > _TABLE_LIMIT:
            table.clear()
    flags = text.translate(_MARK)  # one letter per character: "m" for a mark
    if "m" * (_MARKS + 1) not in flags:
        return text.translate(_SHOWN)
    shown, done = [], 0
    for run in _STACK.finditer(flags):  # past `_MARKS` marks in a row: the rest escaped
        cut = run.start() + _MARKS
        shown += [text[done:cut].translate(_SHOWN), *map(_escaped, text[cut : run.end()])]
        done = run.end()
    return "".join([*shown, text[done:].translate(_SHOWN)])


class _Table(dict[int, str]):
    """A `str.translate` table whose entries `entry(character)` makes when a character is first met."""

    def __init__(self, entry: Callable[[str], str]) -> None:
        super().__init__()
        self._entry = entry

    def __missing__(self, code: int) -> str:
        made = self[code] = self._entry(chr(code))
        return made


_SHOWN = _Table(lambda char: _visible(char))
_MARK = _Table(lambda char: "m" if unicodedata.combining(char) or unicodedata.category(char) == "Me" else ".")
_STACK = re.compile(f"m{{{_MARKS + 1},}}")
#: Characters a table keeps (a kernel printing every code point would fill 100 MB).
_TABLE_LIMIT = 1 << 16


def lines(text: str) -> str:
    """`text` of several lines (a kernel's output, a server's stderr) for a person to read: each
    line escaped as `escape()` does, line breaks (`\\n`) kept."""
    return "\n".join(map(escape, text.split("\n")))


def acting(text: str) -> str:
    """`text` (a cell's output, for an agent whose client also shows it to a person) with only the
    characters that act escaped: controls but line breaks and tabs (a terminal moves, erases,
    recolours or runs a command for them), bidirectional controls and line separators (a renderer
    reorders or breaks the text). Everything drawn stays, emoji sequences and their joiners too."""
    return text if text.isascii() and text.isprintable() else text.translate(_ACTING)


_ACTING = {
    code: _SHORT.get(chr(code)) or _escaped(chr(code))
    for code in [
        *(c for c in range(0x20) if chr(c) not in "\n\t"),
        *range(0x7F, 0xA0),
        0x061C,
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x2028,
        0x2029,
    ]
}


def as_shown(text: str) -> str:
    """`text` with its carriage returns applied as a terminal applies them: what follows a `\r`
    is written over the start of its line. A progress bar's hundred updates of one line leave
    the last one, as the person who ran the cell saw it, instead of all of them; and no `\r`
    is left for a renderer that reads it as a line end (Markdown) to act on."""
    if "\r" not in text:
        return text
    return "\n".join(_overwritten(line) if "\r" in line else line for line in text.split("\n"))


def _overwritten(line: str) -> str:
    """What stays of `line`'s parts, each written over the start of those before it: each
    character comes from the last part that reaches it, so the parts are taken from the last,
    each adding what it holds past the longest after it (linear: written over one by one, a
    long line and a million short overwrites took minutes)."""
    kept: list[str] = []
    reached = 0
    for part in reversed(line.split("\r")):
        if len(part) > reached:
            kept.append(part[reached:])
            reached = len(part)
    return "".join(kept)


class LogFormatter(logging.Formatter):
    """Log lines as `lines()` shows text: what they quote of a kernel's or a server's text (a
    path it made, its error) cannot act on the terminal or log window that shows them."""

    def format(self, record: logging.LogRecord) -> str:
        return lines(super().format(record))


def log_handler() -> logging.Handler:
    """The stderr handler of ipybox's own programs (the MCP server, a standalone tool server)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    return handler


def quote(text: str) -> str:
    """`text` as a JSON string literal, escaped as `escape()` does (so backslashes are doubled)."""
    return escape(json.dumps(text, ensure_ascii=False))


def name(text: str, limit: int = NAME_LIMIT) -> str:
    """A server, tool or argument name: as it is if plainly a name (ASCII), else quoted with every
    other character escaped, so a name that looks like another (`еcho` with a Cyrillic `е`, a
    fullwidth dot) shows what it is made of; past `limit` characters cut, saying how long it is."""
    if len(text) <= limit and _PLAIN_NAME.fullmatch(text):
        return text
    if len(text) <= limit:
        return _ascii_quote(text)
    return f"{_ascii_quote(text[:limit])}…[name of {len(text):,} characters]"


def tool_name(server: str, tool: str) -> str:
    """`server.tool` as a call's prompt or question names it (`name()`, within `TOOL_NAME_LIMIT`)."""
    return f"{name(server, TOOL_NAME_LIMIT)}.{name(tool, TOOL_NAME_LIMIT)}"


def _ascii_quote(text: str) -> str:
    return escape(json.dumps(text))  # ensure_ascii: every character past ASCII as its escape


def value(data: Any, hint: Callable[[], str], limit: int = VALUE_LIMIT) -> str:
    """One argument's value as compact JSON, escaped; past `limit` characters cut, saying how much
    is hidden and `hint()` (where all of it is)."""
    if isinstance(data, str):
        if len(data) <= limit:
            return quote(data)
        return f"{quote(data[:limit])}…[{len(data) - limit:,} more characters not shown; {hint()}]"
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(", ", ": "), default=repr)
    except (RecursionError, ValueError):
        return f"[a value nested too deeply to show; {hint()}]"
    if len(text) <= limit:
        return escape(text)
    hidden = len(text) - limit
    return f"{escape(_whole_escapes(text[:limit]))}…[{hidden:,} more characters not shown; {hint()}]"


def _whole_escapes(text: str) -> str:
    """`text` (cut JSON) without a JSON escape that the cut split, so no half escape is shown."""
    start = text.rfind("\\", max(0, len(text) - 6))
    if start < 0:
        return text
    run = len(text[: start + 1]) - len(text[: start + 1].rstrip("\\"))
    if run % 2 == 0:  # the last backslash closes a `\\`
        return text
    rest = text[start + 1 :]
    complete = (rest[:1] in tuple('"\\/bfnrt') and rest != "") or (rest[:1] == "u" and len(rest) >= 5)
    return text if complete else text[:start]


def arguments(
    args: Mapping[str, Any], hint: Hint, limit: int = VALUE_LIMIT, total: int | None = None
) -> list[str]:
    """`name=value` for each argument (at most `ARGS_LIMIT`, then how many more there are); each
    value gets `limit` characters of its own. Where all of them would take more than `total`
    characters, each gets an equal share of `total` instead, cut with `…`, and a last note says so."""
    items = list(args.items())[:ARGS_LIMIT]
    labels = [name(str(key)) for key, _ in items]
    values = [
        value(data, partial(hint, label), limit) for (_, data), label in zip(items, labels, strict=True)
    ]
    shown = [f"{label}={each}" for label, each in zip(labels, values, strict=True)]
    if total is not None and sum(map(len, shown)) > total:
        shares = _shares([len(each) for each in shown], total)
        for i, ((_, data), share) in enumerate(zip(items, shares, strict=True)):
            if len(shown[i]) > share:
                names, room = max(_SHARE_MIN // 2, share // 3), max(_SHARE_MIN, share - share // 3)
                shown[i] = f"{_fit(labels[i], names)}={_short(data, room, values[i])}"
        shown.append(f"…[values cut to fit one screen; {hint(None)}]")
    if len(args) > ARGS_LIMIT:
        shown.append(f"…[{len(args) - ARGS_LIMIT:,} more arguments not shown; {hint(None)}]")
    return shown


def _shares(lengths: list[int], total: int) -> list[int]:
    """Characters for each of `lengths` out of `total`: the shorter ones whole, the longer ones an
    equal share of the rest."""
    shares = [0] * len(lengths)
    left = total
    for done, i in enumerate(sorted(range(len(lengths)), key=lengths.__getitem__)):
        shares[i] = min(lengths[i], left // (len(lengths) - done))
        left -= shares[i]
    return shares


#: Characters of a value in an equal share, at least (a name gets half).
_SHARE_MIN = 16
_KINDS = {dict: "an object", list: "an array", bool: "a boolean", type(None): "null"}


def _short(data: Any, limit: int, shown: str) -> str:
    """`data` (which `value()` showed as `shown`) in about `limit` characters: a string's start,
    closed (`"abc"…`), other JSON as shown if it fits, else what it is (its JSON is not made again)."""
    if isinstance(data, str):  # only what can be shown is escaped
        return _fit(quote(data[: limit + 1]), limit)
    if len(shown) <= limit:
        return shown
    return f"…[{_KINDS.get(type(data), 'a number')}, cut]"


def _fit(shown: str, limit: int) -> str:
    """A name or a string literal, as `name()` or `quote()` shows it, cut to about `limit`
    characters: no escape split, a quoted one closed again, marked with `…`."""
    if len(shown) <= limit:
        return shown
    if not shown.startswith('"'):  # a plain name: no quote, space or escape in it
        return f"{shown[:limit]}…"
    return f'{_whole_escapes(shown[:limit])}"…'


def call(server: str, tool: str, args: Mapping[str, Any], hint: Hint) -> str:
    """A tool call on one line: `server.tool(name=value, ...)`, its arguments within `PROMPT_LIMIT`."""
    return f"{tool_name(server, tool)}({', '.join(arguments(args, hint, total=PROMPT_LIMIT))})"


def command(cmd: str, hint: Hint, limit: int = COMMAND_LIMIT) -> str:
    """A shell command, one indented `| ` line per line of it, each escaped; past `COMMAND_LINES`
    lines or `limit` characters as shown (escapes count), cut, saying how long it is in all."""
    lines = cmd[: limit + 1].split("\n", COMMAND_LINES)
    shown = "\n".join(f"  | {escape(line)}" for line in lines[:COMMAND_LINES])
    whole = len(cmd) <= limit and len(lines) <= COMMAND_LINES and len(shown) <= limit + 4 * len(lines)
    if whole:
        return shown
    shown = _whole_escapes(shown[: limit + 4 * COMMAND_LINES])
    count = cmd.count("\n") + 1
    size = f"{len(cmd):,} characters on {count:,} line{'s' if count > 1 else ''}"
    return f"{shown}…[not all shown: {size}; {hint(None)}]"


def sdk_hint(label: str | None) -> str:
    """Where an application sees all of an argument: the request's raw `tool_args`."""
    if label is None or label.endswith(" characters]"):  # all of them, or one whose name was cut
        return "all of them: request.tool_args"
    key = label if label.startswith('"') else json.dumps(label)
    return f"all of it: request.tool_args[{key}]"
