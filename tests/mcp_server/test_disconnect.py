"""A client over streamable HTTP that disappears mid-cell (killed: no cancel notification, no session
DELETE) interrupts its cell in both protocol eras; the kernel keeps its state and is free at once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers.launch import REPO

from .conftest import running_http_ipybox
from .test_clients import MODES, connect, output

pytestmark = pytest.mark.timeout(90)

DROPPED_CLIENT = REPO / "tests" / "servers" / "dropped_client.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("disconnect")
    (base / "ws").mkdir()
    with running_http_ipybox(base / "ws", base / "state", base / "log") as (_, url):
        yield url


@pytest.mark.parametrize("mode", MODES)
async def test_killed_client_interrupts_its_cell(server: str, mode: str, tmp_path: Path) -> None:
    marker = tmp_path / "slept-through"
    kernel = f"dropped-{mode}"
    code = "\n".join(
        [
            "import time, pathlib",
            "x = 1",
            "print('started')",
            "time.sleep(60)",
            f"pathlib.Path({str(marker)!r}).touch()",
        ]
    )
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DROPPED_CLIENT),
        server,
        mode,
        kernel,
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    async with connect(server, None, mode) as again:  # another client of the same principal
        try:
            assert client.stdout is not None
            line = await asyncio.wait_for(client.stdout.readline(), 30)
            assert line == b"started\n", line + await client.stdout.read()  # the cell runs, x is set
            queued = asyncio.create_task(output(again, "print(x)", kernel=kernel))
            await asyncio.sleep(1)
            assert not queued.done()  # waits behind the sleeping cell
        finally:
            client.kill()
            await client.wait()
        # the queued cell runs once the vanished client's one is interrupted, and is not itself
        assert await queued == "1"
    assert not marker.exists(), "the cell slept on after its client was gone"
