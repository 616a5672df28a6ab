"""One IPython kernel process, driven over ZMQ ipc sockets with jupyter_client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

import zmq
from jupyter_client.asynchronous.client import AsyncKernelClient

from ipybox.errors import IpyboxError
from ipybox.kernel_mgr import iopub, reaper
from ipybox.kernel_mgr.cgroup import KernelCgroup, fallback
from ipybox.kernel_mgr.deadline import Deadline, Overtaken, race
from ipybox.kernel_mgr.in_kernel import MESSAGE_BYTES_VAR
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.output import KernelEvent, OutputCollector
from ipybox.kernel_mgr.relay import Relay
from ipybox.upstream import adopt_kernel_info

logger = logging.getLogger(__name__)

#: Variables a Python process needs to run; everything else of the parent's stays out of the kernel.
_ESSENTIAL_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM")
#: Which certificate authorities the host trusts (a TLS-intercepting proxy's among them), so that
#: `!pip install`, `requests` or `curl` in the kernel trust what they trust on the host.
_TRUST_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT")
#: The host's proxies: passed to kernels that reach the network as the host does (not a
#: sandboxed one, whose only way out is the sandbox's own proxy, set by srt).
_PROXY_ENV = tuple(
    name for base in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY") for name in (base, base.lower())
)
_CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
_IN_KERNEL = "import ipybox.kernel_mgr.in_kernel as _m; _m.install(get_ipython()); del _m"
_KERNEL_OPTIONS = (
    "--IPKernelApp.log_level=ERROR",
    "--HistoryManager.enabled=False",
    "--IPKernelApp.capture_fd_output=False",  # in_kernel forwards fd 1 and 2 itself (`_FdOutput`)
    f"--IPKernelApp.exec_lines={json.dumps([_IN_KERNEL])}",
)


class KernelDied(IpyboxError):
    """The kernel process exited while a request was outstanding.

    `cause`, when known (the memory limit), replaces the guess made from the exit status.
    """

    def __init__(self, returncode: int | None, cause: str | None = None) -> None:
        self.returncode = returncode
        super().__init__(f"The kernel was killed: {cause}." if cause else describe_exit(returncode))


_SIGNAL_HINTS = {
    signal.SIGKILL: "killed, most often by the out-of-memory killer or a memory limit",
    signal.SIGSEGV: "a segmentation fault in native code",
    signal.SIGABRT: "aborted by native code",
}


def describe_exit(returncode: int | None) -> str:
    """Explain a kernel's exit status in words an agent can act on."""
    if returncode is None:
        return "The kernel stopped responding."
    if 128 < returncode < 128 + 65:  # a wrapper (the sandbox) reports death by signal N as 128 + N
        returncode = 128 - returncode
    if returncode >= 0:
        return f"The kernel process exited with code {returncode}."
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"The kernel died from signal {-returncode}."
    hint = _SIGNAL_HINTS.get(sig)
    return f"The kernel died from {sig.name}" + (f" ({hint})." if hint else ".")


@dataclass
class KernelReply:
    """The outcome of one execute request."""

    status: str
    error: str | None = None

    @classmethod
    def of(cls, content: dict[str, Any], traceback: str | None) -> KernelReply:
        """The outcome an `execute_reply`'s `content` reports; `traceback` is the error output, if any."""
        status = content.get("status", "error")
        error = traceback
        if status == "error" and error is None:
            error = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
        elif status != "ok" and error is None:  # "aborted": the code did not run
            error = f"The kernel did not run the code (status: {status})."
        return cls(status, error)


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Log `message` as a warning the first time only: every kernel start would repeat it."""
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def kernel_environment(extra: Mapping[str, str] | None, *, proxies: bool = True) -> dict[str, str]:
    """The environment a kernel starts with: the essentials, the host's trusted certificates and
    (with `proxies`) its proxies, plus what the caller gives."""
    names = _ESSENTIAL_ENV + _TRUST_ENV + (_PROXY_ENV if proxies else ())
    env = {key: os.environ[key] for key in names if key in os.environ}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Handover:
    """A command prefix whose programs read data from ipybox once they run: `argv(path)` is the
    prefix, told to read the file `path` (a pipe it inherits on fd 3); `data()` is what ipybox writes
    there, built after the prefix's first program started, so that building it overlaps their
    start (the sandbox: srt's node loads its modules while ipybox works out the policy).

    If `data()` raises, the pipe closes empty or cut short, which the reader must refuse; the
    kernel is stopped and the error raised.
    """

    argv: Callable[[str], Sequence[str]]
    data: Callable[[], bytes]


#: Where a `Handover` prefix finds its pipe. The pipe comes in as stdout (a slot of any number
#: can only be kept at its number: `pass_fds`) and this moves it to fd 3, stdout to /dev/null:
#: node (srt) marks close-on-exec only the descriptors up to its first closed one above 15, so a
#: higher number would reach every process in the sandbox.
_HANDOVER_FD = ["/bin/sh", "-c", 'exec "$@" 3<&1 1>/dev/null', "ipybox-handover"]


def _write_all(fd: int, data: bytes) -> None:
    """Write `data` to the pipe `fd` and close it; a reader that is gone (its start failed, which
    the start reports) is no error here."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)


async def _next_message(channel: Any, timeout: float, at_once: bool = True) -> dict[str, Any]:
    """The channel's next message (`get_msg(timeout)`); with `at_once`, one that is there already
    is taken at once, without the poll and its event-loop turn that `get_msg` spends on it: a
    cell's messages mostly come together, and each turn is a good part of a short cell's round
    trip. (A caller reading many lets the event loop turn now and then: messages taken at once
    never yield to it.)"""
    try:
        if not at_once:
            raise zmq.Again
        frames = await channel.socket.recv_multipart(zmq.NOBLOCK)  # a future done at once
    except zmq.Again:
        return await channel.get_msg(timeout=timeout)  # type: ignore[no-any-return]
    _, parts = channel.session.feed_identities(frames)
    return channel.session.deserialize(parts)  # type: ignore[no-any-return]


class Kernel:
    """An ipykernel subprocess and an async client connected to it.

    The kernel gets its own session (process group) so an interrupt or a stop reaches
    everything it spawned, and its own connection file and ipc sockets in `runtime_dir`.
    `env` is the environment of the launch command (`command_prefix`, e.g. the sandbox's
    programs, then the kernel); `kernel_env` holds variables for the kernel alone, which the
    kernel's launcher sets once every program of the prefix has started (see `launch`).
    A `relayed` kernel's sockets are reached through a `Relay`, which drops any message over
    `limits.message_bytes`: what a sandboxed kernel needs, as it may be hostile to the host; an
    unsandboxed one runs as the user and could end the host process anyway, so it is connected
    directly (ipybox's code in the kernel keeps its ordinary output within the limit).
    """

    def __init__(
        self,
        runtime_dir: Path,
        cwd: Path,
        env: Mapping[str, str],
        command_prefix: Sequence[str] | Handover = (),
        limits: ResourceLimits | None = None,
        *,
        own_dir: bool = False,
        kernel_env: Mapping[str, str] | None = None,
        relayed: bool = False,
    ) -> None:
        self._runtime_dir = runtime_dir
        self._relayed = relayed  # through a `Relay`: for a kernel that cannot reach the host otherwise
        self._own_dir = own_dir  # `runtime_dir` is this kernel's alone: removed whole by stop()
        self._cwd = cwd
        self._env = dict(env)
        self._prefix = command_prefix if isinstance(command_prefix, Handover) else list(command_prefix)
        self._limits = limits or ResourceLimits()
        self._kernel_env = dict(kernel_env or {})
        if self._limits.message_bytes is not None:  # the kernel's side keeps ordinary output within it
            self._kernel_env[MESSAGE_BYTES_VAR] = str(self._limits.message_bytes)
        self._cgroup: KernelCgroup | None = None
        self._oom_kills = 0  # out-of-memory kills in the kernel's cgroup before the current request
        self._name = f"k{secrets.token_hex(4)}"
        self._process: asyncio.subprocess.Process | None = None
        self._client: AsyncKernelClient | None = None
        self._relay: Relay | None = None
        self._exited: asyncio.Task[int] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._interrupt_sent: str | None = None  # an interrupt request not answered yet

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process else None

    async def start(self, timeout: float = 30) -> None:
        """Launch the kernel and wait until it answers a kernel_info request; each wait (a
        `Handover` prefix reading its data, the kernel's answer) is bounded by `timeout`."""
        conn_file = self._write_connection_file()
        self._cgroup = KernelCgroup.create(self._limits)
        rlimits, warning = fallback(self._limits, self._cgroup)
        if warning is not None:
            _warn_once(warning)
        # The launcher applies rlimits (if any) and ends the kernel when its stdin (a pipe we
        # hold) closes: that is how a kernel, even in a sandbox, notices ipybox has died.
        launch = [sys.executable, "-m", "ipybox.kernel_mgr.launch", "--watch-stdin", *rlimits]
        if self._kernel_env:
            launch += ["--env-file", str(self._write_private(f"{self._name}-env.json", self._env_settings()))]
        launch += ["--", "-f", str(conn_file), *_KERNEL_OPTIONS]
        await self._spawn(launch, timeout)
        assert self._process is not None
        self._exited = asyncio.create_task(_exit_status(self._process))
        try:  # e.g. a socket path too long for ipc: leave no kernel behind
            client = self._client = AsyncKernelClient()  # stop() closes it, also if this start fails
            iopub.bound(client)
            client.load_connection_file(str(conn_file))
            if self._relayed:  # the host's sockets reach the kernel through it
                ports = range(1, len(_CHANNELS) + 1)
                self._relay = Relay(str(self._runtime_dir / self._name), ports, self._limits.message_bytes)
                client.ip = await self._relay.start()
            client.start_channels(hb=False)  # the process itself is watched; no heartbeat thread needed
        except BaseException:
            await asyncio.shield(self.stop())
            raise
        try:
            await self._race(self._wait_ready(client), timeout)
        except (KernelDied, RuntimeError, TimeoutError) as e:
            stderr = await self._read_stderr()
            await self.stop()
            raise RuntimeError(f"The IPython kernel failed to start: {e}\n{stderr}".strip()) from None
        except BaseException:  # cancelled while starting: leave nothing behind
            await asyncio.shield(self.stop())
            raise
        if self._process.stderr is not None:
            self._stderr_task = asyncio.create_task(self._discard(self._process.stderr))

    async def _spawn(self, launch: list[str], timeout: float) -> None:
        """Start the command prefix with the kernel's `launch` command (in the kernel's cgroup, if
        any); a `Handover` prefix is handed its data once it runs, within `timeout` seconds.
        Nothing is left on errors."""
        pipe: tuple[int, int] | None = None
        try:  # the command too: a Handover's is made here (srt looked up), and may fail
            if isinstance(self._prefix, Handover):  # the prefix reads what it is handed from a pipe
                pipe = os.pipe()
                argv = [*_HANDOVER_FD, *self._prefix.argv("/dev/fd/3"), *launch]
            else:
                argv = [*self._prefix, *launch]
            if self._cgroup is not None:  # joined before anything runs; srt and the kernel inherit it
                argv = self._cgroup.wrap(argv)
            self._process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=self._cwd,
                env=self._env,
                stdin=asyncio.subprocess.PIPE,
                stdout=pipe[0] if pipe is not None else asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except BaseException:
            if pipe is not None:
                os.close(pipe[1])
            await asyncio.shield(self.stop())
            raise
        finally:
            if pipe is not None:
                os.close(pipe[0])
        if isinstance(self._prefix, Handover) and pipe is not None:
            await self._hand_over(self._prefix, pipe[1], timeout)

    async def _hand_over(self, handover: Handover, fd: int, timeout: float) -> None:
        """Build `handover`'s data while the prefix's programs start, and write it to the pipe
        `fd` (closed after, also on errors) within `timeout` seconds; the kernel is stopped if
        that fails, times out or is cancelled (the write's thread then ends on a broken pipe)."""
        try:
            data = handover.data()
        except BaseException:
            os.close(fd)
            await asyncio.shield(self.stop())
            raise
        try:  # in a thread: data over the pipe's capacity waits for the reader
            await asyncio.wait_for(asyncio.to_thread(_write_all, fd, data), timeout)
        except TimeoutError:
            await asyncio.shield(self.stop())
            raise RuntimeError(
                f"The IPython kernel failed to start: its command prefix did not read the {len(data)} "
                f"bytes handed to it within {timeout:g} s (the sandbox's srt stuck while starting?)"
            ) from None
        except BaseException:
            await asyncio.shield(self.stop())
            raise

    @staticmethod
    async def _wait_ready(client: AsyncKernelClient) -> None:
        """Wait until the kernel answers a kernel_info request and iopub delivers messages.

        What `client.wait_for_ready()` checks, without its closing 0.2 s wait for more iopub
        messages: stale ones are skipped anyway, as they belong to no execute request.
        """
        while True:
            client.kernel_info()
            try:
                reply = await client.get_shell_msg(timeout=1)
                if reply["msg_type"] != "kernel_info_reply":
                    continue
                await client.get_iopub_msg(timeout=0.2)  # iopub_welcome or status: iopub is connected
            except Empty:
                continue
            adopt_kernel_info(client, reply)
            return

    @staticmethod
    async def _discard(stream: asyncio.StreamReader) -> None:
        """Keep the kernel's stderr pipe drained so a chatty kernel never blocks on it."""
        while await stream.read(65536):
            pass

    async def _read_stderr(self) -> str:
        if self._process is None or self._process.stderr is None:
            return ""
        with contextlib.suppress(Exception):
            data = await asyncio.wait_for(self._process.stderr.read(8192), 1)
            return data.decode(errors="replace")
        return ""

    def _write_connection_file(self) -> Path:
        self._runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        info: dict[str, Any] = {f"{ch}_port": i for i, ch in enumerate(_CHANNELS, start=1)}
        info |= {
            "transport": "ipc",
            "ip": str(self._runtime_dir / self._name),
            "key": secrets.token_hex(32),
            "signature_scheme": "hmac-sha256",
            "kernel_name": "python3",
        }
        return self._write_private(f"{self._name}.json", info)

    def _env_settings(self) -> dict[str, Any]:
        """The launcher's settings file: the kernel's variables, and the environment they were
        given beside, so that the launcher can tell which ones the sandbox set on the way."""
        return {"env": self._kernel_env, "given": self._env}

    def _write_private(self, name: str, data: dict[str, Any]) -> Path:
        path = self._runtime_dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        return path

    async def _race(self, aw: Any, limit: float | Deadline | None, grace: float = 0) -> Any:
        """Await `aw`, but raise `KernelDied` as soon as the kernel process exits, and
        `TimeoutError` once `limit` (seconds, or a `Deadline` plus `grace` seconds) has passed."""
        assert self._exited is not None
        try:
            task = await race(aw, self._exited, limit, grace)
        except Overtaken:
            raise self._died(self._exited.result()) from None
        if task.cancelled():  # its sockets were closed: the kernel was stopped meanwhile
            raise self._died(self.returncode)
        return task.result()

    def _died(self, returncode: int | None) -> KernelDied:
        """`KernelDied`, naming the memory limit if the cgroup's out-of-memory killer struck meanwhile."""
        if self._cgroup is not None and self._cgroup.memory is not None:
            if self._cgroup.oom_kills() > self._oom_kills:
                hint = "use less memory (e.g. process data in chunks) or raise the limit"
                return KernelDied(returncode, f"{self._cgroup.memory_note()}; {hint}")
        return KernelDied(returncode)

    async def execute(
        self,
        code: str,
        on_event: Callable[[KernelEvent], None],
        deadline: Deadline,
        interrupt_grace: float = 5,
    ) -> KernelReply:
        """Run `code`, passing each output event to `on_event` as it arrives.

        Completes only when both the execute reply and the kernel's idle status for this
        request have arrived. On reaching `deadline` the cell is interrupted and
        `TimeoutError` raised; if the interrupt does not take within `interrupt_grace`
        seconds, the kernel is killed and `KernelDied` raised instead.
        """
        client = self._require_client()
        await self._interrupt_taken(client, deadline)
        if self._cgroup is not None:
            self._oom_kills = self._cgroup.oom_kills()
        # stop_on_error=False: an interrupted (e.g. abandoned) cell must not make the kernel
        # abort the request queued behind it.
        msg_id = client.execute(
            code, silent=False, store_history=False, allow_stdin=False, stop_on_error=False
        )
        collector = OutputCollector(on_event)
        try:
            await self._race(self._drain_iopub(client, msg_id, collector), deadline)
            reply = await self._arrived_shell_reply(client, msg_id)
            if reply is None:
                reply = await self._race(self._shell_reply(client, msg_id), deadline, grace=5)
        except TimeoutError:
            await self._interrupt(client, msg_id, interrupt_grace)
            raise
        except KernelDied:
            await self._collect_last_output(client, msg_id, collector)
            raise
        except asyncio.CancelledError:
            # The caller gave up on this cell: stop it so the kernel is free for the next one.
            self._send_interrupt(client)
            raise
        result = KernelReply.of(reply["content"], collector.error)
        if note := self._oom_note():
            if result.error is None:
                on_event(KernelEvent("stream", text=f"\n{note}\n"))
            else:
                result.error += f"\n{note}"
        return result

    def _oom_note(self) -> str | None:
        """A line naming the memory limit if it made the cgroup kill a process (not the kernel) meanwhile."""
        if self._cgroup is None or self._cgroup.memory is None:
            return None
        kills = self._cgroup.oom_kills()
        if kills <= self._oom_kills:
            return None
        self._oom_kills = kills
        return f"[ipybox] A process of this kernel was killed (SIGKILL): {self._cgroup.memory_note()}."

    async def _drain_iopub(self, client: AsyncKernelClient, msg_id: str, collector: OutputCollector) -> None:
        """Pass the request's output to `collector` until the kernel says it is idle; where the
        relay dropped a message over `message_bytes` (see `relay`), the output says so."""
        relay = self._relay
        drops = relay.drops if relay is not None else 0
        taken = 0
        while True:
            taken += 1
            try:  # every 32nd through the event loop: a flood of output holds up nothing else
                msg = await _next_message(client.iopub_channel, timeout=1, at_once=taken % 32 != 0)
            except Empty:
                continue
            except (ValueError, RecursionError) as e:  # not a Jupyter message (no delimiter, a bad
                # signature, JSON nested too deep to parse): skipped
                logger.warning("skipped a malformed message from kernel %s: %s", self.pid, e)
                continue
            if relay is not None and relay.drops > drops:  # dropped before this message was passed on
                drops = relay.drops
                collector.note(iopub.dropped_note(self._limits.message_bytes))
            parent = msg["parent_header"].get("msg_id")
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                if parent == msg_id:
                    return
            elif parent == msg_id:
                collector.add(msg)

    @staticmethod
    async def _collect_last_output(
        client: AsyncKernelClient, msg_id: str, collector: OutputCollector
    ) -> None:
        """Take the output a dying kernel sent just before it died (e.g. what a cell printed before
        a memory bomb), which may still wait in the socket."""
        with contextlib.suppress(Exception):
            while True:
                msg = await client.get_iopub_msg(timeout=0.2)
                if msg["parent_header"].get("msg_id") == msg_id:
                    collector.add(msg)

    @staticmethod
    async def _arrived_shell_reply(client: AsyncKernelClient, msg_id: str) -> dict[str, Any] | None:
        """The execute reply if it is there already, as it mostly is once the idle status came;
        taken without the task and wait of a race. None if it has not arrived."""
        taken = 0
        with contextlib.suppress(Empty):
            while True:
                taken += 1
                try:  # as `_drain_iopub`: every 32nd through the event loop
                    msg = await _next_message(client.shell_channel, 0, at_once=taken % 32 != 0)
                except (ValueError, RecursionError):  # malformed: skipped
                    continue
                if msg["parent_header"].get("msg_id") == msg_id:
                    return msg
        return None

    async def _shell_reply(self, client: AsyncKernelClient, msg_id: str) -> dict[str, Any]:
        return await self._reply(client.get_shell_msg, msg_id)

    async def _reply(self, get: Callable[..., Awaitable[dict[str, Any]]], msg_id: str) -> dict[str, Any]:
        """The reply to `msg_id` from the channel `get` reads; others, and malformed ones, are skipped."""
        while True:
            try:
                msg = await get()
            except (ValueError, RecursionError) as e:
                logger.warning("skipped a malformed message from kernel %s: %s", self.pid, e)
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    async def _interrupt(self, client: AsyncKernelClient, msg_id: str, grace: float) -> None:
        """Interrupt the running cell over the control channel; kill the kernel if that fails."""
        self._send_interrupt(client)
        try:
            await self._race(self._drain_iopub(client, msg_id, OutputCollector(lambda _: None)), grace)
            await self._race(self._shell_reply(client, msg_id), grace)
        except (TimeoutError, KernelDied):
            logger.warning("kernel %s ignored an interrupt; killing it", self.pid)
            await self.stop()
            raise KernelDied(None) from None

    def _send_interrupt(self, client: AsyncKernelClient) -> None:
        request = client.session.msg("interrupt_request", {})
        client.control_channel.send(request)
        self._interrupt_sent = request["header"]["msg_id"]

    async def _interrupt_taken(self, client: AsyncKernelClient, deadline: Deadline, grace: float = 5) -> None:
        """Wait until the kernel answered the last interrupt request, if one is unanswered: it
        answers once it has sent itself the signal, so an interrupt meant for an earlier cell
        never reaches the next one. The wait is not the next cell's time (`deadline` paused)."""
        if (msg_id := self._interrupt_sent) is None:
            return
        deadline.pause()
        try:
            await self._race(self._reply(client.get_control_msg, msg_id), grace)
        except TimeoutError:
            logger.warning("kernel %s did not answer an interrupt request within %g s", self.pid, grace)
        finally:
            deadline.resume()
        # not when cancelled meanwhile: the next cell waits for the answer then
        self._interrupt_sent = None

    def _require_client(self) -> AsyncKernelClient:
        if self._client is None or not self.alive:
            raise self._died(self.returncode)
        return self._client

    async def stop(self, grace: float = 2) -> None:
        """Kill the kernel's whole process group (and cgroup, if it has one) and remove its files."""
        if self._client is not None:
            with contextlib.suppress(Exception):  # fails for channels a failed start left half made
                self._client.stop_channels()
            # its own ZMQ context: ended here, with any socket left, not by the garbage collector,
            # whose term() would wait for such a socket
            with contextlib.suppress(Exception):
                self._client.context.destroy(linger=0)
            self._client = None
        if self._relay is not None:
            await self._relay.close()
            self._relay = None
        process = self._process
        if process is not None and process.returncode is None:
            # while the kernel lives, escaped processes (setsid, daemons) are still its descendants
            await asyncio.to_thread(reaper.kill_escaped, process.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            exited = self._exited or asyncio.ensure_future(_exit_status(process))
            try:
                await asyncio.wait_for(asyncio.shield(exited), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await asyncio.shield(exited)
        if process is not None:
            # Children of the kernel (e.g. a background `!sleep`) share its process group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        await self._remove_cgroup()  # also kills what left the process group (e.g. `setsid`)
        if process is not None:
            await self._drain_stderr(process, grace)
        for task in (self._exited, self._stderr_task):
            if task is not None and not task.done():
                task.cancel()
        if process is not None and process.stdin is not None:
            process.stdin.close()
        self._remove_files()

    async def _remove_cgroup(self, timeout: float = 5) -> None:
        """Kill what is left in the kernel's cgroup and remove it once those processes are gone."""
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not cgroup.remove():  # killed processes take a moment to exit
            if loop.time() > deadline:
                logger.warning("could not remove the cgroup of kernel %s: %s", self.pid, cgroup.procs_files)
                return
            await asyncio.sleep(0.02)

    async def _drain_stderr(self, process: asyncio.subprocess.Process, timeout: float) -> None:
        """Read the kernel's stderr to its end, which comes once every process holding it is gone.

        Only then does asyncio close the process's transport; one left open warns when it is
        garbage-collected, and fails if its event loop is closed by then.
        """
        if process.stderr is None:
            return
        drain = self._stderr_task or asyncio.ensure_future(self._discard(process.stderr))
        with contextlib.suppress(Exception):  # TimeoutError: something outside the group still holds it
            await asyncio.wait_for(drain, timeout)

    def _remove_files(self) -> None:
        if self._own_dir:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
            return
        for path in self._runtime_dir.glob(f"{self._name}*"):
            with contextlib.suppress(OSError):
                path.unlink()


async def _exit_status(process: asyncio.subprocess.Process, interval: float = 0.05) -> int:
    """The exit status of `process`, as soon as it has exited.

    Not `process.wait()`: that also waits until every process that inherited the kernel's stdin
    and stderr pipes has closed them. When `srt` (the process ipybox starts for a sandboxed
    kernel) is killed, its wrappers and the kernel inside hold them, so a dead kernel went
    unnoticed until its cell ended, however long that took.
    """
    while (returncode := process.returncode) is None:  # noqa: ASYNC110 - no event for the exit alone
        await asyncio.sleep(interval)
    return returncode
