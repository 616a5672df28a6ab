"""How deep kernel-supplied JSON nests: read off the text of a request (before anything walks it)
and off the values (a notebook's outputs) must agree, strings and escapes included."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from ipybox._nesting import MAX_NESTING, deeper_than, text_deeper_than

#: Strings that look like structure, or hide the end of a string: none of them nests.
TRICKY = ["[", "{[", "]}", '"', '\\"[', "\\", "\\\\", '\\\\"{', "x\\u005b", "[[[[" * 30]


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
def test_text_and_values_agree(depth: int) -> None:
    rng = random.Random(depth)
    for _ in range(20):
        value = nested(depth, rng)
        deep = deeper_than(value)
        assert deep == (depth > MAX_NESTING)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False), json.dumps(value, indent=1)):
            assert text_deeper_than(text.encode()) == deep, text[:200]


def test_wide_values_are_not_deep() -> None:
    wide = [{"[": [1, "]"]}] * 5000 + [[["x"]]] * 5000
    assert not deeper_than(wide)
    assert not text_deeper_than(json.dumps(wide).encode())
    assert text_deeper_than(json.dumps([wide, nested(MAX_NESTING + 1, random.Random(0))]).encode())
