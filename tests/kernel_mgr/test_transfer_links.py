"""Attack tests: kernel code plants symbolic links (or lies about paths) to make upload() and
download(), which run outside the kernel and its sandbox, touch files the kernel may not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ipybox import CodeExecutor


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_text("precious")
    return path


async def test_upload_does_not_write_through_a_planted_link(
    executor: CodeExecutor, tmp_path: Path, victim: Path
) -> None:
    await executor.execute(
        f"import os\nos.symlink({str(victim)!r}, 'data.txt')\nos.symlink({str(victim.parent)!r}, 'dir')"
    )
    source = tmp_path / "upload.txt"
    source.write_text("overwritten")
    await executor.upload(source, "data.txt")  # replaces the link itself, never writes its target
    assert (executor.working_dir / "data.txt").read_text() == "overwritten"
    assert not (executor.working_dir / "data.txt").is_symlink()
    with pytest.raises(PermissionError, match="symbolic link"):
        await executor.upload(source, "dir/victim.txt")
    folder = tmp_path / "folder"
    (folder / "dir").mkdir(parents=True)
    (folder / "dir" / "victim.txt").write_text("overwritten")
    with pytest.raises(PermissionError, match="symbolic link"):
        await executor.upload(folder, ".")
    assert victim.read_text() == "precious"


async def test_download_does_not_read_through_a_planted_link(
    executor: CodeExecutor, tmp_path: Path, victim: Path
) -> None:
    await executor.execute(
        f"import os\nos.symlink({str(victim)!r}, 'secret.txt')\nos.mkdir('out')\n"
        f"os.symlink({str(victim)!r}, 'out/secret.txt')\nos.symlink({str(victim.parent)!r}, 'linked')"
    )
    with pytest.raises(PermissionError, match="symbolic link"):
        await executor.download("secret.txt", tmp_path / "got.txt")
    with pytest.raises(PermissionError, match="symbolic link"):
        await executor.download("linked/victim.txt", tmp_path / "got.txt")
    await executor.download("out", tmp_path / "got")  # the link is copied as a link, not its target
    copied = tmp_path / "got" / "secret.txt"
    assert copied.is_symlink() and not (tmp_path / "got.txt").exists()


async def test_plain_upload_and_download_still_work(executor: CodeExecutor, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("hello")
    await executor.upload(source, "sub/in.txt")
    assert (await executor.execute("print(open('sub/in.txt').read())")).text == "hello"
    await executor.download("sub", tmp_path / "back")
    assert (tmp_path / "back" / "in.txt").read_text() == "hello"


async def test_a_second_download_never_writes_through_a_link_the_first_copied(
    executor: CodeExecutor, tmp_path: Path
) -> None:
    """The kernel links out/cfg to a host directory, then makes cfg a directory: the second
    download replaces the copied link instead of writing into the directory it names."""
    victim = tmp_path / "victim"
    victim.mkdir()
    await executor.execute(
        f"import os\nos.makedirs('out', exist_ok=True)\nos.symlink({str(victim)!r}, 'out/cfg')"
    )
    await executor.download("out", tmp_path / "got")
    assert (tmp_path / "got" / "cfg").is_symlink()
    await executor.execute(
        "os.remove('out/cfg')\nos.mkdir('out/cfg')\nopen('out/cfg/authorized_keys', 'w').write('attacker')\n"
        "open('out/note', 'w').write('x')"
    )
    await executor.download("out", tmp_path / "got")
    assert not os.listdir(victim)
    assert (tmp_path / "got" / "cfg" / "authorized_keys").read_text() == "attacker"
    assert not (tmp_path / "got" / "cfg").is_symlink()
