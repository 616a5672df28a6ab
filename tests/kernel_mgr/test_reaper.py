"""What a kernel starts outside its process group ends with it, without a cgroup: the kernel's
launcher is a child subreaper, and `reaper.kill_escaped` finds the orphans below it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest
from servers.launch import eventually

from ipybox import CodeExecutor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")


def _marked(marker: str) -> list[psutil.Process]:
    """The shells that run `...; : marker` (not the outer shell, whose command holds the marker
    too, nor its forks on their way to `exec`)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if cmdline[:2] == ["sh", "-c"] and cmdline[-1].endswith(f": {marker}"):
            found.append(process)
    return found


@pytest.mark.parametrize(
    "escape",
    [
        "setsid sh -c 'sleep 300; : {marker}' &",  # own session, parent exits: an orphan
        "(setsid sh -c 'sleep 300; : {marker}' &) &",  # double fork
        "setsid nohup sh -c 'trap \"\" HUP TERM; sleep 300; : {marker}' >/dev/null 2>&1 &",
    ],
)
async def test_processes_that_leave_the_group_end_with_the_executor(tmp_path: Path, escape: str) -> None:
    marker = f"ipybox-escape-{os.urandom(4).hex()}"
    command = escape.format(marker=marker)
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        kernel = psutil.Process(int((await executor.execute("import os\nprint(os.getpid())")).text))
        await executor.execute(f"import subprocess\nsubprocess.run(['sh', '-c', {command!r}], check=True)")
        found: list[psutil.Process] = []

        def settled() -> bool:  # the shell, not its fork on the way to `exec sleep`
            found[:] = _marked(marker)
            return len(found) == 1

        assert await eventually(settled)
        [escaped] = found
        assert os.getpgid(escaped.pid) != os.getpgid(kernel.pid), "the test's process did not leave the group"
        # re-parented to the kernel's own process (its launcher, a child subreaper), not to init
        assert escaped.pid in {p.pid for p in kernel.children(recursive=True)}
    assert await eventually(lambda: not [p for p in _marked(marker) if p.status() != psutil.STATUS_ZOMBIE])
