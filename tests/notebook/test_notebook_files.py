"""A session notebook in a directory kernel code can write: never written or read through a link.

Kernel code could plant a link (or fifo, or hard link) where ipybox will save or read the notebook,
to make ipybox overwrite another file, or to pass off another file as the record.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from ipybox._safe_fs import UnsafePathError
from ipybox.notebook import SessionRecord


def _record() -> SessionRecord:
    record = SessionRecord("links")
    cell = record.begin_cell("print('hi')")
    cell.add_output("stream", {"name": "stdout", "text": "hi\n"})
    cell.finish(0.01)
    return record


def _symlink(path: Path, victim: Path) -> None:
    path.symlink_to(victim)


def _hardlink(path: Path, victim: Path) -> None:
    os.link(victim, path)


def _fifo(path: Path, victim: Path) -> None:
    os.mkfifo(path)


PLANTS: dict[str, Callable[[Path, Path], None]] = {"symlink": _symlink, "hard link": _hardlink, "fifo": _fifo}


@pytest.mark.parametrize("plant", PLANTS)
def test_saving_replaces_what_was_planted_at_the_path_and_never_writes_through_it(
    tmp_path: Path, plant: str
) -> None:
    workspace, victim = tmp_path / "workspace", tmp_path / "victim.txt"
    (workspace / ".ipybox" / "notebooks").mkdir(parents=True)
    victim.write_text("precious")
    path = workspace / ".ipybox" / "notebooks" / "k.ipynb"
    PLANTS[plant](path, victim)
    _record().save(path, trusted=workspace)
    assert victim.read_text() == "precious"
    assert path.is_file() and not path.is_symlink() and path.stat().st_nlink == 1
    assert SessionRecord.load(path, trusted=workspace).cells[0].code == "print('hi')"
    assert not [p.name for p in path.parent.iterdir() if p.name != "k.ipynb"]  # no temporary file left


@pytest.mark.parametrize("plant", PLANTS)
def test_loading_refuses_what_was_planted_at_the_path(tmp_path: Path, plant: str) -> None:
    workspace, victim = tmp_path / "workspace", tmp_path / "victim.ipynb"
    workspace.mkdir()
    _record().save(victim)  # a real notebook, elsewhere: it must not be passed off as the record
    path = workspace / "k.ipynb"
    PLANTS[plant](path, victim)
    with pytest.raises(UnsafePathError):
        SessionRecord.load(path, trusted=workspace)


@pytest.mark.parametrize("depth", [1, 2])
def test_a_linked_directory_on_the_way_is_refused_both_ways(tmp_path: Path, depth: int) -> None:
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    outside.mkdir()
    parent = workspace / ".ipybox" if depth == 1 else workspace / ".ipybox" / "notebooks"
    parent.parent.mkdir(parents=True)
    parent.symlink_to(outside, target_is_directory=True)
    path = workspace / ".ipybox" / "notebooks" / "k.ipynb" if depth == 2 else parent / "k.ipynb"
    with pytest.raises(UnsafePathError):
        _record().save(path, trusted=workspace)
    assert list(outside.iterdir()) == []
    _record().save(outside / "k.ipynb")
    with pytest.raises(UnsafePathError):
        SessionRecord.load(path, trusted=workspace)


def test_outside_a_trusted_directory_the_parent_is_made(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "k.ipynb"
    _record().save(path)
    assert SessionRecord.load(path).cells[0].outputs[0]["text"] == "hi\n"


def test_half_characters_do_not_stop_the_notebook_being_saved(tmp_path: Path) -> None:
    """A lone surrogate (half a character: no UTF-8) in a cell's output or tool call once
    made every later save of the session's notebook fail; written as its JSON escape, it reads back."""
    record = SessionRecord("halves")
    cell = record.begin_cell("print('halves')")
    cell.add_output("stream", {"name": "stdout", "text": "a\ud800b\n"})
    cell.add_tool_call("s\udfff", "t", {"k\udbff": ["v\udc80"]}, "accepted", "user", result={"text": "ok"})
    cell.finish(0.01)
    record.save(tmp_path / "k.ipynb")
    [loaded] = SessionRecord.load(tmp_path / "k.ipynb").cells
    assert loaded.outputs[0]["text"] == "a\ud800b\n"
    [call] = loaded.tool_calls
    assert (call.server, call.arguments) == ("s\udfff", {"k\udbff": ["v\udc80"]})


def test_what_a_terminal_would_act_on_is_saved_as_escapes(tmp_path: Path) -> None:
    """C1 controls (a terminal reads U+009B as CSI), bidirectional, zero-width and tag characters
    and line separators that a kernel printed or put in a tool call are JSON escapes in the file,
    so `cat` or `git diff` of the notebook shows them as text; loaded back, nothing changed."""
    raw = "a\x9b2J\x1b]0;t\x07\u202eb\u200b\u2028c\U000e0041\x85d\x7f"
    record = SessionRecord("raw")
    cell = record.begin_cell(f"print({raw!r})")
    cell.add_output("stream", {"name": "stdout", "text": raw})
    cell.add_tool_call("s" + raw, "t", {"k" + raw: [raw]}, "accepted", "user", result={"text": raw})
    cell.finish(0.01)
    record.save(tmp_path / "k.ipynb")
    text = (tmp_path / "k.ipynb").read_text()
    assert "\\u009b2J" in text and "\\u202e" in text
    assert not [c for c in "\x9b\x1b\x07\u202e\u200b\u2028\U000e0041\x85\x7f" if c in text]
    [loaded] = SessionRecord.load(tmp_path / "k.ipynb").cells
    assert loaded.outputs[0]["text"] == raw
    [call] = loaded.tool_calls
    assert (call.server, call.arguments) == ("s" + raw, {"k" + raw: [raw]})
