"""Resource limits and the audit trail of the MCP server, set from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import EVERYTHING, ipybox_processes, open_ipybox, requires_node, text_of

pytestmark = pytest.mark.timeout(120)


async def test_memory_bomb_gets_memory_error_and_kernel_survives(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir, args=["--memory-limit", "1G"]) as box:
        await box.output("kept = 41")
        bomb = await box.run("hog = bytearray(2 * 1024**3)")
        after = await box.output("print(kept + 1)")
    assert bomb.is_error and "MemoryError" in text_of(bomb)
    assert after == "42"


async def test_fork_bomb_is_contained(workspace: Path, state_dir: Path) -> None:
    code = (
        "import os, time, signal\n"
        "children = []\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        children.append(pid)\n"
        "except OSError as e:\n"
        "    print('stopped:', e.strerror)\n"
        "print(len(children))\n"
        "for pid in children:\n"
        "    os.kill(pid, signal.SIGKILL)\n"
        "    os.waitpid(pid, 0)\n"
    )
    async with open_ipybox(workspace, state_dir, args=["--process-limit", "40"]) as box:
        out = await box.output(code, timeout=60)
        alive = await box.output("print('alive')")
    lines = out.splitlines()
    assert lines[0].startswith("stopped:")
    assert int(lines[-1]) < 40
    assert alive == "alive"


async def test_output_flood_is_cut_and_host_memory_stays_bounded(workspace: Path, state_dir: Path) -> None:
    flood = "import sys\nfor _ in range(200):\n    sys.stdout.write('y' * 1_000_000)\nprint()\nprint('end')"
    async with open_ipybox(workspace, state_dir) as box:
        server = ipybox_processes(workspace)[0]  # the server itself comes first
        result = await box.run(flood, max_output_chars=2000, timeout=120)
        rss = server.memory_info().rss
        alive = await box.output("print('alive')")
    text = text_of(result)
    assert not result.is_error
    assert "characters" in text and text.rstrip().endswith("end")
    assert len(text) < 5000
    assert rss < 600 * 1024**2  # 200 MB printed; the server keeps at most the output limit
    assert alive == "alive"


@requires_node
async def test_audit_log_records_tool_calls_in_the_workspace(workspace: Path, state_dir: Path) -> None:
    (workspace / ".env").write_text("API_KEY=do-not-log-me-123\n")
    params = dict(EVERYTHING) | {"env": {"API_KEY": "${API_KEY}"}}
    async with open_ipybox(workspace, state_dir) as box:
        await box.register("everything", params)
        await box.output("from mcptools.everything import echo\nprint(echo.run(echo.Params(message='hi')))")
    log = workspace / ".ipybox" / "audit.jsonl"
    [entry] = [json.loads(line) for line in log.read_text().splitlines()]
    assert (entry["server"], entry["tool"], entry["decision"], entry["outcome"]) == (
        "everything",
        "echo",
        "auto",
        "ok",
    )
    assert "do-not-log-me-123" not in log.read_text()
