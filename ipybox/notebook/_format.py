"""A session record as nbformat v4 and back.

nbformat is imported where a notebook is made or read, not with ipybox: it takes long to import
(its JSON schema validation), and a recorder that never saves never needs it.

Every text a kernel supplied (outputs, tool names and arguments, results, errors) is data: outputs
keep their data types (plain text, images, JSON) but not markup a renderer would interpret (HTML,
markdown, SVG, LaTeX; script never), since `nbconvert --to html` copies such markup into the page
as is; and what ipybox renders itself (tool calls, marks) is escaped HTML and markdown, so no
markup or script of the kernel's reaches a reader.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipybox._nesting import MAX_NESTING, deeper_than
from ipybox._version import __version__
from ipybox.errors import IpyboxError
from ipybox.tool_exec.approval import display

if TYPE_CHECKING:
    import nbformat

    from ipybox.notebook.record import CellRecord, SessionMark, SessionRecord, ToolCallRecord

#: The record's format in the notebook's and cells' `ipybox` metadata.
FORMAT = 1
#: What a tool call's output carries in its metadata, so a load tells it from the cell's own outputs.
TOOL_CALL_KEY = "ipybox_tool_call"
#: What ipybox's note on a cell's code carries in its metadata: made at each save, never loaded.
CODE_NOTE_KEY = "ipybox_code_note"
#: Lines a code note shows; more are counted.
_NOTE_LINES = 20
#: MIME types whose content is script, which a front end would run.
_SCRIPTS = frozenset({"application/javascript", "text/javascript", "application/x-javascript"})
#: The MIME types an output keeps: data every renderer shows as data (text escaped, images as
#: base64, JSON as a tree). Any other may be markup to some renderer, and an HTML export inlines
#: it (HTML and SVG carry script and event handlers, markdown raw HTML, LaTeX goes to MathJax,
#: nbconvert writes text/vnd.mermaid into the page unescaped): left out of the record, its source
#: kept as plain text where nothing else represents the output.
_DATA = frozenset({"text/plain", "image/png", "image/jpeg", "application/json"})
#: In place of an output whose data nests deeper than a recursive walk (validation, load) takes.
_TOO_DEEP = f"[ipybox: an output nested over {MAX_NESTING} levels deep, not kept in the notebook]"
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>=:$])")
_DECIDED = {
    "accepted": "accepted",
    "rejected": "rejected",
    "auto": "run without asking (auto-approved)",
    "refused": "refused",
    "timed_out": "not decided in time",
}


class NotebookError(IpyboxError, ValueError):
    """A notebook ipybox cannot read as a session record (not JSON, not nbformat v4, or invalid)."""


def stream(name: str, text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": name if name in ("stdout", "stderr") else "stdout", "text": text}


def display_output(msg_type: str, content: dict[str, Any], execution_count: int) -> dict[str, Any] | None:
    """The output of a display message; None if nothing of it is kept (script is never kept, markup
    only as its plain-text source where nothing else represents it: a reader would run it)."""
    given = {str(k): _mime_value(v) for k, v in (content.get("data") or {}).items() if k not in _SCRIPTS}
    if deep := [k for k, v in given.items() if deeper_than(v)]:  # would break the notebook's save and load
        given = {k: v for k, v in given.items() if k not in deep} or {"text/plain": _TOO_DEEP}
    data = {k: v for k, v in given.items() if k in _DATA}
    if not data and (markup := [v for k, v in given.items() if isinstance(v, str)]):
        data = {"text/plain": markup[0]}  # the source, shown as text
    if not data:
        return None
    metadata = _safe_metadata(content.get("metadata"))
    if msg_type == "execute_result":
        return {
            "output_type": "execute_result",
            "execution_count": execution_count,
            "data": data,
            "metadata": metadata,
        }
    return {"output_type": "display_data", "data": data, "metadata": metadata}


def _safe_metadata(metadata: Any) -> dict[str, Any]:
    """What renderers read of an output's `metadata`, where its value is of the one type they
    expect: an HTML export writes `width` and `height` into an unquoted attribute, where text
    would add attributes (event handlers), and `filenames` names files to show. The rest goes,
    also ipybox's own marks (a kernel's output is never a tool call's)."""
    if not isinstance(metadata, dict):
        return {}
    kept: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, dict) and key not in _SAFE_METADATA:
            if inner := _safe_metadata({k: v for k, v in value.items() if not isinstance(v, dict)}):
                kept[str(key)] = inner
        elif (check := _SAFE_METADATA.get(key)) is not None and check(value):
            kept[key] = value
    return kept


def _is_size(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: Output metadata a renderer reads, each with the check of its value.
_SAFE_METADATA = {
    "width": _is_size,
    "height": _is_size,
    "needs_background": lambda v: v in ("light", "dark"),
    "unconfined": lambda v: isinstance(v, bool),
    "isolated": lambda v: isinstance(v, bool),
}


def _mime_value(value: Any) -> Any:
    return value if isinstance(value, str | dict | list) else str(value)


def error_output(content: dict[str, Any], limit: int | None) -> dict[str, Any]:
    traceback = [str(line) for line in content.get("traceback") or []]
    if limit is not None and sum(map(len, traceback)) > limit:  # a deep recursion: head and tail
        keep = max(limit // 2 // max(max(map(len, traceback)), 1), 1)
        traceback = [
            *traceback[:keep],
            f"[... {len(traceback) - 2 * keep} lines dropped ...]",
            *traceback[-keep:],
        ]
    return {
        "output_type": "error",
        "ename": str(content.get("ename", "Error")),
        "evalue": str(content.get("evalue", "")),
        "traceback": traceback,
    }


def tool_call_output(call: ToolCallRecord) -> dict[str, Any]:
    """The compact, visible form of a tool call: one line saying what ran and who decided it."""
    shown = display.call(call.server, call.tool, call.arguments, lambda _: "see the cell's metadata")
    verdict = _DECIDED.get(call.decision, call.decision)
    by = f" by {display.escape(call.decided_by)}" if call.decided_by else ""
    outcome = f"error: {call.error}" if call.error is not None else (call.result_text or "")
    outcome = display.escape(outcome[:300]) + ("…" if len(outcome) > 300 else "")
    plain = f"tool call: {shown} → {verdict}{by}" + (f"\n  {outcome}" if outcome else "")
    rendered = (
        '<div class="ipybox-tool-call" style="border-left:3px solid #888;padding-left:6px;font-size:90%">'
        f"<b>tool call</b> <code>{html.escape(shown)}</code> → {html.escape(verdict + by)}"
        + (f"<br><small>{html.escape(outcome)}</small>" if outcome else "")
        + "</div>"
    )
    return {
        "output_type": "display_data",
        "data": {"text/plain": plain, "text/html": rendered},
        "metadata": {TOOL_CALL_KEY: True},
    }


def markdown_escape(text: str) -> str:
    """`text` shown as itself in markdown: no HTML, no markup, no link, no math."""
    escaped = html.escape(display.escape(text), quote=False)
    return _MD_SPECIAL.sub(r"\\\1", escaped)


def mark_cell(mark: SessionMark, cell_id: str) -> dict[str, Any]:
    """A reset, restart or resume, as a markdown cell between the cells before and after it."""
    what = {"reset": "Kernel reset", "restart": "Kernel restarted", "resume": "Session resumed"}[mark.kind]
    text = f"**{what}** ({markdown_escape(mark.time)}): {markdown_escape(mark.reason.rstrip('.'))}. "
    if mark.kind == "resume":
        text += "The cells below ran again with their tool calls answered from that record, not made again."
    else:
        text += "The variables and imports of the cells above are gone."
    meta = {"ipybox": {"mark": mark.kind, "reason": mark.reason, "time": mark.time}}
    return {"cell_type": "markdown", "id": cell_id, "metadata": meta, "source": text}


def code_cell(cell: CellRecord, cell_id: str) -> dict[str, Any]:
    own: dict[str, Any] = {
        "started": cell.started,
        "duration_s": cell.duration_s,
        "status": cell.status,
        "code_sha256": cell.code_sha256,
        "tool_calls": [call.to_json() for call in cell.tool_calls],
    }
    if cell.error is not None:
        own["error"] = cell.error
    return {
        "cell_type": "code",
        "id": cell_id,
        "execution_count": cell.execution_count,
        "metadata": {"ipybox": own},
        "outputs": [
            *_code_note(cell.code),
            *(_as_shown(o) for o in cell.outputs if not o.get("metadata", {}).get(CODE_NOTE_KEY)),
        ],
        "source": cell.code,
    }


def _code_note(code: str) -> list[dict[str, Any]]:
    """A note under a cell whose code holds characters that reorder, hide or act on text where it
    is shown (a right-to-left override makes a comment of code in an HTML export: Trojan Source),
    with those lines escaped (`display.escape`); none for other code. The code itself stays as it
    ran: a resume checks it."""
    lines = code.split("\n")
    changed = [
        (number, escaped)
        for number, line in enumerate(lines, 1)
        if (escaped := "\t".join(map(display.escape, line.split("\t")))) != line  # a tab is no trick
    ]
    if not changed:
        return []
    shown = [f"  line {number}: {text}" for number, text in changed[:_NOTE_LINES]]
    if len(changed) > _NOTE_LINES:
        shown.append(f"  … and {len(changed) - _NOTE_LINES} more lines")
    what = "this cell's code holds characters that reorder, hide or act on text where it is shown; as it ran:"
    return [
        {
            "output_type": "display_data",
            "data": {
                "text/plain": "\n".join([f"ipybox: {what}", *shown]),
                "text/html": (
                    '<div class="ipybox-code-note" style="border-left:3px solid #c60;padding-left:6px;'
                    f'font-size:90%"><b>ipybox</b>: {html.escape(what)}'
                    f"<pre>{html.escape(chr(10).join(shown))}</pre></div>"
                ),
            },
            "metadata": {CODE_NOTE_KEY: True},
        }
    ]


def _as_shown(output: dict[str, Any]) -> dict[str, Any]:
    """`output` with the carriage returns of its text applied as a terminal applies them
    (`display.as_shown`): Markdown reads a `\r` as a line end, so one ended the code block that
    `nbconvert --to markdown` sets the output in, and what followed became Markdown and HTML (an
    image fetched where the export is shown). A progress bar keeps its last state, as Jupyter
    shows it."""
    kind = output.get("output_type")
    if kind == "stream":
        return output | {"text": _shown(output["text"])} if "\r" in output["text"] else output
    if kind == "error":
        lines = [*output["traceback"], output["evalue"], output["ename"]]
        if not any("\r" in line for line in lines):
            return output
        *traceback, evalue, ename = map(_shown, lines)
        return output | {"traceback": traceback, "evalue": evalue, "ename": ename}
    data = output.get("data")
    if isinstance(data, dict) and "\r" in str(data.get("text/plain", "")):
        return output | {"data": data | {"text/plain": _shown(data["text/plain"])}}
    return output


def _shown(text: Any) -> Any:
    if isinstance(text, list):  # a multi-line string as nbformat may keep it
        return display.as_shown("".join(map(str, text)))
    return display.as_shown(text) if isinstance(text, str) else text


def notebook(record: SessionRecord, cells: list[dict[str, Any]], checked: int) -> dict[str, Any]:
    """The notebook of `cells` (from `code_cell()` and `mark_cell()`) as a dict, validated but for
    its first `checked` cells, which an earlier call validated (validating is most of the cost of a
    save, so a session saved after each cell validates each cell once)."""
    import nbformat

    metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
        "ipybox": {
            "format": FORMAT,
            "version": __version__,
            "kernel": record.kernel_name,
            "created": record.created,
        },
    }
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata, "cells": cells}
    try:
        nbformat.validate(nb | {"cells": cells[checked:]})
    except nbformat.ValidationError as e:  # a bug of ours, not the kernel's: say what broke
        raise NotebookError(f"the session record is not a valid notebook: {e.message}") from None
    return nb


def node(nb: dict[str, Any]) -> nbformat.NotebookNode:
    import nbformat

    return nbformat.from_dict(nb)


#: Characters a terminal acts on or a reader cannot see, which JSON writes as they are: DEL and
#: the C1 controls (a terminal reads U+009B as CSI, the start of an escape sequence), and the
#: format characters (bidirectional overrides, zero-width ones, tags) and line and paragraph
#: separators. The file holds them as JSON escapes, so `cat` or `git diff` of a notebook shows
#: them as text; read back, it is the same notebook.
_RAW = re.compile(
    "[\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)


def dumps(nb: dict[str, Any]) -> str:
    """The notebook's JSON as nbformat writes it (validated already, so not again), with the
    characters of `_RAW` escaped."""
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return _RAW.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    return display.quote(match.group())[1:-1]


def cell_text(cell: dict[str, Any]) -> str:
    """A cell's part of `dumps()`: its JSON, two levels in (JSON strings hold no line breaks)."""
    text = "  " + json.dumps(cell, indent=1, sort_keys=True, ensure_ascii=False).replace("\n", "\n  ")
    return _RAW.sub(_escaped, text)


#: Where `dumps_cells` puts the cells' texts, as `dumps` writes a list holding this string.
_CELLS = "\x00cells\x00"
_CELLS_LINE = '  "\\u0000cells\\u0000"'


def dumps_cells(nb: dict[str, Any], cells: list[str]) -> str:
    """`dumps(nb)` where the notebook's cells are given as their `cell_text()`s: a session's
    notebook, saved again and again, makes each finished cell's text once."""
    if not cells:
        return dumps(nb | {"cells": []})
    head, found, tail = dumps(nb | {"cells": [_CELLS]}).partition(_CELLS_LINE)
    assert found, "the cells' place in the notebook's JSON"
    return head + ",\n".join(cells) + tail


def parse(text: str, path: Path) -> nbformat.NotebookNode:
    """The validated v4 notebook `text` (read from `path`); `NotebookError` saying why not."""
    import nbformat

    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except (nbformat.ValidationError, ValueError, KeyError, AttributeError, TypeError, RecursionError) as e:
        message = getattr(e, "message", None) or str(e)
        raise NotebookError(
            f"{path} is not a valid Jupyter notebook (nbformat v4): {message}. Pass a notebook that "
            "ipybox saved (CodeExecutor.save_notebook) or another valid .ipynb file."
        ) from None
    return nb
