"""Attack test: a sparse file costs the kernel no disk (`truncate` to a terabyte), but download(),
which copies on the host, wrote every byte of it: the host's disk filled with zeros (a gibibyte
took 12 s and a gibibyte of disk here; a terabyte, hours, and the disk). Holes stay holes now,
and what the files hold is copied exactly."""

from __future__ import annotations

import os
from pathlib import Path

from ipybox import CodeExecutor

GIB = 1 << 30

#: Kernel code: files of every layout of data and holes in `out/`.
PLANT = f"""
import os
os.makedirs('out/deep', exist_ok=True)
def sparse(name, size, pieces=()):
    with open(name, 'wb') as f:
        f.truncate(size)
        for offset, data in pieces:
            f.seek(offset)
            f.write(data)
sparse('out/hole', {GIB})  # a hole only
sparse('out/deep/ends', {GIB}, [(0, b'head'), ({GIB} - 4, b'tail')])  # data, a hole, data
sparse('out/middle', {GIB} // 2, [({GIB} // 4, b'm' * 100_000)])  # a hole, data, a hole
open('out/dense', 'wb').write(bytes(range(256)) * 5000)
open('out/empty', 'wb').close()
"""


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


async def test_a_download_keeps_holes_as_holes(executor: CodeExecutor, tmp_path: Path) -> None:
    await executor.execute(PLANT)
    source = executor.working_dir / "out"
    assert _allocated(source / "hole") < 1 << 20  # the kernel's file costs nothing
    await executor.download("out", tmp_path / "copy")
    copy = tmp_path / "copy"
    for name in ("hole", "deep/ends", "middle", "dense", "empty"):
        assert os.path.getsize(copy / name) == os.path.getsize(source / name), name
        assert _allocated(copy / name) <= _allocated(source / name) + (1 << 20), name
    with (copy / "deep" / "ends").open("rb") as f:
        assert f.read(4) == b"head"
        f.seek(GIB - 8)
        assert f.read() == b"\0\0\0\0tail"
    with (copy / "middle").open("rb") as f:
        f.seek(GIB // 4 - 1)
        assert f.read(100_002) == b"\0" + b"m" * 100_000 + b"\0"
    assert (copy / "dense").read_bytes() == bytes(range(256)) * 5000
    await executor.download("out/hole", tmp_path / "single")  # a file alone, too
    assert _allocated(tmp_path / "single") < 1 << 20
