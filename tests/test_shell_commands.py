"""Shell commands in the kernel: approval of `!cmd`, `x = !cmd` and `%%bash`, the shell-escape
guard, working-directory restore, colour codes, timeouts and cancel() against real kernels."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest
from servers.launch import collect

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutionResult, CodeExecutor

pytestmark = pytest.mark.timeout(120)


async def run_stream(
    executor: CodeExecutor, code: str, accept: bool = True, timeout: float | None = 60
) -> tuple[list[ApprovalRequest], CodeExecutionResult | CodeExecutionError]:
    """Run `code` with stream(), accepting (or rejecting) every approval request."""
    return await collect(executor, code, lambda _: "accept" if accept else "reject", timeout)


@pytest.fixture
async def shell_executor(tmp_path: Path) -> CodeExecutor:
    async with CodeExecutor(
        working_dir=tmp_path, approve_shell_cmds=True, spare_kernel=False, audit_log=tmp_path / "audit.jsonl"
    ) as executor:
        yield executor  # type: ignore[misc]


async def test_bang_commands_are_approved_after_expansion(
    shell_executor: CodeExecutor, tmp_path: Path
) -> None:
    code = "name = 'world'\n!echo hello {name}\nlines = !echo captured {name}\nprint(lines)"
    requests, result = await run_stream(shell_executor, code)
    assert isinstance(result, CodeExecutionResult), result
    assert [(r.server_name, r.tool_name, r.tool_args) for r in requests] == [
        ("ipybox", "shell", {"cmd": "echo hello world"}),
        ("ipybox", "shell", {"cmd": "echo captured world"}),
    ]
    assert result.text == "hello world\n['captured world']"
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(a["server"], a["tool"], a["args"]["cmd"], a["decision"]) for a in audit] == [
        ("ipybox", "shell", "echo hello world", "accepted"),
        ("ipybox", "shell", "echo captured world", "accepted"),
    ]


async def test_expansion_is_not_applied_twice(shell_executor: CodeExecutor) -> None:
    code = "value = '{not_a_name} $HOME'\n!echo '{value}'"
    requests, result = await run_stream(shell_executor, code)
    assert isinstance(result, CodeExecutionResult), result
    assert requests[0].tool_args == {"cmd": "echo '{not_a_name} $HOME'"}
    assert result.text == "{not_a_name} $HOME"


async def test_rejected_command_never_runs(shell_executor: CodeExecutor, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    requests, result = await run_stream(shell_executor, f"!touch {marker}\nprint('after')", accept=False)
    assert len(requests) == 1
    assert isinstance(result, CodeExecutionError)
    assert "ApprovalRejectedError" in str(result) and "rejected by the application" in str(result)
    assert not marker.exists()
    assert "after" not in result.output
    _, captured = await run_stream(shell_executor, f"x = !touch {marker}", accept=False)
    assert isinstance(captured, CodeExecutionError) and not marker.exists()


async def test_bash_cell_is_one_approval_of_its_body(shell_executor: CodeExecutor, tmp_path: Path) -> None:
    body = "echo one\necho two"
    requests, result = await run_stream(shell_executor, f"%%bash\n{body}")
    assert isinstance(result, CodeExecutionResult), result
    assert [(r.tool_name, r.tool_args) for r in requests] == [("shell_magic", {"cmd": body + "\n"})]
    assert result.text == "one\ntwo"
    marker = tmp_path / "sh-ran"
    requests, refused = await run_stream(shell_executor, f"%%sh\ntouch {marker}", accept=False)
    assert [r.tool_name for r in requests] == ["shell_magic"]
    assert isinstance(refused, CodeExecutionError) and not marker.exists()


async def test_execute_approves_shell_commands(shell_executor: CodeExecutor) -> None:
    result = await shell_executor.execute("!echo auto\nx = !echo also\nprint(x)")
    assert result.text == "auto\n['also']"


async def test_failing_command_reports_and_kernel_lives(shell_executor: CodeExecutor) -> None:
    result = await shell_executor.execute("kept = 1\n!no-such-program-ipybox --flag")
    assert result.text is not None and "not found" in result.text
    assert (await shell_executor.execute("print(kept)")).text == "1"


async def test_without_approval_bang_commands_just_run(tmp_path: Path) -> None:
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        requests, result = await run_stream(executor, "!echo free")
    assert requests == [] and isinstance(result, CodeExecutionResult) and result.text == "free"


ESCAPES = {
    "subprocess.run": "import subprocess; subprocess.run(['true'])",
    "subprocess.check_output": "import subprocess; subprocess.check_output(['true'])",
    "os.system": "import os; os.system('true')",
    "os.execv": "import os; os.execv('/bin/true', ['true'])",
    "os.spawnl": "import os; os.spawnl(os.P_WAIT, '/bin/true', 'true')",
    "os.posix_spawn": "import os; os.posix_spawn('/bin/true', ['true'], {})",
    "pty.spawn": "import pty; pty.spawn(['true'])",
    "asyncio subprocess": (
        "import asyncio\n"
        "async def go():\n"
        "    p = await asyncio.create_subprocess_exec('true')\n"
        "    await p.wait()\n"
        "await go()"
    ),
}


@pytest.fixture
async def escape_executor(tmp_path: Path) -> CodeExecutor:
    async with CodeExecutor(
        working_dir=tmp_path, approve_shell_cmds=True, require_shell_escape=True, spare_kernel=False
    ) as executor:
        yield executor  # type: ignore[misc]


@pytest.mark.parametrize("name", ESCAPES)
async def test_shell_escape_blocks_direct_process_creation(name: str, escape_executor: CodeExecutor) -> None:
    with pytest.raises(CodeExecutionError) as info:
        await escape_executor.execute(ESCAPES[name])
    assert "RuntimeError" in str(info.value) and "is disabled in this kernel" in str(info.value)
    assert "`!cmd`" in str(info.value)
    assert re.search(
        r"Direct (subprocess|\S+\(\)) calls are not allowed", str(info.value)
    )  # upstream's phrase


async def test_shell_escape_keeps_approved_commands_working(escape_executor: CodeExecutor) -> None:
    requests, result = await run_stream(escape_executor, "!echo via bang\nout = !echo captured\nprint(out)")
    assert isinstance(result, CodeExecutionResult), result
    assert result.text == "via bang\n['captured']" and len(requests) == 2
    _, magic = await run_stream(escape_executor, "%%bash\necho from bash")
    assert isinstance(magic, CodeExecutionResult) and magic.text == "from bash"
    with pytest.raises(CodeExecutionError):  # the guard is back once the command is done
        await escape_executor.execute(ESCAPES["os.system"])


def test_bad_combinations_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="approve_shell_cmds"):
        CodeExecutor(require_shell_escape=True)
    for name in ("approval_timeout", "connect_timeout", "kernel_init_timeout", "tool_timeout"):
        with pytest.raises(ValueError, match=name):
            CodeExecutor(**{name: -1})


async def test_negative_execution_timeout_is_refused(executor: CodeExecutor) -> None:
    with pytest.raises(ValueError, match="timeout"):
        await executor.execute("1", timeout=-0.5)


async def test_timeout_names_the_limit_and_none_means_no_limit(executor: CodeExecutor) -> None:
    with pytest.raises(TimeoutError, match=r"0\.20s"):
        await executor.execute("import time\nkept = 5\ntime.sleep(30)", timeout=0.2)
    result = await executor.execute("import time\ntime.sleep(0.3)\nprint(kept)", timeout=None)
    assert result.text == "5"


async def test_kernel_init_timeout_bounds_the_start(tmp_path: Path) -> None:
    executor = CodeExecutor(working_dir=tmp_path, kernel_init_timeout=0.001)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="failed to start"):
        await executor.start()
    assert time.monotonic() - started < 10


async def test_given_working_dir_is_restored_after_a_cell(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        moved = await executor.execute("import os\nos.chdir('sub')\nprint(os.getcwd())")
        assert moved.text == f"{tmp_path / 'sub'}\n[ipybox] cwd reset to {tmp_path}"
        assert (await executor.execute("import os; print(os.getcwd())")).text == str(tmp_path)
        quiet = await executor.execute("print('no move')")
        assert quiet.text == "no move"


async def test_without_working_dir_a_change_persists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    async with CodeExecutor(spare_kernel=False) as executor:
        assert (await executor.execute("import os\nos.chdir('sub')")).text is None
        assert (await executor.execute("import os; print(os.getcwd())")).text == str(tmp_path / "sub")


async def test_colour_codes_do_not_reach_the_output(executor: CodeExecutor) -> None:
    code = "!printf '\\033[31mred\\033[0m plain\\n'\n"
    code += "import os\nprint(os.environ['TERM'], os.environ['NO_COLOR'])"
    result = await executor.execute(code)
    assert result.text == "red plain\ndumb 1"


async def test_cancel_ends_execute_promptly_and_keeps_state(executor: CodeExecutor) -> None:
    await executor.execute("kept = 'state'")
    task = asyncio.create_task(
        executor.execute("import time\nfor _ in range(600): time.sleep(0.1)", timeout=None)
    )
    await asyncio.sleep(1.0)
    started = time.monotonic()
    await executor.cancel()
    result = await asyncio.wait_for(task, 10)
    assert time.monotonic() - started < 5
    assert result == CodeExecutionResult(None)
    assert (await executor.execute("print(kept)")).text == "state"


async def test_cancel_while_a_shell_approval_is_pending(shell_executor: CodeExecutor, tmp_path: Path) -> None:
    marker = tmp_path / "never"
    seen: list[ApprovalRequest] = []

    async def consume() -> list[object]:
        items: list[object] = []
        async for item in shell_executor.stream(f"!touch {marker}"):
            items.append(item)
            if isinstance(item, ApprovalRequest):
                seen.append(item)
                await shell_executor.cancel()  # instead of deciding
        return items

    items = await asyncio.wait_for(consume(), 15)
    assert len(seen) == 1 and not any(isinstance(i, CodeExecutionResult) for i in items)
    await asyncio.sleep(0.5)
    assert not marker.exists()
    assert (await shell_executor.execute("print('usable')")).text == "usable"


async def test_approval_waits_do_not_count_against_the_timeout(shell_executor: CodeExecutor) -> None:
    async def slow_decisions() -> CodeExecutionResult:
        async for item in shell_executor.stream("!echo one\n!echo two", timeout=2.0):
            if isinstance(item, ApprovalRequest):
                await asyncio.sleep(1.5)  # two waits: 3 s in all, past the 2 s limit
                await item.accept()
            elif isinstance(item, CodeExecutionResult):
                return item
        raise AssertionError("no result")

    result = await slow_decisions()
    assert result.text == "one\ntwo"
