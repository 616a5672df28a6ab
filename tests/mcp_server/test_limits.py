"""Resource limits and the audit trail of the MCP server, set from the command line."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from servers.launch import require_cgroups

from ipybox import ResourceLimits
from ipybox.mcp_server import ServerOptions

from .conftest import (
    EVERYTHING,
    TRUNCATION_MARKER,
    images_of,
    ipybox_processes,
    open_ipybox,
    requires_node,
    text_of,
)

pytestmark = pytest.mark.timeout(120)


async def test_memory_bomb_is_killed_at_limit_and_next_call_works(workspace: Path, state_dir: Path) -> None:
    require_cgroups()
    async with open_ipybox(workspace, state_dir, args=["--memory-limit", "1G"]) as box:
        await box.output("kept = 41")
        bomb = await box.run("hog = bytearray(2 * 1024**3)")
        after = await box.output("print('kept' in globals(), 41 + 1)")
    assert bomb.is_error and "memory limit of 1.0 GiB was reached" in text_of(bomb)
    assert after == "False 42"  # a fresh kernel


async def test_fork_bomb_is_contained(workspace: Path, state_dir: Path) -> None:
    require_cgroups()
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
    # the spill holds what the output limit kept, and the marker says so rather than "full output"
    assert (marker := TRUNCATION_MARKER.search(text)) and "as kept" in marker.group(0), text
    assert len(text) < 5000
    assert rss < 600 * 1024**2  # 200 MB printed; the server keeps at most the output limit
    assert alive == "alive"


def test_host_limits_have_the_same_defaults_on_the_command_line() -> None:
    args = importlib.import_module("ipybox.cli.main").parser().parse_args([])
    limits, options = ResourceLimits(), ServerOptions(Path("."))
    assert (args.max_images, args.max_image_bytes) == (limits.images, limits.image_bytes)
    assert args.max_message_bytes == limits.message_bytes
    assert (args.max_tool_connections, args.max_tool_buffer) == (limits.tool_connections, limits.tool_buffer)
    assert (args.max_spilled_outputs, args.max_spilled_bytes) == (
        options.spilled_outputs,
        options.spilled_bytes,
    )
    args = importlib.import_module("ipybox.cli.main").parser().parse_args(["--max-images", "none"])
    assert args.max_images is None


async def test_images_and_spilled_outputs_are_kept_up_to_their_limits(
    workspace: Path, state_dir: Path
) -> None:
    show = (
        "import base64, os\nfrom IPython.display import display\nprint('shown')\nfor _ in range(5):\n"
        "    display({'image/png': base64.b64encode(b'\\x89PNG' + os.urandom(1000)).decode()}, raw=True)"
    )
    args = ["--max-images", "3", "--max-spilled-outputs", "2"]
    async with open_ipybox(workspace, state_dir, args=args) as box:
        shown = await box.run(show)
        spilled = [await box.output(f"print('{i}' * 100)", max_output_chars=10) for i in range(4)]
    assert not shown.is_error and len(images_of(shown)) == 3
    text = text_of(shown)
    assert text.startswith("shown\n[ipybox] 2 of the 5 images this execution displayed were dropped")
    assert "at most 3 images (ResourceLimits.images, ipybox --max-images)" in text
    assert text.count("[image saved to ") == 3
    paths = [Path(match.group(3)) for out in spilled if (match := TRUNCATION_MARKER.search(out))]
    assert len(paths) == 4
    assert sorted((workspace / ".ipybox" / "outputs").iterdir()) == sorted(paths[2:])  # the newest two
    assert paths[3].read_text() == "3" * 100


@requires_node
async def test_audit_log_records_tool_calls_in_the_workspace(workspace: Path, state_dir: Path) -> None:
    secret = "do-not-log-me-123"
    (workspace / ".env").write_text(f"API_KEY={secret}\n")
    params = dict(EVERYTHING) | {"env": {"API_KEY": "${API_KEY}"}}
    code = (
        "from mcptools.everything import echo, get_env\n"
        "env = get_env.run(get_env.Params())\n"
        "print(echo.run(echo.Params(message=env)))"  # the secret travels in a tool argument
    )
    async with open_ipybox(workspace, state_dir) as box:
        await box.register("everything", params)
        echoed = await box.output(code)
    assert secret in echoed  # the kernel did get it through the tools...
    log = workspace / ".ipybox" / "audit.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    entries = [e for e in records if "event" not in e]  # the calls; the approvals are events
    assert [(e["server"], e["tool"], e["decision"], e["outcome"]) for e in entries] == [
        ("everything", "get-env", "accepted", "ok"),
        ("everything", "echo", "accepted", "ok"),
    ]
    approvals = [(e["tool"], e["decision"], e["by"]) for e in records if e.get("event") == "approval"]
    assert approvals == [
        (tool, "accepted", "read-only tool (readOnlyHint)")  # server-everything marks both so
        for tool in ("get-env", "echo")
    ]
    assert "***" in json.dumps(entries[1]["args"])  # ...but the audit trail has it redacted
    assert secret not in log.read_text()
