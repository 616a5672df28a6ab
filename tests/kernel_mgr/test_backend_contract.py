"""The same behaviours over every kernel backend: local processes, Kernel Gateway, Enterprise Gateway.

`CodeExecutor` promises them whatever `KernelBackend` it runs on; each gateway is started once for
the module, each test gets a fresh executor (without a spare kernel, to stay quick).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from servers.gateways import (
    ENTERPRISE_GATEWAY,
    KERNEL_GATEWAY,
    GatewayProcess,
    GatewayUnavailable,
    gateway_venv,
)
from servers.launch import unavailable

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutionResult, CodeExecutor
from ipybox.kernel_mgr.gateway import GatewayBackend
from ipybox.kernel_mgr.local import LocalBackend

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=["local", "kernel-gateway", "enterprise-gateway"])
def place(request: pytest.FixtureRequest) -> Iterator[tuple[str, GatewayProcess | None]]:
    if request.param == "local":
        yield "local", None
        return
    kind = KERNEL_GATEWAY if request.param == "kernel-gateway" else ENTERPRISE_GATEWAY
    try:
        venv = gateway_venv(kind)
    except GatewayUnavailable as e:
        unavailable(str(e))
    process = GatewayProcess(kind, venv).start()
    yield request.param, process
    process.close()


@pytest.fixture
async def executor(place: tuple[str, GatewayProcess | None], tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    _, gateway = place
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    if gateway is None:
        backend: LocalBackend | GatewayBackend = LocalBackend()
        env: dict[str, str] = {}
    else:
        backend = GatewayBackend(gateway.url, gateway.token)
        env = {"KERNEL_USERNAME": "ipybox-test"}  # Enterprise Gateway refuses root's kernels
    async with CodeExecutor(
        working_dir=workspace, kernel_env=env, spare_kernel=False, approve_shell_cmds=True, backend=backend
    ) as executor:
        assert executor.backend is backend
        yield executor


async def test_state_output_and_errors(executor: CodeExecutor) -> None:
    assert (await executor.execute("x = 41\nprint('out')")).text == "out"
    assert (await executor.execute("x + 1")).text == "42"
    with pytest.raises(CodeExecutionError, match="ZeroDivisionError") as info:
        await executor.execute("print('before')\n1/0")
    assert info.value.output == "before"


async def test_timeout_interrupts_and_keeps_state(executor: CodeExecutor) -> None:
    await executor.execute("kept = 'yes'")
    with pytest.raises(TimeoutError):
        await executor.execute("import time\ntime.sleep(60)", timeout=1)
    assert (await executor.execute("print(kept)")).text == "yes"


async def test_cancel_ends_the_cell_without_a_result(executor: CodeExecutor) -> None:
    call = executor.execute("import time\ntime.sleep(60)")
    await executor.cancel()
    assert await asyncio.wait_for(call, 60) == CodeExecutionResult(None)
    assert (await executor.execute("print('next')")).text == "next"


async def test_shell_commands_wait_for_approval(executor: CodeExecutor) -> None:
    seen: list[ApprovalRequest] = []
    result = None
    async for item in executor.stream("!echo approved"):
        if isinstance(item, ApprovalRequest):
            seen.append(item)
            await item.accept()
        else:
            result = item
    assert [r.tool_args for r in seen] == [{"cmd": "echo approved"}]
    assert isinstance(result, CodeExecutionResult) and result.text == "approved"


async def test_files_go_in_and_come_back(executor: CodeExecutor, tmp_path: Path) -> None:
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "sub" / "data.bin").write_bytes(bytes(range(256)) * 10)
    await executor.upload(tmp_path / "in", "moved")
    assert (await executor.execute("print(len(open('moved/sub/data.bin', 'rb').read()))")).text == "2560"
    await executor.download("moved", tmp_path / "out")
    assert (tmp_path / "out" / "sub" / "data.bin").read_bytes() == bytes(range(256)) * 10
    with pytest.raises(FileNotFoundError):
        await executor.download("missing", tmp_path / "nothing")


async def test_reset_starts_a_fresh_kernel(executor: CodeExecutor) -> None:
    await executor.execute("gone = 1")
    await executor.reset()
    with pytest.raises(CodeExecutionError, match="NameError"):
        await executor.execute("gone")
