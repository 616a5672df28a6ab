"""`CodeExecutor(sandbox=True)`: what works unsandboxed works the same inside the sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from internals import kernel_pid
from servers.launch import FILESYSTEM

from ipybox import CodeExecutionError, CodeExecutor, generate_mcp_sources

from .conftest import ENV_SECRET, ProcessWatch, probe, run, sandbox_config, until, write_config

pytestmark = [pytest.mark.usefixtures("srt_available"), pytest.mark.timeout(90)]


async def test_basic_execution(executor: CodeExecutor) -> None:
    assert await run(executor, "print('hello world')") == "hello world"
    assert await run(executor, "1 + 1") == "2"
    # both streams arrive; their order is the kernel's: it flushes stdout and stderr apart (about
    # 1 in 200 cells shows them swapped or a newline after both, sandboxed or not)
    both = await run(executor, "import sys\nprint('a')\nprint('b', file=sys.stderr)")
    assert sorted(both.replace("\n", "")) == ["a", "b"], both
    with pytest.raises(CodeExecutionError, match="ZeroDivisionError"):
        await run(executor, "1 / 0")


async def test_state_persists_across_executions(executor: CodeExecutor) -> None:
    await run(executor, "x = 40\ndef add(y):\n    return x + y")
    assert await run(executor, "add(2)") == "42"


async def test_timeout_interrupts_the_cell_and_keeps_state(executor: CodeExecutor) -> None:
    await run(executor, "x = 'kept'")
    pid = kernel_pid(executor)
    with pytest.raises(TimeoutError, match="kept its state"):
        await executor.execute("import time\ntime.sleep(3600)", timeout=2)
    # interrupted over the control channel, not replaced: the same kernel, with its state
    assert kernel_pid(executor) == pid
    assert await run(executor, "print(x)") == "kept"


async def test_state_dirs_are_made_and_read_only_to_the_kernel(srt_available: None, workspace: Path) -> None:
    """`state_dirs`: where the application keeps its own records below the workspace, made before
    the kernel starts; the kernel reads them but cannot write, rename or replace them."""
    records = workspace / "app" / "records"
    async with CodeExecutor(
        sandbox=True, working_dir=workspace, spare_kernel=False, state_dirs=["app/records"]
    ) as executor:
        assert records.is_dir()
        (records / "log.txt").write_text("by the application\n")
        attempts = [
            "open('app/records/log.txt', 'a').write('forged')",
            "open('app/records/new.txt', 'w').write('forged')",
            "os.rename('app/records', 'app/elsewhere')",
            "os.rename('app', 'moved')",
        ]
        guarded = (
            "import os\ntry:\n    {}\n    print('done')\n"
            + "except OSError as e:\n    print(type(e).__name__)"
        )
        for attempt in attempts:
            text = await run(executor, guarded.format(attempt))
            assert text in ("PermissionError", "OSError"), (attempt, text)
        assert (
            await run(executor, "print(open('app/records/log.txt').read(), end='')") == "by the application"
        )
    assert sorted(p.name for p in records.iterdir()) == ["log.txt"]
    for wrong in ["/etc", "..", ".", "app/../../x"]:
        with pytest.raises(ValueError, match="state_dirs must lie below the working directory"):
            CodeExecutor(working_dir=workspace, state_dirs=[wrong])


async def test_reset_twice_quickly_with_spare_kernel(srt_available: None, workspace: Path) -> None:
    watch = ProcessWatch()
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=True) as executor:
        await run(executor, "x = 1")
        await executor.reset()
        await executor.reset()  # the spare of the first reset may still be starting
        with pytest.raises(CodeExecutionError, match="NameError"):
            await run(executor, "x")
        # the replacement kernels are sandboxed like the first one
        result = await probe(
            executor,
            "print(_json.dumps([attempt(lambda: open('.env').read()),"
            " attempt(lambda: open('/etc/ipybox-escape', 'w'))]))",
        )
        assert result[0].startswith("PermissionError"), result
        assert result[1].startswith("OSError: [Errno 30]"), result
        # retired kernels are stopped: one working kernel and one spare remain
        await until(lambda: len(watch.find("python", "/kernels/")) == 2)
    await watch.assert_all_gone()


async def test_workspace_without_write_access_still_runs_cells(
    srt_available: None, workspace: Path, tmp_path: Path
) -> None:
    """Nothing writable but ipybox's own: cells run, temp files go to a private temp dir."""
    config = write_config(tmp_path / "ro.json", sandbox_config(filesystem={"allowWrite": []}))
    async with CodeExecutor(
        sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=False
    ) as executor:
        result = await probe(
            executor,
            "import tempfile\n"
            "print(_json.dumps([attempt(lambda: tempfile.mkdtemp()), attempt(lambda: open('x', 'w'))]))",
        )
    assert result[0].startswith("ok: '"), result
    tmp = Path(result[0][5:-1])
    assert not tmp.is_relative_to(workspace) and not tmp.exists()  # removed with the executor
    assert result[1].startswith("OSError: [Errno 30]"), result
    assert sorted(p.name for p in workspace.iterdir()) == [".env", "hello.txt"]


async def test_generated_tool_api_works_from_the_sandbox(
    executor: CodeExecutor, workspace: Path, everything_params: dict[str, Any]
) -> None:
    modules = await generate_mcp_sources("everything", everything_params, workspace / "mcptools")
    assert "echo" in modules
    code = "from mcptools.everything.echo import run, Params\nprint(run(Params(message='from the sandbox')))"
    assert await run(executor, code) == "Echo: from the sandbox"


@pytest.mark.timeout(120)
async def test_stdio_mcp_server_sandboxed_with_srt(
    executor: CodeExecutor, workspace: Path, tmp_path: Path
) -> None:
    """An MCP server run by `srt` as its command: it may list `.env`, not read it."""
    if not FILESYSTEM.exists():
        pytest.skip("npm package @modelcontextprotocol/server-filesystem is not installed (npm ci)")
    policy = {
        "filesystem": {"denyRead": [str(workspace / ".env")], "allowWrite": [], "denyWrite": []},
        "network": {"allowedDomains": [], "deniedDomains": []},
    }
    mcp_config = write_config(tmp_path / "sandbox-mcp.json", policy)
    params = {
        "command": "srt",
        "args": ["--settings", str(mcp_config), "--", "mcp-server-filesystem", str(workspace)],
    }
    modules = await generate_mcp_sources("filesystem", params, workspace / "mcptools")
    assert "list_directory" in modules
    read = "read_text_file" if "read_text_file" in modules else "read_file"
    assert read in modules, modules

    listing = await run(
        executor,
        "from mcptools.filesystem.list_directory import run, Params\n"
        f"print(run(Params(path={str(workspace)!r})).content)",
    )
    assert "hello.txt" in listing and ".env" in listing  # allowed by server and sandbox

    hello = await run(
        executor,
        f"from mcptools.filesystem.{read} import run, Params\n"
        f"print(run(Params(path={str(workspace / 'hello.txt')!r})).content)",
    )
    assert hello == "hello from the workspace"

    with pytest.raises(CodeExecutionError) as info:  # allowed by the server, blocked by srt
        await run(
            executor,
            f"from mcptools.filesystem.{read} import run, Params\n"
            f"print(run(Params(path={str(workspace / '.env')!r})).content)",
        )
    message = str(info.value)
    assert "EACCES" in message or "permission denied" in message.lower(), message
    assert ENV_SECRET not in message + info.value.output
