"""A kernel's JSON text as the host sees it before parsing it: how deep it nests, and how much
memory its values would take once parsed, read off the bytes outside its strings at C speed.

Parsing is where a kernel's request costs the host most: `json.loads` makes one Python object of
60-odd bytes for each value, so three bytes of text (`{},`) can take 70 bytes of memory, and a
request whose text fits the tool server's budget many times over may not fit once parsed. The
counts here decide before `json.loads` runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import sub
from typing import Any

from ipybox._nesting import MAX_NESTING
from ipybox.errors import IpyboxError

#: Bytes of memory `json.loads` takes at most per thing it makes, beyond the text it copies into
#: strings (CPython 3.11, with room to spare; tests/test_json_text.py holds them to the real
#: parser on the costliest shapes): per list (56 and room for 4 items, as append grows it),
#: dict (one entry: 184), dict entry, string (49 to 76 and its characters), and any value (a
#: slot in its list, and the largest float or int whose text is shorter than the int).
_LIST, _DICT, _ENTRY, _STRING_OBJECT, _VALUE = 96, 200, 48, 80, 40
#: What one parse takes besides (the scanner, its memo of keys, the interpreter's own).
_PARSER = 64 << 10
#: A guess from every byte of the text, strings too, of at most this much is good enough: what it
#: holds of the budget does not matter, and the text is not read any closer.
_CLOSE_READ = 1 << 20
#: The most bytes CPython keeps a character in (a `str` of any character past U+FFFF).
_WIDEST = 4

_STRING = re.compile(rb'"[^"]*"')
#: UTF-8 bytes below the lead byte of a character past U+00FF (0xC4), and of one past U+FFFF.
_BELOW_WIDE, _BELOW_ASTRAL = bytes(range(0xC4)), bytes(range(0xF0))
#: Escapes of high surrogates: half of a character past U+FFFF.
_SURROGATES = tuple(f"\\u{d}{x}".encode() for d in "dD" for x in "89abAB")
#: Brackets as the change in depth they make, plus one (bytes are unsigned); all else dropped.
_DEPTH = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OUTSIDE = (b",", b":", b"[", b"{")


@dataclass(frozen=True)
class JsonText:
    """What UTF-8 `text` would cost to parse (`measure`)."""

    size: int  # bytes of text
    parsed_bytes: int  # at most what the value parsed from it holds
    too_deep: bool  # it nests more than MAX_NESTING levels deep
    decoded_bytes: int  # at most what its text takes decoded (a `str` of 1, 2 or 4 bytes a character)
    unescaping_bytes: int  # at most what a string with escapes takes while it is built (else 0)

    @property
    def parse_bytes(self) -> int:
        """At most what parsing it takes at its peak: the text decoded, the value it makes, and a
        string being unescaped."""
        return self.decoded_bytes + self.parsed_bytes + self.unescaping_bytes + _PARSER


def measure(
    text: bytes | bytearray,
    limit: int = MAX_NESTING,
    start: int = 0,
    end: int | None = None,
    enough: int = _CLOSE_READ,
    within: int | None = None,
) -> JsonText:
    """The counts of `text[start:end]` (UTF-8, which keeps every byte of a multi-byte character out
    of ASCII; a part is first counted in place as if every character were of the widest, and
    copied only where that is more than `enough`); read closely only where a guess from all its
    bytes (strings too) comes to more than `enough` or might nest deeper than `limit`. A text whose
    value takes more than `within` is read no closer than it takes to tell (its depth then not
    read): reading a text of millions of strings or brackets closely takes seconds, and it is
    refused anyway.

    Exact for valid JSON, but for the widths of strings (each counted as wide as the widest
    character of the text). Invalid text may be counted wrong only from a string that never ends,
    and `json.loads` stops there.
    """
    end = len(text) if end is None else end
    size = end - start
    counts = {c: text.count(c, start, end) for c in (b",", b":", b"[", b"{", b'"')}
    objects = _objects(counts[b'"'] // 2, counts)  # strings' bytes counted too: too many
    escaped = text.find(b"\\", start, end) >= 0
    shallow = counts[b"["] + counts[b"{"] <= limit
    if (start, end) != (0, len(text)):  # a part: at the widest characters in place, else copied
        if shallow and _WIDEST * size * (1 + escaped) + objects <= enough:
            return JsonText(size, _WIDEST * size + objects, False, _WIDEST * size, _WIDEST * size * escaped)
        text, start, end = text[start:end], 0, size
    raw, chars = char_bytes(text)
    guess = chars * size + objects
    unescaping = chars * size if escaped else 0
    if shallow and guess <= enough:  # the usual request
        return JsonText(size, guess, False, raw * size, unescaping)
    closely = _read_closely(text, limit, chars, within)
    return JsonText(size, closely.parsed_bytes, closely.too_deep, raw * size, unescaping)


def char_bytes(text: bytes | bytearray) -> tuple[int, int]:
    """At most how many bytes a character of UTF-8 JSON `text` takes in memory (CPython keeps a
    `str` at 1, 2 or 4 bytes a character, by its widest): decoded as it is, and in the strings
    parsed from it (where escapes such as `\\u4e2d` count too)."""
    wide = text.translate(None, _BELOW_WIDE)
    if wide:
        raw = 4 if wide.translate(None, _BELOW_ASTRAL) else 2
    else:  # invalid UTF-8 is refused, or (jupyter_client) read as U+FFFD, 2 bytes a character
        raw = 1 if text.isascii() or _is_utf8(text) else 2
    escapes = text.count(b"\\u")
    if not escapes or escapes == text.count(b"\\u00"):
        return raw, raw
    return raw, max(raw, 4 if any(text.count(s) for s in _SURROGATES) else 2)


def _is_utf8(text: bytes | bytearray) -> bool:
    try:
        text.decode()
    except UnicodeDecodeError:
        return False
    return True


def _read_closely(text: bytes | bytearray, limit: int, chars: int, within: int | None) -> JsonText:
    """`measure`, from the text outside strings (whose characters take `chars` bytes at most);
    with at most two copies of `text` alive at once (the budget counts two while a request is read).
    Past `within`, it stops: before the strings are cut out (their count known), or before the
    depth is read (the brackets known)."""
    size = len(text)
    if b"\\" in text:  # escaped backslashes and quotes gone, every quote left is one
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = text.count(b'"') // 2
    if within is not None and chars * size + _STRING_OBJECT * strings > within:
        return JsonText(size, chars * size + _objects(strings, dict.fromkeys(_OUTSIDE, 0)), False, size, 0)
    outside = _STRING.sub(b"", text) if strings else text
    del text
    parsed = chars * size + _objects(strings, {c: outside.count(c) for c in _OUTSIDE})
    if within is not None and parsed > within:
        return JsonText(size, parsed, False, size, 0)
    brackets = outside.translate(_DEPTH, _NOT_BRACKETS)
    del outside
    too_deep = len(brackets) > limit and max(accumulate(map(sub, brackets, repeat(1))), default=0) > limit
    return JsonText(size, parsed, too_deep, size, 0)


def _objects(strings: int, outside: dict[bytes, int]) -> int:
    """At most what the objects of a parsed value take (its strings' text aside), from how many
    `strings` it has and the brackets, colons and commas `outside` them."""
    lists, dicts, entries = outside[b"["], outside[b"{"], outside[b":"]
    values = outside[b","] + lists + dicts + 1
    return _LIST * lists + _DICT * dicts + _ENTRY * entries + _STRING_OBJECT * strings + _VALUE * values


#: A JSON escape of a surrogate (`\ud800` to `\udfff`): the only way a lone one gets into a value
#: parsed from UTF-8 (its raw bytes are invalid UTF-8, refused or read as U+FFFD).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def whole_characters(value: Any, text: bytes | bytearray | str) -> Any:
    """`value` (parsed from JSON `text`) with each lone surrogate in its strings and keys replaced
    by U+FFFD, in place: half a character is no UTF-8, so a kernel's `"\\udc00"` made whatever
    wrote it on (the MCP server's reply, a notebook) fail. Walked only where `text` has such an
    escape, and without recursion."""
    raw = text.encode(errors="surrogatepass") if isinstance(text, str) else text
    if (b"\\ud" not in raw and b"\\uD" not in raw) or not _SURROGATE_ESCAPE.search(raw):
        return value  # found at C speed (the regular expression reads a byte at a time)
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    stack = [value] if isinstance(value, dict | list) else []
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in [k for k in item if isinstance(k, str) and _LONE_SURROGATE.search(k)]:
                item[_LONE_SURROGATE.sub("\ufffd", key)] = item.pop(key)
            places: Iterable[tuple[Any, Any]] = list(item.items())
        else:
            places = enumerate(item)
        for place, inner in places:
            if isinstance(inner, str):
                if _LONE_SURROGATE.search(inner):
                    item[place] = _LONE_SURROGATE.sub("\ufffd", inner)
            elif isinstance(inner, dict | list):
                stack.append(inner)
    return value


class NotFinite(IpyboxError, ValueError):
    """A number in JSON text that no JSON value is: NaN, Infinity, or a literal past a float's range."""

    def __init__(self) -> None:
        super().__init__(
            "the tool call's arguments hold NaN or Infinity (or a number too large for a float), which "
            "JSON cannot carry: the MCP server would get null in its place, not the value an approval "
            "shows. Pass a finite number, None or a string instead"
        )


def loads(text: str) -> Any:
    """`json.loads(text)`, refusing (`NotFinite`) the numbers Python reads but JSON has not: what
    the host passes on is JSON again, where each became null, so a person approving `days=NaN`
    would have run `days=null`."""
    return json.loads(text, parse_constant=_not_finite, parse_float=_finite)


def _not_finite(literal: str) -> Any:
    raise NotFinite()


def _finite(literal: str, _float: type[float] = float) -> float:
    number = _float(literal)
    if number - number:  # inf - inf is NaN, which is true; a finite number gives 0.0
        raise NotFinite()
    return number
