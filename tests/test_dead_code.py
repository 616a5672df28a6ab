"""No dead code in the package: vulture (60 % confidence and up) finds nothing beyond the names
tests/dead_code_allowed.py explains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ipybox

TESTS = Path(__file__).parent


def test_vulture_finds_no_dead_code() -> None:
    package = Path(ipybox.__file__).parent
    found = subprocess.run(
        [sys.executable, "-m", "vulture", str(package), str(TESTS / "dead_code_allowed.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stdout + found.stderr
