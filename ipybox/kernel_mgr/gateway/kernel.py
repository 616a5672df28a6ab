"""Kernels on a Jupyter Kernel Gateway or Enterprise Gateway, over its REST and websocket API.

`GatewayKernel` does for a remote kernel what `Kernel` does for a local process: start (POST
`/api/kernels`), execute over the websocket `/api/kernels/{id}/channels` (complete when both the
execute reply and the idle status have arrived), interrupt (POST `.../interrupt`) and stop
(DELETE). The remote kernel has no ipybox installed: a setup cell right after start copies the
modules generated code needs into a directory on its `sys.path` (see `bootstrap`), and a
`DirectoryMirror` keeps packages such as `mcptools/` in sync before each execution.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import socket
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx2
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from ipybox.kernel_mgr.backend import OnEvent
from ipybox.kernel_mgr.deadline import Deadline, Overtaken, race
from ipybox.kernel_mgr.gateway.config import GatewayConfig, GatewayError
from ipybox.kernel_mgr.gateway.mirror import DirectoryMirror
from ipybox.kernel_mgr.kernel import KernelDied, KernelReply
from ipybox.kernel_mgr.output import KernelEvent, OutputCollector

logger = logging.getLogger(__name__)
_warned: set[tuple[str, str]] = set()


class GatewayKernelLost(KernelDied):
    """The remote kernel is gone: the connection closed, or the gateway restarted the kernel."""

    def __init__(self, reason: str) -> None:
        Exception.__init__(self, f"The kernel on the gateway is gone: {reason}.")
        self.returncode = None


class GatewayKernel:
    """A kernel started on a gateway and the websocket connected to it.

    `setup` is code run (silently) right after the kernel is ready; `mirror`, if given, is
    synchronized into the kernel before each execution.
    """

    def __init__(self, config: GatewayConfig, setup: str = "", mirror: DirectoryMirror | None = None) -> None:
        self.config = config
        self._setup = setup
        self._mirror = mirror.copy() if mirror is not None else None
        self.kernel_id: str | None = None
        self._http: httpx2.AsyncClient | None = None
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lost: asyncio.Future[str] | None = None
        self._waiters: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._interrupting: asyncio.Future[None] | None = None  # an interrupt request still on its way
        self._session = uuid.uuid4().hex
        #: What the set-up cell found missing in the kernel (see `bootstrap.runtime_problem`).
        self.setup_problem: str | None = None

    @property
    def pid(self) -> int | None:
        return None  # the process runs elsewhere

    @property
    def returncode(self) -> int | None:
        return None

    @property
    def alive(self) -> bool:
        return self._ws is not None and self._lost is not None and not self._lost.done()

    @property
    def gateway(self) -> str:
        return self.config.url

    async def start(self, timeout: float = 30) -> None:
        """Start a kernel on the gateway, connect to it and run the set-up cell."""
        deadline = Deadline(timeout)
        try:
            await self._start(deadline)
        except BaseException:
            await asyncio.shield(self.stop())
            raise

    async def _start(self, deadline: Deadline) -> None:
        self._http = httpx2.AsyncClient(
            base_url=self.config.url, headers=self.config.headers, timeout=self.config.request_timeout
        )
        body = {"name": self.config.kernel_name, "env": {"KERNEL_USERNAME": _user()} | dict(self.config.env)}
        post = asyncio.ensure_future(self._request("POST", "/api/kernels", json=body))
        try:
            response = await asyncio.shield(post)
        except GatewayError:
            await self._check_kernelspec()
            raise
        except asyncio.CancelledError:
            # The gateway starts the kernel anyway: learn its id, so that stop() shuts it down.
            with contextlib.suppress(Exception):
                self.kernel_id = str((await post).json()["id"])
            raise
        self.kernel_id = str(response.json()["id"])
        logger.info("started kernel %s on %s", self.kernel_id, self.gateway)
        try:
            self._ws = await asyncio.wait_for(
                connect(
                    self.config.ws_url(self.kernel_id),
                    additional_headers=self.config.headers,
                    max_size=None,
                    compression=None,
                    open_timeout=None,
                ),
                _remaining(deadline),
            )
        except (OSError, InvalidHandshake, TimeoutError) as e:
            raise GatewayError(f"Cannot connect to the kernel's websocket on {self.gateway}: {e}") from None
        self._lost = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read(self._ws, self._lost))
        try:
            await self._wait_ready(deadline)
        except TimeoutError:
            raise GatewayError(
                f"The kernel on {self.gateway} did not become ready within {deadline.seconds:g} s "
                "(raise kernel_init_timeout for gateways that launch kernels in pods)."
            ) from None
        except KernelDied as e:
            raise GatewayError(f"The kernel on {self.gateway} failed to start: {e}") from None
        if self._setup:
            await self._run_setup(self._setup, deadline)

    async def _check_kernelspec(self) -> None:
        """Raise a `GatewayError` that says so if the gateway has no kernelspec of the wanted name."""
        try:
            specs = (await self._request("GET", "/api/kernelspecs")).json().get("kernelspecs", {})
        except (GatewayError, ValueError, AttributeError):
            return
        if isinstance(specs, dict) and self.config.kernel_name not in specs:
            raise GatewayError(
                f"The kernel gateway at {self.gateway} has no kernelspec named {self.config.kernel_name!r} "
                f"(it has: {', '.join(sorted(specs)) or 'none'}); set kernel_name to one of them."
            )

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        """A REST request to the gateway; failures become `GatewayError` naming the gateway and cause."""
        assert self._http is not None
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx2.TimeoutException:
            raise GatewayError(
                f"The kernel gateway at {self.gateway} did not answer {method} {path} within "
                f"{self.config.request_timeout:g} s."
            ) from None
        except httpx2.HTTPError as e:
            raise GatewayError(f"Cannot reach the kernel gateway at {self.gateway}: {e}") from None
        if response.status_code >= 400:
            reason = _reason(response)
            if response.status_code == 401 or (response.status_code == 403 and "token" in reason.lower()):
                reason = (
                    "the token is missing or wrong (kernel_gateway_token / IPYBOX_KERNEL_GATEWAY_TOKEN): "
                    + reason
                )
            raise GatewayError(
                f"The kernel gateway at {self.gateway} answered {method} {path} with HTTP "
                f"{response.status_code}: {reason}"
            )
        return response

    async def _wait_ready(self, deadline: Deadline) -> None:
        """Send kernel_info requests until one is answered (a pod may take a while to come up)."""
        while True:
            msg_id = await self._send("shell", "kernel_info_request", {})
            queue = self._waiters[msg_id] = asyncio.Queue()
            try:
                await self._race(self._next(queue, "kernel_info_reply"), min(_remaining(deadline), 2.0))
                return
            except TimeoutError:
                if deadline.expired():
                    raise
            finally:
                self._waiters.pop(msg_id, None)

    @staticmethod
    async def _next(queue: asyncio.Queue[dict[str, Any]], msg_type: str) -> dict[str, Any]:
        while (msg := await queue.get())["msg_type"] != msg_type:
            pass
        return msg

    async def _run_setup(self, code: str, deadline: Deadline) -> None:
        try:
            self.setup_problem = await self.run_quiet(code, deadline) or None
        except RuntimeError as e:
            raise GatewayError(f"Setting up the kernel on {self.gateway} failed: {e}") from None
        where = (self.gateway, self.config.kernel_name)
        if self.setup_problem is not None and where not in _warned:
            _warned.add(where)  # once per gateway and kernelspec, not for every spare
            logger.warning("kernel %r on %s: %s", self.config.kernel_name, self.gateway, self.setup_problem)

    async def run_quiet(self, code: str, deadline: Deadline | None = None) -> str:
        """Run ipybox's own code silently (no history, no hooks); its printed text, or `RuntimeError`."""
        chunks: list[str] = []

        def on_event(event: KernelEvent) -> None:
            if event.kind == "stream":
                chunks.append(event.text)

        reply = await self._execute(code, on_event, deadline or Deadline(None), 5, silent=True)
        if reply.error is not None:
            raise RuntimeError(reply.error)
        return "".join(chunks)

    async def execute(
        self, code: str, on_event: OnEvent, deadline: Deadline, interrupt_grace: float = 5
    ) -> KernelReply:
        """Run `code` like `Kernel.execute`, after bringing the mirrored packages up to date."""
        if self._mirror is not None:
            for batch in self._mirror.changes():
                await self.run_quiet(batch, deadline)
            self._mirror.commit()
        return await self._execute(code, on_event, deadline, interrupt_grace)

    async def evaluate(self, expression: str, deadline: Deadline | None = None) -> str:
        """The `text/plain` value of `expression`, evaluated without a cell (no IPython parsing,
        which costs ~0.3 s per MB of source); `RuntimeError` if it raises."""
        content = _execute_content("", silent=True) | {"user_expressions": {"value": expression}}
        reply = await self._roundtrip(content, OutputCollector(lambda _: None), deadline or Deadline(None), 5)
        result = reply["content"].get("user_expressions", {}).get("value", {})
        if result.get("status") != "ok":
            raise RuntimeError(f"{result.get('ename', 'Error')}: {result.get('evalue', '')}")
        return str(result.get("data", {}).get("text/plain", ""))

    async def _execute(
        self,
        code: str,
        on_event: Callable[[KernelEvent], None],
        deadline: Deadline,
        interrupt_grace: float,
        silent: bool = False,
    ) -> KernelReply:
        collector = OutputCollector(on_event)
        reply = await self._roundtrip(_execute_content(code, silent), collector, deadline, interrupt_grace)
        return KernelReply.of(reply["content"], collector.error)

    async def _roundtrip(
        self, content: dict[str, Any], collector: OutputCollector, deadline: Deadline, interrupt_grace: float
    ) -> dict[str, Any]:
        """Send an execute request; its reply once the reply and the idle status have both come."""
        if not self.alive:
            raise self._gone()
        if (interrupting := self._interrupting) is not None:  # an earlier cell's interrupt reaches
            deadline.pause()  # the kernel before this cell does, never this cell
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(interrupting), 5)
            finally:
                deadline.resume()
            self._interrupting = None  # not when cancelled meanwhile: the next cell waits then
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        msg_id = _msg_id()
        self._waiters[msg_id] = queue
        try:
            await self._send("shell", "execute_request", content, msg_id)
            reply: dict[str, Any] = await self._race(self._until_done(queue, collector), deadline)
            return reply
        except TimeoutError:
            await self._interrupt(queue, interrupt_grace)
            raise
        except KernelDied:
            while not queue.empty():  # what the kernel sent before the connection went
                collector.add(queue.get_nowait())
            raise
        except asyncio.CancelledError:  # the caller gave up: free the kernel for the next cell
            self._interrupting = self._spawn(self._post_interrupt())
            raise
        finally:
            self._waiters.pop(msg_id, None)

    @staticmethod
    async def _until_done(queue: asyncio.Queue[dict[str, Any]], collector: OutputCollector) -> dict[str, Any]:
        """Collect output until both the execute reply and the idle status have arrived."""
        reply: dict[str, Any] | None = None
        idle = False
        while reply is None or not idle:
            msg = await queue.get()
            msg_type = msg.get("msg_type")
            if msg_type == "execute_reply":
                reply = msg
            elif msg_type == "status":
                idle = idle or msg["content"].get("execution_state") == "idle"
            elif msg.get("channel") == "iopub":
                collector.add(msg)
        return reply

    async def _interrupt(self, queue: asyncio.Queue[dict[str, Any]], grace: float) -> None:
        """Interrupt the running cell; stop the kernel if the interrupt does not take."""
        try:
            await self._post_interrupt()
            await self._race(self._until_done(queue, OutputCollector(lambda _: None)), grace)
        except (TimeoutError, KernelDied, GatewayError) as e:
            logger.warning(
                "kernel %s on %s ignored an interrupt (%s); stopping it", self.kernel_id, self.gateway, e
            )
            await self.stop()
            raise KernelDied(None, "it did not respond to an interrupt and was stopped") from None

    async def _post_interrupt(self) -> None:
        if self.kernel_id is not None and self._http is not None:
            await self._request("POST", f"/api/kernels/{quote(self.kernel_id)}/interrupt")

    def _spawn(self, coro: Any) -> asyncio.Future[None]:
        async def quietly() -> None:
            with contextlib.suppress(Exception):
                await coro

        task = asyncio.ensure_future(quietly())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _race(self, aw: Any, limit: float | Deadline | None) -> Any:
        """Await `aw`; raise `GatewayKernelLost` if the kernel goes first, `TimeoutError` at `limit`."""
        assert self._lost is not None
        try:
            return (await race(aw, self._lost, limit)).result()
        except Overtaken:
            raise self._gone() from None

    def _gone(self) -> GatewayKernelLost:
        reason = "it was stopped"
        if self._lost is not None and self._lost.done():
            reason = self._lost.result()
        return GatewayKernelLost(f"{reason} ({self.gateway}, kernel {self.kernel_id})")

    async def _send(self, channel: str, msg_type: str, content: dict[str, Any], msg_id: str = "") -> str:
        msg_id = msg_id or _msg_id()
        message = {
            "header": {
                "msg_id": msg_id,
                "msg_type": msg_type,
                "username": "ipybox",
                "session": self._session,
                "version": "5.3",
                "date": "",
            },
            "parent_header": {},
            "metadata": {},
            "content": content,
            "channel": channel,
            "buffers": [],
        }
        assert self._ws is not None
        try:
            await self._ws.send(json.dumps(message))
        except ConnectionClosed:
            raise self._gone() from None
        return msg_id

    async def _read(self, ws: ClientConnection, lost: asyncio.Future[str]) -> None:
        """Route incoming messages to the request they answer; record why the connection ended."""
        reason = "the connection to the kernel gateway closed (the gateway stopped or restarted)"
        quick_ack = _quick_ack(ws)
        try:
            while True:
                quick_ack()
                raw = await ws.recv()
                if isinstance(raw, bytes):
                    continue  # binary frames carry buffers (comms); nothing ipybox asked for
                msg = json.loads(raw)
                msg["msg_type"] = msg.get("msg_type") or msg.get("header", {}).get("msg_type")
                if msg["msg_type"] == "status" and not msg.get("parent_header"):
                    state = msg.get("content", {}).get("execution_state")
                    if state in ("restarting", "dead"):
                        reason = "the kernel died on the gateway, which restarted it (its state is lost)"
                        if state == "dead":
                            reason = "the kernel died on the gateway"
                        break
                queue = self._waiters.get(msg.get("parent_header", {}).get("msg_id", ""))
                if queue is not None:
                    queue.put_nowait(msg)
        except ConnectionClosed:
            pass
        except (ValueError, KeyError, AttributeError) as e:
            reason = f"the gateway sent a malformed message ({e})"
        finally:
            if not lost.done():
                lost.set_result(reason)

    async def stop(self, grace: float = 2) -> None:
        """Close the websocket and shut the kernel down on the gateway (DELETE)."""
        if self._lost is not None and not self._lost.done():
            self._lost.set_result("it was stopped")
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), grace)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        kernel_id, self.kernel_id = self.kernel_id, None
        http, self._http = self._http, None
        if http is None:
            return
        try:
            if kernel_id is not None:
                with contextlib.suppress(httpx2.HTTPError):
                    await asyncio.wait_for(
                        http.delete(f"/api/kernels/{quote(kernel_id)}"), self.config.request_timeout
                    )
        except TimeoutError:
            logger.warning("could not shut kernel %s down on %s: no answer", kernel_id, self.gateway)
        finally:
            await http.aclose()


def _user() -> str:
    """Who starts kernels: Enterprise Gateway runs (and authorizes) them as `KERNEL_USERNAME`."""
    with contextlib.suppress(Exception):
        return getpass.getuser()
    return "ipybox"


def _execute_content(code: str, silent: bool) -> dict[str, Any]:
    # stop_on_error=False: an interrupted cell must not make the kernel abort the next request.
    return {
        "code": code,
        "silent": silent,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": False,
    }


def _msg_id() -> str:
    return uuid.uuid4().hex


def _remaining(deadline: Deadline) -> float:
    remaining = deadline.remaining()
    if remaining is None:
        return 3600.0
    if remaining <= 0:
        raise TimeoutError
    return remaining


def _reason(response: httpx2.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        body = response.json()
        message = body.get("message") or body.get("reason")
        if message:
            return str(message)
    return response.text[:300] or response.reason_phrase


def _quick_ack(ws: ClientConnection) -> Callable[[], None]:
    """A function that makes the next ACKs on `ws`'s socket go out at once (Linux `TCP_QUICKACK`).

    Gateways write each message as a small segment with Nagle's algorithm on; a client that
    delays its ACK (40 ms on Linux) then holds up the next message. Linux clears the flag again
    after a while, so it is set before each receive.
    """
    sock = ws.transport.get_extra_info("socket") if ws.transport is not None else None
    option = getattr(socket, "TCP_QUICKACK", None)
    if sock is None or option is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return lambda: None

    def set_quick_ack() -> None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, 1)

    return set_quick_ack
