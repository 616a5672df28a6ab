"""Attack tests: kernel code plants symbolic links (or lies about paths) to make upload() and
download(), which run outside the kernel and its sandbox, touch files the kernel may not."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
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
    await executor.download("out", tmp_path / "got")  # neither the link (it leads out) nor its target
    copied = tmp_path / "got" / "secret.txt"
    assert not os.path.lexists(copied) and not (tmp_path / "got.txt").exists()


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
    """The kernel links out/cfg to a host directory (not copied: it leads out of the folder;
    an earlier ipybox copied it), then makes cfg a directory: the second download replaces a
    link there instead of writing into the directory it names."""
    victim = tmp_path / "victim"
    victim.mkdir()
    await executor.execute(
        f"import os\nos.makedirs('out', exist_ok=True)\nos.symlink({str(victim)!r}, 'out/cfg')"
    )
    await executor.download("out", tmp_path / "got")
    assert not os.path.lexists(tmp_path / "got" / "cfg")
    (tmp_path / "got" / "cfg").symlink_to(victim)  # as an earlier ipybox copied it
    await executor.execute(
        "os.remove('out/cfg')\nos.mkdir('out/cfg')\nopen('out/cfg/authorized_keys', 'w').write('attacker')\n"
        "open('out/note', 'w').write('x')"
    )
    await executor.download("out", tmp_path / "got")
    assert not os.listdir(victim)
    assert (tmp_path / "got" / "cfg" / "authorized_keys").read_text() == "attacker"
    assert not (tmp_path / "got" / "cfg").is_symlink()


#: A name that clears the screen and sets the terminal's title, with a C1 control (CSI) and a bell.
ESC = "gone\x1b[2J\x1b]0;pwned\x07\x9b31m"


async def test_a_download_goes_on_past_entries_removed_while_it_copies(
    executor: CodeExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Kernel code still writing the tree removes a file, a directory and a link between the
    listing and their copy: the download copies the rest and says what went, instead of failing
    whole with 'No such file or directory' for the top folder. A name is shown as data, never
    as terminal control (one with escape sequences went to the user's terminal as it was)."""
    names = ("kept", "gone", "gone_dir/deep/f", ESC)
    await executor.execute(
        f"import os\nos.makedirs('out/gone_dir/deep')\nfor name in {names!r}:\n"
        "    open('out/' + name, 'w').write(name)\nos.symlink('kept', 'out/gone_link')"
    )
    listed = os.scandir

    def scandir_then_remove(fd: int) -> Iterator[os.DirEntry[str]]:  # the kernel's next moves, timed
        entries = list(listed(fd))
        if "gone" in {entry.name for entry in entries}:
            monkeypatch.undo()
            shutil.rmtree(executor.working_dir / "out" / "gone_dir")
            os.remove(executor.working_dir / "out" / "gone")
            os.remove(executor.working_dir / "out" / "gone_link")
            os.remove(executor.working_dir / "out" / ESC)
        return iter(entries)

    monkeypatch.setattr(os, "scandir", scandir_then_remove)
    with caplog.at_level(logging.WARNING, logger="ipybox.kernel_mgr.transfer"):
        await executor.download("out", tmp_path / "got")
    assert sorted(os.listdir(tmp_path / "got")) == ["kept"]
    assert (tmp_path / "got" / "kept").read_text() == "kept"
    removed = {record.getMessage().split(" was removed")[0] for record in caplog.records}
    names = ("gone", "gone_dir", "gone_link", ESC)
    assert removed == {repr(str(executor.working_dir / "out" / name)) for name in names}
    assert all(record.getMessage().isprintable() for record in caplog.records)


async def test_links_that_lead_out_of_a_downloaded_tree_stay_behind(
    executor: CodeExecutor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A link a kernel plants in a tree that download() copies out names whatever it likes on
    the host: copied as it was, `keys -> ~/.ssh` had a later download to `got/keys/...` write
    into the folder it names, and an upload of the copied tree read what it names into the
    kernel (a sandboxed kernel read a file of the host that way, shown). A link is copied only
    where it stays in the tree whatever it passes through (a relative path down from its
    folder); the others (absolute, with `..`) are left out and named in the
    log. An upload never follows a link in the uploaded tree either."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("precious")
    links = {
        "keys": str(victim),  # absolute
        "up": "../../victim/secret",  # relative, out of the tree
        "via": "sub/../../victim",  # down, then out
        "chain": "hop/secret",  # down, through a link that leads out (left out, so chain names nothing)
        "hop": str(victim),
        "ok": "sub/file",  # stays in the tree
    }
    plant = "import os\nos.makedirs('out/sub', exist_ok=True)\nopen('out/sub/file', 'w').write('data')\n"
    plant += "".join(f"os.symlink({target!r}, 'out/{name}')\n" for name, target in links.items())
    await executor.execute(plant)
    got = tmp_path / "got"
    with caplog.at_level(logging.WARNING, logger="ipybox.kernel_mgr.transfer"):
        await executor.download("out", got)
    assert sorted(os.listdir(got)) == ["chain", "ok", "sub"]
    assert os.readlink(got / "ok") == "sub/file" and (got / "ok").read_text() == "data"
    assert not (got / "chain").exists()
    left_out = "\n".join(record.getMessage() for record in caplog.records)
    out = [name for name in links if name not in ("ok", "chain")]
    assert all(repr(str(executor.working_dir / "out" / name)) in left_out for name in out)
    # the host's later writes and reads of the copied tree stay in it
    await executor.execute(
        "os.makedirs('new', exist_ok=True)\nopen('new/authorized_keys', 'w').write('attacker')"
    )
    await executor.download("new/authorized_keys", got / "keys" / "authorized_keys")
    assert sorted(os.listdir(victim)) == ["secret"]
    (got / "mine").symlink_to(victim / "secret")  # also a link of the application's own
    await executor.upload(got, "back")
    uploaded = await executor.execute("print(sorted(os.listdir('back')))")
    assert uploaded.text == "['keys', 'sub']"
