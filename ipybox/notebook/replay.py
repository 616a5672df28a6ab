"""Resume: rebuild a kernel's state from a session notebook, tool calls answered from the record.

`resume(executor, path)` runs the notebook's cells after its last reset or restart again, in order,
on `executor`'s kernel. Meanwhile the tool server's `calls` (the `tool_exec.calls.ToolCalls` seam) is
a `ReplayCalls`: each tool call and shell command a cell makes is matched against the calls the
cell's record holds, and answered from there (the recorded decision, the recorded result or error),
so no MCP server is called and nobody is asked. Where a cell's code, calls or outcome differ from
its record, the resume stops there with a `ResumeError` naming the cell and why; the cells before
it have run and their state stays in the kernel.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipybox.errors import IpyboxError
from ipybox.kernel_mgr.cell import CodeExecutionError
from ipybox.notebook.record import CellRecord, SessionMark, SessionRecord, ToolCallRecord, code_digest
from ipybox.tool_exec.approval.server import Decision
from ipybox.tool_exec.audit import MORE, left_out, redact_value
from ipybox.tool_exec.connections import ToolCallError

if TYPE_CHECKING:
    from ipybox.code_exec import CodeExecutor

logger = logging.getLogger(__name__)

#: Seconds a cell may run again at least (and three times its recorded duration, if longer).
MIN_CELL_TIMEOUT = 120.0
_SECRET = "***"


class ResumeError(IpyboxError):
    """A resume stopped at `cell` (its execution count in the notebook) for the reason the message
    gives; the cells before it ran again and their state is in the kernel."""

    def __init__(self, message: str, cell: int) -> None:
        super().__init__(message)
        self.cell = cell


@dataclass(frozen=True)
class ResumeReport:
    """What a resume did: `cells_run` cells ran again, `cells_skipped` (before the notebook's last
    reset or restart: their state was already lost) did not, `tool_calls` were answered from the
    record."""

    cells_run: int
    cells_skipped: int
    tool_calls: int


class ReplayCalls:
    """A `ToolCalls` that answers each call from the record of the cell running now (`expect()`).

    A call matches a recorded one with the same server, tool and arguments (compared as recorded:
    redacted, long strings cut). A call the record does not have is refused, and `divergence` says
    why; `check()` at the cell's end also reports recorded calls that were not made again.
    """

    def __init__(self) -> None:
        self._expected: list[ToolCallRecord] = []
        self._answers: dict[str, list[ToolCallRecord]] = {}
        self.divergence: str | None = None
        self.answered = 0

    def expect(self, cell: CellRecord) -> None:
        """Answer the calls of `cell` from now on."""
        self._expected = list(cell.tool_calls)
        self._answers.clear()
        self.divergence = None

    def check(self) -> str | None:
        """Why the cell that ran differs from its record in its calls; None if it does not."""
        if self.divergence is None:
            missing = [
                c for c in self._expected if c.decision != "refused"
            ]  # refused before asking: not seen
            if missing:
                self.divergence = f"it did not make the recorded call {_shown(missing[0])} this time"
        return self.divergence

    async def decide(
        self, server_name: str, tool_name: str, tool_args: dict[str, Any], *, kind: str
    ) -> Decision:
        found = self._take(server_name, tool_name, tool_args, exact=kind == "shell")
        if found is None:
            what = "shell command" if kind == "shell" else "tool call"
            self.divergence = self.divergence or (
                f"it made the {what} {server_name}.{tool_name}({_args(tool_args)}), which its record "
                "does not have (in that order, with these arguments)"
            )
            raise ToolCallError(f"Resume: {self.divergence}; it was not made.")
        self.answered += 1
        by = f"the resumed record ({found.decided_by or found.decision})"
        if found.decision in ("accepted", "auto"):
            self._answers.setdefault(_key(server_name, tool_name, tool_args), []).append(found)
            return Decision(True, found.decision, by)
        if found.decision == "rejected":  # refused again, in the words the kernel heard then
            return Decision(
                False, "rejected", by, _reason(found.error, kind, server_name, tool_name, tool_args)
            )
        raise ToolCallError(found.error or f"Tool call {server_name}.{tool_name} was {found.decision}.")

    async def call(
        self,
        server_name: str,
        server_params: Mapping[str, Any],
        tool_name: str,
        tool_args: dict[str, Any],
        env: Mapping[str, str],
    ) -> dict[str, Any]:
        found = self._answers[_key(server_name, tool_name, tool_args)].pop(0)
        if found.error is not None:
            raise ToolCallError(found.error)
        if found.result is None:
            self.divergence = self.divergence or (
                f"the result of its call {_shown(found)} was not kept (too large), so it cannot be "
                "answered without making the call again"
            )
            raise ToolCallError(f"Resume: {self.divergence}.")
        return found.result

    def _take(self, server: str, tool: str, args: dict[str, Any], *, exact: bool) -> ToolCallRecord | None:
        """The first expected call that matches, passing over calls refused before anyone was asked.
        A shell command (`exact`, it runs again) matches only as recorded in full: no secret is
        redacted from one, so a `***` in it is its own text, and one cut short is not known."""
        for index, recorded in enumerate(self._expected):
            same = (recorded.arguments == args) if exact else _matches(recorded.arguments, args)
            if recorded.server == server and recorded.tool == tool and same:
                del self._expected[index]
                return recorded
            if recorded.decision != "refused":
                return None
        return None


async def resume(
    executor: CodeExecutor, path: str | os.PathLike[str], *, into: SessionRecord | None = None
) -> ResumeReport:
    """Run the cells of the notebook at `path` again on `executor`, tool calls answered from it.

    `into` is the executor's own session record, marked where the resume begins. Raises
    `NotebookError` if `path` is no valid notebook, `ResumeError` where a cell diverges.
    """
    path = Path(path)
    record = SessionRecord.load(path, trusted=executor.working_dir)
    last_mark = max((i for i, e in enumerate(record.entries) if _lost_state(e)), default=-1)
    cells = [e for e in record.entries[last_mark + 1 :] if isinstance(e, CellRecord)]
    skipped = len(record.cells) - len(cells)
    server = executor.tool_server
    if into is not None:
        into.mark_resume(str(path))
    replay, live = ReplayCalls(), server.calls
    server.calls = replay
    try:
        for cell in cells:
            await _run_again(executor, replay, cell, path)
    finally:
        server.calls = live
    logger.info("resumed %s: %d cells run again, %d skipped", path, len(cells), skipped)
    return ResumeReport(len(cells), skipped, replay.answered)


async def _run_again(executor: CodeExecutor, replay: ReplayCalls, cell: CellRecord, path: Path) -> None:
    def stop(why: str, ran: bool = False) -> ResumeError:
        this = "this cell ran again as far as it got" if ran else "this cell did not run again"
        return ResumeError(
            f"The resume of {path} stopped at cell [{cell.execution_count}]: {why}. The cells before it "
            f"ran again and their state is in the kernel; {this}, and those after it did not (run them "
            "yourself, changed as needed).",
            cell.execution_count,
        )

    if code_digest(cell.code) != cell.code_sha256:
        raise stop("its code was changed after it was recorded, so its recorded tool calls may not fit it")
    if cell.status == "running" or (cell.error or "").startswith(("cancelled", "interrupted")):
        raise stop("it was interrupted when it was recorded, so what it left in the kernel is unknown")
    replay.expect(cell)
    timeout = max(MIN_CELL_TIMEOUT, 3 * float(cell.duration_s or 0))
    failed: str | None = None
    try:
        await executor.execute(cell.code, timeout=timeout)
    except (CodeExecutionError, TimeoutError) as e:
        failed = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    if (why := replay.check()) is not None:
        raise stop(why, ran=True)
    if failed is not None and cell.status != "error":
        raise stop(f"it failed this time ({failed}), but not when it was recorded", ran=True)
    if failed is None and cell.status == "error":
        raise stop("it succeeded this time, but failed when it was recorded", ran=True)


def _lost_state(entry: CellRecord | SessionMark) -> bool:
    return isinstance(entry, SessionMark) and entry.kind in ("reset", "restart")


def _matches(recorded: Any, live: Any) -> bool:
    """Whether `live` (raw arguments) is what the record kept as `recorded` (redacted, cut)."""
    if isinstance(recorded, dict) and isinstance(live, dict):
        cut = MORE in recorded and _cut_short(recorded[MORE], len(recorded) - 1, live)  # the first ones
        keys = [k for k in recorded if not (cut and k == MORE)]
        pairs = _paired(keys, list(live)[: len(keys)] if cut else list(live))
        return pairs is not None and all(_matches(recorded[r], live[k]) for r, k in pairs)
    if isinstance(recorded, list) and isinstance(live, list | tuple):
        if recorded and _cut_short(recorded[-1], len(recorded) - 1, live):
            recorded, live = recorded[:-1], live[: len(recorded) - 1]
        return len(recorded) == len(live) and all(map(_matches, recorded, live))
    if isinstance(recorded, str) and isinstance(live, str):
        cut = redact_value(live, ())
        if _SECRET not in recorded:
            return bool(recorded == cut)
        parts = recorded.split(_SECRET)  # each secret's value stands for one `***`
        return cut.startswith(parts[0]) and cut.endswith(parts[-1]) and len(cut) >= sum(map(len, parts))
    return bool(recorded == live) and type(recorded) is type(live)


def _paired(recorded: list[Any], live: list[Any]) -> list[tuple[Any, Any]] | None:
    """Each recorded key with the live key it was recorded from, or None where they differ: the
    notebook keeps keys sorted, redacted and cut as strings are (one with a secret in it matches as
    a string does)."""
    if len(recorded) != len(live):
        return None
    as_kept = {(redact_value(k, ()) if isinstance(k, str) else k): k for k in live}
    pairs = [(r, as_kept.pop(r)) for r in recorded if r in as_kept]
    rest, paired = list(as_kept.values()), {r for r, _ in pairs}
    for r in [r for r in recorded if isinstance(r, str) and _SECRET in r and r not in paired]:
        found = next((k for k in rest if isinstance(k, str) and _matches(r, k)), None)
        if found is None:
            return None
        rest.remove(found)
        pairs.append((r, found))
    return pairs if len(pairs) == len(recorded) else None


def _cut_short(marker: Any, kept: int, live: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> bool:
    """Whether `marker` is what a record that kept `kept` items of `live` put after them."""
    left = len(live) - kept
    return left > 0 and marker == left_out(left, of_list=not isinstance(live, dict))


def _reason(error: str | None, kind: str, server: str, tool: str, args: dict[str, Any]) -> str | None:
    """The reason a recorded rejection gave (its error without what the tool server adds)."""
    if error is None:
        return None
    said = f"Shell command {args.get('cmd')!r} was " if kind == "shell" else f"Tool call {server}.{tool} was "
    return error.removeprefix(said).removesuffix(".") if error.startswith(said) else error


def _key(server: str, tool: str, args: dict[str, Any]) -> str:
    return json.dumps([server, tool, args], sort_keys=True, default=repr)


def _args(args: dict[str, Any]) -> str:
    text = json.dumps(args, default=repr)
    return text[:200] + ("…" if len(text) > 200 else "")


def _shown(call: ToolCallRecord) -> str:
    return f"{call.server}.{call.tool}({_args(call.arguments)})"
