"""A kernel's JSON text read before it is parsed (ipybox/_json_text.py): how deep it nests must
agree with the parsed value's depth, strings and escapes included, and what it says parsing takes
must bound what the real parser takes, for the costliest shapes of value."""

from __future__ import annotations

import json
import random
import tracemalloc
from typing import Any

import pytest

from ipybox import ResourceLimits
from ipybox._json_text import measure
from ipybox._nesting import MAX_NESTING, deeper_than

#: Strings that look like structure, or hide the end of a string: none of them nests.
TRICKY = ["[", "{[", "]}", '"', '\\"[', "\\", "\\\\", '\\\\"{', "x\\u005b", "[[[[" * 30, ",:,:"]


def nested(depth: int, rng: random.Random) -> Any:
    """A value exactly `depth` levels deep, with tricky strings as keys, items and padding."""
    value: Any = rng.choice(TRICKY)
    for level in range(depth):  # a dict among the filler: as deep as `value` from the second on
        inner = {"k": rng.choice(TRICKY)} if level and rng.random() < 0.3 else 2.5
        filler = [rng.choice(TRICKY), 1, None, inner]
        if rng.random() < 0.5:
            value = [*filler[: rng.randint(0, 3)], value]
        else:
            padding = {f"{rng.choice(TRICKY)}{i}": v for i, v in enumerate(filler)}
            value = {rng.choice(TRICKY): value, **padding}
    return value


@pytest.mark.parametrize("depth", [0, 1, 50, MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, 150])
def test_text_and_values_agree_on_depth(depth: int) -> None:
    rng = random.Random(depth)
    for _ in range(20):
        value = nested(depth, rng)
        deep = deeper_than(value)
        assert deep == (depth > MAX_NESTING)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False), json.dumps(value, indent=1)):
            assert measure(text.encode(), limit=MAX_NESTING).too_deep == deep, text[:200]
            assert measure(text.encode(), limit=0).too_deep == (depth > 0)  # read closely, always


def test_wide_values_are_not_deep() -> None:
    wide = [{"[": [1, "]"]}] * 5000 + [[["x"]]] * 5000
    assert not deeper_than(wide)
    assert not measure(json.dumps(wide).encode()).too_deep
    assert measure(json.dumps([wide, nested(MAX_NESTING + 1, random.Random(0))]).encode()).too_deep


def _items(item: str, count: int = 100_000) -> str:
    return "[" + ",".join([item] * count) + "]"


#: The costliest values per byte of text we know of, and some ordinary ones.
SHAPES = {
    "empty dicts": _items("{}"),
    "empty lists": _items("[]"),
    "one-entry dicts": _items('{"a":1}'),
    "six-entry dicts": _items('{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}', 20_000),
    "lists in lists": _items("[[1]]"),
    "dicts in lists": _items('[{"a":[]}]'),
    "distinct keys": "{" + ",".join(f'"{i}":0' for i in range(100_000)) + "}",
    "distinct strings": _items('"ab"'),
    "floats": _items("1.5"),
    "large ints": _items("123456789012345"),
    "huge int": str(10**4000),
    "escaped backslashes": json.dumps("\\" * 500_000),
    "escaped strings": _items('"\\u00e9\\n"'),
    "one long string": json.dumps("x" * 1_000_000),
    "one long string of non-ASCII": json.dumps("é" * 500_000, ensure_ascii=False),
    "commas in strings": json.dumps({"csv": "a,b:c\n" * 200_000}),
    # one wide character makes every character of its string take 2 or 4 bytes
    "an escaped emoji, then ASCII": json.dumps("\U0001f600" + "a" * 1_000_000),
    "a raw emoji, then ASCII": json.dumps("\U0001f600" + "a" * 1_000_000, ensure_ascii=False),
    "an escaped CJK character, then ASCII": json.dumps("\u4e2d" + "a" * 1_000_000),
    "raw CJK text": json.dumps("\u4e2d\u6587" * 200_000, ensure_ascii=False),
    "keys with emoji": "{" + ",".join(f'"\\ud83d\\ude00{i}":0' for i in range(50_000)) + "}",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_what_parsing_takes_is_never_more_than_measured(shape: str) -> None:
    line = SHAPES[shape].encode()
    counted = measure(line)
    tracemalloc.start()
    try:
        value = json.loads(line.decode())
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert value is not None
    assert peak <= counted.parse_bytes, (peak, counted)
    assert kept <= counted.parsed_bytes, (kept, counted)
    if shape in ("one long string", "commas in strings"):  # no guess from commas in strings
        assert counted.parse_bytes < 4 * len(line), counted  # text, value, a string unescaped


def test_ordinary_data_is_counted_close_to_what_it_takes() -> None:
    """A million floats (a column of data sent to a tool) is counted at about 40 bytes a number
    (their objects take 32): with the line itself and its connection, it fits the default
    `tool_buffer`."""
    line = json.dumps({"values": [i + 0.5 for i in range(1_000_000)]}).encode()
    held = measure(line).parse_bytes + len(line) * 9 // 8 + (1 << 20)
    budget = ResourceLimits().tool_buffer
    assert budget is not None and held < budget


#: Texts of millions of strings or brackets: cutting their strings out or walking their depth
#: took the host's event loop 2 to 6 seconds for 38 MiB; what they parse to is far over any budget.
FLOODS = {
    "empty strings": b'"",',
    "escaped quotes that end strings": b'\\\\",',
    "empty lists": b"[],",
    "brackets nested 100 deep": b"[" * 100 + b"]" * 100 + b",",
    "strings holding brackets": b'"[{",',
}


@pytest.mark.parametrize("flood", FLOODS)
def test_a_text_over_what_fits_is_not_read_closely(flood: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ipybox import _json_text

    class Refuse:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"read closely ({name}) a text that cannot fit")

        def __call__(self, *args: Any) -> Any:
            raise AssertionError("walked the depth of a text that cannot fit")

    line = b"[" + FLOODS[flood] * 200_000 + b"1]"
    within = 2 << 20
    with monkeypatch.context() as patched:  # the costly steps: cutting strings out, walking depth
        patched.setattr(_json_text, "_STRING", Refuse())
        patched.setattr(_json_text, "accumulate", Refuse())
        counted = measure(line, within=within)
    assert counted.parsed_bytes > within
    assert counted.parsed_bytes <= measure(line).parsed_bytes  # never more than the close read says
    small = b"[" + FLOODS[flood] * 100 + b"1]"  # one that fits is read closely, as before
    assert measure(small, limit=10, within=within) == measure(small, limit=10)


def test_half_characters_are_read_as_replacement_characters() -> None:
    from ipybox._json_text import whole_characters

    text = (
        r'{"a\udc00": ["x\ud800y", {"k": "\udfff", "deep": [[["\udbff"]]]}], '
        r'"pair": "\ud83d\ude00", "not": "\\udc00"}'
    )
    value = whole_characters(json.loads(text), text.encode())
    assert value == {
        "a\ufffd": ["x\ufffdy", {"k": "\ufffd", "deep": [[["\ufffd"]]]}],
        "pair": "\U0001f600",  # a whole character, kept
        "not": "\\udc00",  # an escaped backslash: text, kept
    }
    assert json.dumps(value, ensure_ascii=False).encode()  # UTF-8 again
    assert whole_characters("\ud800", b'"\\ud800"') == "\ufffd"


@pytest.mark.parametrize("shape", ["floats", "escaped strings", "raw CJK text", "one long string"])
def test_a_part_counted_in_place_is_never_less_than_its_copy(shape: str) -> None:
    """A part of a larger buffer (a message's content among its frames) is counted where it lies,
    as if its every character were of the widest, unless that guess is too large to be good
    enough: either way never less than the part copied out and counted alone."""
    line = SHAPES[shape].encode()
    frame = b"\xf5\xff\xc4" + line + b"\xf0\x9f"  # bytes around it that are no character of it
    alone = measure(line)
    for enough in (1 << 30, 1 << 10):  # counted in place, then copied
        part = measure(frame, start=3, end=3 + len(line), enough=enough)
        assert part.parse_bytes >= alone.parse_bytes and part.parsed_bytes >= alone.parsed_bytes
    assert measure(frame, start=3, end=3 + len(line), enough=1 << 10) == alone
