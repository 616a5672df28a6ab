"""`CodeExecutor` against real IPython kernels."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import zlib
from pathlib import Path

import internals
import pytest
from internals import busy, kernel_pid, kernels
from servers.launch import SANDBOX_PATH, child_pids, eventually, pid_alive, require_sandbox

from ipybox import CodeExecutionChunk, CodeExecutionError, CodeExecutionResult, CodeExecutor

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png(width: int = 3, height: int = 2) -> bytes:
    """A small valid RGB PNG, built by hand."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes([255, 0, 0]) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return PNG_MAGIC + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# --- basic execution -----------------------------------------------------------------------------


async def test_execute_returns_text_without_trailing_newline(executor: CodeExecutor) -> None:
    result = await executor.execute("print('hello world')")
    assert result == CodeExecutionResult(text="hello world", images=[])


async def test_execute_multiline_output_keeps_inner_newlines(executor: CodeExecutor) -> None:
    result = await executor.execute("print('a')\nprint()\nprint('b')\nprint()")
    assert result.text == "a\n\nb"


async def test_execute_without_output_returns_none(executor: CodeExecutor) -> None:
    result = await executor.execute("x = 1")
    assert result.text is None
    assert result.images == []


async def test_expression_value_is_returned(executor: CodeExecutor) -> None:
    result = await executor.execute("6 * 7")
    assert result.text == "42"


async def test_state_persists_across_executions(executor: CodeExecutor) -> None:
    await executor.execute("import math\nx = 41\ndef inc(v):\n    return v + 1")
    result = await executor.execute("print(inc(x), math.pi > 3)")
    assert result.text == "42 True"


async def test_top_level_await(executor: CodeExecutor) -> None:
    code = (
        "import asyncio\n"
        "async def f():\n"
        "    await asyncio.sleep(0.01)\n"
        "    return 'awaited'\n"
        "print(await f())"
    )
    result = await executor.execute(code)
    assert result.text == "awaited"


async def test_shell_escape(executor: CodeExecutor) -> None:
    result = await executor.execute("!echo hi")
    assert result.text == "hi"


async def test_stdout_and_stderr_interleaved_in_order(executor: CodeExecutor) -> None:
    code = (
        "import sys\n"
        "for i in range(5):\n"
        "    print(f'out {i}', flush=True)\n"
        "    sys.stderr.write(f'err {i}\\n')\n"
        "    sys.stderr.flush()\n"
    )
    result = await executor.execute(code)
    expected = "\n".join(f"out {i}\nerr {i}" for i in range(5))
    assert result.text == expected


async def test_display_of_dict_returns_text(executor: CodeExecutor) -> None:
    result = await executor.execute("from IPython.display import display\ndisplay({'a': 1})")
    assert result.text == "{'a': 1}"


async def test_object_repr_is_returned(executor: CodeExecutor) -> None:
    code = (
        "class Thing:\n"
        "    def __repr__(self):\n"
        "        return 'Thing(42)'\n"
        "    def _repr_html_(self):\n"
        "        return '<b>42</b>'\n"
        "from IPython.display import display\n"
        "print('before')\n"
        "display(Thing())\n"
        "Thing()"
    )
    result = await executor.execute(code)
    assert result.text == "before\nThing(42)\nThing(42)"


@pytest.mark.timeout(120)
async def test_many_executions_lose_no_output(executor: CodeExecutor) -> None:
    for i in range(1000):
        result = await executor.execute(f"print({i})")
        assert result.text == str(i), f"execution {i} returned {result.text!r}"


#: Kernel code: the thread that forwards fd 1 and 2 to the streams (ipybox's, or ipykernel's
#: watcher) waits 50 ms before each piece it passes on, as on a machine too busy to run it.
SLOW_FORWARDING = """
import os, sys, threading, time

class _SlowForForwarders:
    def __init__(self, lock):
        self._lock = lock

    def __enter__(self):
        name = threading.current_thread().name
        if name.startswith("ipybox-fd") or "_watch_pipe_fd" in name:
            time.sleep(0.05)
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)

for _stream in (sys.stdout, sys.stderr):
    _stream._buffer_lock = _SlowForForwarders(_stream._buffer_lock)
"""


@pytest.mark.timeout(120)
async def test_output_written_to_the_fds_as_a_cell_ends_is_in_that_cell(executor: CodeExecutor) -> None:
    """What C code or a child process writes to fd 1 or 2 reaches the cell it was written in, also
    when the thread that passes it on is slow to: the cell ends once the output has arrived, not
    once the pipe is empty (ipykernel's forwarding then lost it: every line here)."""
    await executor.execute(SLOW_FORWARDING)
    for i in range(5):
        result = await executor.execute(f"os.write(1, b'out {i}\\n'); _ = os.write(2, b'err {i}\\n')")
        assert sorted((result.text or "").splitlines()) == [f"err {i}", f"out {i}"], (i, result.text)
    result = await executor.execute("import subprocess\n_ = subprocess.run(['echo', 'from a child'])")
    assert result.text == "from a child"
    # code that hands the streams' descriptors on (to a child, to faulthandler) gets the pipe
    code = "import faulthandler\nfaulthandler.enable()\n"
    code += "_ = subprocess.run(['echo', 'via fileno'], stdout=sys.stdout)"
    assert (await executor.execute(code)).text == "via fileno"
    # a cell that closes fd 1 ends its forwarding, which then has nothing left to wait for
    code = "import ipybox.kernel_mgr.in_kernel as ik\nos.close(1)\ntime.sleep(0.5)\n"
    code += "print([output.arrived() for output in ik._fd_outputs])"
    assert (await executor.execute(code)).text == "[True, True]"


# --- streaming -----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_stream_chunks_arrive_before_result(executor: CodeExecutor, tmp_path: Path) -> None:
    # The cell prints "chunk 2" only once the test has received "chunk 1" (which it prints
    # without flushing): were chunks batched at the end, the cell would run into its timeout.
    go = tmp_path / "go"
    code = (
        "import pathlib, time\n"
        "print('chunk 1')\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n"
        "    time.sleep(0.01)\n"
        "print('chunk 2')"
    )
    items: list[object] = []
    streamed = ""
    async for item in executor.stream(code, timeout=30, chunks=True):
        items.append(item)
        if isinstance(item, CodeExecutionChunk):
            streamed += item.text
            if "chunk 1" in streamed:
                go.touch()

    *chunks, result = items
    assert isinstance(result, CodeExecutionResult)
    assert result.text == "chunk 1\nchunk 2"
    assert all(isinstance(chunk, CodeExecutionChunk) for chunk in chunks)
    assert streamed == "chunk 1\nchunk 2\n"


async def test_stream_without_chunks_yields_only_result(executor: CodeExecutor) -> None:
    items = [item async for item in executor.stream("print('chunk 1')\nprint('chunk 2')")]
    assert len(items) == 1
    assert isinstance(items[0], CodeExecutionResult)
    assert items[0].text == "chunk 1\nchunk 2"


# --- images --------------------------------------------------------------------------------------


async def test_matplotlib_plot_is_saved_as_png(tmp_path: Path) -> None:
    images_dir = tmp_path / "plots"
    async with CodeExecutor(images_dir=images_dir, working_dir=tmp_path, spare_kernel=False) as executor:
        code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"
        result = await executor.execute(code, timeout=60)
        # the default image limits (ResourceLimits.images, image_bytes) keep a notebook cell's 30
        # plots and a loop's 20 screenshots of 1 MiB each
        plots = await executor.execute("for i in range(30):\n    plt.plot(range(i + 2))\n    plt.show()")
        shots = await executor.execute(
            "import base64, os\nfrom IPython.display import display\nfor _ in range(20):\n"
            "    display({'image/png': base64.b64encode(os.urandom(2**20)).decode()}, raw=True)"
        )
    assert (len(plots.images), plots.text, len(shots.images), shots.text) == (30, None, 20, None)
    assert len(result.images) == 1
    image = result.images[0]
    assert image.exists()
    assert image.suffix == ".png"
    assert image.parent == images_dir
    assert image.read_bytes().startswith(PNG_MAGIC)
    assert len(list(images_dir.iterdir())) == 51


async def test_default_images_dir_is_working_dir_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with CodeExecutor(spare_kernel=False) as executor:
        assert executor.images_dir == tmp_path.resolve() / "images"
        result = await executor.execute(
            f"from IPython.display import Image, display\ndisplay(Image({_png()!r}))"
        )
    assert len(result.images) == 1
    assert result.images[0].parent == tmp_path.resolve() / "images"
    assert result.images[0].exists()


class _PathLike:
    """An os.PathLike that is no Path (as libraries such as py.path or fsspec hand out)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


async def test_paths_may_be_strings_or_pathlike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`CodeExecutor(working_dir="some/dir")` as users write it: str (relative to the current
    directory) or any os.PathLike, wherever a path is taken."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "some" / "dir").mkdir(parents=True)
    async with CodeExecutor(
        working_dir="some/dir",
        images_dir="plots",
        audit_log=_PathLike(tmp_path / "audit.jsonl"),
        spare_kernel=False,
    ) as executor:
        show = f"from IPython.display import Image, display\ndisplay(Image({_png()!r}))"
        result = await executor.execute(f"import os\nprint(os.getcwd())\n{show}")
    assert result.text == str((tmp_path / "some" / "dir").resolve())
    assert result.images[0].resolve().parent == (tmp_path / "plots").resolve()
    assert executor.audit_log == tmp_path / "audit.jsonl"


async def test_displayed_image_bytes_are_saved_unchanged(executor: CodeExecutor, tmp_path: Path) -> None:
    png = _png(5, 4)
    code = f"from IPython.display import Image, display\nprint('an image:')\ndisplay(Image({png!r}))"
    result = await executor.execute(code)
    assert result.text == "an image:"
    assert len(result.images) == 1
    assert result.images[0].parent == tmp_path.resolve() / "images"
    assert result.images[0].read_bytes() == png
    assert result.png == [png]  # as received, to send on without reading the file back


async def test_images_that_cannot_be_saved_keep_the_cells_output(
    executor: CodeExecutor, tmp_path: Path
) -> None:
    """The kernel replaced images/ by a link (or a file): the images are not saved (never through
    the link), and the cell's own output comes back with a note saying why."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    show = f"from IPython.display import Image, display\ndisplay(Image({_png()!r}))"
    planted = {
        "link": f"import os\nos.symlink({str(elsewhere)!r}, 'images')",
        "file": "import os\nos.remove('images')\nopen('images', 'w').write('not a directory')",
    }
    for what, plant in planted.items():
        await executor.execute(plant)
        result = await executor.execute(f"print('the output')\n{show}")
        assert result.text is not None and result.text.startswith("the output\n"), (what, result)
        assert "1 image(s) displayed by the cell could not be saved" in result.text, (what, result)
        assert result.images == [] and result.png == [_png()]
    assert list(elsewhere.iterdir()) == []


# --- environment ---------------------------------------------------------------------------------

HOST_PROXY = "http://proxy.corp.invalid:3128"
NETWORK_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "HTTPS_PROXY", "https_proxy", "NO_PROXY")


@pytest.mark.parametrize("sandbox", [False, True], ids=["local", "sandboxed"])
async def test_kernel_trusts_the_hosts_certificates_and_uses_its_proxy_unless_sandboxed(
    sandbox: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a TLS-intercepting proxy `!pip install` needs the proxy and its CA bundle, as
    install_package has them; a sandboxed kernel keeps the sandbox's own proxy (srt's)."""
    if sandbox:
        require_sandbox()
        monkeypatch.setenv("PATH", SANDBOX_PATH)
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
        monkeypatch.setenv(name, bundle)
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, HOST_PROXY)
    monkeypatch.setenv("NO_PROXY", "localhost")
    monkeypatch.setenv("IPYBOX_TEST_OTHER", "not for the kernel")
    async with CodeExecutor(sandbox=sandbox, working_dir=tmp_path, spare_kernel=False) as executor:
        names = (*NETWORK_ENV, "IPYBOX_TEST_OTHER")
        code = f"import json, os\nprint(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
        seen = json.loads((await executor.execute(code)).text or "")
    assert seen["IPYBOX_TEST_OTHER"] is None
    assert [seen[name] for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")] == [bundle] * 3
    if sandbox:
        assert HOST_PROXY not in (seen["HTTPS_PROXY"], seen["https_proxy"]), seen
    else:
        assert (seen["HTTPS_PROXY"], seen["https_proxy"], seen["NO_PROXY"]) == (
            HOST_PROXY,
            HOST_PROXY,
            "localhost",
        )


# --- errors --------------------------------------------------------------------------------------


async def test_runtime_error_raises_code_execution_error(executor: CodeExecutor) -> None:
    with pytest.raises(CodeExecutionError) as info:
        await executor.execute("print('before')\n1/0")
    message = str(info.value)
    assert "ZeroDivisionError" in message
    assert "division by zero" in message
    assert "\x1b" not in message
    assert info.value.output == "before"


async def test_syntax_error_raises_code_execution_error(executor: CodeExecutor) -> None:
    with pytest.raises(CodeExecutionError) as info:
        await executor.execute("def f(:\n    pass")
    assert "SyntaxError" in str(info.value)
    assert "\x1b" not in str(info.value)
    # The executor stays usable.
    assert (await executor.execute("print('ok')")).text == "ok"


# --- environment and working directory -----------------------------------------------------------


async def test_parent_environment_is_not_inherited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IPYBOX_TEST_SECRET", "s3cr3t-value")
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        result = await executor.execute(
            "import os\n"
            "print(os.environ.get('IPYBOX_TEST_SECRET'))\n"
            "print(any('s3cr3t-value' in v for v in os.environ.values()))"
        )
    assert result.text == "None\nFalse"


async def test_kernel_env_is_visible(tmp_path: Path) -> None:
    async with CodeExecutor(
        kernel_env={"TEST_VAR": "x"}, working_dir=tmp_path, spare_kernel=False
    ) as executor:
        result = await executor.execute("import os; print(os.environ['TEST_VAR'])")
    assert result.text == "x"


async def test_kernel_cwd_defaults_to_parent_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with CodeExecutor(spare_kernel=False) as executor:
        assert executor.working_dir == tmp_path.resolve()
        result = await executor.execute("import os; print(os.getcwd())")
    assert result.text == os.getcwd()


async def test_kernel_cwd_is_working_dir(executor: CodeExecutor, tmp_path: Path) -> None:
    result = await executor.execute("import os; print(os.getcwd())")
    assert result.text == str(tmp_path.resolve())
    assert str(tmp_path) != os.getcwd()


# --- timeouts ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_timeout_interrupts_sleep_and_keeps_state(executor: CodeExecutor) -> None:
    await executor.execute("kept = 'still here'")
    pid = kernel_pid(executor)
    with pytest.raises(TimeoutError, match="kept its state"):
        await executor.execute("import time\ntime.sleep(3600)", timeout=1)
    # interrupted, not replaced: the same kernel, with its state, runs the next cell
    assert kernel_pid(executor) == pid
    assert (await executor.execute("print(kept)")).text == "still here"


@pytest.mark.timeout(60)
async def test_timeout_interrupts_busy_loop(executor: CodeExecutor) -> None:
    await executor.execute("kept = 7")
    pid = kernel_pid(executor)
    with pytest.raises(TimeoutError, match="kept its state"):
        await executor.execute("while True:\n    pass", timeout=1)
    assert kernel_pid(executor) == pid
    assert (await executor.execute("print(kept * 6)")).text == "42"


# --- kernel death --------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import os; os._exit(3)", "exited with code 3"),
        ("import ctypes; ctypes.string_at(0)", "SIGSEGV"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
    ],
    ids=["exit", "segfault", "sigkill"],
)
async def test_kernel_death_reports_cause_and_recovers(
    default_executor: CodeExecutor, code: str, expected: str
) -> None:
    await default_executor.execute("marker = 1")
    old_pid = kernel_pid(default_executor)
    with pytest.raises(CodeExecutionError) as info:
        await default_executor.execute(f"print('dying', flush=True)\n{code}")
    message = str(info.value)
    assert expected in message
    assert "kernel" in message.lower()
    assert "fresh kernel" in message
    assert not pid_alive(old_pid)  # type: ignore[arg-type]

    # The next execution runs on a fresh kernel: it works, and the old state is gone.
    assert (await default_executor.execute("print('alive')")).text == "alive"
    assert kernel_pid(default_executor) != old_pid
    with pytest.raises(CodeExecutionError, match="NameError"):
        await default_executor.execute("marker")


# --- reset ---------------------------------------------------------------------------------------


async def _check_reset(executor: CodeExecutor) -> None:
    await executor.execute(
        "import pathlib\n"
        "pathlib.Path('data.txt').write_text('kept')\n"
        "pathlib.Path('mymod.py').write_text('VALUE = 42')\n"
        "import mymod\n"
        "x = 42"
    )
    assert (await executor.execute("print(x, mymod.VALUE)")).text == "42 42"
    await executor.reset()
    with pytest.raises(CodeExecutionError, match="NameError"):
        await executor.execute("print(x)")
    with pytest.raises(CodeExecutionError, match="NameError"):
        await executor.execute("mymod")
    result = await executor.execute("print(open('data.txt').read())\nimport mymod\nprint(mymod.VALUE)")
    assert result.text == "kept\n42"


async def test_reset_clears_namespace_and_keeps_files(default_executor: CodeExecutor) -> None:
    old_pid = kernel_pid(default_executor)
    await _check_reset(default_executor)  # the warm spare takes over
    assert kernel_pid(default_executor) != old_pid


async def test_reset_without_spare_kernel(tmp_path: Path) -> None:
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        await _check_reset(executor)
        await _check_reset(executor)


# --- concurrency ---------------------------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_concurrent_executors_are_independent(tmp_path: Path) -> None:
    async def work(index: int) -> list[str | None]:
        seen: list[str | None] = []
        async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
            for i in range(40):
                await executor.execute(f"x = {index * 1000 + i}")
                await asyncio.sleep(0)
                seen.append((await executor.execute("print(x)")).text)
        return seen

    results = await asyncio.gather(*(work(index) for index in range(3)))
    for index, seen in enumerate(results):
        assert seen == [str(index * 1000 + i) for i in range(40)]


# --- lifecycle and cleanup -----------------------------------------------------------------------


async def test_execute_before_start_raises() -> None:
    executor = CodeExecutor()
    with pytest.raises(RuntimeError, match="not started"):
        await executor.execute("print(1)")
    with pytest.raises(RuntimeError, match="not started"):
        async for _ in executor.stream("print(1)"):
            pass
    with pytest.raises(RuntimeError, match="not started"):
        await executor.reset()


async def test_stop_removes_processes_and_runtime_dir(tmp_path: Path) -> None:
    before = child_pids()
    async with CodeExecutor(working_dir=tmp_path) as executor:
        runtime_dir = internals.runtime_dir(executor)
        assert runtime_dir is not None and runtime_dir.is_dir()
        await kernels(executor).spare_ready()
        assert len(child_pids() - before) >= 2  # the kernel and its warm spare
        await executor.execute("print(1)")
    assert await eventually(lambda: child_pids() <= before), child_pids() - before
    assert not runtime_dir.exists()


async def test_stop_after_exception_in_body(tmp_path: Path) -> None:
    before = child_pids()
    runtime_dir: Path | None = None
    with pytest.raises(ValueError, match="boom"):
        async with CodeExecutor(working_dir=tmp_path) as executor:
            runtime_dir = internals.runtime_dir(executor)
            await executor.execute("x = 1")
            assert child_pids() - before
            raise ValueError("boom")
    assert await eventually(lambda: child_pids() <= before), child_pids() - before
    assert runtime_dir is not None and not runtime_dir.exists()


@pytest.mark.timeout(60)
async def test_stop_after_cancel_during_execution(tmp_path: Path) -> None:
    before = child_pids()
    running = asyncio.Event()
    runtime_dirs: list[Path | None] = []

    async def run() -> None:
        async with CodeExecutor(working_dir=tmp_path) as executor:
            runtime_dirs.append(internals.runtime_dir(executor))
            async for _ in executor.stream(
                "print('sleeping', flush=True)\nimport time\ntime.sleep(30)", chunks=True
            ):
                running.set()

    task = asyncio.create_task(run())
    await asyncio.wait_for(running.wait(), 30)
    assert child_pids() - before
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await eventually(lambda: child_pids() <= before), child_pids() - before
    assert runtime_dirs[0] is not None and not runtime_dirs[0].exists()


async def test_stop_kills_background_processes(tmp_path: Path) -> None:
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        result = await executor.execute(
            "import subprocess\np = subprocess.Popen(['sleep', '300'])\nprint(p.pid)"
        )
        assert result.text is not None
        pid = int(result.text)
        assert pid_alive(pid)
    assert await eventually(lambda: not pid_alive(pid))


@pytest.mark.timeout(60)
async def test_abandoned_stream_interrupts_cell_and_frees_executor(executor: CodeExecutor) -> None:
    await executor.execute("kept = 'yes'")
    pid = kernel_pid(executor)
    async for item in executor.stream(
        "print('started', flush=True)\nimport time\ntime.sleep(3600)", chunks=True
    ):
        assert isinstance(item, CodeExecutionChunk)
        break
    # Had the abandoned cell not been interrupted, this one would wait behind it and time out.
    result = await executor.execute("print(kept)", timeout=30)
    assert result.text == "yes"
    assert kernel_pid(executor) == pid


async def test_execute_releases_executor_when_it_returns(executor: CodeExecutor) -> None:
    await executor.execute("print(1)")
    assert not busy(executor)


@pytest.mark.timeout(60)
async def test_stop_during_execution_fails_it_and_starts_no_kernel(tmp_path: Path) -> None:
    before = child_pids()
    async with CodeExecutor(working_dir=tmp_path) as executor:
        task = asyncio.create_task(
            executor.execute("print('sleeping', flush=True)\nimport time\ntime.sleep(30)")
        )
        await asyncio.sleep(0.5)
        assert not task.done()
    with pytest.raises(CodeExecutionError, match="kernel"):
        await asyncio.wait_for(task, 10)
    await asyncio.sleep(0.5)  # no replacement kernel is started after the stop
    assert await eventually(lambda: child_pids() <= before), child_pids() - before


# --- cancel() ------------------------------------------------------------------------------------

LONG = "import time\ntime.sleep(600)"


async def _items(stream: object) -> list[object]:
    return [item async for item in stream]  # type: ignore[attr-defined]


async def test_cancel_before_the_stream_starts_is_not_lost(executor: CodeExecutor) -> None:
    await executor.execute("kept = 7")
    task = asyncio.create_task(_items(executor.stream(LONG)))  # not started yet: no lock, no kernel
    await executor.cancel()
    assert await asyncio.wait_for(task, 60) == []
    assert (await executor.execute("print(kept)")).text == "7"


async def test_cancel_reaches_a_stream_waiting_for_the_executor(executor: CodeExecutor) -> None:
    first = asyncio.create_task(_items(executor.stream(LONG)))
    second = asyncio.create_task(_items(executor.stream("print('second')")))
    assert await eventually(lambda: busy(executor))  # the first holds the executor, the second waits
    await executor.cancel()
    assert await asyncio.wait_for(first, 60) == [] and await asyncio.wait_for(second, 60) == []
    assert (await executor.execute("print('after')")).text == "after"


async def test_cancel_before_execute_runs_returns_an_empty_result(executor: CodeExecutor) -> None:
    call = executor.execute("print('never')\n" + LONG)
    await executor.cancel()
    assert await asyncio.wait_for(call, 60) == CodeExecutionResult(None)


async def test_a_cancelled_cell_never_yields_a_result(executor: CodeExecutor) -> None:
    """Cancelled as its last output arrives, the cell has often finished already: still no result."""
    for _ in range(5):
        seen: list[object] = []
        async for item in executor.stream("print('last', flush=True)", chunks=True):
            seen.append(item)
            if isinstance(item, CodeExecutionChunk):
                await executor.cancel()
        assert [type(item) for item in seen] == [CodeExecutionChunk]


async def test_cancel_after_the_result_changes_nothing(executor: CodeExecutor) -> None:
    assert (await executor.execute("print('done')")).text == "done"
    await executor.cancel()  # nothing runs: no effect on what comes next
    assert (await executor.execute("print('next')")).text == "next"


async def test_escape_sequences_leave_the_output_and_take_no_text_with_them(executor: CodeExecutor) -> None:
    """`result.text` is what an application prints: every escape sequence goes (a clipboard write
    ended by ST, a link, DCS, 8-bit CSI), and none that never ended takes the lines after it."""
    code = (
        "print('one \\x1b]52;c;UEFZTE9BRA==\\x1b\\\\ two \\x1b]8;;https://evil.example/\\x1b\\\\link')\n"
        "print('three \\x1bP+q544e\\x1b\\\\ four \\x9b2J five \\x1b]0;never ended')\n"
        "print('six')\n"
        "print('seven \\x07 eight')\n"
    )
    result = await executor.execute(code)
    assert result.text == "one  two link\nthree  four  five 0;never ended\nsix\nseven \x07 eight"
