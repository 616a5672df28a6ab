"""Resource limits: off by default, so real workloads run; when set, enforced on the kernel's whole
process tree with cgroups (or, where there are none, with rlimits and a warning)."""

from __future__ import annotations

import http.server
import importlib
import logging
import os
import resource
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import internals
import psutil
import pytest
from internals import kernel_pid, kernels
from servers.launch import chromium_dump_dom, eventually, require_cgroups, require_chromium

from ipybox import CodeExecutionError, CodeExecutor
from ipybox.kernel_mgr import cgroup as cgroup_module
from ipybox.kernel_mgr.cgroup import KernelCgroup, fallback
from ipybox.kernel_mgr.limits import ResourceLimits, format_size

pytestmark = pytest.mark.timeout(120)

GIB = 1 << 30
#: Reserves 64 GiB of address space without using it, as Chromium, CUDA and JAX do.
RESERVE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
size = 64 << 30
address = libc.mmap(None, size, 0, 0x02 | 0x20 | 0x4000, -1, 0)  # PROT_NONE; PRIVATE|ANONYMOUS|NORESERVE
if address in (None, ctypes.c_void_p(-1).value):
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
libc.munmap(address, size)
print(size >> 30)
"""
#: A page whose text only a browser running its script shows.
PAGE = (
    b'<html><body><p id="x">static</p>'
    b'<script>document.getElementById("x").textContent = "rendered by " + "js"</script></body></html>'
)


def _kernel_pid(executor: CodeExecutor) -> int | None:
    return kernel_pid(executor)


def _cgroup_dirs(executor: CodeExecutor) -> list[Path]:
    cgroup = internals.kernel(executor)._cgroup
    assert cgroup is not None
    return [path for _, path in cgroup.dirs.values()]


@pytest.fixture
def page_url() -> Iterator[str]:
    """`PAGE`, served over HTTP on 127.0.0.1 by a thread of the test process."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    finally:
        server.shutdown()
        server.server_close()


# --- defaults ------------------------------------------------------------------------------------


def test_memory_and_process_limits_are_off_by_default() -> None:
    assert ResourceLimits() == ResourceLimits(memory=None, processes=None, output=10_000_000)
    args = importlib.import_module("ipybox.cli.main").parser().parse_args([])
    assert (args.memory_limit, args.process_limit) == (None, None)
    assert fallback(ResourceLimits(), None) == ([], None)


def test_format_size() -> None:
    assert format_size(GIB) == "1.0 GiB"
    assert format_size(3 * GIB // 2) == "1.5 GiB"
    assert format_size(512 << 20) == "512.0 MiB"
    assert format_size(1000) == "1000 bytes"


async def test_default_kernel_has_no_rlimits_and_reserves_64_gib(tmp_path: Path) -> None:
    own = [resource.getrlimit(kind) for kind in (resource.RLIMIT_AS, resource.RLIMIT_NPROC)]
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        assert internals.kernel(executor)._cgroup is None
        code = "import resource as r\nprint([r.getrlimit(k) for k in (r.RLIMIT_AS, r.RLIMIT_NPROC)])"
        assert (await executor.execute(code)).text == str(own)  # the kernel inherits ours; ipybox sets none
        assert (await executor.execute(RESERVE)).text == "64"


@pytest.mark.parametrize("memory", [None, 2 * GIB], ids=["default", "memory-limit"])
async def test_headless_chromium_renders_a_page(tmp_path: Path, page_url: str, memory: int | None) -> None:
    require_chromium()
    if memory is not None:
        require_cgroups()
    async with CodeExecutor(
        working_dir=tmp_path, limits=ResourceLimits(memory=memory), spare_kernel=False
    ) as ex:
        text = (
            await ex.execute(chromium_dump_dom(page_url, str(tmp_path / "profile")), timeout=90)
        ).text or ""
    assert text.splitlines()[0] == "0", text
    assert '<p id="x">rendered by js</p>' in text


# --- limits set, enforced with cgroups -------------------------------------------------------------


async def test_memory_bomb_in_the_kernel_is_killed_naming_the_limit(tmp_path: Path) -> None:
    require_cgroups()
    async with CodeExecutor(working_dir=tmp_path, limits=ResourceLimits(memory=GIB)) as executor:
        await executor.execute("kept = 41")
        pid = _kernel_pid(executor)
        assert (await executor.execute(RESERVE)).text == "64"  # address space is not memory
        with pytest.raises(
            CodeExecutionError, match=r"killed: the kernel's memory limit of 1\.0 GiB was reached"
        ):
            await executor.execute("hog = bytearray(2 << 30)")
        assert (await executor.execute("print('kept' in globals(), 41 + 1)")).text == "False 42"
        assert _kernel_pid(executor) != pid
        with pytest.raises(CodeExecutionError, match=r"memory limit of 1\.0 GiB"):  # growing in 64 MiB steps
            await executor.execute("hog = [bytearray(64 << 20) for _ in range(64)]")
        assert (await executor.execute("print('alive')")).text == "alive"
    assert psutil.virtual_memory().available > GIB  # the host is fine


async def test_memory_bomb_in_a_child_is_killed_and_the_kernel_lives_on(tmp_path: Path) -> None:
    require_cgroups()
    async with CodeExecutor(
        working_dir=tmp_path, limits=ResourceLimits(memory=GIB), spare_kernel=False
    ) as executor:
        await executor.execute("kept = 41\nimport subprocess, sys")
        pid = _kernel_pid(executor)
        result = await executor.execute(
            "print(subprocess.run([sys.executable, '-c', 'x = bytearray(2 << 30)']).returncode)"
        )
        lines = (result.text or "").splitlines()
        assert lines[0] == "-9"
        assert (
            "[ipybox] A process of this kernel was killed (SIGKILL): the kernel's memory limit of 1.0 GiB"
            in lines[-1]
        )
        # a child touching 2 GiB page by page, and failing the cell: the note goes with the error
        touch = "import mmap\\nm = mmap.mmap(-1, 2 << 30)\\nfor i in range(0, 2 << 30, 4096): m[i] = 1"
        with pytest.raises(CodeExecutionError, match=r"(?s)SIGKILL.*memory limit of 1\.0 GiB was reached"):
            await executor.execute(f"subprocess.run([sys.executable, '-c', '{touch}'], check=True)")
        assert (await executor.execute("print(kept + 1)")).text == "42"
        assert _kernel_pid(executor) == pid


async def test_fork_bomb_is_contained_and_its_processes_end_with_the_kernel(tmp_path: Path) -> None:
    require_cgroups()
    marker = f"ipybox-fork-bomb-{os.urandom(4).hex()}"
    bomb = (  # leaves the kernel's process group: only the cgroup holds it
        f"import os, time  # {marker}\n"
        "os.setsid()\n"
        "failed = 0\n"
        "while failed < 3:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            failed = 0\n"
        "    except OSError:\n"
        "        failed += 1\n"
        "        time.sleep(0.05)\n"
        "time.sleep(300)\n"
    )

    def bombs() -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["cmdline"]):
            if marker in " ".join(process.info["cmdline"] or []):
                found.append(process)
        return found

    limits = ResourceLimits(processes=64)
    async with CodeExecutor(working_dir=tmp_path, limits=limits, spare_kernel=False) as executor:
        await executor.execute(f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {bomb!r}])")
        counts: list[int] = []

        def settled() -> bool:
            counts.append(len(bombs()))
            return len(counts) > 20 and counts[-1] == counts[-20] > 0

        assert await eventually(settled, timeout=30, interval=0.1), counts
        assert counts[-1] < 64
        with pytest.raises(CodeExecutionError, match="Resource temporarily unavailable"):
            await executor.execute("subprocess.run(['true'])")
        assert (await executor.execute("print('alive')")).text == "alive"
        dirs = _cgroup_dirs(executor)
    assert await eventually(lambda: not bombs()), [p.pid for p in bombs()]
    assert not any(path.exists() for path in dirs)


async def test_cgroups_of_gone_kernels_are_removed(tmp_path: Path) -> None:
    require_cgroups()
    gone = int(subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout)  # noqa: ASYNC221
    async with CodeExecutor(
        working_dir=tmp_path, limits=ResourceLimits(memory=GIB, processes=100), spare_kernel=False
    ) as executor:
        dirs = _cgroup_dirs(executor)
        assert all(path.name.startswith(f"ipybox-{os.getpid()}-") for path in dirs)
        # the cgroups a killed ipybox (gone pid) left, with a process that escaped its kernel
        orphans = [path.parent / f"ipybox-{gone}-0123abcd" for path in dirs]
        for path in orphans:
            path.mkdir()
        join = " ".join(f"echo $$ > {path}/cgroup.procs &&" for path in orphans)
        straggler = subprocess.Popen(["sh", "-c", f"{join} exec sleep 300"])  # noqa: ASYNC220
        assert await eventually(
            lambda: str(straggler.pid) in (orphans[0] / "cgroup.procs").read_text().split()
        )
        await executor.reset()  # starting a kernel cleans up
        assert await eventually(lambda: straggler.poll() is not None)
        assert not any(path.exists() for path in orphans)
        current = _cgroup_dirs(executor)
        assert await eventually(lambda: not any(path.exists() for path in dirs))  # the retired kernel's
    assert not any(path.exists() for path in current)  # and those of the kernels running at stop


# --- limits set, no cgroup available --------------------------------------------------------------


async def test_without_cgroups_limits_fall_back_to_rlimits_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cgroup_module, "CGROUP_ROOT", tmp_path / "no-cgroups")
    limits = ResourceLimits(memory=3 * GIB // 2, processes=10_000)
    assert KernelCgroup.create(limits) is None
    caplog.set_level(logging.WARNING, logger="ipybox")
    async with CodeExecutor(working_dir=tmp_path, limits=limits) as executor:
        await kernels(executor).spare_ready()  # a second kernel: still one warning
        await executor.execute("kept = 41")
        with pytest.raises(CodeExecutionError, match="MemoryError"):
            await executor.execute("hog = bytearray(2 << 30)")
        assert (await executor.execute("print(kept + 1)")).text == "42"
        with pytest.raises(CodeExecutionError, match="Cannot allocate memory"):  # RLIMIT_AS's known cost
            await executor.execute(RESERVE)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "memory limit of 1.5 GiB is applied as RLIMIT_AS" in warnings[0]
    assert "process limit of 10000 is applied as RLIMIT_NPROC" in warnings[0]
