"""Attack tests: kernel code swaps paths in its working directory between real files or
directories and symbolic links to outside, while ipybox (outside any sandbox) writes or reads
there. Nothing outside the workspace may ever be written or read.

The kernel's flipping thread runs in a real kernel; the host repeats its operation many times
so that both orders of check and swap happen.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from servers.launch import nasty_params

from ipybox import CodeExecutor, _safe_fs
from ipybox.mcp_apigen import generate_mcp_sources
from ipybox.mcp_server.output import truncate

ROUNDS = 300

FLIPPER = """
import os, threading, time
_stop = threading.Event()
def _flip(path, real, outside):
    while not _stop.is_set():
        for make in (real, lambda p: os.symlink(outside, p)):
            try:
                if os.path.islink(path) or os.path.isfile(path):
                    os.unlink(path)
                elif os.path.isdir(path):
                    import shutil; shutil.rmtree(path)
                make(path)
            except OSError:
                pass
            time.sleep(0.0005)
"""


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "victim.txt").write_text("precious")
    return path


@pytest.fixture
async def kernel(tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with CodeExecutor(working_dir=workspace, spare_kernel=False) as executor:
        await executor.execute(FLIPPER)
        yield executor
        await executor.execute("_stop.set()")


async def flip(kernel: CodeExecutor, name: str, real: str, target: Path) -> None:
    """A kernel thread swaps `name` between `real` (a function of the path) and a link to `target`."""
    await kernel.execute(
        f"threading.Thread(target=_flip, args=({name!r}, {real}, {str(target)!r}), daemon=True).start()"
    )


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "precious"


async def test_upload_into_a_flipping_directory(kernel: CodeExecutor, tmp_path: Path, outside: Path) -> None:
    await flip(kernel, "dir", "os.mkdir", outside)
    source = tmp_path / "new.txt"
    source.write_text("uploaded")
    done = refused = 0
    for _ in range(ROUNDS):
        try:
            await kernel.upload(source, "dir/new.txt")
            done += 1
        except (PermissionError, FileNotFoundError, NotADirectoryError):
            refused += 1
    untouched(outside)
    assert done + refused == ROUNDS


async def test_upload_over_a_flipping_file(kernel: CodeExecutor, tmp_path: Path, outside: Path) -> None:
    await flip(kernel, "data.txt", "lambda p: open(p, 'w').write('mine')", outside / "victim.txt")
    source = tmp_path / "new.txt"
    source.write_text("uploaded")
    for _ in range(ROUNDS):
        with contextlib.suppress(PermissionError):
            await kernel.upload(source, "data.txt")
    untouched(outside)


async def test_download_of_a_flipping_file(kernel: CodeExecutor, tmp_path: Path, outside: Path) -> None:
    await flip(kernel, "secret.txt", "lambda p: open(p, 'w').write('public')", outside / "victim.txt")
    got = tmp_path / "got.txt"
    for _ in range(ROUNDS):
        got.unlink(missing_ok=True)
        with contextlib.suppress(PermissionError, FileNotFoundError):
            await kernel.download("secret.txt", got)
        assert not got.exists() or got.read_text() in ("", "public")


async def test_download_of_a_flipping_directory(kernel: CodeExecutor, tmp_path: Path, outside: Path) -> None:
    await flip(kernel, "dir", "os.mkdir", outside)
    for i in range(ROUNDS // 3):
        with contextlib.suppress(PermissionError, FileNotFoundError, NotADirectoryError):
            await kernel.download("dir", tmp_path / f"got{i}")
        assert (
            not (tmp_path / f"got{i}" / "victim.txt").exists()
            or (tmp_path / f"got{i}" / "victim.txt").is_symlink()
        )


async def test_download_refuses_hard_links_fifos_and_devices(
    executor: CodeExecutor, tmp_path: Path, outside: Path
) -> None:
    try:
        os.link(outside / "victim.txt", tmp_path / "hard.txt")
    except OSError:
        pytest.skip("no hard links across these directories")
    await executor.execute("import os\nos.mkfifo('pipe')\nos.symlink('/dev/zero', 'zero')\nos.mkdir('d')")
    os.link(outside / "victim.txt", tmp_path / "d" / "hard.txt")
    for name, reason in [
        ("hard.txt", "hard links"),
        ("pipe", "not a regular file"),
        ("zero", "symbolic link"),
    ]:
        with pytest.raises(PermissionError, match=reason) as e:
            await executor.download(name, tmp_path / "got")
        assert name in str(e.value)
        assert not (tmp_path / "got").exists()
    with pytest.raises(PermissionError, match="hard links"):
        await executor.download("d", tmp_path / "got-d")
    assert (await executor.execute("print('kernel fine')")).text == "kernel fine"


@pytest.mark.parametrize("where", ["images", ".ipybox/outputs"])
async def test_new_files_in_a_flipping_directory(kernel: CodeExecutor, outside: Path, where: str) -> None:
    """What saving a cell's images and the MCP server's spill files do, under the same race."""
    top = where.split("/")[0]
    await flip(kernel, top, "os.mkdir", outside)
    workspace = kernel.working_dir
    for i in range(ROUNDS):
        with contextlib.suppress(PermissionError, FileNotFoundError, NotADirectoryError):
            if where == "images":
                _safe_fs.create_file(workspace / where / f"{i}.png", b"png", workspace)
            else:
                truncate("x" * 100, 10, workspace / where, trusted=workspace)
    untouched(outside)


async def test_generation_never_writes_through_a_linked_mcptools(tmp_path: Path, outside: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "mcptools").symlink_to(outside)
    with pytest.raises(PermissionError, match="symbolic link") as e:
        await generate_mcp_sources("nasty", nasty_params(), workspace / "mcptools", workspace=workspace)
    assert "mcptools" in str(e.value)
    (workspace / "mcptools").unlink()
    (workspace / "mcptools").mkdir()
    (workspace / "mcptools" / "nasty").symlink_to(
        outside
    )  # the package itself a link: replaced, not followed
    (outside / "keep.py").write_text("x = 1\n")
    await generate_mcp_sources("nasty", nasty_params(), workspace / "mcptools", workspace=workspace)
    assert not (workspace / "mcptools" / "nasty").is_symlink()
    assert (workspace / "mcptools" / "nasty" / "__init__.py").is_file()
    assert sorted(p.name for p in outside.iterdir()) == ["keep.py", "victim.txt"]
    assert (outside / "victim.txt").read_text() == "precious"
