"""Real workloads (headless Chromium) and resource limits in a sandboxed kernel."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import internals
import pytest
from internals import kernel_pid
from servers.launch import chromium_dump_dom, require_cgroups, require_chromium

from ipybox import CodeExecutionError, CodeExecutor, ResourceLimits

from .conftest import run

pytestmark = [pytest.mark.usefixtures("srt_available"), pytest.mark.timeout(120)]

PAGE = (
    '<html><body><p id="x">static</p>'
    '<script>document.getElementById("x").textContent = "rendered by " + "js"</script></body></html>'
)
RENDERED = '<p id="x">rendered by js</p>'
#: Serves the working directory on 127.0.0.1 inside the sandbox (its own network namespace).
SERVE = (
    "import http.server, threading\n"
    "class Quiet(http.server.SimpleHTTPRequestHandler):\n"
    "    def log_message(self, *args): pass\n"
    "server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Quiet)\n"
    "threading.Thread(target=server.serve_forever, daemon=True).start()\n"
    "print(server.server_address[1])"
)


async def test_headless_chromium_renders_pages_in_the_sandbox(
    executor: CodeExecutor, workspace: Path
) -> None:
    require_chromium()
    (workspace / "page.html").write_text(PAGE)
    text = await run(executor, chromium_dump_dom(f"file://{workspace}/page.html", "profile"), timeout=90)
    assert text.splitlines()[0] == "0" and RENDERED in text, text
    port = await run(executor, SERVE)
    text = await run(executor, chromium_dump_dom(f"http://127.0.0.1:{port}/page.html", "profile"), timeout=90)
    assert text.splitlines()[0] == "0" and RENDERED in text, text
    # the sandbox still holds: Chromium cannot write outside the workspace
    await run(executor, chromium_dump_dom(f"file://{workspace}/page.html", "/etc/ipybox-profile"), timeout=90)
    assert not Path("/etc/ipybox-profile").exists()


async def test_memory_limit_holds_for_a_sandboxed_kernel(workspace: Path) -> None:
    require_cgroups()
    limits = ResourceLimits(memory=1 << 30, processes=256)
    async with CodeExecutor(
        sandbox=True, working_dir=workspace, limits=limits, spare_kernel=False
    ) as executor:
        cgroup = internals.kernel(executor)._cgroup
        assert cgroup is not None
        # srt, its helpers and the kernel inside: the whole tree is in the kernel's cgroup
        procs = {int(pid) for path in cgroup.procs_files for pid in path.read_text().split()}
        assert kernel_pid(executor) in procs and len(procs) >= 3
        await run(executor, "import subprocess, sys\nkept = 1")
        text = await run(
            executor, "print(subprocess.run([sys.executable, '-c', 'x = bytearray(2 << 30)']).returncode)"
        )
        assert text.splitlines()[0] == "-9" and "memory limit of 1.0 GiB" in text
        assert await run(executor, "print(kept)") == "1"
        with pytest.raises(
            CodeExecutionError, match=r"killed: the kernel's memory limit of 1\.0 GiB was reached"
        ):
            await run(executor, "hog = bytearray(2 << 30)")
        assert await run(executor, "print('alive')") == "alive"
        dirs = [path for _, path in cgroup.dirs.values()]
    assert not any(path.exists() for path in dirs)


async def test_numpy_and_matplotlib_work_without_warnings(executor: CodeExecutor, workspace: Path) -> None:
    """The first plot writes matplotlib's cache into the kernel's private dir: no warning that
    the config dir is not writable."""
    text = await run(
        executor,
        "import numpy as np, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot(np.arange(10) ** 2)\nplt.savefig('plot.png')\nimport tempfile\n"
        "print(matplotlib.get_cachedir(), tempfile.gettempdir())",
        timeout=90,
    )
    assert len(text.splitlines()) == 1, text  # no warning lines
    cache, tmp = text.split()
    assert "/kernels/" in cache and "/kernels/" in tmp  # the kernel's private dir
    assert (workspace / "plot.png").stat().st_size > 1000


async def test_pip_runs_as_on_the_host(executor: CodeExecutor) -> None:
    """`!pip --version` and `!pip list` read the Python environment they belong to."""
    pip = shutil.which("pip")
    if pip is None:
        pytest.skip("no pip on PATH")
    assert await run(executor, f"!{pip} --version") == _version(pip)
    listed = await run(executor, f"!{pip} list 2>&1 | head -3")
    assert listed.startswith("Package"), listed


def _version(program: str) -> str:
    return subprocess.run([program, "--version"], capture_output=True, text=True, check=True).stdout.strip()
