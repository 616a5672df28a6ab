"""An MCP client cancelling a running execute_ipython_cell (notifications/cancelled) interrupts the
cell at once and keeps the kernel's state."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from .conftest import raw_ipybox


@pytest.mark.timeout(60)
async def test_cancelled_cell_is_interrupted_and_state_kept(workspace: Path, state_dir: Path) -> None:
    async with raw_ipybox(workspace, state_dir) as raw:
        assert "result" in await raw.request(
            "tools/call", {"name": "execute_ipython_cell", "arguments": {"code": "kept = 'still here'"}}
        )
        long_cell = {"code": "import time\nfor _ in range(3000): time.sleep(0.01)\nprint('finished')"}
        await raw.notify("tools/call", {"name": "execute_ipython_cell", "arguments": long_cell}, id=100)
        await asyncio.sleep(1.5)
        cancelled_at = time.monotonic()
        await raw.notify("notifications/cancelled", {"requestId": 100, "reason": "user pressed stop"})
        result = await raw.call("execute_ipython_cell", {"code": "print(kept)"})
        waited = time.monotonic() - cancelled_at
    assert result["content"][0]["text"] == "still here"
    assert waited < 10, f"the next cell waited {waited:.1f}s: the cancelled one was not interrupted"
    assert not any(m.get("id") == 100 and "result" in m for m in raw.received)  # no answer to it
