"""The MCP server's log lines (its stderr: the terminal of whoever runs `ipybox` there, a client's
log window) quote kernel text as data: a resumed cell's error, which the kernel writes, is shown
with its escape sequences and controls as escapes."""

from __future__ import annotations

from pathlib import Path

import pytest
from servers.hostile_args import assert_shown_safely

from .conftest import open_ipybox

pytestmark = pytest.mark.timeout(90)

#: Variants a terminal acts on, on one line (the resume quotes the error's last): colour in the colon
#: form, clipboard (OSC 52 ended by ST), 8-bit CSI (all three stripped as the kernel's output is),
#: bidirectional override, backspaces.
HOSTILE = "\x1b[38:5:16m\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\\x9b2J\u202egnp.exe\x08\x08\x08txt"
#: A cell that succeeds when recorded and fails with the hostile message once the flag exists.
DIVERGES = f"import os\nif os.path.exists('flag'):\n    raise RuntimeError({HOSTILE!r})\nprint('ok')"


async def test_a_resumed_cells_error_is_logged_as_data(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        assert await box.output(DIVERGES) == "ok"
        await box.output("open('flag', 'w').close()")
    async with open_ipybox(workspace, state_dir, args=["--resume"]) as box:
        notice = await box.output("print('after')")
        log = box.stderr()

    assert "resumed from" in notice and "only in part" in notice, notice
    assert "\x1b" not in notice and "(RuntimeError: \\u202egnp.exe" in notice, notice  # the reply too
    [line] = [line for line in log.splitlines() if "resuming kernel" in line]
    assert_shown_safely(log, lines=True)
    # the escape sequences were stripped from the cell's output; what acts besides is escaped
    assert "failed this time (RuntimeError: \\u202egnp.exe\\u0008\\u0008\\u0008txt)" in line, line
