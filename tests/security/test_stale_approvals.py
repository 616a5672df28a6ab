"""An approval belongs to the execution that asks for it: code a streamed cell leaves running
(a thread, a thread it starts, a pool job) and that retries after the application rejected it
is refused in the next `execute()`, which approves its own calls automatically."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from servers.launch import collect

from ipybox import CodeExecutionResult, CodeExecutor

pytestmark = pytest.mark.timeout(120)

RETRY = """
import threading, time
from concurrent.futures import ThreadPoolExecutor
errors, stop = [], threading.Event()
def retry():
    while not stop.is_set():
        try:
            get_ipython().system('touch {marker}')
            return
        except Exception as e:
            errors.append(str(e))
            time.sleep(0.01)
"""

#: How each variant leaves `retry` running after the cell.
LEFTOVERS = {
    "thread": "threading.Thread(target=retry, daemon=True).start()",
    "thread of a thread": "threading.Thread(target=lambda: threading.Thread(target=retry).start()).start()",
    "pool job": "pool = ThreadPoolExecutor(1); pool.submit(retry)",
}


@pytest.fixture
async def shell_executor(tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    async with CodeExecutor(working_dir=tmp_path, approve_shell_cmds=True, spare_kernel=False) as executor:
        yield executor


@pytest.mark.parametrize("leftover", list(LEFTOVERS))
async def test_leftover_retries_are_not_approved_by_the_next_execution(
    shell_executor: CodeExecutor, tmp_path: Path, leftover: str
) -> None:
    marker = tmp_path / "ran"
    code = RETRY.format(marker=marker) + LEFTOVERS[leftover] + "\nwhile not errors: time.sleep(0.01)"
    requests, first = await collect(shell_executor, code, lambda _: "reject")
    assert isinstance(first, CodeExecutionResult)
    assert requests and {r.tool_name for r in requests} == {"shell"}  # each rejected

    # the next execution: approves its own calls; the leftover keeps retrying meanwhile
    seen = await shell_executor.execute(
        "n = len(errors)\nwhile len(errors) < n + 3: time.sleep(0.01)\nprint(errors[-1])"
    )
    await shell_executor.execute("stop.set()")
    assert not marker.exists()
    assert "earlier execution left running" in (seen.text or "")


async def test_work_submitted_by_the_current_execution_is_approved(
    shell_executor: CodeExecutor, tmp_path: Path
) -> None:
    await shell_executor.execute(
        "from concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(1)"
    )
    await shell_executor.execute("pool.submit(lambda: None).result()")  # the worker thread exists now
    marker = tmp_path / "ran"
    await shell_executor.execute(f"pool.submit(get_ipython().system, 'touch {marker}').result()")
    assert marker.exists()
