"""A kernel's JSON text as the host sees it before parsing it: how deep it nests, and how much
memory its values would take once parsed, read off the bytes outside its strings at C speed.

Parsing is where a kernel's request costs the host most: `json.loads` makes one Python object of
60-odd bytes for each value, so three bytes of text (`{},`) can take 70 bytes of memory, and a
request whose text fits the tool server's budget many times over may not fit once parsed. The
counts here decide before `json.loads` runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import sub

from ipybox._nesting import MAX_NESTING

#: Bytes of memory `json.loads` takes at most per thing it makes, beyond the text it copies into
#: strings (CPython 3.11, with room to spare; tests/test_json_text.py holds them to the real
#: parser on the costliest shapes): per list (56 and room for 4 items, as append grows it),
#: dict (one entry: 184), dict entry, string (49 and its text), and any value (a slot in its
#: list, and the largest float or int whose text is shorter than the int).
_LIST, _DICT, _ENTRY, _STRING_OBJECT, _VALUE = 96, 200, 48, 56, 40
#: What one parse takes besides (the scanner, its memo of keys, the interpreter's own).
_PARSER = 64 << 10
#: A guess from every byte of the text, strings too, of at most this much is good enough: what it
#: holds of the budget does not matter, and the text is not read any closer.
_CLOSE_READ = 1 << 20

_STRING = re.compile(rb'"[^"]*"')
#: Brackets as the change in depth they make, plus one (bytes are unsigned); all else dropped.
_DEPTH = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


@dataclass(frozen=True)
class JsonText:
    """What UTF-8 `text` would cost to parse (`measure`)."""

    size: int  # bytes of text
    parsed_bytes: int  # at most what the value parsed from it holds
    too_deep: bool  # it nests more than MAX_NESTING levels deep

    @property
    def parse_bytes(self) -> int:
        """At most what parsing it takes at its peak: the text decoded, and the value it makes."""
        return self.size + self.parsed_bytes + _PARSER


def measure(
    text: bytes | bytearray,
    limit: int = MAX_NESTING,
    start: int = 0,
    end: int | None = None,
    enough: int = _CLOSE_READ,
) -> JsonText:
    """The counts of `text[start:end]` (UTF-8, which keeps every byte of a multi-byte character out
    of ASCII); read in place, and copied to be read closely only where a guess from all its bytes
    (strings too) comes to more than `enough` or might nest deeper than `limit`.

    Exact for valid JSON. Invalid text may be counted wrong only from a string that never ends,
    and `json.loads` stops there.
    """
    end = len(text) if end is None else end
    size = end - start
    counts = {c: text.count(c, start, end) for c in (b",", b":", b"[", b"{", b'"')}
    guess = size + _objects(counts[b'"'] // 2, counts)  # strings' bytes counted too: too many
    if counts[b"["] + counts[b"{"] <= limit and guess <= enough:  # the usual request
        return JsonText(size, guess, too_deep=False)
    return _read_closely(text[start:end] if (start, end) != (0, len(text)) else text, limit)


def _read_closely(text: bytes | bytearray, limit: int) -> JsonText:
    """`measure`, from the text outside strings; with at most two copies of `text` alive at once
    (the budget counts two while a request is read)."""
    size = len(text)
    if b"\\" in text:  # escaped backslashes and quotes gone, every quote left is one
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = text.count(b'"') // 2
    outside = _STRING.sub(b"", text) if strings else text
    del text
    parsed = size + _objects(strings, {c: outside.count(c) for c in (b",", b":", b"[", b"{")})
    brackets = outside.translate(_DEPTH, _NOT_BRACKETS)
    del outside
    too_deep = len(brackets) > limit and max(accumulate(map(sub, brackets, repeat(1))), default=0) > limit
    return JsonText(size, parsed, too_deep)


def _objects(strings: int, outside: dict[bytes, int]) -> int:
    """At most what the objects of a parsed value take (its strings' text aside), from how many
    `strings` it has and the brackets, colons and commas `outside` them."""
    lists, dicts, entries = outside[b"["], outside[b"{"], outside[b":"]
    values = outside[b","] + lists + dicts + 1
    return _LIST * lists + _DICT * dicts + _ENTRY * entries + _STRING_OBJECT * strings + _VALUE * values
