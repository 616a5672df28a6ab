"""`Kernel`, `KernelSupervisor` and output collection, against real ipykernel processes."""

from __future__ import annotations

import asyncio
import base64
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from servers.launch import eventually, pid_alive

from ipybox.kernel_mgr.deadline import Deadline
from ipybox.kernel_mgr.kernel import Handover, Kernel, KernelDied, describe_exit, kernel_environment
from ipybox.kernel_mgr.output import KernelEvent, OutputBuffer, OutputCollector, strip_ansi
from ipybox.kernel_mgr.supervisor import KernelSupervisor


def _deadline(seconds: float = 30) -> Deadline:
    return Deadline(seconds)


async def _run(kernel: Kernel, code: str, seconds: float = 30) -> tuple[str, list[KernelEvent]]:
    """Execute `code`; return its concatenated text output and the events passed to the callback."""
    seen: list[KernelEvent] = []
    reply = await kernel.execute(code, seen.append, _deadline(seconds))
    assert reply.status == "ok", reply.error
    return "".join(e.text for e in seen), seen


async def _cancel_at_first_output(kernel: Kernel, code: str) -> None:
    """Execute `code` and cancel the execution once its first output came."""
    started = asyncio.Event()
    task = asyncio.create_task(kernel.execute(code, lambda _: started.set(), _deadline()))
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    return tmp_path / "runtime"


@pytest.fixture
async def kernel(runtime_dir: Path, tmp_path: Path) -> AsyncIterator[Kernel]:
    kernel = Kernel(runtime_dir, tmp_path, kernel_environment({}))
    await kernel.start()
    try:
        yield kernel
    finally:
        await kernel.stop()


# --- pure helpers --------------------------------------------------------------------------------


def test_describe_exit() -> None:
    assert describe_exit(None) == "The kernel stopped responding."
    assert describe_exit(3) == "The kernel process exited with code 3."
    assert describe_exit(-signal.SIGSEGV).startswith("The kernel died from SIGSEGV (a segmentation fault")
    assert describe_exit(-signal.SIGKILL).startswith("The kernel died from SIGKILL (killed")
    assert describe_exit(-signal.SIGTERM) == "The kernel died from SIGTERM."
    assert describe_exit(-1000) == "The kernel died from signal 1000."
    assert str(KernelDied(-signal.SIGABRT)).startswith("The kernel died from SIGABRT")
    assert describe_exit(128 + signal.SIGKILL).startswith("The kernel died from SIGKILL")  # via the sandbox
    assert describe_exit(1) == "The kernel process exited with code 1."


def test_kernel_environment_keeps_only_essentials_and_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IPYBOX_TEST_SECRET", "secret")
    monkeypatch.setenv("HOME", "/home/test")
    env = kernel_environment({"TEST_VAR": "x", "HOME": "/override"})
    assert "IPYBOX_TEST_SECRET" not in env
    assert env["TEST_VAR"] == "x"
    assert env["HOME"] == "/override"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"] == os.environ["PATH"]


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[31mred\x1b[0m \x1b[1;32mbold\x1b[39;49m\x1b]0;title\x07!") == "red bold!"


#: What a kernel prints, with each escape sequence's kind: nothing of them may stay (an application
#: prints `result.text`), and no text around them may go (a string that never ended ate it).
STRIPPED = [
    ("a\x1b]52;c;UEFZTE9BRA==\x1b\\b", "ab"),  # clipboard, ended by ST
    ("a\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),  # hyperlink
    ("a\x1bP+q544e\x1b\\b\x1b_apc\x1b\\c\x1bX\x1b\\d\x1b^pm\x9ce", "abcde"),  # DCS, APC, SOS, PM
    ("a\x9b2Jb\x9d0;t\x07c\x90q\x9cd\x85e", "abcde"),  # 8-bit CSI, OSC, DCS; NEL
    ("a\x1b7b\x1b8c\x1bcd\x1bMe\x1b(Bf\x1b#8g", "abcdefg"),  # cursor save/restore, reset, charsets
    ("a\x1b[38:5:16mb\x1b[?1049hc\x1b[?2004hd\x1b[6ne\x1b[ch", "abcdeh"),  # colon SGR, modes, queries
    ("a\x1b\x1b[0m]52;c;UEFZ\x07b", "a]52;c;UEFZ\x07b"),  # no sequence made by stripping another
    ("a\x1b]0;never ended\nlines\x07b", "a0;never ended\nlines\x07b"),  # eats nothing
    ("a\x1b]52;c;UEFZ", "a52;c;UEFZ"),  # a sequence cut at the message's end: its start goes
    ("\x1b", ""),
]


def test_strip_ansi_removes_every_escape_sequence_and_no_text() -> None:
    for raw, left in STRIPPED:
        assert strip_ansi(raw) == left, ascii(raw)


def test_output_collector_orders_events_and_decodes_images() -> None:
    seen: list[KernelEvent] = []
    collector = OutputCollector(seen.append)

    def msg(msg_type: str, content: dict[str, Any]) -> dict[str, Any]:
        return {"msg_type": msg_type, "content": content}

    collector.add(msg("stream", {"name": "stdout", "text": "\x1b[32mout\x1b[0m\n"}))
    collector.add(
        msg("display_data", {"data": {"image/png": base64.b64encode(b"png").decode(), "text/plain": "x"}})
    )
    collector.add(msg("execute_result", {"data": {"text/plain": "42", "text/html": "<b>42</b>"}}))
    collector.add(msg("status", {"execution_state": "busy"}))
    assert collector.error is None
    collector.add(msg("error", {"ename": "E", "evalue": "v", "traceback": ["\x1b[31mTrace\x1b[0m", "E: v"]}))

    assert seen == [
        KernelEvent("stream", text="out\n"),
        KernelEvent("image", encoded=base64.b64encode(b"png").decode()),  # decoded only if kept
        KernelEvent("text", text="42\n"),
        KernelEvent("error"),  # kept in no text; its message is there for the session notebook
    ]
    assert (seen[3].msg_type, seen[3].content["ename"]) == ("error", "E")
    assert (seen[1].size, seen[1].image()) == (3, b"png")
    assert collector.error == "Trace\nE: v"


def test_output_collector_error_without_traceback() -> None:
    collector = OutputCollector(lambda _: None)
    collector.add({"msg_type": "error", "content": {"ename": "ValueError", "evalue": "bad", "traceback": []}})
    assert collector.error == "ValueError: bad"


# --- Kernel --------------------------------------------------------------------------------------


async def test_kernel_runs_in_own_session_with_cwd_and_env(runtime_dir: Path, tmp_path: Path) -> None:
    kernel = Kernel(runtime_dir, tmp_path, kernel_environment({"TEST_VAR": "x"}))
    await kernel.start()
    try:
        assert kernel.alive and kernel.pid is not None
        assert os.getsid(kernel.pid) == kernel.pid  # its own session and process group
        text, _ = await _run(kernel, "import os\nprint(os.getcwd())\nprint(os.environ['TEST_VAR'])")
        assert text == f"{tmp_path.resolve()}\nx\n"
        # The connection file and the ipc sockets live in the runtime dir.
        assert any(runtime_dir.glob("*.json"))
        assert len(list(runtime_dir.iterdir())) >= 2
    finally:
        await kernel.stop()
    assert not kernel.alive
    assert list(runtime_dir.iterdir()) == []


async def test_kernel_variables_restart_the_interpreter_only_where_read_at_start(
    runtime_dir: Path, tmp_path: Path
) -> None:
    """The kernel's own variables reach it either way; only one that a process reads as it starts
    (here `PYTHONPATH`, `LC_*`) costs a second start of the interpreter, which then sees it."""
    lib = tmp_path / "lib"
    lib.mkdir()
    probe = (
        "import os, sys\n"
        "print('--env-file' in sys.orig_argv, os.environ['APP_SETTING'], "
        f"{str(lib)!r} in sys.path, os.environ.get('LC_TIME') == 'POSIX')"
    )
    cases = [
        ({"APP_SETTING": "a"}, "True a False False\n"),
        ({"APP_SETTING": "b", "PYTHONPATH": str(lib)}, "False b True False\n"),
        ({"APP_SETTING": "c", "LC_TIME": "POSIX"}, "False c False True\n"),
    ]
    for number, (kernel_env, expected) in enumerate(cases):
        kernel = Kernel(runtime_dir / str(number), tmp_path, kernel_environment({}), kernel_env=kernel_env)
        await kernel.start()
        try:
            text, _ = await _run(kernel, probe)
        finally:
            await kernel.stop()
        assert text == expected, kernel_env


async def test_kernel_execute_reports_events_in_order(kernel: Kernel) -> None:
    code = (
        "import sys\n"
        "from IPython.display import display\n"
        "print('one', flush=True)\n"
        "sys.stderr.write('two\\n'); sys.stderr.flush()\n"
        "display({'three': 3})\n"
        "print('four', flush=True)\n"
        "5"
    )
    _, events = await _run(kernel, code)
    assert [(e.kind, e.text) for e in events] == [
        ("stream", "one\n"),
        ("stream", "two\n"),
        ("text", "{'three': 3}\n"),
        ("stream", "four\n"),
        ("text", "5\n"),
    ]


async def test_kernel_execute_reports_errors(kernel: Kernel) -> None:
    reply = await kernel.execute("raise ValueError('nope')", lambda _: None, _deadline())
    assert reply.status == "error"
    assert reply.error is not None
    assert "ValueError: nope" in reply.error
    assert "\x1b" not in reply.error


@pytest.mark.timeout(60)
async def test_kernel_events_are_delivered_while_running(kernel: Kernel, tmp_path: Path) -> None:
    # The cell prints "b" only after the test has received "a": were events delivered only
    # when the cell ends, it would wait until its deadline and raise TimeoutError.
    go = tmp_path / "go"
    seen: list[str] = []

    def on_event(event: KernelEvent) -> None:
        seen.append(event.text)
        go.touch()

    code = (
        "import pathlib, time\n"
        "print('a', flush=True)\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n"
        "    time.sleep(0.01)\n"
        "print('b', flush=True)"
    )
    reply = await kernel.execute(code, on_event, _deadline())
    assert reply.status == "ok", reply.error
    assert seen == ["a\n", "b\n"]


@pytest.mark.timeout(60)
async def test_kernel_timeout_interrupts_and_keeps_state(kernel: Kernel) -> None:
    await _run(kernel, "x = 5")
    pid = kernel.pid
    with pytest.raises(TimeoutError):
        await kernel.execute("import time\ntime.sleep(3600)", lambda _: None, _deadline(0.5))
    # interrupted, not killed: the same process runs the next cell, with its state
    assert kernel.alive and kernel.pid == pid
    assert (await _run(kernel, "print(x)"))[0] == "5\n"


@pytest.mark.timeout(60)
async def test_kernel_ignoring_interrupt_is_killed(kernel: Kernel) -> None:
    pid = kernel.pid
    assert pid is not None
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    with pytest.raises(KernelDied) as info:
        await kernel.execute(code, lambda _: None, _deadline(0.5), interrupt_grace=1)
    assert info.value.returncode is None
    assert "stopped responding" in str(info.value)
    assert not kernel.alive
    assert await eventually(lambda: not pid_alive(pid))


@pytest.mark.timeout(60)
async def test_kernel_death_raises_kernel_died(kernel: Kernel) -> None:
    with pytest.raises(KernelDied) as info:
        await kernel.execute("import os\nos._exit(7)", lambda _: None, _deadline())
    assert info.value.returncode == 7
    assert not kernel.alive
    with pytest.raises(KernelDied):
        await kernel.execute("1", lambda _: None, _deadline())


@pytest.mark.timeout(60)
async def test_cancelled_execute_interrupts_cell_and_next_output_is_not_lost(kernel: Kernel) -> None:
    pid = kernel.pid
    await _cancel_at_first_output(kernel, "import time\nprint('started', flush=True)\ntime.sleep(3600)")
    # Sent right away, while the cancelled cell may still be being interrupted. Had the cancel
    # not interrupted it, this cell would wait behind an hour's sleep and time out.
    text, _ = await _run(kernel, "print('next')")
    assert text == "next\n"
    assert kernel.pid == pid  # interrupted, not killed


@pytest.mark.timeout(60)
async def test_an_interrupt_meant_for_a_cancelled_cell_never_reaches_the_next(kernel: Kernel) -> None:
    """The kernel sends itself the signal when it handles the interrupt request, in a thread of its
    own: here that thread is kept busy for 2 s, so the cancelled cell's interrupt would land in the
    middle of the next cell had that cell been sent before the kernel answered the request."""
    await _cancel_at_first_output(kernel, _BUSY_CONTROL.format(2) + "print('x', flush=True)\ntime.sleep(0.5)")
    text, _ = await _run(kernel, "import time\ntime.sleep(3)\nprint('next')")
    assert text == "next\n"


#: Code that keeps the kernel's control thread (which handles interrupt requests) busy for `{}` s.
_BUSY_CONTROL = "import time\nget_ipython().kernel.control_thread.io_loop.add_callback(time.sleep, {})\n"


@pytest.mark.timeout(60)
async def test_a_cancel_during_the_wait_for_an_interrupt_leaves_the_wait_to_the_next_cell(
    kernel: Kernel,
) -> None:
    """A cell cancelled while it waits for the earlier cell's interrupt to be answered has sent
    nothing; the cell after it still waits, so the late interrupt does not land in it either."""
    await _cancel_at_first_output(kernel, _BUSY_CONTROL.format(3) + "print('x', flush=True)\ntime.sleep(0.5)")
    waiting = asyncio.create_task(kernel.execute("print('never')", lambda _: None, _deadline()))
    await asyncio.sleep(0.5)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    text, _ = await _run(kernel, "import time\ntime.sleep(4)\nprint('next')")
    assert text == "next\n"


@pytest.mark.timeout(60)
async def test_the_wait_for_an_earlier_interrupt_is_not_the_next_cells_time(kernel: Kernel) -> None:
    await _cancel_at_first_output(kernel, _BUSY_CONTROL.format(2) + "print('x', flush=True)\ntime.sleep(0.5)")
    assert (await _run(kernel, "print('next')", seconds=1))[0] == "next\n"  # waits 2 s, runs at once


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "others", ["get_ipython().run_cell('1', silent=True)", "get_ipython().run_cell('')", "%run -i other.ipy"]
)
async def test_a_cell_that_ran_other_cells_can_still_be_interrupted(
    kernel: Kernel, tmp_path: Path, others: str
) -> None:
    """Each cell run inside another ends with its own events; the outer cell is interruptible
    until it ends itself (else its timeout would kill the kernel, and a cancel would be lost)."""
    (tmp_path / "other.ipy").write_text("y = 1\n")
    pid = kernel.pid
    with pytest.raises(TimeoutError):
        await kernel.execute(f"{others}\nimport time\ntime.sleep(3600)", lambda _: None, _deadline(0.5))
    assert kernel.alive and kernel.pid == pid  # interrupted, not killed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("event", ["post_execute", "post_run_cell"])
async def test_an_interrupt_once_the_cells_code_ended_is_dropped(kernel: Kernel, event: str) -> None:
    """ipykernel raises KeyboardInterrupt wherever its main thread is: after the cell's code, that
    can be halfway through sending the reply, which then corrupts the next one. Here the signal
    comes from a callback that runs after the cell's code, as a late interrupt would."""
    register = (
        "import os, signal\n"
        f"get_ipython().events.register({event!r}, lambda *_: os.kill(os.getpid(), signal.SIGINT))"
    )
    await _run(kernel, register)
    for _ in range(3):
        assert (await _run(kernel, "print('ran')", seconds=10))[0] == "ran\n"
    with pytest.raises(TimeoutError):  # interrupts still stop a running cell
        await kernel.execute("import time\ntime.sleep(3600)", lambda _: None, _deadline(0.5))


@pytest.mark.timeout(60)
async def test_a_reply_the_kernel_did_not_sign_is_skipped(kernel: Kernel) -> None:
    """Kernel code can send the host anything on its shell socket: a reply with a wrong signature
    is skipped (and logged), never raised to the caller, and the real reply still counts."""
    code = (
        "from jupyter_client.session import Session\n"
        "k = get_ipython().kernel\n"
        "parent = k.get_parent()\n"
        "stream = k.shell_channel_thread.manager.get_subshell_to_shell_channel_socket(None)\n"
        "Session(key=b'not the key').send(stream, 'execute_reply', {'status': 'ok'}, parent=parent,\n"
        "    ident=parent['header']['session'].encode())\n"
        "print('sent')"
    )
    assert (await _run(kernel, code, seconds=10))[0] == "sent\n"
    assert (await _run(kernel, "print('next')", seconds=10))[0] == "next\n"


@pytest.mark.timeout(60)
async def test_kernel_stop_kills_process_group(kernel: Kernel) -> None:
    # The child ignores SIGTERM, so only the final SIGKILL to the process group ends it.
    code = "import subprocess\nprint(subprocess.Popen(['sh', '-c', 'trap \"\" TERM; sleep 300']).pid)"
    text, _ = await _run(kernel, code)
    child = psutil.Process(int(text))
    assert await eventually(lambda: bool(child.children()))  # the trap is set, `sleep` runs
    pids = [child.pid] + [p.pid for p in child.children()]
    await kernel.stop()
    assert not kernel.alive
    assert await eventually(lambda: not any(pid_alive(pid) for pid in pids))


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
async def test_kernel_start_failure_is_reported(runtime_dir: Path, tmp_path: Path) -> None:
    kernel = Kernel(runtime_dir, tmp_path, kernel_environment({}), command_prefix=["false"])
    with pytest.raises(RuntimeError, match="failed to start"):
        await kernel.start(timeout=10)
    assert not kernel.alive
    assert list(runtime_dir.iterdir()) == []


@pytest.mark.parametrize("route", ["kernel exits", "socket path too long"])
async def test_a_failed_start_leaves_no_descriptor_open(
    runtime_dir: Path, tmp_path: Path, route: str
) -> None:
    """The client's sockets and its ZMQ context are closed by the start that failed, not left to
    the garbage collector (whose end of a context waits for every socket still open)."""
    if route == "socket path too long":  # ipc socket paths are limited to about 107 bytes
        runtime_dir = tmp_path / ("d" * 120)
    prefix = ["false"] if route == "kernel exits" else []

    async def fail() -> None:
        kernel = Kernel(runtime_dir, tmp_path, kernel_environment({}), command_prefix=prefix)
        with pytest.raises(Exception):  # noqa: B017, PT011 - each route fails in its own words
            await kernel.start(timeout=10)

    await fail()  # what the first start loads once (modules, the event loop's own descriptors)
    gc.collect()
    gc.disable()
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(3):
            await fail()
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        gc.enable()


#: A prefix that copies what it is handed (from the file named first) and runs the kernel.
_COPY = ["/bin/sh", "-c", 'cat "$0" > "$1" && shift && exec "$@"']


@pytest.mark.parametrize("size", [0, 10, 3 << 20])  # up to a pipe's capacity, and far over it
async def test_a_handover_reaches_the_prefix_once_it_runs(
    runtime_dir: Path, tmp_path: Path, size: int
) -> None:
    copy, built = tmp_path / "copy", []
    data = os.urandom(size)

    def build() -> bytes:
        # built once the prefix runs; the pipe is not the prefix's until it reads it
        built.append(True)
        return data

    handover = Handover(lambda path: [*_COPY, path, str(copy)], build)
    kernel = Kernel(runtime_dir, tmp_path, kernel_environment({}), command_prefix=handover)
    try:
        await kernel.start()
        assert built == [True]
        assert copy.read_bytes() == data
        text, _ = await _run(kernel, "print(6 * 7)")
        assert text.strip() == "42"
    finally:
        await kernel.stop()


async def test_a_handover_that_fails_leaves_nothing_running(runtime_dir: Path, tmp_path: Path) -> None:
    started = tmp_path / "started"

    def build() -> bytes:
        raise ValueError("the policy cannot be built")

    prefix = ["/bin/sh", "-c", 'echo $$ > "$1" && cat "$0" > /dev/null && shift && exec "$@"']
    kernel = Kernel(
        runtime_dir,
        tmp_path,
        kernel_environment({}),
        command_prefix=Handover(lambda p: [*prefix, p, str(started)], build),
    )
    with pytest.raises(ValueError, match="the policy cannot be built"):
        await kernel.start()
    assert not kernel.alive
    pid = kernel.pid  # the prefix's process (it may be stopped before it wrote `started`)
    assert pid is not None
    assert await eventually(lambda: not pid_alive(pid))
    assert not started.exists() or not pid_alive(int(started.read_text() or 0))
    assert list(runtime_dir.iterdir()) == []


async def test_a_handover_whose_command_fails_leaves_nothing(runtime_dir: Path, tmp_path: Path) -> None:
    """The prefix's command is made only at start (srt looked up then: gone from PATH, or a bad
    IPYBOX_SRT, after the executor started): its error leaves no pipe, file or directory."""

    def argv(path: str) -> list[str]:
        raise ValueError("srt is not installed")

    fds = set(os.listdir("/proc/self/fd"))
    handover = Handover(argv, lambda: b"{}")
    kernel = Kernel(runtime_dir, tmp_path, kernel_environment({}), command_prefix=handover)
    with pytest.raises(ValueError, match="srt is not installed"):
        await kernel.start()
    assert not kernel.alive
    assert set(os.listdir("/proc/self/fd")) == fds
    assert list(runtime_dir.iterdir()) == []


@pytest.mark.timeout(30)  # without a bound on the handover, start() waited for ever
async def test_a_handover_never_read_ends_within_the_start_timeout(runtime_dir: Path, tmp_path: Path) -> None:
    """A prefix that runs but never reads what it is handed (srt's node stuck loading) stalls a
    write past the pipe's capacity: `start(timeout)` bounds that wait too, and leaves nothing."""
    started = tmp_path / "started"
    prefix = ["/bin/sh", "-c", 'echo $$ > "$1" && exec sleep 1000']
    handover = Handover(lambda p: [*prefix, p, str(started)], lambda: bytes(1 << 20))
    kernel = Kernel(runtime_dir, tmp_path, kernel_environment({}), command_prefix=handover)
    with pytest.raises(RuntimeError, match="did not read"):
        await kernel.start(timeout=2)
    assert not kernel.alive
    assert await eventually(lambda: started.exists() and not pid_alive(int(started.read_text() or 0)))
    assert list(runtime_dir.iterdir()) == []


@pytest.mark.timeout(60)
async def test_orphaned_kernel_exits_when_parent_dies(tmp_path: Path) -> None:
    """A kernel whose host process dies without cleaning up shuts itself down."""
    script = (
        "import asyncio, os, sys\n"
        "from pathlib import Path\n"
        "from ipybox.kernel_mgr.kernel import Kernel, kernel_environment\n"
        "async def main():\n"
        "    kernel = Kernel(Path(sys.argv[1]), Path(sys.argv[1]), kernel_environment({}))\n"
        "    await kernel.start()\n"
        "    print(kernel.pid, flush=True)\n"
        "    os._exit(0)\n"
        "asyncio.run(main())\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(tmp_path), stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), 60)
    pid = int(stdout)
    assert await eventually(lambda: not pid_alive(pid), timeout=10)


# --- KernelSupervisor ----------------------------------------------------------------------------


@pytest.fixture
async def supervisor(runtime_dir: Path, tmp_path: Path) -> AsyncIterator[KernelSupervisor]:
    supervisor = KernelSupervisor(lambda: Kernel(runtime_dir, tmp_path, kernel_environment({})))
    await supervisor.start()
    try:
        yield supervisor
    finally:
        await supervisor.stop()


def _spare_pid(supervisor: KernelSupervisor) -> int | None:
    spare = supervisor._spare
    assert spare is not None and spare.done()
    return spare.result().pid


async def test_supervisor_replace_swaps_in_warm_spare(supervisor: KernelSupervisor) -> None:
    first = supervisor.kernel
    first_pid = first.pid
    assert first_pid is not None
    await supervisor.spare_ready()
    spare_pid = _spare_pid(supervisor)
    assert spare_pid != first_pid

    await supervisor.replace()
    assert supervisor.kernel.pid == spare_pid  # the warm spare, not a kernel started on demand
    assert await eventually(lambda: not pid_alive(first_pid))
    # A new spare is on its way.
    await supervisor.spare_ready()
    assert _spare_pid(supervisor) not in (first_pid, spare_pid)


async def test_supervisor_recovers_from_kernel_death(supervisor: KernelSupervisor) -> None:
    old = supervisor.kernel
    with pytest.raises(KernelDied) as info:
        await supervisor.execute("import os\nos._exit(2)", lambda _: None, _deadline())
    assert info.value.returncode == 2
    assert supervisor.kernel is not old
    seen: list[KernelEvent] = []
    reply = await supervisor.execute("print('ok')", seen.append, _deadline())
    assert reply.status == "ok"
    assert seen == [KernelEvent("stream", text="ok\n")]


async def test_supervisor_without_spare(runtime_dir: Path, tmp_path: Path) -> None:
    supervisor = KernelSupervisor(lambda: Kernel(runtime_dir, tmp_path, kernel_environment({})), spare=False)
    await supervisor.start()
    try:
        assert supervisor._spare is None
        old_pid = supervisor.kernel.pid
        await supervisor.replace()
        assert supervisor._spare is None
        assert supervisor.kernel.alive
        assert supervisor.kernel.pid != old_pid
    finally:
        await supervisor.stop()


async def test_supervisor_stop_stops_all_kernels(runtime_dir: Path, tmp_path: Path) -> None:
    supervisor = KernelSupervisor(lambda: Kernel(runtime_dir, tmp_path, kernel_environment({})))
    await supervisor.start()
    pids = {supervisor.kernel.pid}
    await supervisor.spare_ready()
    pids.add(_spare_pid(supervisor))
    await supervisor.replace()  # retires the first kernel in the background
    pids.add(supervisor.kernel.pid)
    await supervisor.stop()  # stops the current kernel, the new spare (maybe still starting), the retired one
    assert None not in pids and len(pids) == 2
    assert await eventually(lambda: not any(pid_alive(pid) for pid in pids if pid is not None))
    assert await eventually(
        lambda: not any(pid_alive(p.pid) for p in psutil.Process().children(recursive=True))
    )
    assert list(runtime_dir.iterdir()) == []
    with pytest.raises(RuntimeError, match="No kernel is running"):
        supervisor.kernel  # noqa: B018


def test_output_buffer_keeps_head_and_tail_and_counts_the_rest() -> None:
    buffer = OutputBuffer(limit=10)
    for i in range(100):
        buffer.add(KernelEvent("stream", text=f"{i:02d}\n"))
    text = buffer.text()
    assert text.startswith("00\n01\n[...")  # the first five characters, then the marker
    assert text.endswith("...]\n8\n99")  # the last five characters ("8\n99\n"), stripped
    assert buffer.dropped == 300 - 10
    assert "290 characters of output dropped" in text


def test_output_buffer_without_limit_keeps_everything() -> None:
    buffer = OutputBuffer(limit=None)
    buffer.add(KernelEvent("stream", text="a" * 100_000))
    buffer.add(KernelEvent("image", data=b"png"))
    assert buffer.text() == "a" * 100_000
    assert buffer.images == [b"png"]
