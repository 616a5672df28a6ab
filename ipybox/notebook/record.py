"""The record of one kernel's session: its cells (code, outputs, timing, tool calls) and its marks.

A `SessionRecord` is filled as cells run (`begin_cell()`, then the `CellRecord`'s `add_*()` and
`finish()`); `to_notebook()` turns it into a Jupyter notebook, `save()` writes that, `load()` reads
one back for a resume. What a cell printed is kept as ipybox keeps a cell's output: past
`ResourceLimits.output` characters its head and tail around a marker, images up to
`ResourceLimits.images` and `image_bytes`.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipybox import _safe_fs
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.limits import format_size as _format_size
from ipybox.kernel_mgr.output import DROPPED_MARK, KernelEvent
from ipybox.notebook import _format
from ipybox.tool_exec.audit import redact_value

if TYPE_CHECKING:
    import nbformat

#: Characters of a tool call's result text shown in the notebook (the whole result is in its metadata).
RESULT_TEXT_LIMIT = 2000
#: Characters of a tool call's encoded result kept for a resume; a larger one is not kept.
RESULT_LIMIT = 4 << 20

_DISPLAY_TYPES = {"display_data": "display_data", "update_display_data": "display_data"}


def code_digest(code: str) -> str:
    """The digest a cell's record keeps of its code, to tell an edited cell at a resume."""
    return hashlib.sha256(code.encode()).hexdigest()


@dataclass
class ToolCallRecord:
    """One tool call (or shell command) a cell made and what became of it.

    `arguments` and `result` are redacted as the audit log redacts (secret values replaced by
    `***`; arguments cut at its field limit), `result` is the call's encoded result as the kernel
    got it (None when the call did not run, or was too large to keep).
    """

    server: str
    tool: str
    arguments: dict[str, Any]
    decision: str
    decided_by: str | None = None
    result_text: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "server": self.server,
            "tool": self.tool,
            "arguments": self.arguments,
            "decision": self.decision,
            "decided_by": self.decided_by,
        }
        for key in ("result_text", "result", "error"):
            if (value := getattr(self, key)) is not None:
                data[key] = value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCallRecord:
        return cls(
            str(data["server"]),
            str(data["tool"]),
            dict(data.get("arguments") or {}),
            str(data.get("decision", "")),
            data.get("decided_by"),
            data.get("result_text"),
            data.get("result"),
            data.get("error"),
        )


@dataclass
class SessionMark:
    """A point in the session where the kernel's state was lost (a `reset`, or a `restart` after a
    crash), or where a `resume` from a recorded session began."""

    kind: str  # "reset" | "restart" | "resume"
    reason: str = ""
    time: str = ""


class CellRecord:
    """What one cell did: made by `SessionRecord.begin_cell()`, filled while it runs.

    Outputs come as Jupyter iopub messages (`add_output(msg_type, content)`) or as the kernel
    events ipybox reads them into (`add_event()`); tool calls with `add_tool_call()`; the cell
    ends with `finish()`. `outputs` are nbformat v4 output dicts, in the order they came.
    """

    def __init__(
        self, code: str, execution_count: int, limits: ResourceLimits, images: _SessionImages | None = None
    ) -> None:
        self.code = code
        self.execution_count = execution_count
        self.started = _now()
        self.duration_s: float | None = None
        self.error: str | None = None
        #: "running", then "ok" or "error".
        self.status = "running"
        self.outputs: list[dict[str, Any]] = []
        self.tool_calls: list[ToolCallRecord] = []
        self.code_sha256 = code_digest(code)
        self._budget = _TextBudget(limits.output)
        self._max_images, self._max_image_bytes = limits.images, limits.image_bytes
        self._images = self._image_bytes = 0
        self._images_dropped = 0
        self._session_images = images
        #: Counts the changes: a saved text of the cell (`SessionRecord`) holds while it is the same.
        self.version = 0

    @classmethod
    def _of(cls, node: nbformat.NotebookNode, execution_count: int, limits: ResourceLimits) -> CellRecord:
        """The record of a notebook's code cell (one ipybox did not record: no tool calls)."""
        own = node.metadata.get("ipybox") or {}
        cell = cls(node.source, execution_count, limits)
        cell.code_sha256 = str(own.get("code_sha256", cell.code_sha256))
        cell.started = str(own.get("started", ""))
        cell.duration_s = own.get("duration_s")
        cell.status = str(own.get("status", "ok"))
        cell.error = own.get("error")
        cell.tool_calls = [ToolCallRecord.from_json(dict(c)) for c in own.get("tool_calls", [])]
        cell.outputs = [dict(o) for o in node.outputs]
        return cell

    def add_output(self, msg_type: str, content: dict[str, Any]) -> None:
        """Record an iopub message of the cell: stream, display_data, update_display_data (kept as
        a new display), execute_result, error or clear_output (others are ignored)."""
        self.version += 1
        if msg_type == "stream":
            self._add_text(str(content.get("name", "stdout")), str(content.get("text", "")))
        elif msg_type in _DISPLAY_TYPES or msg_type == "execute_result":
            self._add_display(msg_type, content)
        elif msg_type == "error":
            self.outputs.append(_format.error_output(content, self._budget.limit))
        elif (
            msg_type == "clear_output"
        ):  # as a notebook shows it: what came before is gone, but the tool calls
            self.outputs = [o for o in self.outputs if o.get("metadata", {}).get(_format.TOOL_CALL_KEY)]

    def add_event(self, event: KernelEvent) -> None:
        """Record an output event as ipybox's kernel layer reads it (the message it came from,
        or, for a note ipybox adds itself, its text as stdout)."""
        self.version += 1
        if event.msg_type:
            self.add_output(event.msg_type, event.content)
        elif event.kind in ("stream", "text"):
            self._add_text("stdout", event.text)

    def add_tool_call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        decision: str,
        decided_by: str | None,
        result_text: str | None = None,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        secrets: Iterable[str] = (),
    ) -> ToolCallRecord:
        """Record a tool call the cell made: `decision` (accepted, rejected, auto, refused,
        timed_out), `decided_by` (who or what decided), its `result_text` or `error`, and its
        encoded `result` (what the kernel got, kept for a resume). Values of `secrets` are
        replaced by `***` as in the audit log."""
        self.version += 1
        secrets = tuple(secrets)
        kept = None
        if result is not None and len(repr(result)) <= RESULT_LIMIT:  # measured before it is walked
            kept = redact_value(result, secrets, None, items=RESULT_LIMIT)  # kept whole, for a resume
        text = result_text if result_text is not None else (kept or {}).get("text")
        call = ToolCallRecord(
            server,
            tool,
            redact_value(arguments, secrets),
            decision,
            decided_by,
            redact_value(text, secrets, RESULT_TEXT_LIMIT) if text is not None else None,
            kept,
            redact_value(error, secrets) if error is not None else None,
        )
        self.tool_calls.append(call)
        self.outputs.append(_format.tool_call_output(call))
        return call

    def finish(self, duration_s: float, error: str | None = None) -> None:
        """End the cell: `error` is why it failed (its traceback, or that the kernel died)."""
        self.version += 1
        self.duration_s = round(duration_s, 6)
        self.error = error
        self.status = "error" if error is not None else "ok"
        if tail := self._budget.tail():
            self.outputs.append(
                _format.stream("stdout", f"\n[... {self._budget.dropped} {DROPPED_MARK} ...]\n")
            )
            self.outputs.extend(_format.stream(name, text) for name, text in tail)
        if self._images_dropped:
            note = f"[ipybox] {self._images_dropped} image(s) of this cell were dropped at the image limits."
            self.outputs.append(_format.stream("stderr", note + "\n"))
        if error is not None and not any(o["output_type"] == "error" for o in self.outputs):
            self.outputs.append(
                _format.error_output({"ename": "Error", "evalue": error, "traceback": [error]}, None)
            )

    def _add_text(self, name: str, text: str) -> None:
        if head := self._budget.take(name, text):
            last = self.outputs[-1] if self.outputs else None
            if last is not None and last["output_type"] == "stream" and last["name"] == name:
                last["text"] += head
            else:
                self.outputs.append(_format.stream(name, head))

    def _add_display(self, msg_type: str, content: dict[str, Any]) -> None:
        data = dict(content.get("data") or {})
        size = sum(len(v) * 3 // 4 for k, v in data.items() if k.startswith("image/") and isinstance(v, str))
        if size:
            over_count = self._max_images is not None and self._images >= self._max_images
            over_size = self._max_image_bytes is not None and self._image_bytes + size > self._max_image_bytes
            if over_count or over_size:
                self._images_dropped += 1
                return
            self._images += 1
            self._image_bytes += size
        if (output := _format.display_output(msg_type, content, self.execution_count)) is not None:
            self.outputs.append(output)
            if size and self._session_images is not None:
                self._session_images.keep(self, output, size, self._max_image_bytes)


#: What an image the session's record let go for newer ones shows instead.
IMAGE_MADE_WAY = (
    "[ipybox] image not kept in the session's notebook: it keeps the newest images up to {limit} "
    "(ResourceLimits.image_bytes), and newer ones took its place"
)


class _SessionImages:
    """The images a session's record holds, across its cells: at most a cell's `image_bytes`, so
    a long session holds no more of the host's memory than one cell may; the oldest make way for
    new ones, and their outputs say so."""

    def __init__(self) -> None:
        self._kept: deque[tuple[CellRecord, dict[str, Any], int]] = deque()
        self._bytes = 0

    def keep(self, cell: CellRecord, output: dict[str, Any], size: int, limit: int | None) -> None:
        """Keep `cell`'s image `output`, letting the oldest go while over `limit` bytes."""
        self._kept.append((cell, output, size))
        self._bytes += size
        while limit is not None and self._bytes > limit and len(self._kept) > 1:
            owner, old, old_size = self._kept.popleft()
            self._bytes -= old_size
            old["data"] = {"text/plain": IMAGE_MADE_WAY.format(limit=_format_size(limit))}
            old["metadata"] = {}
            owner.version += 1


class _TextBudget:
    """Characters of text a cell keeps: the first half of `limit` as it comes, the last half as a
    tail (what falls out of it between them is counted)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._head_room = None if limit is None else limit // 2
        self._tail_room = 0 if limit is None else limit - limit // 2
        self._tail: deque[tuple[str, str]] = deque()
        self._tail_size = 0
        self.dropped = 0

    def take(self, name: str, text: str) -> str:
        """The part of `text` kept in the head; the rest goes to the tail."""
        if self._head_room is None:
            return text
        head, rest = text[: self._head_room], text[self._head_room :]
        self._head_room -= len(head)
        if rest:
            self._tail.append((name, rest))
            self._tail_size += len(rest)
            while self._tail_size > self._tail_room:
                first_name, first = self._tail[0]
                cut = min(len(first), self._tail_size - self._tail_room)
                if cut == len(first):
                    self._tail.popleft()
                else:
                    self._tail[0] = (first_name, first[cut:])
                self._tail_size -= cut
                self.dropped += cut
        return head

    def tail(self) -> list[tuple[str, str]]:
        """The tail, consecutive pieces of one stream joined (once, at the cell's end)."""
        joined: list[tuple[str, str]] = []
        for name, text in self._tail:
            if joined and joined[-1][0] == name:
                joined[-1] = (name, joined[-1][1] + text)
            else:
                joined.append((name, text))
        self._tail.clear()
        return joined


#: Characters of finished cells' JSON a session's record keeps between saves (the outputs are in
#: memory already; this is a second copy, as text).
_KEPT_TEXT = 64 << 20


class SessionRecord:
    """The record of a kernel's session (`kernel_name` names it in the notebook).

    Entries are `CellRecord`s and `SessionMark`s, in order. Not thread-safe: fill it from the
    event loop that runs the cells.
    """

    def __init__(self, kernel_name: str = "python3", *, limits: ResourceLimits | None = None) -> None:
        self.kernel_name = kernel_name
        self.limits = limits or ResourceLimits()
        self.entries: list[CellRecord | SessionMark] = []
        self.created = _now()
        self._checked = 0  # the entries validated already, as they are for good
        self._begun: list[tuple[int, CellRecord]] = []  # cells begun here and not yet seen finished
        self._images = _SessionImages()
        self._code_cells = 0
        #: The saved text of each finished entry (`_format.cell_text`), with its `CellRecord.version`,
        #: and how many characters they hold together (at most `_KEPT_TEXT`).
        self._texts: dict[int, tuple[int, str]] = {}
        self._kept_chars = 0

    @property
    def cells(self) -> list[CellRecord]:
        return [e for e in self.entries if isinstance(e, CellRecord)]

    def begin_cell(self, code: str, limits: ResourceLimits | None = None) -> CellRecord:
        """A new cell's record, appended to the session; it keeps outputs within `limits` (the
        cell's own, where it runs with others than the session's), as the cell's result does."""
        self._code_cells += 1
        cell = CellRecord(code, self._code_cells, limits or self.limits, self._images)
        self._still_running().append((len(self.entries), cell))  # finished ones go, saved or not
        self.entries.append(cell)
        return cell

    def mark_reset(self) -> None:
        """The kernel was reset on request: what the cells before built is gone."""
        self.entries.append(SessionMark("reset", "reset on request", _now()))

    def mark_restart(self, reason: str) -> None:
        """The kernel died (`reason`) and a fresh one took its place: its state is gone."""
        self.entries.append(SessionMark("restart", reason, _now()))

    def mark_resume(self, source: str) -> None:
        """The cells that follow are a resume of the session recorded in `source` (a notebook)."""
        self.entries.append(SessionMark("resume", f"from {source}", _now()))

    def to_notebook(self) -> nbformat.NotebookNode:
        """The session as a validated nbformat v4 `NotebookNode`."""
        return _format.node(self._notebook())

    def _notebook(self) -> dict[str, Any]:
        cells = [_cell(i, e) for i, e in enumerate(self.entries)]
        nb = _format.notebook(self, cells, self._checked)
        self._checked = self._settled()
        return nb

    def _settled(self) -> int:
        """The entries before the first cell still running: finished cells change only where an
        image made way for newer ones, and stay valid. (A cell recorded as running in a notebook
        this record was loaded from never ends: it does not count.)"""
        return min((i for i, _ in self._still_running()), default=len(self.entries))

    def _still_running(self) -> list[tuple[int, CellRecord]]:
        """The cells begun here that still run, with their places in `entries`."""
        self._begun = [(i, cell) for i, cell in self._begun if cell.status == "running"]
        return self._begun

    def _text(self) -> str:
        """`_format.dumps(self._notebook())`, with each finished entry's text made once and kept
        while the entry is the same: a session saved after each cell (the MCP server's) costs
        about the file's writing, not the JSON of every cell again."""
        texts: list[str] = []
        fresh: list[dict[str, Any]] = []  # to validate
        for i, entry in enumerate(self.entries):
            version = entry.version if isinstance(entry, CellRecord) else 0
            kept = self._texts.get(i)
            if kept is not None and kept[0] == version and i < self._checked:
                texts.append(kept[1])
                continue
            cell = _cell(i, entry)
            if i >= self._checked:
                fresh.append(cell)
            texts.append(text := _format.cell_text(cell))
            if not isinstance(entry, CellRecord) or entry.status != "running":
                self._keep_text(i, version, text)
        nb = _format.notebook(self, fresh, 0)
        self._checked = self._settled()
        return _format.dumps_cells(nb, texts)

    def _keep_text(self, index: int, version: int, text: str) -> None:
        """Keep an entry's text for the next save, within `_KEPT_TEXT` characters in all: past
        that, the text is made again at each save rather than held twice in memory."""
        if (old := self._texts.pop(index, None)) is not None:
            self._kept_chars -= len(old[1])
        if self._kept_chars + len(text) <= _KEPT_TEXT:
            self._texts[index] = (version, text)
            self._kept_chars += len(text)

    def save(self, path: str | os.PathLike[str], *, trusted: str | os.PathLike[str] | None = None) -> None:
        """Write the notebook to `path` atomically (a new file renamed into place).

        Below `trusted` (a directory kernel code can write, e.g. its working directory) the
        directories are walked without following links, made if missing; a link at `path` itself
        is replaced, never written through. Elsewhere the parent directory is made if missing.
        """
        # a lone surrogate (a kernel's `"\\udc00"` in a tool call's JSON) is no UTF-8: written as
        # the JSON escape it came as, inside its string, rather than failing every later save
        data = self._text().encode(errors="backslashreplace")
        path = Path(path)
        with _open_parent(path, trusted, create=True) as fd:
            _safe_fs.replace_file(fd, path.name, io.BytesIO(data))

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, trusted: str | os.PathLike[str] | None = None
    ) -> SessionRecord:
        """Read a notebook `save()` wrote (or any v4 notebook: cells without a record count as
        cells that made no tool calls). Below `trusted`, no link is followed and only a regular
        file with one link is read. Raises `NotebookError` if it is not a valid notebook."""
        path = Path(path)
        with _open_parent(path, trusted, create=False) as fd, _safe_fs.open_regular(fd, path.name, path) as f:
            text = f.read().decode("utf-8", errors="replace")
        return cls._of(_format.parse(text, path))

    @classmethod
    def _of(cls, nb: nbformat.NotebookNode) -> SessionRecord:
        meta = nb.metadata.get("ipybox") or {}
        record = cls(str(meta.get("kernel", "python3")))
        record.created = str(meta.get("created", record.created))
        for node in nb.cells:
            own = node.metadata.get("ipybox") or {}
            if node.cell_type == "markdown" and own.get("mark") in ("reset", "restart", "resume"):
                record.entries.append(
                    SessionMark(own["mark"], str(own.get("reason", "")), str(own.get("time", "")))
                )
            elif node.cell_type == "code":
                record._code_cells += 1
                record.entries.append(CellRecord._of(node, record._code_cells, record.limits))
        record._checked = len(record.entries)  # validated as read
        return record


def _open_parent(path: Path, trusted: str | os.PathLike[str] | None, *, create: bool) -> Any:
    parts = _safe_fs.parts_below(path, Path(trusted)) if trusted is not None else None
    if trusted is None or parts is None or not parts:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        return _safe_fs.opendir(path.parent, ())
    if create:
        Path(trusted).mkdir(parents=True, exist_ok=True)
    return _safe_fs.opendir(Path(trusted), parts[:-1], create=create)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


__all__ = ["CellRecord", "SessionMark", "SessionRecord", "ToolCallRecord", "code_digest"]


def _cell(index: int, entry: CellRecord | SessionMark) -> dict[str, Any]:
    """An entry's notebook cell; ids are stable, so a notebook saved again differs only where the
    session went on."""
    if isinstance(entry, CellRecord):
        return _format.code_cell(entry, f"ipybox-{index}")
    return _format.mark_cell(entry, f"ipybox-{index}")
