"""Compact signatures: the units, formats and ranges that a field's type alone does not say, within
a byte budget measured over the recorded corpus of real servers' tools."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from ipybox.mcp_apigen.signature import hint, signature

CORPUS = Path(__file__).parent / "corpus"

TARIFF = {
    "type": "object",
    "properties": {
        "price": {"type": "number", "description": "Price of the goods in USD."},
        "tariff_rate": {
            "type": "number",
            "description": "Tariff rate in percent.",
            "minimum": 0,
            "maximum": 100,
        },
        "since": {"type": "string", "format": "date"},
        "note": {"type": "string", "description": "Free text."},
    },
    "required": ["price", "tariff_rate"],
}


def test_units_formats_and_ranges_follow_the_summary() -> None:
    text = signature("calculate_tariff", TARIFF, None, "The tariff on goods. More.")
    assert text.splitlines() == [
        "calculate_tariff(price: float, tariff_rate: float, since: str = None, note: str = None) -> str",
        "    The tariff on goods.",
        "    # price: in USD; tariff_rate: 0..100, in percent; since: date",
    ]
    assert "\n    #" not in signature(
        "t", {"type": "object", "properties": {"a": {"type": "string"}}}, None, "T."
    )


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "integer", "minimum": 1}, ">=1"),
        ({"type": "integer", "maximum": 50}, "<=50"),
        ({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, ">0..<=1"),
        ({"type": "number", "minimum": 0, "exclusiveMinimum": True}, ">0"),  # draft-04
        ({"type": "integer", "format": "int64", "minimum": 1, "maximum": 16}, "1..16"),  # width: no hint
        ({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]}, "date-time"),
        ({"type": "array", "items": {"type": "string", "format": "uri"}}, "each uri"),
        ({"type": "string", "pattern": "^[A-Z]{2}$"}, "pattern ^[A-Z]{2}$"),
        ({"type": "string", "pattern": "^" + "a" * 40 + "$"}, ""),  # long patterns: the module has them
        ({"type": "integer", "description": "Timeout in milliseconds."}, "in milliseconds"),
        ({"type": "number", "description": "Discount as a fraction (0.05 for 5%)."}, "as a fraction"),
        ({"type": "string", "description": "Start time (ISO 8601)."}, "ISO 8601"),
        ({"type": "string", "description": "Day as DD/MM/YYYY."}, "DD/MM/YYYY"),
        ({"type": "string", "description": "Labels, comma-separated."}, "comma-separated"),
        ({"type": "integer", "description": "Line number (1-based)."}, "1-based"),
        ({"type": "string", "description": "IANA zone, e.g. 'Europe/Paris'."}, "e.g. 'Europe/Paris'"),
        ({"type": "array", "description": "Rows, e.g. [{a: 1}, {a: 2}]."}, ""),  # cut-off structure: left out
        ({"type": "string", "description": "The name of the user."}, ""),
        ({"type": "string", "description": 5}, ""),
        ("not a schema", ""),
    ],
)
def test_hints(schema: Any, expected: str) -> None:
    assert hint(schema) == expected


def test_a_hint_is_short_and_a_signature_holds_few() -> None:
    long = {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
        "format": "x" * 20,
        "description": "in seconds, e.g. 1",
    }
    assert len(hint(long)) <= 48 and hint(long).endswith("...")
    many = {"type": "object", "properties": {f"f{i}": {"type": "integer", "minimum": i} for i in range(10)}}
    assert signature("t", many, None, None).splitlines()[1].count(";") == 5  # six fields at most


def _corpus() -> list[dict[str, Any]]:
    return [t for f in sorted(CORPUS.glob("*.json")) for t in json.loads(f.read_text())["tools"]]


def test_hints_cost_a_measured_part_of_the_signatures() -> None:
    """The budget, over the recorded corpus: hint lines add at most 15% to the signatures' bytes,
    and the median signature stays under 250 bytes."""
    sizes, hint_bytes, hinted = [], 0, 0
    for tool in _corpus():
        text = signature(tool["name"], tool["inputSchema"], tool.get("outputSchema"), tool.get("description"))
        lines = text.splitlines()
        hints = [line for line in lines if line.startswith("    # ")]
        hint_bytes += sum(len(line.encode()) + 1 for line in hints)
        hinted += bool(hints)
        sizes.append(len(text.encode()))
    total = sum(sizes)
    assert hint_bytes <= 0.15 * (total - hint_bytes), (hint_bytes, total)
    assert statistics.median(sizes) <= 250, statistics.median(sizes)
    assert hinted >= len(sizes) // 5, (hinted, len(sizes))  # hints are found where the corpus has them
