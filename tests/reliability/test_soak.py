"""Soak: thousands of executions and generated-API tool calls on one executor leak nothing.

Resources are measured after a warm-up (the first 10% of the iterations) and at the end: the
kernel's and this process's RSS, this process's open file descriptors, threads and asyncio
tasks, and the live child processes. Every result is checked exactly. CI runs reduced counts;
`--soak-full` runs 10,000 executions and 2,000 tool calls.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from internals import kernels, runtime_dir
from servers.launch import eventually

from ipybox import CodeExecutionChunk, CodeExecutionError, CodeExecutionResult, CodeExecutor

from .conftest import MIB, Figures, Scale, Usage, Workspace, descendants, echo_code, kernel_pid

pytestmark = pytest.mark.slow

#: Tool calls per cell: calls run in a loop inside a cell, as agent code does.
TOOL_BATCH = 50
#: Growth allowed from the end of the warm-up to the end of the soak.
MAX_KERNEL_GROWTH = 50 * MIB
MAX_HOST_GROWTH = 50 * MIB
MAX_FD_GROWTH = 5
MAX_THREAD_GROWTH = 2
MAX_TASK_GROWTH = 2


async def _stream(executor: CodeExecutor, code: str) -> tuple[str, CodeExecutionResult]:
    """Run `code` with stream(chunks=True): the concatenated chunks and the result."""
    chunks: list[str] = []
    result: CodeExecutionResult | None = None
    async for item in executor.stream(code, chunks=True, auto_approve=True):
        if isinstance(item, CodeExecutionChunk):
            chunks.append(item.text)
        elif isinstance(item, CodeExecutionResult):
            result = item
    assert result is not None
    return "".join(chunks), result


async def _cell(executor: CodeExecutor, i: int, total: int) -> int:
    """One soak iteration (plain, streamed or failing, by `i`), checked exactly; the new total."""
    if i % 100 == 99:  # a cell that fails after printing
        with pytest.raises(CodeExecutionError) as info:
            await executor.execute(f"print('before {i}')\nraise ValueError('soak {i}')")
        assert f"ValueError: soak {i}" in str(info.value), str(info.value)
        assert info.value.output == f"before {i}"
        return total
    if i % 100 == 49:  # streamed output
        chunks, result = await _stream(executor, f"for k in range(3):\n    print(f'{i}.{{k}}', flush=True)")
        expected = f"{i}.0\n{i}.1\n{i}.2"
        assert chunks == expected + "\n", (i, chunks)
        assert result.text == expected and result.images == [], (i, result)
        return total
    total += i  # kernel state carried from cell to cell
    result = await executor.execute(f"total += {i}\nprint({i}, total)")
    assert result.text == f"{i} {total}", (i, result.text)
    return total


async def _tool_cell(executor: CodeExecutor, i: int) -> None:
    """TOOL_BATCH echo calls through the generated API in one cell; every result checked."""
    code = f"print('\\n'.join(echo.run(echo.Params(message=f'{i}.{{j}}')) for j in range({TOOL_BATCH})))"
    result = await executor.execute(code)
    assert result.text == "\n".join(f"{i}.{j}" for j in range(TOOL_BATCH)), (i, result.text)


@pytest.mark.timeout(600)
async def test_soak_executions_and_tool_calls_leak_nothing(
    workspace: Workspace, scale: Scale, figures: Figures
) -> None:
    workspace.register()
    n = scale.soak_executions
    warmup = n // 10
    tool_cells = scale.soak_tool_calls // TOOL_BATCH
    every = n // tool_cells  # one tool cell after every `every` iterations, the first in the warm-up
    calls = 0
    total = 0
    started = time.monotonic()
    async with CodeExecutor(working_dir=workspace.root) as executor:
        pid = kernel_pid(executor)
        assert (await executor.execute(echo_code("up") + "\ntotal = 0")).text == "up"
        baseline: Usage | None = None
        warm_at = started
        for i in range(n):
            if i == warmup:
                await kernels(executor).spare_ready()
                baseline = Usage.of(executor)
                warm_at = time.monotonic()
            total = await _cell(executor, i, total)
            if i % every == 0 and calls < scale.soak_tool_calls:
                await _tool_cell(executor, i)
                calls += TOOL_BATCH
        final = Usage.of(executor)
        ended = time.monotonic()
        assert kernel_pid(executor) == pid, "the kernel was replaced during the soak"
        assert (await executor.execute("print(total)")).text == str(total)
    assert baseline is not None
    assert calls == scale.soak_tool_calls

    figures.report(
        "soak",
        {
            "mode": "full" if scale.full else "ci",
            "executions": n,
            "tool_calls": calls,
            "seconds": round(ended - started, 1),
            "measured_seconds": round(ended - warm_at, 1),
            **baseline.figures("before"),
            **final.figures("after"),
        },
    )
    assert final.kernel_rss - baseline.kernel_rss < MAX_KERNEL_GROWTH
    assert final.host_rss - baseline.host_rss < MAX_HOST_GROWTH
    assert final.fds - baseline.fds <= MAX_FD_GROWTH
    assert final.children == baseline.children == 3  # the kernel, its warm spare, the MCP server
    assert final.threads - baseline.threads <= MAX_THREAD_GROWTH
    assert final.tasks - baseline.tasks <= MAX_TASK_GROWTH


@pytest.mark.timeout(300)
async def test_reset_and_kernel_death_churn_leaks_nothing(
    workspace: Workspace, scale: Scale, figures: Figures
) -> None:
    """Kernels and MCP servers replaced over and over (reset, kernel exit) leave nothing behind."""
    workspace.register()
    cycles = 40 if scale.full else 8
    warmup = 2
    started = time.monotonic()
    async with CodeExecutor(working_dir=workspace.root) as executor:
        runtime = runtime_dir(executor)
        assert runtime is not None
        kernels_dir = runtime / "kernels"
        baseline: Usage | None = None
        baseline_files: set[str] = set()
        pids: set[int] = set()
        for cycle in range(cycles):
            if cycle == warmup:
                baseline, baseline_files = await _settled(executor), _files(kernels_dir)
            pids.add(kernel_pid(executor))
            assert (await executor.execute(f"state = {cycle}\n" + echo_code(f"c{cycle}"))).text == f"c{cycle}"
            if cycle % 2 == 0:
                await executor.reset()
            else:
                with pytest.raises(CodeExecutionError, match="exited with code 3"):
                    await executor.execute("import os\nos._exit(3)")
            with pytest.raises(CodeExecutionError, match="NameError"):
                await executor.execute("state")
        final, final_files = await _settled(executor), _files(kernels_dir)
    assert baseline is not None
    assert len(pids) == cycles  # every cycle ran on a new kernel

    figures.report(
        "churn",
        {
            "cycles": cycles,
            "seconds": round(time.monotonic() - started, 1),
            **{k: v for k, v in baseline.figures("before").items() if "kernel" not in k},
            **{k: v for k, v in final.figures("after").items() if "kernel" not in k},
            "kernel_files": len(final_files),
        },
    )
    assert final.host_rss - baseline.host_rss < MAX_HOST_GROWTH
    assert final.fds - baseline.fds <= MAX_FD_GROWTH
    assert final.children == baseline.children
    assert final.threads - baseline.threads <= MAX_THREAD_GROWTH
    assert final.tasks - baseline.tasks <= MAX_TASK_GROWTH
    # one connection file and ipc socket set per live kernel: those of retired kernels are removed
    assert len(final_files) == len(baseline_files), (sorted(baseline_files), sorted(final_files))


async def _settled(executor: CodeExecutor) -> Usage:
    """Usage once the spare is up and retired kernels are gone (kernel + spare + MCP server)."""
    assert (await executor.execute(echo_code("settle"))).text == "settle"
    await kernels(executor).spare_ready()
    assert await eventually(lambda: len(descendants()) == 3 and not kernels(executor)._retired)
    return Usage.of(executor)


def _files(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}
