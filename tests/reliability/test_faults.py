"""Faults: an MCP server killed or hanging mid-call, the kernel or its sandbox wrapper killed,
ipybox itself killed, a memory bomb. Each gives a clear error, loses nothing else (the kernel's
state where the kernel survives, the output printed before), and the next call works.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import internals
import psutil
import pytest
from mcp_server.conftest import raw_ipybox
from sandbox.conftest import ProcessWatch
from servers.launch import (
    REPO,
    SANDBOX_PATH,
    alive,
    child_pids,
    describe,
    eventually,
    nasty_params,
    require_cgroups,
    require_sandbox,
)

from ipybox import ApprovalRequest, CodeExecutionChunk, CodeExecutionError, CodeExecutionResult, CodeExecutor
from ipybox.kernel_mgr.deadline import Deadline
from ipybox.kernel_mgr.kernel import Kernel, KernelDied, kernel_environment
from ipybox.kernel_mgr.limits import ResourceLimits

from .conftest import NASTY, Workspace, descendants, echo_code, kernel_pid, mentioning

pytestmark = pytest.mark.timeout(120)

#: A tool call that takes 30 s, announced by a line of output before it starts.
SLOW_CALL = (
    "from mcptools.nasty import slow\nprint('calling', flush=True)\nprint(slow.run(slow.Params(seconds=30)))"
)
#: A cell that sleeps 30 s, announced likewise.
SLEEP = "print('sleeping', flush=True)\nimport time\ntime.sleep(30)"


def _sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the test if no sandbox can run here (fail it in CI); put `srt` on PATH."""
    require_sandbox()
    monkeypatch.setenv("PATH", SANDBOX_PATH)


async def _start(executor: CodeExecutor, code: str) -> asyncio.Task[CodeExecutionResult]:
    """Start `code` (which prints first, then blocks); return its task once the output arrived."""
    printed = asyncio.Event()

    async def run() -> CodeExecutionResult:
        result: CodeExecutionResult | None = None
        async for item in executor.stream(code, chunks=True, auto_approve=True):
            if isinstance(item, CodeExecutionChunk):
                printed.set()
            elif isinstance(item, CodeExecutionResult):
                result = item
        assert result is not None
        return result

    task = asyncio.create_task(run())
    waiter = asyncio.create_task(printed.wait())
    await asyncio.wait({task, waiter}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    assert printed.is_set(), task.result() if task.done() else "no output within 60 s"
    return task


# --- MCP servers ---------------------------------------------------------------------------------------


async def test_mcp_server_killed_mid_call(workspace: Workspace) -> None:
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root, spare_kernel=False) as executor:
        assert (await executor.execute("kept = 'yes'\n" + echo_code("warm up"))).text == "warm up"
        [server] = child_pids(NASTY)
        approved = asyncio.Event()

        async def call_slow() -> None:
            async for item in executor.stream(SLOW_CALL):
                if isinstance(item, ApprovalRequest):  # the call has reached the tool server
                    await item.accept()
                    approved.set()

        task = asyncio.create_task(call_slow())
        await asyncio.wait_for(approved.wait(), 30)
        await asyncio.sleep(0.5)  # and, once approved, the MCP server
        killed = time.monotonic()
        os.kill(server, signal.SIGKILL)
        with pytest.raises(CodeExecutionError) as info:
            await asyncio.wait_for(task, 30)
        assert time.monotonic() - killed < 10
        message = str(info.value)
        assert "MCP server 'nasty' closed the connection during the call to 'slow'" in message, message
        assert "restarted on the next call" in message
        assert info.value.output == "calling"
        # the kernel kept its state, and the next call starts the server again
        assert (await executor.execute("print(kept)\n" + echo_code("again"))).text == "yes\nagain"
        restarted = child_pids(NASTY)
        assert len(restarted) == 1 and server not in restarted


async def test_hanging_mcp_server_times_out(workspace: Workspace) -> None:
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root, spare_kernel=False, tool_timeout=2) as executor:
        assert (await executor.execute("kept = 'yes'\n" + echo_code("warm up"))).text == "warm up"
        [server] = child_pids(NASTY)
        started = time.monotonic()
        with pytest.raises(CodeExecutionError) as info:
            await executor.execute(SLOW_CALL)
        elapsed = time.monotonic() - started
        assert 2 <= elapsed < 10, elapsed
        message = str(info.value)
        assert "Tool 'slow' of MCP server 'nasty' did not answer within 2 s" in message, message
        assert info.value.output == "calling"
        assert (await executor.execute("print(kept)\n" + echo_code("again"))).text == "yes\nagain"
        # the hung server was stopped and a fresh one answered
        assert await eventually(lambda: server not in child_pids(NASTY))
        assert len(child_pids(NASTY)) == 1


# --- kernels ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["running", "idle"])
async def test_kernel_killed(workspace: Workspace, when: str) -> None:
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root) as executor:
        assert (await executor.execute("marker = 1\n" + echo_code("before"))).text == "before"
        old = kernel_pid(executor)
        if when == "running":
            task = await _start(executor, SLEEP)
            os.kill(old, signal.SIGKILL)
            with pytest.raises(CodeExecutionError) as info:
                await asyncio.wait_for(task, 10)
            assert info.value.output == "sleeping"
        else:
            os.kill(old, signal.SIGKILL)
            with pytest.raises(CodeExecutionError) as info:
                await asyncio.wait_for(executor.execute("print(marker)"), 10)
        message = str(info.value)
        assert "The kernel died from SIGKILL" in message, message
        assert "the next execution runs on a fresh kernel" in message
        # a fresh kernel: it works, calls tools, and the old state is gone
        assert (await executor.execute(echo_code("after"))).text == "after"
        assert kernel_pid(executor) != old and not psutil.pid_exists(old)
        with pytest.raises(CodeExecutionError, match="NameError"):
            await executor.execute("marker")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("when", ["running", "idle"])
async def test_sandbox_wrapper_killed(
    workspace: Workspace, when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL to `srt` (the process ipybox started for a sandboxed kernel) is a dead kernel."""
    _sandbox(monkeypatch)
    workspace.register()
    watch = ProcessWatch()
    async with CodeExecutor(sandbox=True, working_dir=workspace.root) as executor:
        runtime_dir = str(internals.runtime_dir(executor))
        assert (await executor.execute("marker = 1\n" + echo_code("before"))).text == "before"
        srt = psutil.Process(kernel_pid(executor))
        assert "srt" in " ".join(srt.cmdline())
        wrapped = descendants(srt)  # socat, sh, bwrap, the kernel
        assert any("ipybox.kernel_mgr.launch" in p.cmdline() for p in wrapped), [describe(p) for p in wrapped]
        watch.snapshot()
        killed = time.monotonic()
        if when == "running":
            task = await _start(executor, SLEEP)
            killed = time.monotonic()
            srt.send_signal(signal.SIGKILL)
            with pytest.raises(CodeExecutionError) as info:
                await asyncio.wait_for(task, 20)
            assert info.value.output == "sleeping"
        else:
            srt.send_signal(signal.SIGKILL)
            # The kernel inside outlives its wrapper for a moment (until ipybox stops it), so a cell
            # sent right away may still run; killed "while idle" means noticed before the next cell.
            assert await eventually(lambda: not _current_kernel_alive(executor))
            with pytest.raises(CodeExecutionError) as info:
                await asyncio.wait_for(executor.execute("print(marker)"), 20)
        assert time.monotonic() - killed < 10
        message = str(info.value)
        assert "The kernel died from SIGKILL" in message, message
        assert "fresh kernel" in message
        # the next execution runs on a fresh sandboxed kernel, which calls tools as before
        assert (await executor.execute(echo_code("after"))).text == "after"
        fresh = psutil.Process(kernel_pid(executor))
        assert fresh.pid != srt.pid and "srt" in " ".join(fresh.cmdline())
        with pytest.raises(CodeExecutionError, match="NameError"):
            await executor.execute("marker")
        # what ran inside the killed wrapper is gone while the executor goes on
        assert await eventually(lambda: not any(alive(p) for p in wrapped)), [
            describe(p) for p in wrapped if alive(p)
        ]
    await watch.assert_all_gone(timeout=10, runtime_dir=runtime_dir)
    assert not Path(runtime_dir).exists()


async def test_kernel_wrapper_killed_mid_cell() -> None:
    """A wrapper between ipybox and the kernel (as `srt` is) killed while a cell runs.

    The kernel outlives its wrapper and keeps the pipes ipybox gave the wrapper open; its death
    must still be noticed at once, not when the cell ends. Needs no sandbox tools.
    """
    wrapper = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"]
    runtime_dir = Path(tempfile.mkdtemp(prefix="ipybox-test-", dir="/tmp"))
    kernel = Kernel(runtime_dir, runtime_dir, kernel_environment(None), command_prefix=wrapper)
    try:
        await kernel.start()
        assert kernel.pid is not None
        inner = descendants(psutil.Process(kernel.pid))
        assert any("ipybox.kernel_mgr.launch" in p.cmdline() for p in inner), [describe(p) for p in inner]
        printed = asyncio.Event()
        cell = asyncio.create_task(kernel.execute(SLEEP, lambda _: printed.set(), Deadline(60)))
        await asyncio.wait_for(printed.wait(), 30)
        killed = time.monotonic()
        os.kill(kernel.pid, signal.SIGKILL)
        with pytest.raises(KernelDied, match="SIGKILL"):
            await asyncio.wait_for(cell, 10)
        assert time.monotonic() - killed < 10  # not when the 30 s cell ends
        assert not kernel.alive
    finally:
        await kernel.stop()
        shutil.rmtree(runtime_dir, ignore_errors=True)
    assert await eventually(lambda: not any(alive(p) for p in inner)), [
        describe(p) for p in inner if alive(p)
    ]


def _current_kernel_alive(executor: CodeExecutor) -> bool:
    return internals.kernel(executor).alive


async def test_memory_bomb_is_killed_at_the_limit_and_the_next_call_works(tmp_path: Path) -> None:
    require_cgroups()
    limits = ResourceLimits(memory=1 << 30)
    async with CodeExecutor(working_dir=tmp_path, limits=limits) as executor:
        await executor.execute("kept = 41")
        pid = kernel_pid(executor)
        limit = r"killed: the kernel's memory limit of 1\.0 GiB was reached"
        with pytest.raises(CodeExecutionError, match=limit) as raised:
            # the pause lets the kernel's I/O thread send the line before the kill (busy CI machines)
            await executor.execute(
                "print('allocating', flush=True)\nimport time; time.sleep(0.5)\nhog = bytearray(2 << 30)"
            )
        assert raised.value.output == "allocating"
        assert kernel_pid(executor) != pid  # the warm spare took over
        with pytest.raises(CodeExecutionError, match=limit):  # growing in 64 MiB steps
            await executor.execute("hog = [bytearray(64 * 1024**2) for _ in range(64)]")
        assert (await executor.execute("print('kept' in globals(), 41 + 1)")).text == "False 42"


# --- ipybox killed -----------------------------------------------------------------------------------------

#: An application using ipybox: generates an API, starts an executor (kernel, warm spare), calls a
#: tool (MCP server), prints what it started and then waits to be killed.
HOST = """
import asyncio, json, sys
from pathlib import Path

import psutil

from ipybox import CodeExecutor, generate_mcp_sources

sys.path.insert(0, sys.argv[4])  # the tests' folder: internals.py reads the executor's insides
import internals
from internals import kernel_pid, kernels


async def main() -> None:
    workspace, sandbox, server = Path(sys.argv[1]), sys.argv[2] == "sandbox", json.loads(sys.argv[3])
    await generate_mcp_sources("nasty", server, workspace / "mcptools")
    executor = CodeExecutor(working_dir=workspace, sandbox=sandbox)
    await executor.start()
    await kernels(executor).spare_ready()
    code = "from mcptools.nasty import echo\\nprint(echo.run(echo.Params(message='up')))"
    assert (await executor.execute(code)).text == "up"
    servers = [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if "nasty_server.py" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
    ]
    started = {
        "kernel": kernel_pid(executor),
        "spare": (await kernels(executor)._spare).pid,
        "servers": servers,
        "runtime_dir": str(internals.runtime_dir(executor)),
    }
    print(json.dumps(started), flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sandbox", [False, True], ids=["plain", "sandboxed"])
async def test_killed_application_leaves_nothing_behind(
    tmp_path: Path, sandbox: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox:
        _sandbox(monkeypatch)
    # A private temp dir (short enough for socket paths) for the runtime dirs of the application
    # and of the executor started after it: no other ipybox on the machine removes them meanwhile.
    private_tmp = Path(tempfile.mkdtemp(prefix="ipybox-test-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(private_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    script = tmp_path / "host.py"
    script.write_text(HOST)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    log = tmp_path / "host.log"
    with log.open("w") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            str(workspace),
            "sandbox" if sandbox else "plain",
            json.dumps(nasty_params()),
            str(Path(__file__).resolve().parents[1]),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            cwd=REPO,
        )
    tree: list[psutil.Process] = []
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 120)
        assert line, log.read_text()[-3000:]
        started = json.loads(line)
        runtime_dir = Path(started["runtime_dir"])
        # everything the application started, recorded before it dies (orphans leave its tree)
        tree = descendants(psutil.Process(process.pid))
        pids = {p.pid for p in tree}
        assert {started["kernel"], started["spare"], *started["servers"]} <= pids, started
        assert len(started["servers"]) == 1
        tree += [p for p in mentioning(str(runtime_dir)) if p.pid not in pids]

        process.kill()
        await process.wait()
        assert await eventually(lambda: not any(alive(p) for p in tree), timeout=10), [
            describe(p) for p in tree if alive(p)
        ]
        assert not mentioning(str(runtime_dir)), [describe(p) for p in mentioning(str(runtime_dir))]

        # the dead application's runtime dir is removed when the next executor starts
        assert runtime_dir.parent == private_tmp
        assert (runtime_dir / "owner.pid").read_text() == str(process.pid)
        async with CodeExecutor(working_dir=tmp_path, spare_kernel=False):
            pass
        assert not runtime_dir.exists()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        for leftover in tree:  # only if the test failed: the processes it recorded
            if alive(leftover):
                leftover.kill()
        shutil.rmtree(private_tmp, ignore_errors=True)


async def test_killed_mcp_server_command_leaves_nothing_behind(tmp_path: Path) -> None:
    """SIGKILL to `ipybox --workspace W` (stdio) with a kernel and a registered MCP server running."""
    workspace, state = tmp_path / "workspace", tmp_path / "state"
    tree: list[psutil.Process] = []
    try:
        async with raw_ipybox(workspace, state, "--spare-kernels", "1") as box:
            reply = await box.call(
                "register_mcp_server", {"server_name": "nasty", "server_params": nasty_params()}
            )
            assert not reply.get("isError"), reply
            reply = await box.call("execute_ipython_cell", {"code": echo_code("up")})
            assert not reply.get("isError") and reply["content"][0]["text"] == "up", reply
            tree = descendants(psutil.Process(box.process.pid))
            commands = [" ".join(p.cmdline()) for p in tree]
            assert sum("ipybox.kernel_mgr.launch" in c for c in commands) == 2, commands  # kernel + spare
            assert sum(NASTY in c for c in commands) == 1, commands
            box.process.kill()
            await box.process.wait()
        assert await eventually(lambda: not any(alive(p) for p in tree), timeout=10), [
            describe(p) for p in tree if alive(p)
        ]
    finally:
        for leftover in tree:
            if alive(leftover):
                leftover.kill()
