"""What ipybox sets up inside each kernel at start (stdlib only: it runs before every first cell).

- `exit()` and `quit()` explain themselves instead of shutting the kernel down behind the
  caller's back; programs see `TERM=dumb` (with `NO_COLOR=1` from ipybox) and print no colours.
- Output written straight to file descriptors 1 and 2 (by C code, `os.write`, child processes)
  reaches the cell's stream through a pipe that a thread of ipybox's forwards (`_FdOutput`; the
  kernel starts with ipykernel's own forwarding off); a cell ends only once all that came through
  the pipe has reached the stream, so such output is never reported after the cell's result.
- With `IPYBOX_WORKING_DIR` set, a cell that changed the working directory gets it changed back.
- With `IPYBOX_APPROVE_SHELL` set, every way IPython starts a program asks the application
  (through the tool server) before it runs: `!cmd`, `!!cmd`, `x = !cmd`, `%sx`, `%system`,
  `%sc`, `%%!`, `%pip`, `%conda`, aliases, `%man`, `%clear`, `%%script` and every script magic
  (`%%bash`, `%%sh`, `%%perl`, `%%python3`, ...), and `get_ipython().system/system_raw/
  system_piped/getoutput(...)`; with `IPYBOX_REQUIRE_SHELL_ESCAPE` also
  set, Python's own ways of starting a program raise instead, so commands take the approved path.
  This guard only steers code written in good faith: any Python code that means to get around
  it can (it can undo the patches, reach the originals, or use ctypes).
- `!pip` and `%pip` install into the kernel's own Python (see `_pip_for_this_python`).
- Output is never dropped on its way out: ipybox's side reads at most one message ahead, so
  when it falls behind, ipykernel's I/O thread waits (`XPUB_NODROP`) rather than dropping what
  does not fit in its queue (the cell's output, or the status that ends it), and a flush waits
  with it rather than giving up after 10 s with "IOStream.flush timed out" in the output.
- A traceback ends at the last frame that does not hide itself (`__tracebackhide__`): IPython
  always shows the frame an error was raised in, so an error from ipybox's tool-call client
  showed the agent ipybox's own source, and where it is installed, above the message.
- An interrupt counts only until the cell's code has ended: one that comes later (a cancel racing
  the cell's end) is dropped. ipykernel would raise it wherever its main thread is, also halfway
  through sending the cell's reply, and a reply cut short there makes the next one unreadable.
- With `IPYBOX_MESSAGE_BYTES` set, what the kernel sends stays within the host's limit per
  message: long printed text goes in pieces, and an output too large for one message is replaced
  by a line saying so. The host enforces the limit regardless; this keeps ordinary code's output.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import functools
import os
import shlex
import shutil
import signal
import struct
import sys
import tempfile
import termios
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any

#: How long a finished cell waits for its fd output to be forwarded.
_DRAIN_SECONDS = 2.0
WORKING_DIR_VAR = "IPYBOX_WORKING_DIR"
APPROVE_SHELL_VAR = "IPYBOX_APPROVE_SHELL"
REQUIRE_SHELL_ESCAPE_VAR = "IPYBOX_REQUIRE_SHELL_ESCAPE"
MESSAGE_BYTES_VAR = "IPYBOX_MESSAGE_BYTES"
#: How long a flush waits for ipykernel's I/O thread, which waits for ipybox to read (ipykernel: 10 s).
_FLUSH_SECONDS = 3600.0
#: Bytes of a message besides its text or data (header, signature, JSON around them).
_ENVELOPE = 64 * 1024


def _no_exit(*args: object, **kwargs: object) -> None:
    raise RuntimeError("exit() and quit() are disabled in ipybox: reset for a fresh kernel.")


def _pending(fd: int) -> int:
    """Bytes waiting to be read from the pipe `fd`."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return 0


class _FdOutput:
    """Forwards what is written to fd 1 or 2 to the cell's stream, and to where the fd pointed
    before (the kernel's own stdout or stderr, which the host reads), as ipykernel's
    `capture_fd_output` does; but it can tell when all that was written has arrived.

    ipykernel's thread reads the pipe, then writes what it read to the stream: in between (a
    thread switch, under load), the pipe is empty and the output not yet in the stream, and a
    cell ending then lost it to the next cell. This thread counts the bytes waiting in the pipe
    as taken before it reads them (under the GIL, so `arrived()` never sees them in neither
    place) and as passed on once the stream has them.
    """

    def __init__(self, stream: Any, fd: int) -> None:
        self.stream = stream
        self._echo = os.dup(fd)
        read, write = os.pipe()
        os.dup2(write, fd)  # inheritable, as fd 1 and 2 are: child processes write into the pipe
        os.close(write)
        self._fd = read
        # what `subprocess.run(..., stdout=sys.stdout)` and `faulthandler.enable()` write to: the
        # pipe, so it reaches the cell too (ipykernel's own forwarding gives the fd it replaced)
        stream.fileno = functools.partial(int, fd)
        self._taken = self._passed = 0
        threading.Thread(target=self._forward, name=f"ipybox-fd{fd}", daemon=True).start()

    def arrived(self) -> bool:
        """Whether everything written to the fd so far has reached the stream."""
        return not _pending(self._fd) and self._taken == self._passed

    def _forward(self) -> None:
        import codecs
        import select

        text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # keeps a split character whole
        readable = select.poll()
        readable.register(self._fd, select.POLLIN)
        while True:
            readable.poll()
            size = max(_pending(self._fd), 1)  # 0: the end (or a byte that came just now)
            self._taken += size
            try:
                data = os.read(self._fd, size)
            except OSError:
                data = b""
            if not data:  # every writer is gone (fd 1 or 2 closed), or the pipe was: nothing more comes
                self._taken -= size
                return
            if decoded := text.decode(data):
                with contextlib.suppress(Exception):  # a closed stream (the kernel ending)
                    self.stream.write(decoded)
            self._passed += len(data)
            self._taken -= size - len(data)
            with contextlib.suppress(OSError):
                os.write(self._echo, data)


#: ipybox's forwarders of fd 1 and 2 (none where ipykernel forwards them itself).
_fd_outputs: list[_FdOutput] = []


def _forward_fd_output() -> None:
    """Forward fd 1 and 2 unless ipykernel does (a kernel not started by ipybox: a gateway's)."""
    streams = ((sys.stdout, 1), (sys.stderr, 2))
    if any(getattr(stream, "_fid", None) is not None for stream, _ in streams):
        return
    for stream, fd in streams:
        if hasattr(stream, "session"):  # ipykernel's stream: what a cell's output goes to
            _fd_outputs.append(_FdOutput(stream, fd))


def _emptied(fd: int) -> bool:
    return not _pending(fd)


def drain_fd_output(*_: object) -> None:
    """Wait until what was written to fd 1 and 2 has reached the streams, then flush it.

    ipykernel flushes both streams itself before it replies; the flush here (a round trip to its
    IO thread, which blocks) is only for output that had to be waited for.
    """
    waits: list[tuple[Any, Callable[[], bool]]] = [(output.stream, output.arrived) for output in _fd_outputs]
    for stream in (sys.stdout, sys.stderr):  # where ipykernel forwards: it has no count, only its pipe
        fd = getattr(stream, "_fid", None)  # the read end of ipykernel's capture pipe
        if isinstance(fd, int):
            waits.append((stream, functools.partial(_emptied, fd)))
    deadline = time.monotonic() + _DRAIN_SECONDS
    for stream, arrived in waits:
        if arrived():
            continue
        while not arrived() and time.monotonic() < deadline:
            time.sleep(0.001)
        stream.flush()


def _restore_working_dir(directory: str) -> Callable[..., None]:
    def restore(*_: object) -> None:
        try:
            changed = os.getcwd() != directory
        except FileNotFoundError:  # the directory it moved to was deleted
            changed = True
        if changed:
            os.chdir(directory)
            sys.stdout.write(f"[ipybox] cwd reset to {directory}\n")

    return restore


# --- shell commands ------------------------------------------------------------------------------

#: Approved commands running now; while there is one, the guard lets processes start (process-wide:
#: `%%bash` starts its process from a thread of its own).
_approved = 0
_approved_lock = threading.Lock()


@contextlib.contextmanager
def _approved_run() -> Iterator[None]:
    global _approved
    with _approved_lock:
        _approved += 1
    try:
        yield
    finally:
        with _approved_lock:
            _approved -= 1


def _ask(kind: str, cmd: str) -> None:
    """Ask the application to approve a shell command; raises if it does not."""
    from ipybox.tool_exec.client import approve_shell_command

    approve_shell_command(kind, cmd)


@contextlib.contextmanager
def _expanded_already(shell: Any) -> Iterator[None]:
    """Switch IPython's `{var}`/`$var` expansion off: the command was expanded for approval."""
    shell.var_expand = lambda cmd, *args, **kwargs: cmd
    try:
        yield
    finally:
        del shell.var_expand  # the class's method again


def _approve_line_commands(shell: Any) -> None:
    """Route `!cmd`, `!!cmd`, `x = !cmd` and every magic built on them through approval.

    `system` and `getoutput` are what `%sx`/`%system`/`%sc`/`%%!`, `%pip`/`%conda`/`%uv`,
    aliases (`%ls`, ...), `%man` and `%clear` call; `system_piped` and `system_raw` are the
    public ways around `system`. The command is expanded here, in the caller's namespace, so the
    application approves what will run; the originals run it without expanding it again.
    """
    getoutput = shell.getoutput

    def approving(run: Callable[[str], Any]) -> Callable[[str], Any]:
        def approved_system(cmd: str) -> Any:
            expanded = shell.var_expand(cmd, depth=1)
            _ask("shell", expanded)
            with _approved_run(), _expanded_already(shell):
                return run(expanded)

        return approved_system

    def approved_getoutput(cmd: str, split: bool = True, depth: int = 0) -> Any:
        expanded = shell.var_expand(cmd, depth=depth + 1)
        _ask("shell", expanded)
        with _approved_run(), _expanded_already(shell):
            return getoutput(expanded, split=split)

    for name in ("system", "system_piped", "system_raw"):
        setattr(shell, name, approving(getattr(shell, name)))
    shell.getoutput = approved_getoutput


def _approve_cell_magics(shell: Any) -> None:
    """Route `%%script` and every named script magic (`%%bash`, `%%sh`, `%%perl`, `%%ruby`,
    `%%python3`, `%%pypy`, ... and any added by configuration) through approval.

    They all run through `ScriptMagics.shebang`; the `script` entry is that method, bound. A
    `%%bash`/`%%sh` cell is approved as its body (what the shell runs), others with their line.
    """
    manager = shell.magics_manager
    find = getattr(manager, "find", None)  # IPython may register them lazily: load them now
    if find is not None:
        find("cell", "script")
    magics = manager.registry.get("ScriptMagics")
    if magics is None:
        return
    shebang = magics.shebang

    @functools.wraps(shebang)  # keeps `parser`, which the magic reads from `self.shebang`
    def approved(line: str, cell: str | None = None) -> Any:
        words = line.split()
        plain_shell = len(words) == 1 and os.path.basename(words[0]) in ("bash", "sh")
        _ask("shell_magic", (cell or "") if plain_shell else f"%%script {line}\n{cell or ''}")
        with _approved_run():
            return shebang(line, cell)

    magics.shebang = approved
    manager.magics["cell"]["script"] = approved


# --- executions ----------------------------------------------------------------------------------

#: The execution (cell) that code runs on behalf of: set for each cell, copied into the asyncio
#: tasks it creates; threads record it when started (see `_track_executions`).
_execution: contextvars.ContextVar[str | None] = contextvars.ContextVar("ipybox_execution", default=None)
#: The cell running now, if any.
_running: str | None = None


def execution_tags() -> dict[str, str | None]:
    """Which execution the calling code belongs to, and which one is running now.

    The tool server refuses a tool call or shell command whose execution has finished (a thread
    or task a cell left behind), so an approval given to a later execution never covers it.
    """
    origin = _execution.get()
    if origin is None:
        origin = getattr(threading.current_thread(), "_ipybox_execution", None)
    return {"execution": origin, "running": _running}


def _track_executions(shell: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def pre_run_cell(*_: object) -> None:
        global _running
        kernel = getattr(shell, "kernel", None)
        parent = kernel.get_parent() if kernel is not None else {}
        _running = str(parent.get("header", {}).get("msg_id") or uuid.uuid4().hex)
        _execution.set(_running)

    def post_run_cell(*_: object) -> None:
        global _running
        _running = None

    start = threading.Thread.start

    def tagged_start(self: threading.Thread) -> None:
        self._ipybox_execution = execution_tags()["execution"]  # type: ignore[attr-defined]
        start(self)

    submit = ThreadPoolExecutor.submit

    def tagged_submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return submit(self, contextvars.copy_context().run, fn, *args, **kwargs)  # workers are reused

    threading.Thread.start = tagged_start  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = tagged_submit  # type: ignore[method-assign,assignment]
    shell.events.register("pre_run_cell", pre_run_cell)
    shell.events.register("post_run_cell", post_run_cell)


def _guard(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not _approved:
            shown = "subprocess" if name.startswith("subprocess.") else f"{name}()"  # upstream's wording
            raise RuntimeError(
                f"Direct {shown} calls are not allowed: {name}() is disabled in this kernel. Start "
                "programs with a shell command (`!cmd`, `x = !cmd` or a %%bash cell), which the "
                "application approves."
            )
        return func(*args, **kwargs)

    return guarded


def _require_shell_escape() -> None:
    """Make Python's own ways of starting a program raise outside an approved command."""
    import pty
    import subprocess

    names = [n for n in dir(os) if n.startswith(("exec", "spawn", "posix_spawn"))]
    for name in ["system", *names]:
        setattr(os, name, _guard(f"os.{name}", getattr(os, name)))
    pty.spawn = _guard("pty.spawn", pty.spawn)
    # Popen is what run(), call(), check_output() and asyncio's subprocesses all go through.
    popen_init = subprocess.Popen.__init__
    subprocess.Popen.__init__ = _guard("subprocess.Popen", popen_init)  # type: ignore[method-assign]


# --- pip -------------------------------------------------------------------------------------------

#: `pip` for the kernel's Python: its own pip module if it has one, else uv's pip (environments
#: made by uv, such as uvx's, have no pip); a clear refusal where the environment is read-only.
_PIP_SHIM = """#!/bin/sh
# pip for the Python of an ipybox kernel (written by ipybox at kernel start)
py={python}
case "$1" in
install | uninstall)
    own=""
    for arg in "$@"; do
        case "$arg" in --target* | -t | --prefix* | --root* | --user) own=1 ;; esac
    done
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    if [ -z "$own" ] && ! "$py" -c 'import os, sys; sys.exit(not os.access(sys.argv[1], os.W_OK))' "$site"
    then
        echo "pip: this kernel cannot write to its Python environment ($site)." \\
            "A sandboxed kernel may write only its working directory and reach only the network" \\
            "its policy allows: install the package outside the kernel (into the environment" \\
            "ipybox runs in, or with the ipybox MCP server's install_package tool), then import it" \\
            "(reset only if this kernel had imported an older version of it)." >&2
        exit 1
    fi
    ;;
esac
if "$py" -m pip --version >/dev/null 2>&1; then
    exec "$py" -m pip "$@"
fi
uv=$(command -v uv 2>/dev/null || true)
for candidate in "$HOME/.local/bin/uv" "$HOME/.cargo/bin/uv" \\
    "${{XDG_DATA_HOME:-$HOME/.local/share}}/ipybox/uv-venv/bin/uv"; do
    [ -n "$uv" ] && break
    [ -x "$candidate" ] && uv=$candidate
done
if [ -z "$uv" ]; then
    echo "pip: $py has no pip module and uv was not found on PATH;" \\
        "install uv (docs.astral.sh/uv), or pip into that environment." >&2
    exit 1
fi
[ "$#" -gt 0 ] || exec "$uv" pip --help
command=$1
shift
exec "$uv" pip "$command" --python "$py" "$@"
"""


def _pip_for_this_python(shell: Any) -> None:
    """Put a `pip` for this kernel's Python first on the kernel's PATH and make `%pip` use it.

    `!pip` would otherwise run whichever pip is first on PATH (another Python's), and IPython's
    `%pip` runs `python -m pip`, which environments made by uv lack. `%pip` goes through
    `shell.system`, so with shell approval it is asked for like any `!cmd`.
    """
    directory = tempfile.mkdtemp(prefix="kernel-pip-")
    shim = os.path.join(directory, "pip")
    with open(shim, "w") as f:
        f.write(_PIP_SHIM.format(python=shlex.quote(sys.executable)))
    os.chmod(shim, 0o755)
    os.symlink("pip", os.path.join(directory, "pip3"))
    # an unset PATH means the default search path, which must stay after ours
    os.environ["PATH"] = os.pathsep.join([directory, os.environ.get("PATH", os.defpath)])
    import atexit

    atexit.register(shutil.rmtree, directory, True)

    def pip(line: str) -> None:
        shell.system(f"pip {line}")  # the shim, first on PATH; an approval shows `pip install x`
        if shell.user_ns.get("_exit_code") == 0:  # nothing changed when pip failed
            sys.stdout.write("Note: restart the kernel (reset) to use updated packages it had imported.\n")

    shell.register_magic_function(pip, "line", "pip")


def _keep_output_when_behind(shell: Any) -> None:
    """Make ipykernel's iopub socket wait for ipybox rather than drop messages when its queue is full."""
    thread = getattr(getattr(shell, "kernel", None), "iopub_thread", None)
    socket = getattr(thread, "socket", None)
    if thread is None or socket is None:
        return
    import zmq  # ipykernel's own dependency, imported already

    def no_drop() -> None:
        with contextlib.suppress(zmq.ZMQError):  # not an XPUB (older ipykernel): nothing to set
            socket.setsockopt(zmq.XPUB_NODROP, 1)

    thread.schedule(no_drop)  # in the thread that owns the socket
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "flush_timeout"):
            stream.flush_timeout = _FLUSH_SECONDS


def _split_streams(limit: int) -> None:
    """Send printed text longer than one message allows in pieces (ipykernel sends what a flush
    collected as one message). A character takes at most 6 bytes in JSON (`\\u001b`)."""
    piece = max((limit - _ENVELOPE) // 6, 1024)
    streams: tuple[Any, ...] = (sys.stdout, sys.stderr)
    for stream in streams:
        if not hasattr(stream, "register_hook"):  # not ipykernel's
            continue

        def split(msg: dict[str, Any], stream: Any = stream) -> dict[str, Any]:
            text = msg["content"]["text"]
            while len(text) > piece:
                head, text = text[:piece], text[piece:]
                content = {"name": stream.name, "text": head}
                part = stream.session.msg("stream", content, parent=msg["parent_header"])
                stream.session.send(stream.pub_thread, part, ident=stream.topic)
            msg["content"]["text"] = text
            return msg

        # Hooks are per thread, and the stream sends from ipykernel's I/O thread.
        stream.pub_thread.schedule(functools.partial(stream.register_hook, split))


def _replace_oversize_outputs(shell: Any, limit: int) -> None:
    """Replace a displayed output too large for one message by a line saying so (the host would
    drop it whole, and the connection with it)."""
    if not hasattr(shell.display_pub, "register_hook"):
        return

    def fit(msg: dict[str, Any]) -> dict[str, Any]:
        content = msg["content"]
        size = sum(len(value) for value in content.get("data", {}).values() if isinstance(value, str))
        if size + _ENVELOPE <= limit:
            return msg
        kinds = ", ".join(content.get("data", {}))
        note = (
            f"[ipybox] An output of {size / 2**20:.1f} MiB ({kinds}) was not sent: larger than the "
            f"{limit / 2**20:.1f} MiB ipybox takes in one message (ResourceLimits.message_bytes, ipybox "
            "--max-message-bytes). Save it to a file, display it smaller, or raise the limit."
        )
        content["data"], content["metadata"] = {"text/plain": note}, {}
        return msg

    shell.display_pub.register_hook(fit)


class _Interrupts:
    """Makes SIGINT raise only while ipykernel handles an execute request and its cell's code has
    not ended: not while the kernel sends the reply. The cell has ended at a `post_execute` (the
    first event after a cell, also a silent one; this callback runs first of all) that comes when
    no `run_cell_async` is under way, so a cell that runs others (`%run x.ipynb`, `run_cell()`)
    stays interruptible after them. Only the main thread's cells count: signals go to it alone."""

    def __init__(self) -> None:
        self.cell_runs = False
        self.depth = 0  # run_cell_async calls under way in the main thread

    def on_signal(self, *_: object) -> None:
        if self.cell_runs:
            raise KeyboardInterrupt

    def install(self, shell: Any) -> None:
        kernel = getattr(shell, "kernel", None)
        if kernel is None or not hasattr(kernel, "pre_handler_hook"):  # not ipykernel
            return
        run_cell_async = shell.run_cell_async

        def pre_handler_hook() -> None:  # ipykernel's, with this handler instead of Python's default
            self.cell_runs = _handling(kernel) in ("execute_request", None)
            kernel.saved_sigint_handler = signal.signal(signal.SIGINT, self.on_signal)

        @functools.wraps(run_cell_async)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            main = threading.current_thread() is threading.main_thread()
            self.depth += main
            try:
                return await run_cell_async(*args, **kwargs)
            finally:
                self.depth -= main

        kernel.pre_handler_hook = pre_handler_hook
        shell.run_cell_async = counted
        shell.events.callbacks["post_execute"].insert(0, self.ended)

    def ended(self, *_: object) -> None:
        if self.depth == 0 and threading.current_thread() is threading.main_thread():
            self.cell_runs = False


def _handling(kernel: Any) -> str | None:
    """The type of the shell request `kernel` handles (None if it cannot tell)."""
    try:
        return str(kernel.get_parent("shell")["header"]["msg_type"])
    except Exception:  # noqa: BLE001 - another ipykernel: any request counts
        return None


def without_hidden_tail(tb: types.TracebackType) -> types.TracebackType:
    """`tb` (a copy) without the frames at its end that hide themselves, if any other is left."""
    entries = []
    entry: types.TracebackType | None = tb
    while entry is not None:
        entries.append(entry)
        entry = entry.tb_next
    keep = len(entries)
    while keep > 1 and entries[keep - 1].tb_frame.f_locals.get("__tracebackhide__"):
        keep -= 1
    if keep == len(entries):
        return tb
    copy: types.TracebackType | None = None
    for entry in reversed(entries[:keep]):
        copy = types.TracebackType(copy, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    assert copy is not None
    return copy


def _hide_hidden_tails(shell: Any) -> None:
    formatter = shell.InteractiveTB
    structured_traceback = formatter.structured_traceback

    @functools.wraps(structured_traceback)
    def trimmed(etype: Any, evalue: Any, etb: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(etb, types.TracebackType):
            etb = without_hidden_tail(etb)
        return structured_traceback(etype, evalue, etb, *args, **kwargs)

    formatter.structured_traceback = trimmed


def install(shell: Any) -> None:
    """Set all of the above up in the kernel's interactive shell."""
    shell.user_ns["exit"] = shell.user_ns["quit"] = _no_exit
    # ipykernel asks programs for colours (TERM=xterm-color, FORCE_COLOR, CLICOLOR_FORCE); the
    # output goes to an agent, not a terminal.
    os.environ["TERM"] = "dumb"
    for name in ("FORCE_COLOR", "CLICOLOR_FORCE", "CLICOLOR"):
        os.environ.pop(name, None)
    _Interrupts().install(shell)
    _forward_fd_output()
    shell.events.register("post_run_cell", drain_fd_output)
    _track_executions(shell)
    with contextlib.suppress(OSError):  # a kernel without a writable temp dir keeps IPython's pip
        _pip_for_this_python(shell)
    _keep_output_when_behind(shell)
    _hide_hidden_tails(shell)
    if limit := os.environ.pop(MESSAGE_BYTES_VAR, ""):
        _split_streams(int(limit))
        _replace_oversize_outputs(shell, int(limit))
    if directory := os.environ.pop(WORKING_DIR_VAR, ""):
        shell.events.register("post_run_cell", _restore_working_dir(directory))
    if os.environ.pop(APPROVE_SHELL_VAR, "") == "1":
        _approve_line_commands(shell)
        _approve_cell_magics(shell)
        if os.environ.pop(REQUIRE_SHELL_ESCAPE_VAR, "") == "1":
            _require_shell_escape()
