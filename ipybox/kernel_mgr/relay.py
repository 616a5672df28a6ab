"""Carries a kernel's ZMQ connections through the host, forwarding what the kernel sends one whole
message at a time, so that no message larger than the limit, counting all its parts, reaches ZMQ.

ZMQ can limit each part of a message (`MAXMSGSIZE`), but stores all the parts of a message
before it counts the message against its queue: a kernel that wrote one message of very many
parts to its socket made the host hold all of them. Here the host's sockets connect to a relay in a directory
of the host's own, and the relay connects on to the kernel's sockets: what the host sends passes
unchanged; what the kernel sends is read as ZMTP 3 frames, and each message is held until its
last part came (then sent on) or it grew past `limit` (then it is dropped, its remaining parts
skipped, and `drops` counted). Flow control passes through, so a kernel that sends faster than the
host reads waits, holding what it has not sent itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import stat
import struct
import tempfile
from collections.abc import Callable, Iterable

from ipybox import _json_text
from ipybox.errors import IpyboxError

logger = logging.getLogger(__name__)

_GREETING = 64  # ZMTP 3: signature (10), version (2), mechanism (20), as-server (1), filler (31)
_MORE, _LONG, _COMMAND = 0x01, 0x02, 0x04
_DELIMITER = b"<IDS|MSG>"  # between a Jupyter message's routing identities and its signed parts
#: How often the relay tries a kernel socket that does not accept yet (the kernel still starting,
#: or gone): at first, then at most.
_RETRY_FIRST_S, _RETRY_MAX_S = 0.002, 0.02


class ProtocolViolation(IpyboxError):
    """The kernel's side did not speak ZMTP 3 with the NULL mechanism, as every kernel ipybox starts does."""


class Frames:
    """Splits the kernel's side of one ZMTP 3 connection into whole messages of at most `limit`
    bytes (None: no limit), each passed on once complete; larger ones are dropped."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._greeting = bytearray()
        self._buffer = bytearray()
        self._message = bytearray()  # the message being read: its frames, headers included
        self._body_left = 0  # bytes of the current frame's body still to come
        self._more = False  # the current frame has more after it
        self._skipping = False  # the current message is being dropped
        self.drops = 0

    def feed(self, data: bytes | bytearray) -> bytearray:
        """What of `data` (and what came before) is complete and may be sent on."""
        out = bytearray()
        view = memoryview(data)
        if len(self._greeting) < _GREETING:
            take = _GREETING - len(self._greeting)
            self._greeting += view[:take]
            self._check_greeting()
            out += view[:take]  # sent on as it comes: each side waits for parts of the other's
            view = view[take:]
        self._buffer += view
        pos = 0
        with memoryview(self._buffer) as buffer:
            while pos < len(buffer):
                if not self._body_left:
                    header = self._header(buffer, pos)
                    if header is None:
                        break
                    flags, size, length = header
                    if not flags & _COMMAND:  # a command amid a message's frames leaves it open: the
                        self._more = bool(flags & _MORE)  # host's ZMQ joins the frames around it
                    whole = len(self._message) + length + size
                    if not self._skipping and self._limit is not None and whole > self._limit:
                        self._skipping = True
                        self._message.clear()
                        self.drops += 1
                    take, self._body_left = length, size
                else:
                    take = min(self._body_left, len(buffer) - pos)
                    self._body_left -= take
                if not self._skipping:
                    self._message += buffer[pos : pos + take]
                pos += take
                if not self._body_left:  # a header with an empty body, or a body's end
                    self._frame_ended(out)
        del self._buffer[:pos]
        return out

    def _frame_ended(self, out: bytearray) -> None:
        if self._more:
            return
        if (
            not self._skipping
            and self._limit is not None
            and _parsed_bytes(self._message, self._limit) > self._limit
        ):
            self._skipping = True  # small as text, but not once parsed
            self.drops += 1
        if not self._skipping:
            out += self._message
        self._message.clear()
        self._skipping = False

    @staticmethod
    def _header(buffer: memoryview, pos: int) -> tuple[int, int, int] | None:
        """The next frame's flags, body size and header length, or None until all of it came."""
        if len(buffer) - pos < 2:
            return None
        flags = buffer[pos]
        if flags & ~(_MORE | _LONG | _COMMAND):
            raise ProtocolViolation(f"a frame with unknown flags {flags:#x}")
        if not flags & _LONG:
            return flags, buffer[pos + 1], 2
        if len(buffer) - pos < 9:
            return None
        return flags, struct.unpack_from(">Q", buffer, pos + 1)[0], 9

    def _check_greeting(self) -> None:
        greeting = bytes(self._greeting)
        if greeting[:1] not in (b"", b"\xff") or (len(greeting) > 9 and not greeting[9] & 1):
            raise ProtocolViolation("not a ZMTP greeting")
        if len(greeting) > 10 and greeting[10] < 3:
            raise ProtocolViolation(f"ZMTP version {greeting[10]}, not 3")
        if len(greeting) >= 32 and greeting[12:32].rstrip(b"\0") != b"NULL":
            raise ProtocolViolation("a security mechanism other than NULL")


def _parsed_bytes(message: bytearray, limit: int) -> int:
    """At most what the host holds of a Jupyter message (ZMTP frames, headers included) once
    parsed: its JSON parts (header, parent header, metadata, content) counted from their text
    (a `{}` of three bytes parses to a 64-byte dict), its other frames as they are; read closely
    only where a guess passes `limit`."""
    spans, pos = [], 0
    with memoryview(message) as view:
        while pos < len(view):
            flags, size, length = Frames._header(view, pos) or (0, len(view) - pos - 1, 1)
            if not flags & _COMMAND:  # a command (a ping) is no part of the message
                spans.append((pos + length, pos + length + size))
            pos += length + size
    is_delimiter = (b - a == len(_DELIMITER) and message[a:b] == _DELIMITER for a, b in spans)
    delimiter = next((i for i, found in enumerate(is_delimiter) if found), len(spans))
    json_parts = spans[delimiter + 2 : delimiter + 6]
    others = len(message) - sum(b - a for a, b in json_parts)
    # each part by its own widths (a frame's size, a byte of 0xc4 or more, is not a wide character);
    # one within an eighth of the limit at its widest is not copied to find them: the four parts'
    # guesses can then make no more than half the limit together
    enough = limit // 8
    parts = (_json_text.measure(message, start=a, end=b, enough=enough, within=limit) for a, b in json_parts)
    return others + sum(part.parsed_bytes for part in parts)


class _End(asyncio.Protocol):
    """One end of a relayed connection: passes what it reads to the other end, with flow control."""

    def __init__(self, relay: Relay, frames: Frames | None = None, target: str | None = None) -> None:
        self.relay = relay
        self.frames = frames  # on the kernel's end: what it sends, read as frames
        self.target = target  # on the host's end: the kernel socket to connect on to
        self.transport: asyncio.Transport | None = None
        self.other: _End | None = None
        self.waiting: list[bytes | bytearray] = []  # read before the other end was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.relay._ends.add(self)
        if self.target is not None:
            self.relay._connect_on(self, self.target)

    def data_received(self, data: bytes | bytearray) -> None:
        if self.frames is not None:
            drops = self.frames.drops
            try:
                data = self.frames.feed(data)
            except ProtocolViolation as e:
                logger.warning("closing a kernel connection: %s", e)
                self.close()
                return
            if self.frames.drops > drops:
                self.relay._dropped(self.frames.drops - drops)
        if not data:
            return
        if self.other is not None and self.other.transport is not None:
            self.other.transport.write(data)
        else:
            self.waiting.append(data)

    def pause_writing(self) -> None:  # the other side reads slower than this one is written to
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay._ends.discard(self)
        if self.other is not None:
            self.other.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class Relay:
    """Relays the ipc sockets of one kernel (`ip`-`port` paths) for the host (see the module).

    `start()` returns the `ip` the host's client connects to instead; messages over `limit` bytes
    are counted in `drops` and reported to `on_drop`.
    """

    def __init__(self, ip: str, ports: Iterable[int], limit: int | None) -> None:
        self._kernel_ip = ip
        self._ports = tuple(ports)
        self._limit = limit
        self._dir: str | None = None
        self._servers: list[asyncio.Server] = []
        self._ends: set[_End] = set()
        self._connecting: set[asyncio.Task[None]] = set()
        self.drops = 0
        self.on_drop: Callable[[], None] | None = None

    async def start(self) -> str:
        self._dir = tempfile.mkdtemp(prefix="ipybox-relay-")  # the host's own: 0700
        ip = os.path.join(self._dir, "k")
        try:
            for port in self._ports:
                accept = functools.partial(self._accepted, f"{self._kernel_ip}-{port}")
                server = await asyncio.get_running_loop().create_unix_server(accept, f"{ip}-{port}")
                self._servers.append(server)
        except BaseException:
            await self.close()
            raise
        return ip

    def _accepted(self, target: str) -> _End:
        return _End(self, target=target)

    def _connect_on(self, host: _End, target: str) -> None:
        task = asyncio.ensure_future(self._connect(host, target))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(self, host: _End, target: str) -> None:
        """Connect `host`'s connection on to the kernel's socket `target`, once it accepts."""
        loop = asyncio.get_running_loop()
        kernel = _End(self, Frames(self._limit))
        retry = _RETRY_FIRST_S
        while True:
            if host.transport is None or host.transport.is_closing():
                return
            try:
                if not stat.S_ISSOCK(os.lstat(target).st_mode):  # a link or file the kernel put there
                    raise ConnectionRefusedError(f"{target} is not a socket")
                await loop.create_unix_connection(lambda: kernel, target)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                await asyncio.sleep(retry)  # not bound yet, or gone; ZMQ would retry too
                retry = min(2 * retry, _RETRY_MAX_S)
            except OSError:
                host.close()
                return
        kernel.other, host.other = host, kernel
        assert kernel.transport is not None and host.transport is not None
        for end in (host, kernel):  # what either read before they were joined
            for data in end.waiting:
                end.other.transport.write(data)  # type: ignore[union-attr]
            end.waiting.clear()
        if host.transport.is_closing():
            kernel.close()

    def _dropped(self, count: int) -> None:
        self.drops += count
        if self.on_drop is not None:
            self.on_drop()

    async def close(self) -> None:
        for task in list(self._connecting):
            task.cancel()
        for server in self._servers:
            server.close()
        for end in list(self._ends):
            end.close()
        self._servers = []
        if self._dir is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self._dir)
            self._dir = None
