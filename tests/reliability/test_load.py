"""Load: eight executors at once, and the MCP server under eight concurrent HTTP client sessions.

Each executor (and each session) holds a unique token and every output is checked exactly, so
output, tool results or approval requests that crossed from one to another fail the test. The
server keys kernels by principal and name: the eight sessions are four users with two named
kernels each, which share a pool of two warm spares.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from mcp import ClientSession
from mcp.types import CallToolResult
from mcp_server.conftest import http_session, sigterm_survivors, start_http_ipybox, text_of
from servers.launch import child_pids, describe, eventually

from ipybox import ApprovalRequest, CodeExecutionResult, CodeExecutor

from .conftest import NASTY, Figures, Scale, Workspace, descendants, kernel_pid

pytestmark = pytest.mark.slow

EXECUTORS = 8
SESSIONS = 8
USERS = 4  # two sessions each, on kernels of different names
SPARES = 2
#: Tool calls per cell.
TOOL_BATCH = 10
#: How often each HTTP session reads its variable back.
READS = 5


# --- executors ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    token: str
    pid: int
    executions: int
    tool_calls: int
    approvals: int


async def _approve_each(
    executor: CodeExecutor, code: str
) -> tuple[list[ApprovalRequest], CodeExecutionResult]:
    """Run `code` with stream(), accepting every approval request; the requests and the result."""
    requests: list[ApprovalRequest] = []
    result: CodeExecutionResult | None = None
    async for item in executor.stream(code):
        if isinstance(item, ApprovalRequest):
            requests.append(item)
            await item.accept()
        elif isinstance(item, CodeExecutionResult):
            result = item
    assert result is not None
    return requests, result


async def _drive(executor: CodeExecutor, index: int, token: str, scale: Scale) -> Outcome:
    """Executions and tool calls on one executor, each result checked against its own token.

    Executors with an odd index approve every tool call through stream(); the others use
    execute(), which approves them automatically.
    """
    approve_each = index % 2 == 1
    setup = f"import os\nfrom mcptools.nasty import echo\ntoken = {token!r}\nprint(os.getpid())"
    result = await executor.execute(setup)
    assert result.text is not None
    pid = int(result.text)
    tool_cells = scale.load_tool_calls // TOOL_BATCH
    every = scale.load_executions // tool_cells
    calls = approvals = 0
    for i in range(scale.load_executions):
        result = await executor.execute(f"print(token, {i})")
        assert result.text == f"{token} {i}", (token, i, result.text)
        if i % every == every // 2 and calls < scale.load_tool_calls:
            messages = [f"{token}:{i}.{j}" for j in range(TOOL_BATCH)]
            code = (
                f"print('\\n'.join(echo.run(echo.Params(message=f'{{token}}:{i}.{{j}}'))"
                f" for j in range({TOOL_BATCH})))"
            )
            if approve_each:
                requests, result = await _approve_each(executor, code)
                assert [(r.server_name, r.tool_name, r.tool_args) for r in requests] == [
                    ("nasty", "echo", {"message": m}) for m in messages
                ]
                approvals += len(requests)
            else:
                result = await executor.execute(code)
            assert result.text == "\n".join(messages), (token, i, result.text)
            calls += TOOL_BATCH
    return Outcome(token, pid, scale.load_executions, calls, approvals)


@pytest.mark.timeout(300)
async def test_eight_executors_at_once_keep_their_results_apart(
    workspace: Workspace, scale: Scale, figures: Figures
) -> None:
    workspace.register()
    before = {p.pid for p in descendants()}
    tokens = [f"token{index}-{secrets.token_hex(6)}" for index in range(EXECUTORS)]
    executors = [CodeExecutor(working_dir=workspace.root, spare_kernel=False) for _ in tokens]
    started = time.monotonic()
    try:
        await asyncio.gather(*(executor.start() for executor in executors))
        ready = time.monotonic()
        outcomes = await asyncio.gather(
            *(
                _drive(executor, index, token, scale)
                for index, (executor, token) in enumerate(zip(executors, tokens, strict=True))
            )
        )
        ended = time.monotonic()
        assert [o.token for o in outcomes] == tokens
        # no kernel was replaced, and each executor kept its own kernel and MCP server
        assert [o.pid for o in outcomes] == [kernel_pid(executor) for executor in executors]
        assert len({o.pid for o in outcomes}) == EXECUTORS
        assert len(child_pids(NASTY)) == EXECUTORS
        assert all(o.tool_calls == scale.load_tool_calls for o in outcomes)
        assert sum(o.approvals for o in outcomes) == scale.load_tool_calls * EXECUTORS // 2
        finals = await asyncio.gather(*(executor.execute("print(token)") for executor in executors))
        assert [r.text for r in finals] == tokens
    finally:
        await asyncio.gather(*(executor.stop() for executor in executors))
    assert await eventually(lambda: not {p.pid for p in descendants()} - before), [
        describe(p) for p in descendants() if p.pid not in before
    ]

    figures.report(
        "load_executors",
        {
            "mode": "full" if scale.full else "ci",
            "executors": EXECUTORS,
            "executions_each": scale.load_executions,
            "tool_calls_each": scale.load_tool_calls,
            "start_seconds": round(ready - started, 1),
            "run_seconds": round(ended - ready, 1),
        },
    )


# --- the MCP server over streamable HTTP ---------------------------------------------------------------


@dataclass
class HttpIpybox:
    process: subprocess.Popen[bytes]
    url: str
    log_file: Path
    tokens: list[str]  # a bearer token per user

    def kernels(self) -> list[psutil.Process]:
        """The kernel processes the server runs now."""
        found = []
        for child in descendants(psutil.Process(self.process.pid)):
            with contextlib.suppress(psutil.Error):
                if "ipybox.kernel_mgr.launch" in child.cmdline():
                    found.append(child)
        return found


@pytest.fixture
def http_ipybox(tmp_path: Path) -> Iterator[HttpIpybox]:
    """`ipybox --transport streamable-http` on a free port with USERS users (`--auth-tokens`, unsandboxed:
    `--shared-trust`) and SPARES warm spares; stopped with SIGTERM at teardown."""
    workspace, state = tmp_path / "workspace", tmp_path / "state"
    workspace.mkdir()
    log_file = tmp_path / "ipybox-http.log"
    tokens = [secrets.token_hex(16) for _ in range(USERS)]
    token_file = tmp_path / "tokens"
    token_file.write_text("".join(f"user{index} {token}\n" for index, token in enumerate(tokens)))
    args = ["--auth-tokens", str(token_file), "--shared-trust", "--spare-kernels", str(SPARES)]
    process, url = start_http_ipybox(workspace, state, log_file, args=args)
    server = HttpIpybox(process, url, log_file, tokens)
    try:
        yield server
        alive = sigterm_survivors(process, timeout=30, grace=10)
        assert not alive, f"left running after SIGTERM: {[describe(p) for p in alive]}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def _run(session: ClientSession, code: str, kernel: str) -> str:
    result = await session.call_tool("execute_ipython_cell", {"code": code, "kernel": kernel})
    assert isinstance(result, CallToolResult), result
    assert not result.is_error, text_of(result)
    return text_of(result)


@pytest.mark.timeout(120)
async def test_http_sessions_at_once_are_all_served_and_isolated(
    http_ipybox: HttpIpybox, figures: Figures
) -> None:
    holding = asyncio.Barrier(SESSIONS)
    tokens = [f"session{index}-{secrets.token_hex(6)}" for index in range(SESSIONS)]

    running: list[int] = []

    async def session(index: int, token: str) -> tuple[int, list[str]]:
        kernel = f"k{index % 2}"
        async with http_session(http_ipybox.url, http_ipybox.tokens[index // 2]) as client:
            pid = int(await _run(client, f"import os\ntoken = {token!r}\nprint(os.getpid())", kernel))
            await asyncio.wait_for(holding.wait(), 180)  # every session's kernel holds its token now
            running.append(len(http_ipybox.kernels()))
            reads = []
            for _ in range(READS):
                reads.append(await _run(client, "print(token)", kernel))
                await asyncio.sleep(0)
            return pid, reads

    started = time.monotonic()
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(session(index, token)) for index, token in enumerate(tokens)]
    elapsed = time.monotonic() - started
    results = [task.result() for task in tasks]
    assert [reads for _, reads in results] == [[token] * READS for token in tokens]
    assert len({pid for pid, _ in results}) == SESSIONS  # a kernel per user and name
    assert min(running) >= SESSIONS, running
    # the warm spares are one pool: not one per kernel
    assert await eventually(lambda: len(http_ipybox.kernels()) == SESSIONS + SPARES, timeout=60), [
        describe(p) for p in http_ipybox.kernels()
    ]
    # a user's kernel outlives the session (state across calls); the server keeps serving
    async with http_session(http_ipybox.url, http_ipybox.tokens[0]) as client:
        assert await _run(client, "print(token)", "k0") == tokens[0]

    figures.report("load_http", {"sessions": SESSIONS, "reads_each": READS, "seconds": round(elapsed, 1)})
