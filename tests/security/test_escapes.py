"""Nothing a kernel starts outlives `stop()` or `reset()`, even a process that left the kernel's
process group and session (no cgroup here: the executor has no limits)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from ipybox import CodeExecutor

pytestmark = pytest.mark.timeout(120)

SLEEPER = "sh -c 'echo $$ > {pidfile}; exec sleep 300'"

#: Ways kernel code starts a process that leaves its process group; each writes the pid to {pidfile}.
ROUTES = {
    "!nohup setsid -f": f"!nohup setsid -f {SLEEPER} > /dev/null 2>&1",
    "double fork": """
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open({pidfile!r}, "w").write(str(os.getpid()))
        os.execvp("sleep", ["sleep", "300"])
    os._exit(0)
""",
    "Popen new session": (
        "import subprocess\nsubprocess.Popen(['sh', '-c', 'echo $$ > {pidfile}; exec sleep 300'], "
        "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"
    ),
}

WAIT_FOR_PID = (
    "import os, time\nwhile not (os.path.exists({pidfile!r}) and open({pidfile!r}).read().strip()):\n"
    "    time.sleep(0.01)"
)


@pytest.mark.parametrize("ending", ["stop", "reset"])
@pytest.mark.parametrize("route", list(ROUTES))
async def test_escaped_processes_end_with_the_kernel(tmp_path: Path, route: str, ending: str) -> None:
    pidfile = str(tmp_path / "pid")
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        await executor.execute(ROUTES[route].format(pidfile=pidfile))
        await executor.execute(WAIT_FOR_PID.format(pidfile=pidfile))
        escaped = psutil.Process(int(Path(pidfile).read_text()))
        assert escaped.is_running() and escaped.status() != psutil.STATUS_ZOMBIE
        if ending == "reset":
            await executor.reset()
            assert (await executor.execute("print('fresh')")).text == "fresh"
    assert not running(escaped), f"{route}: pid {escaped.pid} outlived {ending}()"


def running(process: psutil.Process) -> bool:
    """Whether it still runs (a killed process stays a zombie until init reaps it)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
