"""Approval controls for tool calls: approve_tool_calls=False, approval waits outside the timeout,
rejection as ApprovalRejectedError, and cancel() with a tool call awaiting approval."""

from __future__ import annotations

import asyncio
from pathlib import Path

from servers.launch import collect

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutionResult, CodeExecutor

from .conftest import Workspace

ECHO = "from mcptools.nasty import echo\nprint(echo.run(echo.Params(message='hi')))"


async def test_without_tool_call_approval_stream_yields_no_requests(
    workspace: Workspace, _state_dir: Path
) -> None:
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root, approve_tool_calls=False, spare_kernel=False) as ex:
        requests, result = await collect(ex, ECHO)
    assert requests == []
    assert isinstance(result, CodeExecutionResult) and "hi" in (result.text or "")


async def test_shell_commands_still_ask_when_tool_calls_do_not(
    workspace: Workspace, _state_dir: Path
) -> None:
    workspace.register()
    async with CodeExecutor(
        working_dir=workspace.root, approve_tool_calls=False, approve_shell_cmds=True, spare_kernel=False
    ) as ex:
        requests, result = await collect(ex, ECHO + "\n!echo shell", decide=lambda r: "accept")
    assert [(r.server_name, r.tool_name) for r in requests] == [("ipybox", "shell")]
    assert isinstance(result, CodeExecutionResult) and (result.text or "").endswith("shell")


async def test_rejected_tool_call_raises_approval_rejected(
    executor: CodeExecutor, workspace: Workspace
) -> None:
    requests, result = await collect(executor, ECHO, decide=lambda r: "reject")
    assert len(requests) == 1
    assert isinstance(result, CodeExecutionError) and "ApprovalRejectedError" in str(result)


async def test_slow_approval_does_not_time_the_cell_out(executor: CodeExecutor) -> None:
    items = []
    # the call itself (server start included) takes ~1 s quiet, several on a loaded machine
    async for item in executor.stream(ECHO, timeout=12):
        if isinstance(item, ApprovalRequest):
            await asyncio.sleep(13)  # longer than the cell's timeout
            await item.accept()
        items.append(item)
    result = items[-1]
    assert isinstance(result, CodeExecutionResult) and "hi" in (result.text or "")


async def test_cancel_with_a_tool_call_awaiting_approval(executor: CodeExecutor) -> None:
    await executor.execute("kept = 7")
    seen: list[object] = []

    async def consume() -> None:
        async for item in executor.stream(ECHO):
            seen.append(item)
            if isinstance(item, ApprovalRequest):
                await executor.cancel()

    await asyncio.wait_for(consume(), 15)
    assert len(seen) == 1 and isinstance(seen[0], ApprovalRequest)
    assert (await executor.execute("print(kept)")).text == "7"
