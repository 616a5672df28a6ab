"""When the suite runs as a normal user from an installed wheel (scripts/test-as-user sets
IPYBOX_TEST_INSTALLED=1), check that it really does: not root, ipybox imported from the venv's
site-packages rather than the checkout, and the user already running many threads."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

import ipybox

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    os.environ.get("IPYBOX_TEST_INSTALLED") != "1", reason="only in scripts/test-as-user runs"
)


def test_runs_as_a_normal_user() -> None:
    assert os.getuid() != 0 and os.geteuid() != 0


def test_ipybox_comes_from_the_installed_wheel() -> None:
    location = Path(ipybox.__file__).resolve()
    assert location.is_relative_to(Path(sys.prefix).resolve()), location
    assert not location.is_relative_to(REPO.resolve()), location
    assert "site-packages" in location.parts


def test_user_already_runs_more_threads_than_the_old_default_limit() -> None:
    uid = os.getuid()
    threads = sum(
        p.info["num_threads"] or 0
        for p in psutil.process_iter(["uids", "num_threads"])
        if p.info["uids"] and p.info["uids"].real == uid
    )
    assert threads > 512, threads
