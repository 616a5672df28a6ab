"""A sandboxed kernel cannot reach the terminal of the person who approves its tool calls: it
could otherwise draw over a prompt while it waits (or read the answer typed there), past every
escape ipybox applies to what it shows. The host holds a real pseudo-terminal open here, as an
application run in a terminal does; an unsandboxed kernel (the user's own process) finds and
opens it, which shows the probe can tell."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ipybox import CodeExecutor

pytestmark = pytest.mark.timeout(120)

#: Every terminal device the kernel can name (its own /dev, the descriptors /proc shows) that it
#: could open for writing, and whether /dev/tty (a controlling terminal) opens.
PROBE = r"""
import glob, os
names = set(glob.glob("/dev/pts/[0-9]*"))
for fd in glob.glob("/proc/*/fd/*"):
    try:
        target = os.readlink(fd)
    except OSError:
        continue
    if target.startswith(("/dev/pts/", "/dev/tty", "/dev/console")):
        names.add(target)
opened = []
for name in sorted(names | {"/dev/tty", "/dev/console"}):
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK))
        opened.append(name)
    except OSError:
        pass
print(opened)
"""


async def test_a_sandboxed_kernel_cannot_open_the_hosts_terminal(
    srt_available: None, workspace: Path
) -> None:
    primary, secondary = os.openpty()
    terminal = os.ttyname(secondary)
    try:
        async with CodeExecutor(working_dir=workspace, spare_kernel=False) as executor:
            unsandboxed = (await executor.execute(PROBE)).text
        async with CodeExecutor(working_dir=workspace, sandbox=True, spare_kernel=False) as executor:
            sandboxed = (await executor.execute(PROBE)).text
    finally:
        os.close(secondary)
        os.close(primary)
    assert terminal in (unsandboxed or ""), unsandboxed  # the probe finds a terminal it can reach
    assert sandboxed == "[]", sandboxed
