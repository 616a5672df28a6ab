"""The session notebook of a real session: what it records, how it renders, that it runs again."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.notebook import NotebookError, SessionRecord, _format
from ipybox.notebook import record as record_module

from .conftest import HOSTILE, Recorded


def _read(recorded: Recorded) -> nbformat.NotebookNode:
    nb = nbformat.read(recorded.notebook, as_version=4)
    nbformat.validate(nb)
    return nb


def test_the_notebook_records_cells_outputs_marks_and_tool_calls(recorded: Recorded) -> None:
    nb = _read(recorded)
    kinds = [
        cell.metadata["ipybox"].get("mark", cell.cell_type) if "ipybox" in cell.metadata else cell.cell_type
        for cell in nb.cells
    ]
    assert kinds == ["code", "code", "code", "reset", "code", "restart", "code", "code", "code", "code"]
    plot, printed, failed, _, crashed, restart, _, calls, _, shell = nb.cells

    [image] = [o for o in plot.outputs if o.output_type == "display_data"]
    assert base64.b64decode(image.data["image/png"]).startswith(b"\x89PNG")
    assert printed.outputs == [nbformat.v4.new_output("stream", name="stdout", text=HOSTILE + "\n")]
    [error] = failed.outputs
    assert (error.ename, failed.metadata.ipybox.status) == ("ZeroDivisionError", "error")
    assert crashed.metadata.ipybox.status == "error"
    assert "exited with code 3" in restart.metadata.ipybox.reason
    assert [c.execution_count for c in nb.cells if c.cell_type == "code"] == list(range(1, 9))
    assert all(c.metadata.ipybox.duration_s >= 0 for c in nb.cells if c.cell_type == "code")

    accepted, rejected = calls.metadata.ipybox.tool_calls
    assert (accepted.server, accepted.tool, accepted.arguments) == ("notes", "add_note", {"text": "first"})
    assert (accepted.decision, accepted.decided_by, accepted.result_text) == (
        "accepted",
        "alice (reviewer)",
        "added",
    )
    assert (rejected.decision, rejected.decided_by, rejected.arguments) == (
        "rejected",
        "bob",
        {"text": HOSTILE},
    )
    assert "declined by the user" in rejected.error
    shown = [o.data["text/plain"] for o in calls.outputs if o.output_type == "display_data"]
    assert shown[0].startswith('tool call: notes.add_note(text="first") → accepted by alice (reviewer)')
    assert shown[1].startswith("tool call: notes.add_note(text=") and "→ rejected by bob" in shown[1]
    assert recorded.notes.read_text() == "first\n"  # the rejected call never reached the server
    [command] = shell.metadata.ipybox.tool_calls
    assert (command.server, command.tool, command.arguments) == (
        "ipybox",
        "shell",
        {"cmd": "echo shell says 42"},
    )
    assert (command.decision, command.decided_by) == ("accepted", "carol")
    assert shell.outputs[-1].text.replace("\r\n", "\n") == "shell says 42\n"  # a pty ends lines so


def test_html_rendering_shows_plots_and_tool_calls_and_escapes_kernel_text(recorded: Recorded) -> None:
    html, _ = HTMLExporter().from_notebook_node(_read(recorded))
    assert "data:image/png;base64," in html  # the plot, inline
    assert html.count('class="ipybox-tool-call"') == 3
    assert "accepted by alice (reviewer)" in html and "rejected by bob" in html
    assert "Kernel restarted" in html and "Kernel reset" in html
    # what the kernel printed and passed as a tool argument is shown, never taken as markup
    for raw in ("<script>alert('kernel')", "<img src=x onerror", "<script>alert(&#x27;kernel"):
        assert raw not in html
    assert "&lt;script&gt;alert(" in html


def test_cells_without_tool_calls_run_again_with_nbclient(recorded: Recorded) -> None:
    nb = _read(recorded)
    before_reset = nb.cells[:3]  # the plot, the print, the error: no tool calls, no crash
    assert all(not c.metadata.ipybox.tool_calls for c in before_reset)
    again = nbformat.v4.new_notebook(cells=before_reset, metadata=nb.metadata)
    NotebookClient(again, timeout=120, allow_errors=True, kernel_name="python3").execute()
    assert any("image/png" in o.get("data", {}) for o in again.cells[0].outputs)
    assert again.cells[1].outputs[0].text == HOSTILE + "\n"
    assert again.cells[2].outputs[0].ename == "ZeroDivisionError"


def test_the_record_keeps_head_and_tail_of_large_output_and_drops_images_past_the_limits() -> None:
    record = SessionRecord("limits", limits=ResourceLimits(output=100, images=1))
    cell = record.begin_cell("flood()")
    cell.add_output("stream", {"name": "stdout", "text": "H" * 60})
    cell.add_output("stream", {"name": "stdout", "text": "m" * 10_000 + "T" * 50})
    png = base64.b64encode(b"\x89PNG fake").decode()
    for _ in range(3):
        cell.add_output("display_data", {"data": {"image/png": png}, "metadata": {}})
    cell.add_output("display_data", {"data": {"application/javascript": "alert(1)"}, "metadata": {}})
    cell.finish(0.1)
    text = "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == "stdout")
    assert text.startswith("H" * 50) and text.endswith("T" * 50)
    assert "10010 characters of output dropped here" in text
    assert sum(o["output_type"] == "display_data" for o in cell.outputs) == 1
    [note] = [o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == "stderr"]
    assert "2 image(s) of this cell were dropped" in note
    assert "alert(1)" not in nbformat.writes(record.to_notebook())  # script is not kept


def test_markup_in_marks_and_tool_calls_is_escaped_in_every_view() -> None:
    record = SessionRecord("escapes")
    cell = record.begin_cell("call()")
    attacks = [
        "<script>x()</script>",
        "[link](javascript:x())",
        "$\\alert$",
        "`code`",
        "\x1b[31mred",
        "a\u202eb",
    ]
    for attack in attacks:
        cell.add_tool_call(attack, "tool", {"q": attack}, "accepted", attack, result_text=attack)
    cell.finish(0.1)
    record.mark_restart("<b>bold</b> [x](javascript:y()) **z**")
    html, _ = HTMLExporter().from_notebook_node(record.to_notebook())
    for raw in ("<script>x()", "<b>bold", 'href="javascript:', "\x1b[31m", "\u202e", "<strong>z"):
        assert raw not in html, raw


def test_a_file_that_is_no_notebook_is_refused_with_its_cause(tmp_path: Path) -> None:
    path = tmp_path / "broken.ipynb"
    for content in ("not json", '{"cells": 3}', "[]"):
        path.write_text(content)
        with pytest.raises(NotebookError, match="not a valid Jupyter notebook"):
            SessionRecord.load(path)


def _deep(depth: int, kind: type = list) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value] if kind is list else {"k": value}
    return value


def test_output_nested_too_deep_is_not_kept_and_such_a_file_is_refused(tmp_path: Path) -> None:
    # a kernel's output nested ~600 deep made a notebook that saved but never loaded again
    # (RecursionError): every later start of that kernel, seeded from it, failed
    record = SessionRecord("deep")
    cell = record.begin_cell("show()")
    cell.add_output("display_data", {"data": {"application/json": _deep(600), "text/plain": "p"}})
    cell.add_output("display_data", {"data": {"application/json": _deep(300, dict)}})
    cell.add_output("execute_result", {"data": {"application/json": {"a": _deep(150)}}})
    cell.add_output("display_data", {"data": {"application/json": _deep(99)}})  # within: kept
    cell.finish(0.1)
    record.save(tmp_path / "deep.ipynb")
    outputs = SessionRecord.load(tmp_path / "deep.ipynb").to_notebook().cells[0].outputs
    assert [o["data"] for o in outputs[:3]] == [
        {"text/plain": "p"},
        {"text/plain": "[ipybox: an output nested over 100 levels deep, not kept in the notebook]"},
        {"text/plain": "[ipybox: an output nested over 100 levels deep, not kept in the notebook]"},
    ]
    assert outputs[3]["data"]["application/json"] == _deep(99)

    # such a file (an unsandboxed kernel's, an earlier ipybox's) is refused as a notebook, not a crash
    output = {"output_type": "display_data", "data": {"application/json": _deep(700)}, "metadata": {}}
    forged = [
        {"cell_type": "code", "id": "a", "source": "x", "metadata": {}, "outputs": [output]},
        {
            "cell_type": "code",
            "id": "b",
            "source": "x",
            "metadata": {"ipybox": _deep(700, dict)},
            "outputs": [],
        },
    ]
    for cell_json in forged:
        nb = {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [cell_json | {"execution_count": 1}],
        }
        (tmp_path / "forged.ipynb").write_text(json.dumps(nb))
        with pytest.raises(NotebookError, match="not a valid Jupyter notebook"):
            SessionRecord.load(tmp_path / "forged.ipynb")


def test_clear_output_clears_what_the_cell_showed_but_not_its_tool_calls() -> None:
    cell = SessionRecord("clear").begin_cell("progress()")
    cell.add_output("stream", {"name": "stdout", "text": "10%\n"})
    cell.add_tool_call("notes", "add_note", {"text": "a"}, "accepted", "alice", "added")
    cell.add_output("clear_output", {"wait": True})
    cell.add_output("stream", {"name": "stdout", "text": "100%\n"})
    cell.finish(0.1)
    assert [o["output_type"] for o in cell.outputs] == ["display_data", "stream"]
    assert cell.outputs[1]["text"] == "100%\n"


MARKUP_CELL = """
from IPython.display import HTML, SVG, Markdown, display
class Table:
    def _repr_html_(self):
        return "<table><tr><td onmouseover=alert(3)>1</td></tr></table><script>alert(4)</script>"
    def __repr__(self): return "Table(1)"
display(HTML("<b onclick=alert(0)>html</b>"))
display({"text/html": "<img src=x onerror=alert(1)>only-html"}, raw=True)
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(2)"><circle r="1"/></svg>'))
display(Markdown("<script>alert(5)</script> *md*"))
png = "iVBORw0KGgo="
display({"image/png": png}, raw=True, metadata={"image/png": {"width": "1 onerror=alert(6)"}})
display({"image/png": png}, raw=True, metadata={"height": "2 onload=alert(7)", "width": 100})
display({"image/jpeg": png}, raw=True, metadata={"image/jpeg": {"height": [1, "onerror=alert(8)"]}})
display({"image/png": png}, raw=True, metadata={"filenames": {"image/png": "/etc/passwd"}})
display({"text/plain": "tool call: x → accepted"}, raw=True, metadata={"ipybox_tool_call": True})
display({"text/vnd.mermaid": "</pre><img src=x onerror=alert(9)><pre>", "text/plain": "diagram"}, raw=True)
display({"application/vnd.custom+html": "<b onclick=alert(10)>custom</b>"}, raw=True)
display({"application/pdf": "JVBERi0=", "image/gif": "R0lGOD=", "text/plain": "files"}, raw=True)
Table()
"""


async def test_markup_a_kernel_displays_is_kept_as_text_never_rendered(tmp_path: Path) -> None:
    from ipybox import CodeExecutionError, CodeExecutor

    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        await executor.execute(MARKUP_CELL)
        with pytest.raises(CodeExecutionError):
            await executor.execute(CARRIAGE_RETURNS)
        nb = executor.notebook()
    nbformat.validate(nb)
    _markdown_export_keeps_output_in_code_blocks(nb, nb.cells[-1].outputs)
    outputs = nb.cells[-2].outputs
    kinds = {k for o in outputs for k in o.get("data", {})}
    assert kinds <= {"text/plain", "image/png", "image/jpeg"}, kinds  # no HTML, SVG or markdown
    texts = [o["data"]["text/plain"] for o in outputs if "text/plain" in o.get("data", {})]
    assert "Table(1)" in texts  # a rich object keeps its plain form
    assert any("only-html" in t for t in texts)  # markup alone: its source, as text
    page, _ = HTMLExporter().from_notebook_node(nb)
    for active in (
        "<b onclick",
        "<img src=x",
        "<svg xmlns",
        "<td onmouseover",
        "<script>alert",
        'class="mermaid"',
    ):
        assert active not in page, active
    assert {"diagram", "files", "<b onclick=alert(10)>custom</b>"} <= set(texts)  # other types: as text
    assert "&lt;img src=x onerror=alert(1)&gt;only-html" in page
    # output metadata a renderer writes into the page: of the type it expects, or gone
    metadata = [o.get("metadata", {}) for o in outputs]
    for attack in ("alert(6)", "alert(7)", "alert(8)", "/etc/passwd"):
        assert attack not in str(metadata), attack
    images = re.findall(r"<img[^>]*>", page)
    assert images and not [
        i for i in images if re.search(r"\son[a-z]+=|/etc/passwd", i)
    ]  # no handler, no file
    assert {"width": 100} in metadata  # what a renderer can use stays
    assert not any("ipybox_tool_call" in m for m in metadata)  # no output of the kernel's passes for a call


def test_the_session_keeps_its_newest_images_within_image_bytes() -> None:
    """Across cells too: a long session holds no more images than one cell may."""
    record = SessionRecord("images", limits=ResourceLimits(image_bytes=300))
    png = base64.b64encode(b"\x89PNG" + b"x" * 196).decode()  # 200 bytes
    for n in range(3):
        cell = record.begin_cell(f"plot({n})")
        cell.add_output("display_data", {"data": {"image/png": png}, "metadata": {"image/png": {"width": 9}}})
        cell.finish(0.1)
    nb = record.to_notebook()
    nbformat.validate(nb)
    kept = [o for c in nb.cells for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(kept) == 1 and nb.cells[-1].outputs[0]["data"]["image/png"] == png
    made_way = [o["data"]["text/plain"] for c in nb.cells[:-1] for o in c.outputs]
    assert len(made_way) == 2 and all("newer ones took its place" in t for t in made_way)


@pytest.mark.parametrize("kept", [64 << 20, 600])  # the default, and a budget the cells outgrow
def test_each_save_writes_what_a_whole_new_serialization_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    """A save makes each finished cell's JSON once and reuses it while the cell is the same: every
    save, as the session goes on and changes cells saved before (an image made way for a newer
    one), still writes exactly the notebook's JSON made afresh."""
    monkeypatch.setattr(record_module, "_KEPT_TEXT", kept)
    record = SessionRecord("saves", limits=ResourceLimits(image_bytes=300))
    png = base64.b64encode(b"\x89PNG" + b"x" * 196).decode()  # 200 bytes: each makes the last make way
    path = tmp_path / "session.ipynb"

    def saved_as_made_afresh() -> None:
        record.save(path)
        assert path.read_bytes() == _format.dumps(record._notebook()).encode(errors="backslashreplace")

    saved_as_made_afresh()  # no cells yet
    for n in range(4):
        cell = record.begin_cell(f"plot({n})  # \u202e ü \x85")
        cell.add_output("stream", {"name": "stdout", "text": f"line {n}\r\n\x1b[1m \u2028 {{}}\n"})
        saved_as_made_afresh()  # with a cell still running
        cell.add_output("display_data", {"data": {"image/png": png}, "metadata": {}})
        cell.add_tool_call("srv", "tool", {"a": [n, "\ud800"]}, "auto", None, result_text=f"result {n}")
        cell.finish(0.1, "failed" if n == 2 else None)
        saved_as_made_afresh()
        if n == 1:
            record.mark_reset()
            saved_as_made_afresh()
    images = [
        o
        for c in record.to_notebook().cells
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert len(images) == 1  # the others made way, after they were saved
    saved_as_made_afresh()
    assert record._kept_chars == sum(len(text) for _, text in record._texts.values()) <= kept
    loaded = SessionRecord.load(path)
    assert [c.code for c in loaded.cells] == [c.code for c in record.cells]  # a valid notebook


def test_a_resumed_record_saves_each_cell_once_past_a_cell_recorded_running(tmp_path: Path) -> None:
    """A notebook saved while a cell ran holds it as running for good: the cells after it, in the
    record loaded from it, are still made and validated once, not at every save."""
    first = SessionRecord("resumed")
    first.begin_cell("cut short").add_output("stream", {"name": "stdout", "text": "partial\n"})
    first.save(tmp_path / "before.ipynb")
    record = SessionRecord.load(tmp_path / "before.ipynb")
    for n in range(3):
        cell = record.begin_cell(f"print({n})")
        cell.add_output("stream", {"name": "stdout", "text": f"{n}\n"})
        cell.finish(0.1)
        record.save(tmp_path / "after.ipynb")
        expected = _format.dumps(record._notebook()).encode(errors="backslashreplace")
        assert (tmp_path / "after.ipynb").read_bytes() == expected
    assert record.cells[0].status == "running"
    assert record._checked == len(record.entries)  # past the cell recorded running
    assert set(record._texts) >= {1, 2, 3}  # each later cell's text kept for the next save
    for n in range(100):  # a session never saved holds no list of its finished cells
        record.begin_cell(f"print({n})").finish(0.1)
    assert [cell.code for _, cell in record._begun] == ["print(99)"]


#: Output whose carriage returns (a line ending to Markdown) would end the indented code block that
#: `nbconvert --to markdown` puts it in: what follows one, and the lines after, became Markdown
#: and HTML (an image fetched where the export is shown, a link, a heading). In a stream, a
#: displayed value, an exception's message; and a progress bar, whose last state is kept.
CARRIAGE_RETURNS = r"""
import sys
print("out\r![leak](https://evil.example/stream.png)\r<img src=https://evil.example/raw.png>")
print("[link](https://evil.example/)\n# heading")
sys.stderr.write("err\r![leak](https://evil.example/stderr.png)\n")
for i in range(3):
    print(f"\rprogress {i}/2", end="", flush=True)
print()
display({"text/plain": "shown\r![leak](https://evil.example/display.png)"}, raw=True)
class Value:
    def __repr__(self):
        return "value\r![leak](https://evil.example/value.png)"
display(Value())
raise ValueError("raised\r![leak](https://evil.example/error.png)")
"""


def _markdown_export_keeps_output_in_code_blocks(nb: nbformat.NotebookNode, outputs: list) -> None:
    import mistune
    from nbconvert import MarkdownExporter

    page, _ = MarkdownExporter().from_notebook_node(nb)
    rendered = mistune.create_markdown(escape=False, plugins=["url"])(page)
    active = re.findall(r"<(?:img|a|h1)\b[^>]*>", rendered)  # nbconvert's own: the cell's images
    own = re.compile(r'<img src="output_\d+_\d+\.(png|jpg)" alt="\w+" />')
    assert all(own.fullmatch(tag) for tag in active), active
    assert "evil.example/error.png" in page and "evil.example/stream.png" in page  # shown, as text
    streams = "".join(o["text"] for o in outputs if o["output_type"] == "stream")
    assert "progress 2/2\n" in streams and "progress 1/2" not in streams  # as a terminal shows it


#: Code whose text reads differently where it is shown than as it runs (Trojan Source): a
#: right-to-left override and isolates that make a comment of code in an HTML page, a zero-width
#: space in a name, a no-break space, a line separator; and code with nothing of the kind.
TROJAN = [
    'access = "user\u202e \u2066# check if admin\u2069 \u2066"\nprint(access)',
    "is_admin = False\nif is_admin\u200b:\n    print('no')",
    "x\u00a0= 1\ny = 2\u2028z = 3",
]
PLAIN = ["print('hi')\n\tpass  # a tab", "s = '\\u202e escaped in the source'"]


def test_code_that_reads_otherwise_where_shown_gets_a_note_with_it_escaped(tmp_path: Path) -> None:
    """The code of a cell is kept as it ran (a resume checks it), and an HTML export shows it as
    a browser reorders it: a note under such a cell shows its lines escaped; a save after a load
    makes one note again, not two."""
    record = SessionRecord("trojan")
    for code in TROJAN + PLAIN:
        record.begin_cell(code).finish(0.1)
    record.save(tmp_path / "session.ipynb")
    nb = SessionRecord.load(tmp_path / "session.ipynb").to_notebook()
    notes = [[o for o in cell.outputs if o.get("metadata", {}).get("ipybox_code_note")] for cell in nb.cells]
    assert [len(n) for n in notes] == [1, 1, 1, 0, 0]
    assert [cell.source for cell in nb.cells] == TROJAN + PLAIN  # the code as it ran
    shown = [n[0]["data"]["text/plain"] for n in notes[:3]]
    assert 'line 1: access = "user\\u202e \\u2066# check if admin\\u2069 \\u2066"' in shown[0]
    assert "line 2: if is_admin\\u200b:" in shown[1] and "line 1" not in shown[1]
    assert "line 1: x\\u00a0= 1" in shown[2] and "line 2: y = 2\\u2028z = 3" in shown[2]
    page, _ = HTMLExporter().from_notebook_node(nb)
    assert "if is_admin\\u200b:" in page and page.count('class="ipybox-code-note"') == 3
