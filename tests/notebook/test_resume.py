"""Resume from a recorded session's notebook: a fresh kernel gets its state, no tool call repeats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.notebook import NotebookError, SessionRecord
from ipybox.notebook.replay import ResumeError

from .conftest import Recorded


async def test_resume_restores_the_state_without_calling_or_asking(registered: Recorded) -> None:
    recorded = registered
    async with CodeExecutor(
        working_dir=recorded.workspace, spare_kernel=False, approve_shell_cmds=True
    ) as executor:
        # no approval handler is connected: a call that asked would be refused
        report = await executor.resume(recorded.notebook)
        assert (report.cells_run, report.cells_skipped, report.tool_calls) == (4, 4, 3)
        result = await executor.execute("print(x, y, first, refused)")
        assert result.text == "41 42 result='added' ApprovalRejectedError"
        resumed = executor.notebook()
        # the kernel plants a link where the application saves the notebook: replaced, not followed
        victim = recorded.notes.parent / "victim.txt"
        victim.write_text("precious")
        await executor.execute(f"import os\nos.symlink({str(victim)!r}, 'planted.ipynb')")
        executor.save_notebook(recorded.workspace / "planted.ipynb")
    assert victim.read_text() == "precious"
    assert not (recorded.workspace / "planted.ipynb").is_symlink()
    assert recorded.notes.read_text() == "first\n"  # the server got the accepted call once, at recording
    assert resumed.cells[0].metadata.ipybox.mark == "resume" and "Session resumed" in resumed.cells[0].source
    accepted, rejected = resumed.cells[2].metadata.ipybox.tool_calls
    assert accepted.decided_by == "the resumed record (alice (reviewer))" and accepted.result_text == "added"
    assert rejected.decision == "rejected" and "declined by the user" in rejected.error


def _edited(recorded: Recorded, tmp: Path, change: str) -> Path:
    nb = json.loads(recorded.notebook.read_text())
    calls = nb["cells"][7]
    if change == "code":
        calls["source"] = "".join(calls["source"]).replace("'first'", "'other'")
    elif change == "arguments":
        calls["metadata"]["ipybox"]["tool_calls"][0]["arguments"] = {"text": "other"}
    elif change == "missing call":
        nb["cells"][8]["metadata"]["ipybox"]["tool_calls"] = calls["metadata"]["ipybox"]["tool_calls"][:1]
    elif change == "outcome":
        nb["cells"][8]["metadata"]["ipybox"]["status"] = "error"
    path = recorded.workspace / f"edited-{change.replace(' ', '-')}.ipynb"
    path.write_text(json.dumps(nb))
    return path


#: How a notebook is changed, the cell the resume stops at, and why.
DIVERGENCES = [
    ("code", 6, "its code was changed after it was recorded"),
    ("arguments", 6, "which its record does not have"),
    ("missing call", 7, "it did not make the recorded call notes.add_note"),
    ("outcome", 7, "it succeeded this time, but failed when it was recorded"),
]


async def test_a_diverging_resume_stops_at_that_cell_and_keeps_the_state_before(
    registered: Recorded, tmp_path: Path
) -> None:
    recorded = registered
    async with CodeExecutor(
        working_dir=recorded.workspace, spare_kernel=False, approve_shell_cmds=True
    ) as executor:
        for change, cell, why in DIVERGENCES:  # one kernel for all: each resume starts from no x, y
            await executor.execute("globals().pop('x', None); globals().pop('y', None)")
            with pytest.raises(ResumeError, match=rf"stopped at cell \[{cell}\]: .*{why}") as info:
                await executor.resume(_edited(recorded, tmp_path, change))
            assert info.value.cell == cell
            state = await executor.execute("print(x, 'y' in globals())")
            assert state.text == f"41 {cell == 7}", (
                change
            )  # the cells before ran again ([7] before its check)
        broken = recorded.workspace / "not-a-notebook.ipynb"
        broken.write_text("{")
        with pytest.raises(NotebookError, match="not a valid Jupyter notebook"):
            await executor.resume(broken)
    assert recorded.notes.read_text() == "first\n"


SHELL_CELLS = [
    "tail = open('tail.txt').read()\n!echo ***{tail}",  # a `***` of its own, no secret's
    "pad, tail = 'x' * 2100, open('tail2.txt').read()\n!echo {pad}{tail}",  # cut short in the record
]


async def test_a_resumed_shell_command_runs_only_as_recorded_in_full(tmp_path: Path) -> None:
    """A resume approves a shell command again (the kernel runs it) only if it is the recorded one:
    a `***` in it, or the end of one too long to keep, never stands for other text (here a file
    the cell reads, changed since: `; touch` a marker)."""
    from ipybox import ApprovalRequest

    (tmp_path / "tail.txt").write_text("")
    (tmp_path / "tail2.txt").write_text("")
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False, approve_shell_cmds=True) as executor:
        for code in SHELL_CELLS:
            async for item in executor.stream(code):
                if isinstance(item, ApprovalRequest):
                    await item.accept(by="carol")
        executor.save_notebook(tmp_path / "session.ipynb")
        for changed, cell in (("tail.txt", 1), ("tail2.txt", 2)):
            (tmp_path / "tail.txt").write_text("")
            (tmp_path / "tail2.txt").write_text("")
            (tmp_path / changed).write_text(f"; touch {tmp_path}/ran-{cell}")
            with pytest.raises(ResumeError, match="record") as stopped:
                await executor.resume(tmp_path / "session.ipynb")
            assert stopped.value.cell == cell
    assert not list(tmp_path.glob("ran-*"))


def test_arguments_cut_short_in_the_record_match_only_what_it_kept() -> None:
    """A wide call's record keeps about `MAX_ITEMS` of its items and counts the rest: a resume takes
    a live call for it only if the kept items and the counts are the same (a changed item among
    the kept, or one item more or less, is another call; what the record left out it cannot
    compare, as with the end of a long string)."""
    from ipybox.notebook import _format
    from ipybox.notebook.replay import _matches
    from ipybox.tool_exec.audit import MAX_ITEMS, redact_value

    live = {"items": list(range(3 * MAX_ITEMS)), "table": {f"k{i}": i for i in range(50)}, "n": 1}
    kept = json.loads(_format.dumps(redact_value(live, ())))  # as the notebook holds it
    assert len(kept["items"]) < len(live["items"]) and kept["table"] == {"…": "50 more entries not kept"}
    assert _matches(kept, live)
    others = [
        {**live, "items": [-1, *live["items"][1:]]},
        {**live, "items": [*live["items"], 0]},
        {**live, "items": live["items"][:-1]},
        {**live, "table": {**live["table"], "k50": 50}},
        {**live, "n": 2},
    ]
    for other in others:
        assert not _matches(kept, other)

    # a dict cut short whose keys are not in sorted order (the notebook sorts them), long keys
    # (cut as strings are) and a key with a secret in it (redacted): the same call matches
    table = {f"k{i}": i for i in range(MAX_ITEMS + 5)}
    live = {"long": {"x" * 5000: 1, "y" * 5000: 2}, "keyed": {"id TOKEN-123": 1, "b": 2}, "table": table}
    kept = json.loads(_format.dumps(redact_value(live, ["TOKEN-123"])))
    assert sorted(map(len, kept["long"])) == [2001, 2001] and "***" in str(kept["keyed"])
    assert kept["table"]["…"] == f"{len(table) - len(kept['table']) + 1} more entries not kept"
    assert _matches(kept, live)
    others = [
        {**live, "table": {**table, "k5": -1}},
        {**live, "table": {"k-1": 0, **table}},
        {**live, "long": {"x" * 5000: 1, "z" * 5000: 2}},
        {**live, "keyed": {"other": 1, "b": 2}},
        {**live, "keyed": {"id TOKEN-123": 1, "c": 2}},
    ]
    for other in others:
        assert not _matches(kept, other)


async def test_an_executor_given_a_record_continues_it_after_a_restart_mark(registered: Recorded) -> None:
    """`CodeExecutor(record=...)`: the saved session goes on in the new executor's notebook, its cells
    not run again (that is `resume()`), a restart mark saying the state before it is gone."""
    record = SessionRecord.load(registered.notebook, trusted=registered.workspace)
    before = len(record.to_notebook().cells)
    async with CodeExecutor(working_dir=registered.workspace, spare_kernel=False, record=record) as executor:
        result = await executor.execute("print('x' in globals())")
        notebook = executor.notebook()
    assert result.text == "False"  # nothing ran again
    mark, cell = notebook.cells[before:]
    assert mark.metadata.ipybox.mark == "restart" and "started again" in mark.source
    assert cell.source == "print('x' in globals())"
    assert notebook.cells[:before] == record.to_notebook().cells[:before]
