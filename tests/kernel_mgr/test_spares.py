"""`SpareKernels`: executors that share one keep at most its size of warm spares together, each
spare serving only the executor that started it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from servers.launch import eventually

from ipybox import CodeExecutor
from ipybox.kernel_mgr.spares import SpareKernels

pytestmark = pytest.mark.timeout(120)


def _kernels() -> list[psutil.Process]:
    """The kernel processes this test process runs."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "ipybox.kernel_mgr.launch" in " ".join(child.cmdline()):
                found.append(child)
    return found


def _count(n: int) -> Callable[[], bool]:
    return lambda: len(_kernels()) == n


async def test_executors_share_one_spare_and_each_keeps_its_own(tmp_path: Path) -> None:
    places = SpareKernels(1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = CodeExecutor(working_dir=tmp_path / "a", spare_kernel=places)
    b = CodeExecutor(working_dir=tmp_path / "b", spare_kernel=places)
    try:
        await a.start()
        assert await eventually(_count(2), timeout=60), _kernels()  # a's kernel and its spare
        await b.start()
        for executor in (a, b):
            await executor.execute("x = 1")
        assert await eventually(_count(3), timeout=60), _kernels()  # no spare for b: the place is a's
        await b.reset()  # a cold start: b has no spare to swap in, and takes none of a's
        assert (
            await b.execute("import os; print(os.getcwd(), 'x' in dir())")
        ).text == f"{tmp_path / 'b'} False"
        assert await eventually(_count(3), timeout=60), _kernels()
        await a.reset()  # a swaps in its spare and starts another in its place
        assert (
            await a.execute("import os; print(os.getcwd(), 'x' in dir())")
        ).text == f"{tmp_path / 'a'} False"
        assert await eventually(_count(3), timeout=60), _kernels()
        await a.stop()  # gives its place back: b takes it at its next reset
        await b.reset()
        assert await eventually(_count(2), timeout=60), _kernels()  # b's kernel and now its spare
        assert len(places) == 1
    finally:
        await a.stop()
        await b.stop()
    assert await eventually(_count(0), timeout=30), _kernels()
    assert len(places) == 0


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        SpareKernels(-1)
