"""A kernel's session as a Jupyter notebook: recorded as cells run, saved link-safely, read back.

The API (stable; only additions from here on):

- `SessionRecord(kernel_name="python3", *, limits=None)`: the record of one kernel's session.
  - `begin_cell(code) -> CellRecord`: a new cell, appended.
  - `mark_reset()`, `mark_restart(reason)`: the kernel's state was lost there (a markdown cell).
  - `to_notebook() -> nbformat.NotebookNode`: nbformat v4, validated.
  - `save(path, *, trusted=None)`: written atomically (a new file renamed into place); below
    `trusted` (a directory the kernel can write) no link is followed and a link at `path` is
    replaced, never written through.
  - `SessionRecord.load(path, *, trusted=None) -> SessionRecord`: read back (for a resume);
    `NotebookError` if the file is not a valid v4 notebook.
  - `entries` (`CellRecord`s and `SessionMark`s in order), `cells` (the `CellRecord`s).
- `CellRecord`:
  - `add_output(msg_type, content)`: an iopub message (stream, display_data,
    update_display_data, execute_result, error); images stay inline (base64).
  - `add_event(event)`: the same from a `kernel_mgr.output.KernelEvent` (it carries its message).
  - `add_tool_call(server, tool, arguments, decision, decided_by, result_text=None, *, result=None,
    error=None, secrets=()) -> ToolCallRecord`: arguments redacted by the audit log's rules
    (`tool_exec.audit.redact_value`); kept in the cell's metadata (`ipybox.tool_calls`) and shown
    as a compact line among its outputs ("tool call: server.tool(args) → accepted by ...").
  - `finish(duration_s, error=None)`.
  - `code`, `outputs` (nbformat output dicts), `tool_calls`, `status`, `error`, `code_sha256`.

Resume (`ipybox.notebook.replay`, imported on use): `await resume(executor, path) -> ResumeReport`
(also `CodeExecutor.resume(path)`) runs the cells after the notebook's last reset or restart again,
with the tool server's `calls` seam (`tool_exec.calls.ToolCalls`) set to a `ReplayCalls` that answers
every tool call and shell approval from the record; `ResumeError` (`.cell`) where a cell diverges.

Outputs are kept as ipybox keeps a cell's output (`ResourceLimits.output`: head and tail around a
marker; `images`, `image_bytes`). Every text from the kernel is data: what ipybox renders itself
is escaped HTML and markdown.
"""

from ipybox.notebook._format import NotebookError
from ipybox.notebook.record import CellRecord, SessionMark, SessionRecord, ToolCallRecord, code_digest

__all__ = ["CellRecord", "NotebookError", "SessionMark", "SessionRecord", "ToolCallRecord", "code_digest"]
