"""Kernels on real gateways (Jupyter Kernel Gateway, Enterprise Gateway) started on localhost.

The gateways run from their own venvs without ipybox (see `servers.gateways`); their kernels
get ipybox's kernel modules and the workspace's `mcptools/` pushed by the executor.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest
from internals import kernels
from servers.gateways import (
    ENTERPRISE_GATEWAY,
    KERNEL_GATEWAY,
    GatewayProcess,
    GatewayUnavailable,
    gateway_venv,
)
from servers.launch import approve_each, nasty_params, unavailable

from ipybox import (
    ApprovalRequest,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    generate_mcp_sources,
)
from ipybox.kernel_mgr.gateway import GatewayError, resolve_gateway_url
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.tool_exec.server import ToolServer

pytestmark = pytest.mark.timeout(180)

#: A 1x1 PNG, displayed by a cell to check that images come back.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
#: Enterprise Gateway refuses kernels for root unless told who the user is.
EG_ENV = {"KERNEL_USERNAME": "ipybox-test"}


def _start_gateway(kind_name: str) -> GatewayProcess:
    kind = {"kg": KERNEL_GATEWAY, "eg": ENTERPRISE_GATEWAY}[kind_name]
    try:
        venv = gateway_venv(kind)
    except GatewayUnavailable as e:
        unavailable(str(e))
    return GatewayProcess(kind, venv).start()


@pytest.fixture(scope="module", params=["kg", "eg"])
def gateway(request: pytest.FixtureRequest) -> Iterator[GatewayProcess]:
    """Each gateway, shared by the tests of this module that only run code on it."""
    process = _start_gateway(request.param)
    yield process
    process.close()


@pytest.fixture
def own_gateway() -> Iterator[GatewayProcess]:
    """A Kernel Gateway of the test's own, for tests that kill or restart it."""
    process = _start_gateway("kg")
    yield process
    process.close()


def _executor(gateway: GatewayProcess, workspace: Path, **kwargs: object) -> CodeExecutor:
    env = EG_ENV if gateway.kind is ENTERPRISE_GATEWAY else {}
    return CodeExecutor(
        kernel_gateway_url=gateway.url,
        kernel_gateway_token=gateway.token,
        working_dir=workspace,
        kernel_env=env,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
async def executor(gateway: GatewayProcess, tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    async with _executor(gateway, tmp_path, spare_kernel=False) as executor:
        yield executor


def _kernels(gateway: GatewayProcess) -> list[str]:
    response = httpx2.get(f"{gateway.url}/api/kernels", headers={"Authorization": f"token {gateway.token}"})
    response.raise_for_status()
    return [k["id"] for k in response.json()]


# --- running code -------------------------------------------------------------------------------------


async def test_state_output_images_and_errors(executor: CodeExecutor, tmp_path: Path) -> None:
    assert (await executor.execute("x = 41\nprint('hello')")).text == "hello"
    assert (await executor.execute("x + 1")).text == "42"
    shown = await executor.execute(
        f"from IPython.display import Image, display\ndisplay(Image(data={PNG!r}))"
    )
    assert len(shown.images) == 1 and shown.images[0].read_bytes() == PNG
    with pytest.raises(CodeExecutionError, match="ZeroDivisionError") as info:
        await executor.execute("print('before')\n1/0")
    assert info.value.output == "before"
    chunks = [
        item
        async for item in executor.stream(
            "import time\nfor i in range(3): print(i); time.sleep(0.1)", chunks=True
        )
    ]
    assert isinstance(chunks[-1], CodeExecutionResult) and chunks[-1].text == "0\n1\n2"


async def test_the_kernel_has_no_ipybox_of_its_own(executor: CodeExecutor) -> None:
    """The kernel's venv lacks ipybox and mcp: what ipybox needs there is pushed in at start."""
    out = await executor.execute(
        "import importlib.util, sys, ipybox\n"
        "print(importlib.util.find_spec('mcp') is None, 'ipybox-kernel-' in ipybox.__file__, sys.prefix)"
    )
    assert out.text is not None
    missing_mcp, pushed, prefix = out.text.split()
    assert missing_mcp == "True" and pushed == "True" and "gateways" in prefix


async def test_timeout_interrupts_and_keeps_state(executor: CodeExecutor) -> None:
    await executor.execute("kept = 'yes'")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="interrupted"):
        await executor.execute("import time\nwhile True: time.sleep(0.05)", timeout=1)
    assert time.monotonic() - started < 10
    assert (await executor.execute("kept")).text == "'yes'"


async def test_cancel_stops_the_cell_and_keeps_state(executor: CodeExecutor) -> None:
    await executor.execute("kept = 1")
    task = asyncio.create_task(executor.execute("import time\ntime.sleep(30)"))
    await asyncio.sleep(1)
    await executor.cancel()
    result = await asyncio.wait_for(task, 10)
    assert result.text is None
    assert (await executor.execute("kept + 1")).text == "2"


async def test_reset_swaps_in_the_warm_spare_and_stop_deletes_kernels(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    before = set(_kernels(gateway))
    async with _executor(gateway, tmp_path) as executor:
        await executor.execute("x = 1")
        await kernels(executor).spare_ready()
        assert len(set(_kernels(gateway)) - before) == 2  # the kernel and its spare
        started = time.monotonic()
        await executor.reset()
        assert time.monotonic() - started < 5
        with pytest.raises(CodeExecutionError, match="NameError"):
            await executor.execute("x")
    assert set(_kernels(gateway)) <= before


async def test_shell_commands_need_approval_through_the_tcp_tool_server(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    async with _executor(gateway, tmp_path, approve_shell_cmds=True, spare_kernel=False) as executor:
        requests, result = await approve_each(executor, "!echo approved")
        assert [r.tool_name for r in requests] == ["shell"] and result.text == "approved"


async def test_generated_tools_are_pushed_and_called_with_approval(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    await generate_mcp_sources("nasty", nasty_params(), tmp_path / "mcptools")
    async with _executor(gateway, tmp_path, spare_kernel=False) as executor:
        code = "from mcptools.nasty.echo import Params, run\nprint(run(Params(message='hi')))"
        requests, result = await approve_each(executor, code)
        assert [(r.server_name, r.tool_name) for r in requests] == [("nasty", "echo")]
        assert result.text == "hi"
        with pytest.raises(CodeExecutionError, match="rejected by the application"):
            async for item in executor.stream(code):
                if isinstance(item, ApprovalRequest):
                    await item.reject()
        # registered later: the kernel sees the new package at the next execution
        await generate_mcp_sources("later", nasty_params(), tmp_path / "mcptools")
        out = await executor.execute(
            "from mcptools.later.echo import Params, run\nprint(run(Params(message='new')))"
        )
        assert out.text == "new"
        # invalid arguments fail in the kernel (pydantic there), before anything is sent
        with pytest.raises(CodeExecutionError, match="ToolArgumentError"):
            await executor.execute("from mcptools.nasty.echo import Params\nParams(message=[1])")


async def test_tool_server_tcp_requires_the_token(tmp_path: Path) -> None:
    async with ToolServer(host="127.0.0.1", port=0, workspace=tmp_path) as server:
        assert server.port is not None
        for request in (
            {"op": "run", "server_name": "x", "tool_name": "y"},
            {"op": "shell", "tool_name": "shell"},
        ):
            reply = await asyncio.to_thread(_exchange, server.port, request | {"token": "wrong"})
            assert not reply["ok"] and "token" in reply["error"]
        reply = await asyncio.to_thread(_exchange, server.port, {"op": "run", "token": server.token})
        assert "token" not in reply.get("error", "")


def _exchange(port: int, request: dict[str, object]) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(json.dumps(request).encode() + b"\n")
        reply: dict[str, object] = json.loads(sock.makefile().readline())
        return reply


# --- files ------------------------------------------------------------------------------------------


async def test_upload_and_download_files_and_directories(executor: CodeExecutor, tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "sub" / "empty").mkdir(parents=True)
    (source / "a.txt").write_text("alpha")
    (source / "sub" / "b.bin").write_bytes(os.urandom(3 * (1 << 20) + 17))  # several chunks
    await executor.upload(source / "a.txt", "xfer-test/one.txt")
    await executor.upload(source, "xfer-test/tree")
    out = await executor.execute("print(open('xfer-test/one.txt').read())")
    assert out.text == "alpha"
    back = tmp_path / "back"
    await executor.download("xfer-test/tree", back)
    assert (back / "a.txt").read_text() == "alpha"
    assert (back / "sub" / "b.bin").read_bytes() == (source / "sub" / "b.bin").read_bytes()
    assert (back / "sub" / "empty").is_dir()
    await executor.download("xfer-test/one.txt", tmp_path / "one.txt")
    assert (tmp_path / "one.txt").read_text() == "alpha"
    with pytest.raises(FileNotFoundError, match="no-such"):
        await executor.download("no-such-file", tmp_path / "x")
    await executor.execute("import shutil; shutil.rmtree('xfer-test')")


async def test_transfers_with_a_local_kernel(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("local")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with CodeExecutor(working_dir=workspace, spare_kernel=False) as executor:
        await executor.upload(tmp_path / "in.txt", "d/in.txt")
        assert (await executor.execute("print(open('d/in.txt').read())")).text == "local"
        await executor.download("d", tmp_path / "out")
    assert (tmp_path / "out" / "in.txt").read_text() == "local"


# --- faults ---------------------------------------------------------------------------------------


async def test_gateway_killed_during_a_cell(own_gateway: GatewayProcess, tmp_path: Path) -> None:
    executor = _executor(own_gateway, tmp_path)
    await executor.start()
    try:
        await executor.execute("x = 1")
        task = asyncio.create_task(
            executor.execute("print('running', flush=True)\nimport time\ntime.sleep(60)")
        )
        await asyncio.sleep(1.5)
        own_gateway.kill()
        started = time.monotonic()
        with pytest.raises(CodeExecutionError) as info:
            await asyncio.wait_for(task, 15)
        assert time.monotonic() - started < 10
        message = str(info.value)
        assert own_gateway.url in message and "state" in message, message
        with pytest.raises(CodeExecutionError, match="Cannot reach the kernel gateway"):
            await asyncio.wait_for(executor.execute("1"), 30)
    finally:
        await asyncio.wait_for(executor.stop(), 30)


async def test_gateway_restarted_between_cells(own_gateway: GatewayProcess, tmp_path: Path) -> None:
    async with _executor(own_gateway, tmp_path) as executor:
        await executor.execute("x = 1")
        own_gateway.restart()
        with pytest.raises(CodeExecutionError, match="state .*lost") as info:
            await asyncio.wait_for(executor.execute("x"), 30)
        assert own_gateway.url in str(info.value)
        assert (await asyncio.wait_for(executor.execute("print('fresh')"), 30)).text == "fresh"
        with pytest.raises(CodeExecutionError, match="NameError"):
            await executor.execute("x")


async def test_kernel_dying_on_the_gateway(gateway: GatewayProcess, executor: CodeExecutor) -> None:
    with pytest.raises(CodeExecutionError, match="kernel") as info:
        await asyncio.wait_for(executor.execute("import os\nos._exit(3)"), 30)
    assert gateway.url in str(info.value)
    assert (await asyncio.wait_for(executor.execute("print('again')"), 60)).text == "again"


async def test_wrong_token(gateway: GatewayProcess, tmp_path: Path) -> None:
    executor = CodeExecutor(
        kernel_gateway_url=gateway.url, kernel_gateway_token="wrong", working_dir=tmp_path
    )
    with pytest.raises(GatewayError, match="token") as info:
        await asyncio.wait_for(executor.start(), 20)
    assert gateway.url in str(info.value)


async def test_missing_kernelspec(gateway: GatewayProcess, tmp_path: Path) -> None:
    executor = _executor(gateway, tmp_path, kernel_name="no-such-kernel")
    with pytest.raises(GatewayError, match="no kernelspec named 'no-such-kernel'.*python3"):
        await asyncio.wait_for(executor.start(), 20)


async def test_unreachable_gateway(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        executor = CodeExecutor(kernel_gateway_url=f"http://127.0.0.1:{port}", working_dir=tmp_path)
        with pytest.raises(GatewayError, match=f"Cannot reach the kernel gateway at http://127.0.0.1:{port}"):
            await asyncio.wait_for(executor.start(), 20)


def test_gateway_host_and_port_name_the_gateway() -> None:
    assert resolve_gateway_url(None, "localhost", None) is None
    assert resolve_gateway_url(None, "gw.example", 8888) == "http://gw.example:8888"
    assert resolve_gateway_url("http://gw.example:8888/", "gw.example", 8888) == "http://gw.example:8888/"
    with pytest.raises(ValueError, match="kernel_gateway_port"):
        resolve_gateway_url(None, "gw.example", None)
    with pytest.raises(ValueError, match="different"):
        resolve_gateway_url("http://a:1", "b", 2)
    with pytest.raises(ValueError, match="sandbox"):
        CodeExecutor(kernel_gateway_url="http://a:1", sandbox=True)
    with pytest.raises(ValueError, match="http"):
        CodeExecutor(kernel_gateway_url="a:1")


# --- the MCP server and CLI -------------------------------------------------------------------------


async def test_mcp_server_over_http_gives_each_session_a_gateway_kernel(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    from mcp.types import CallToolResult
    from mcp_server.conftest import IPYBOX_COMMAND, http_session, server_env, sigterm_survivors, text_of
    from servers.launch import free_port, wait_for_port

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    port = free_port()
    extra = {"IPYBOX_KERNEL_GATEWAY_TOKEN": gateway.token}
    if gateway.kind is ENTERPRISE_GATEWAY:
        extra["KERNEL_ENV_KERNEL_USERNAME"] = EG_ENV["KERNEL_USERNAME"]
    log_file = tmp_path / "ipybox.log"
    with log_file.open("w") as log:
        process = subprocess.Popen(  # noqa: ASYNC220 - started once, then awaited by polling
            [*IPYBOX_COMMAND, "--workspace", str(workspace), "--kernel-gateway", gateway.url]
            + ["--transport", "streamable-http", "--host", "127.0.0.1", "--port", str(port), "--no-auth"],
            env=server_env(tmp_path / "state", **extra),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        assert wait_for_port(process, port, 30) is None, log_file.read_text()
        url = f"http://127.0.0.1:{port}/mcp"
        before = set(_kernels(gateway))

        async def client(value: int) -> str:
            async with http_session(url) as session:
                code = f"x = {value}\nimport ipybox\nprint(x, 'ipybox-kernel-' in ipybox.__file__)"
                result = await session.call_tool("execute_ipython_cell", {"code": code})
                assert isinstance(result, CallToolResult) and not result.is_error, text_of(result)
                return text_of(result)

        assert sorted(await asyncio.gather(client(1), client(2))) == ["1 True", "2 True"]
        assert not sigterm_survivors(process)
        assert set(_kernels(gateway)) <= before  # every session's kernel was shut down
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_download_refuses_paths_a_lying_kernel_reports(executor: CodeExecutor, tmp_path: Path) -> None:
    """Kernel code replaces the helper that lists a directory, to make the host write elsewhere."""
    escape = tmp_path / "escaped.txt"
    await executor.execute(
        "import json, os, ipybox.kernel_mgr.kernel_files as kf\n"
        "os.makedirs('lying', exist_ok=True)\n"
        f"kf.describe = lambda path: print(json.dumps({{'type': 'dir', 'path': path, 'dirs': [], "
        f"'files': [['../escaped.txt', 3], [{str(escape)!r}, 3]]}}))"
    )
    with pytest.raises(PermissionError, match="outside the download target"):
        await executor.download("lying", tmp_path / "target")
    assert not escape.exists()


async def test_a_kernel_image_without_pydantic_is_told_what_to_add(
    gateway: GatewayProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = gateway.add_kernelspec("python3-without-pydantic", hide=("pydantic",))
    with caplog.at_level(logging.WARNING, logger="ipybox"):
        async with _executor(gateway, tmp_path, kernel_name=name, spare_kernel=False) as executor:
            assert (await executor.execute("print(1 + 1)")).text == "2"  # code without tools runs
            with pytest.raises(CodeExecutionError, match=r"lacks pydantic.*pip install 'pydantic"):
                await executor.execute("import ipybox.mcp_apigen.runtime")
    assert "lacks pydantic" in caplog.text and name in caplog.text


@pytest.mark.parametrize(
    ("sdk", "cli"),
    [
        ({"sandbox": True}, ["--sandbox"]),
        ({"limits": ResourceLimits(memory=1 << 30)}, ["--memory-limit", "1G"]),
        ({"limits": ResourceLimits(processes=64)}, ["--process-limit", "64"]),
    ],
    ids=["sandbox", "memory", "processes"],
)
def test_sdk_and_cli_refuse_local_options_for_a_gateway_in_the_same_words(
    sdk: dict[str, object], cli: list[str], tmp_path: Path
) -> None:
    with pytest.raises(ValueError) as refused:
        CodeExecutor(kernel_gateway_url="http://gw.example:8888", **sdk)  # type: ignore[arg-type]
    argv = ["--workspace", str(tmp_path), "--kernel-gateway", "http://gw.example:8888", *cli]
    done = subprocess.run(
        [sys.executable, "-c", "from ipybox.cli.main import main; main()", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    problem = done.stderr.strip().splitlines()[-1].removeprefix("ipybox: ")
    assert str(refused.value).lower() == problem.lower() and "local kernels" in problem


def test_the_modules_sent_to_remote_kernels_import_only_each_other() -> None:
    """A kernel on a gateway has no ipybox: what the sent modules import of ipybox must be sent too."""
    import ast

    import ipybox
    from ipybox.kernel_mgr.gateway import KERNEL_MODULES

    package = Path(ipybox.__file__).parent
    imported: set[str] = set()
    for rel in KERNEL_MODULES:
        for node in ast.walk(ast.parse((package / rel).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ipybox."):
                imported.add(node.module or "")
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("ipybox.")}
    needed = {name.removeprefix("ipybox.").replace(".", "/") + ".py" for name in imported}
    assert needed <= set(KERNEL_MODULES), sorted(needed - set(KERNEL_MODULES))


async def test_mcp_server_resumes_a_gateway_kernel_from_its_notebook(
    own_gateway: GatewayProcess, tmp_path: Path
) -> None:
    """`ipybox --resume` rebuilds a gateway kernel as it does a local one: from the workspace's notebook."""
    from mcp_server.conftest import open_ipybox

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    args = ["--kernel-gateway", own_gateway.url, "--approval", "auto"]
    env = {"IPYBOX_KERNEL_GATEWAY_TOKEN": own_gateway.token}
    async with open_ipybox(workspace, tmp_path / "state", args=args, env=env) as box:
        await box.output("x = 41")
        await box.output("y = x + 1")
    assert (workspace / ".ipybox" / "notebooks" / "default.ipynb").is_file()
    async with open_ipybox(workspace, tmp_path / "state", args=[*args, "--resume"], env=env) as box:
        resumed = await box.output("print(y)")
    assert resumed.endswith("42") and "2 cells ran again" in resumed, resumed
