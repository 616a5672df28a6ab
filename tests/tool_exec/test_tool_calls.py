"""Tool calls from kernel code through generated APIs: transports, approval, errors, restarts, cleanup."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from servers.launch import (
    HttpServer,
    child_pids,
    collect,
    eventually,
    filesystem_params,
    network_env,
    unavailable,
)

from ipybox import (
    ApprovalRequest,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    ToolRunner,
    ToolServer,
    generate_mcp_sources,
)

from .conftest import Workspace, requires_node

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NASTY = "nasty_server.py"
EVERYTHING = "mcp-server-everything"


def echo_code(server: str, message: str = "hello") -> str:
    return f"from mcptools.{server} import echo\nprint(echo.run(echo.Params(message={message!r})))"


# --- transports -----------------------------------------------------------------------------------


@requires_node
@pytest.mark.timeout(60)
async def test_everything_stdio_echo(executor: CodeExecutor) -> None:
    result = await executor.execute(echo_code("everything"))
    assert result.text == "Echo: hello"


@requires_node
@pytest.mark.timeout(60)
@pytest.mark.parametrize("http_server", ["streamableHttp", "sse"], indirect=True)
async def test_everything_http_echo(
    executor: CodeExecutor, workspace: Workspace, http_server: HttpServer
) -> None:
    name = f"everything_{http_server.kind.lower()}"
    modules = await generate_mcp_sources(name, http_server.params, workspace.root / "mcptools")
    assert "echo" in modules
    assert f"{http_server.port}" in (workspace.root / "mcptools" / name / "__init__.py").read_text()
    result = await executor.execute(
        echo_code(name, "over http") + "\nprint(echo.run(echo.Params(message='again')))"
    )
    assert result.text == "Echo: over http\nEcho: again"


@requires_node
@pytest.mark.timeout(60)
async def test_filesystem_tools_return_result_models(
    executor: CodeExecutor, workspace: Workspace, tmp_path: Path
) -> None:
    data = (tmp_path / "data").resolve()
    (data / "sub").mkdir(parents=True)
    (data / "notes.txt").write_text("hi")
    modules = await generate_mcp_sources("files", filesystem_params(data), workspace.root / "mcptools")
    assert {"list_allowed_directories", "list_directory", "read_text_file"} <= set(modules)
    code = f"""
from mcptools.files import list_allowed_directories as lad, list_directory as ld
allowed = lad.run(lad.Params())
listing = ld.run(ld.Params(path={str(data)!r}))
print(type(allowed) is lad.Result, type(listing) is ld.Result)
print(allowed.content)
print(listing.content)
"""
    result = await executor.execute(code)
    assert result.text is not None
    lines = result.text.splitlines()
    assert lines[0] == "True True"
    assert str(data) in result.text
    assert "[FILE] notes.txt" in result.text
    assert "[DIR] sub" in result.text


@pytest.mark.timeout(240)
async def test_uvx_time_server(executor: CodeExecutor, workspace: Workspace) -> None:
    """A server from PyPI run by `uvx`, as users configure most Python MCP servers."""
    uvx = shutil.which("uvx")
    if uvx is None:
        unavailable("uvx is not installed")
    # Install (or find in the uv cache) mcp-server-time first, so the generator's connect
    # timeout does not include a download.
    probe = await asyncio.to_thread(
        subprocess.run, [uvx, "mcp-server-time", "--help"], capture_output=True, text=True, timeout=180
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        unavailable(f"uvx cannot install mcp-server-time from the package index: {last}")
    # The server runs with the MCP client's default environment plus `env`: pass on what uv
    # needs to reach the index (certificates, proxies, mirrors), as ${VAR} placeholders.
    env = {name: "${" + name + "}" for name in network_env()}
    params = {"command": uvx, "args": ["mcp-server-time", "--local-timezone", "UTC"], "env": env}
    modules = await generate_mcp_sources("clock", params, workspace.root / "mcptools")
    assert "get_current_time" in modules
    code = """
from mcptools.clock import get_current_time as t
r = t.run(t.Params(timezone="UTC"))
print(type(r).__name__, r.timezone if hasattr(r, "timezone") else r)
"""
    result = await executor.execute(code)
    assert result.text is not None and "UTC" in result.text


# --- approval -------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_stream_yields_approval_request_and_accept_runs_the_tool(executor: CodeExecutor) -> None:
    requests, outcome = await collect(executor, echo_code("nasty", "hi"), lambda r: "accept")
    assert isinstance(outcome, CodeExecutionResult)
    assert outcome.text == "hi"
    assert len(requests) == 1
    request = requests[0]
    assert (request.server_name, request.tool_name, request.tool_args) == ("nasty", "echo", {"message": "hi"})
    assert str(request) == 'nasty.echo(message="hi")'
    match request:
        case ApprovalRequest("nasty", "echo", {"message": "hi"}):
            pass
        case _:
            raise AssertionError("ApprovalRequest does not match positionally")


@pytest.mark.timeout(60)
async def test_reject_raises_code_execution_error(executor: CodeExecutor) -> None:
    code = "print('before')\n" + echo_code("nasty", "secret") + "\nprint('after')"
    requests, outcome = await collect(executor, code, lambda r: "reject")
    assert len(requests) == 1
    assert isinstance(outcome, CodeExecutionError)
    assert "rejected" in str(outcome)
    assert "nasty.echo" in str(outcome)
    assert outcome.output == "before"
    # the kernel is fine and the next call goes through
    requests, outcome = await collect(
        executor, "print(echo.run(echo.Params(message='ok')))", lambda r: "accept"
    )
    assert isinstance(outcome, CodeExecutionResult) and outcome.text == "ok"


@pytest.mark.timeout(60)
async def test_unanswered_request_times_out(workspace: Workspace) -> None:
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root, approval_timeout=1, spare_kernel=False) as executor:
        requests, outcome = await collect(executor, echo_code("nasty"), lambda r: "ignore")
        assert len(requests) == 1
        assert isinstance(outcome, CodeExecutionError)
        message = str(outcome)
        assert "not approved" in message
        assert "approval_timeout" in message or "1 s" in message
        # a late answer is harmless, and the next call can be approved
        await requests[0].accept()
        requests, outcome = await collect(executor, echo_code("nasty", "later"), lambda r: "accept")
        assert isinstance(outcome, CodeExecutionResult) and outcome.text == "later"


@pytest.mark.timeout(60)
async def test_execute_auto_approves_every_call(executor: CodeExecutor) -> None:
    code = (
        echo_code("nasty", "one")
        + "\nfor m in ['two', 'three']:\n    print(echo.run(echo.Params(message=m)))"
    )
    result = await executor.execute(code)
    assert result.text == "one\ntwo\nthree"


@pytest.mark.timeout(60)
async def test_a_caller_waiting_for_a_slow_tool_sleeps(executor: CodeExecutor) -> None:
    """A caller polls for its reply a moment before it sleeps, while its last reply came quickly
    (a wake-up from sleep costs a fast call a good part of its latency): while a slow tool runs
    it uses next to no processor time, and quick calls between slow ones still get their replies."""
    code = """
import time
from mcptools.nasty import echo, slow
used = time.thread_time()
for _ in range(3):
    slow.run(slow.Params(seconds=0.3))
    print(echo.run(echo.Params(message="quick")))
print(round(time.thread_time() - used, 3))
"""
    *quick, used = (await executor.execute(code)).text.splitlines()
    assert quick == ["quick"] * 3
    assert float(used) < 0.3, used  # polling through the slow calls would take about 0.9 s


# --- errors and restarts --------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_tool_error_is_raised_in_the_kernel(executor: CodeExecutor) -> None:
    code = "from mcptools.nasty import fail\nfail.run(fail.Params())"
    with pytest.raises(CodeExecutionError) as info:
        await executor.execute(code)
    assert "boom: something went wrong" in str(info.value)
    assert "ToolRunnerError" in str(info.value)
    # the error can be caught in kernel code
    code = (
        "from ipybox.tool_exec.client import ToolRunnerError\n"
        "try:\n    fail.run(fail.Params())\nexcept ToolRunnerError as e:\n    print('caught', e)"
    )
    result = await executor.execute(code)
    assert result.text == "caught boom: something went wrong"


@pytest.mark.timeout(60)
async def test_server_crash_is_reported_and_next_call_restarts_it(executor: CodeExecutor) -> None:
    await executor.execute(echo_code("nasty", "warm up"))
    before = child_pids(NASTY)
    assert len(before) == 1
    with pytest.raises(CodeExecutionError) as info:
        await executor.execute("from mcptools.nasty import crash\ncrash.run(crash.Params())")
    message = str(info.value)
    assert "'nasty'" in message and "closed the connection" in message and "restarted" in message
    assert "During the call it wrote to stderr:\n  nasty_server: crashing on purpose" in message, message
    assert await eventually(lambda: not child_pids(NASTY) & before)
    result = await executor.execute(echo_code("nasty", "back again"))
    assert result.text == "back again"
    after = child_pids(NASTY)
    assert len(after) == 1 and not after & before


@requires_node
@pytest.mark.timeout(60)
async def test_unreachable_http_server_at_call_time(
    executor: CodeExecutor, workspace: Workspace, http_server: HttpServer
) -> None:
    await generate_mcp_sources("gone", http_server.params, workspace.root / "mcptools")
    http_server.kill()
    with pytest.raises(CodeExecutionError) as info:  # an error, not a hang until the test's timeout
        await executor.execute(echo_code("gone"))
    assert "Could not connect to MCP server 'gone'" in str(info.value)
    # once the server is back, calls work again
    http_server.start()
    result = await executor.execute(echo_code("gone", "back"))
    assert result.text == "Echo: back"


@requires_node
@pytest.mark.timeout(90)
@pytest.mark.parametrize("http_server", ["streamableHttp", "sse"], indirect=True)
async def test_http_server_killed_between_calls(
    executor: CodeExecutor, workspace: Workspace, http_server: HttpServer
) -> None:
    await generate_mcp_sources("flaky", http_server.params, workspace.root / "mcptools")
    assert (await executor.execute(echo_code("flaky", "first"))).text == "Echo: first"
    http_server.kill()
    with pytest.raises(CodeExecutionError) as info:  # an error, not a hang until the test's timeout
        await executor.execute("print(echo.run(echo.Params(message='lost')))")
    assert "'flaky'" in str(info.value)
    http_server.start()
    result = await executor.execute("print(echo.run(echo.Params(message='second')))")
    assert result.text == "Echo: second"


# --- results ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_image_tool_returns_png_bytes(executor: CodeExecutor) -> None:
    code = """
from mcptools.nasty import image
out = image.run(image.Params())
print(repr(str(out)), isinstance(out, str), len(out.images))
print(out.images[0].mime_type, out.images[0].data[:8])
print(out.images[0]._repr_png_() == out.images[0].data)
"""
    result = await executor.execute(code)
    assert result.text is not None
    lines = result.text.splitlines()
    assert lines[0] == "'a 1x1 red PNG' True 1"
    assert lines[1] == f"image/png {PNG_MAGIC!r}"
    assert lines[2] == "True"


@pytest.mark.timeout(60)
async def test_resource_tool_returns_resources(executor: CodeExecutor) -> None:
    code = """
from mcptools.nasty import resource
out = resource.run(resource.Params())
print(str(out))
r = out.resources[0]
print(len(out.resources), r.uri, r.mime_type, r.text)
"""
    result = await executor.execute(code)
    text = "hello from an embedded resource"
    assert result.text == f"{text}\n1 nasty://resource/greeting text/plain {text}"


@requires_node
@pytest.mark.timeout(60)
async def test_everything_image_and_structured_content(executor: CodeExecutor) -> None:
    code = """
from mcptools.everything import get_tiny_image as img, get_structured_content as sc
out = img.run(img.Params())
print(len(out.images), out.images[0].mime_type, out.images[0].data[:8])
r = sc.run(sc.Params(location="New York"))
print(type(r) is sc.Result, type(r.temperature).__name__, type(r.conditions).__name__)
"""
    result = await executor.execute(code)
    assert result.text is not None
    lines = result.text.splitlines()
    assert lines[0] == f"1 image/png {PNG_MAGIC!r}"
    assert lines[1] == "True float str"


# --- kernel-side calling conventions ------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_run_works_in_a_cell_with_top_level_await(executor: CodeExecutor) -> None:
    code = (
        "import asyncio\nfrom mcptools.nasty import echo\n"
        "await asyncio.sleep(0)\nprint(echo.run(echo.Params(message='awaited')))"
    )
    result = await executor.execute(code)
    assert result.text == "awaited"


@pytest.mark.timeout(60)
async def test_async_tool_runner_in_the_kernel(executor: CodeExecutor) -> None:
    code = """
import asyncio
from ipybox import ToolRunner
from mcptools.nasty import SERVER_NAME, SERVER_PARAMS
runner = ToolRunner(SERVER_NAME, SERVER_PARAMS)
outs = await asyncio.gather(*(runner.run("echo", {"message": f"m{i}"}) for i in range(3)))
print(sorted(str(o) for o in outs))
print(runner.run_sync("structured_output", {"user_id": 3})["user"]["id"])
"""
    result = await executor.execute(code)
    assert result.text == "['m0', 'm1', 'm2']\n3"


# --- lifecycle --------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_reset_closes_mcp_servers_and_next_call_restarts(executor: CodeExecutor) -> None:
    await executor.execute(echo_code("nasty"))
    before = child_pids(NASTY)
    assert len(before) == 1
    await executor.reset()
    assert await eventually(lambda: not child_pids(NASTY))
    result = await executor.execute(echo_code("nasty", "fresh"))  # fresh kernel: import again
    assert result.text == "fresh"
    after = child_pids(NASTY)
    assert len(after) == 1 and not after & before


@requires_node
@pytest.mark.timeout(60)
async def test_executor_stop_leaves_no_server_processes(workspace: Workspace) -> None:
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root, spare_kernel=False) as executor:
        await executor.execute(echo_code("nasty") + "\n" + echo_code("everything"))
        assert child_pids(NASTY) and child_pids(EVERYTHING)
    assert await eventually(lambda: not child_pids(NASTY) and not child_pids(EVERYTHING))


@requires_node
@pytest.mark.timeout(60)
async def test_tool_server_stop_leaves_no_server_processes(workspace: Workspace) -> None:
    workspace.register()
    server = ToolServer(host="127.0.0.1", port=0)
    await server.start()
    try:
        assert server.port
        for name, expected in [("nasty", "x"), ("everything", "Echo: x")]:
            runner = ToolRunner(
                name, workspace.servers[name], host="127.0.0.1", port=server.port, token=server.token
            )
            assert await runner.run("echo", {"message": "x"}) == expected
        assert child_pids(NASTY) and child_pids(EVERYTHING)
    finally:
        await server.stop()
    assert not child_pids(NASTY) and not child_pids(EVERYTHING)
    assert await asyncio.to_thread(_refused, server.port)


def _refused(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


@pytest.mark.timeout(60)
async def test_tool_server_servers_argument_allows_unregistered_servers(workspace: Workspace) -> None:
    params = workspace.servers["nasty"]
    async with ToolServer(host="127.0.0.1", port=0, servers={"adhoc": params}) as server:
        runner = ToolRunner("adhoc", params, host="127.0.0.1", port=server.port, token=server.token)
        assert await runner.run("echo", {"message": "ok"}) == "ok"
        tampered = ToolRunner(
            "adhoc", params | {"args": ["-c", "pass"]}, host="127.0.0.1", port=server.port, token=server.token
        )
        with pytest.raises(Exception, match="not registered"):
            await tampered.run("echo", {"message": "no"})
