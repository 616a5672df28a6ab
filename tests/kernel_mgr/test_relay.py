"""The relay between the host's ZMQ sockets and a kernel's: whole messages within the limit pass,
larger ones (however many parts) are dropped with the connection kept, anything but ZMTP 3 ends it.

Real ZMQ sockets on both sides (a ROUTER or PUB bound where a kernel binds, a DEALER or SUB of the
host connected through the relay), and the frame parser fed a real ZMTP stream in random pieces.
"""

from __future__ import annotations

import asyncio
import random
import struct
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session

from ipybox.kernel_mgr.relay import Frames, ProtocolViolation, Relay

LIMIT = 64 * 1024
GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x01" + b"NULL".ljust(20, b"\0") + b"\0" * 32


def _frame(body: bytes, more: bool = False, command: bool = False) -> bytes:
    flags = (0x01 if more else 0) | (0x04 if command else 0)
    if len(body) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def _message(parts: list[bytes]) -> bytes:
    return b"".join(_frame(part, more=i < len(parts) - 1) for i, part in enumerate(parts))


def test_frames_pass_whole_messages_within_the_limit_in_any_pieces() -> None:
    messages = [[b"a" * 10, b"b" * 300], [b"c"], [b"x" * 5000] * 3, [b"d" * 2, b""], [b"e" * 100]]
    stream = GREETING + _frame(b"\x05READY", command=True) + b"".join(map(_message, messages))
    rng = random.Random(7)
    for limit in (None, 10_000, 400):
        expected = GREETING + _frame(b"\x05READY", command=True)
        expected += b"".join(_message(m) for m in messages if limit is None or len(_message(m)) <= limit)
        dropped = sum(limit is not None and len(_message(m)) > limit for m in messages)
        for _ in range(50):
            frames, out, pos = Frames(limit), bytearray(), 0
            while pos < len(stream):
                step = rng.randint(1, 700)
                out += frames.feed(stream[pos : pos + step])
                pos += step
            assert bytes(out) == expected and frames.drops == dropped


@pytest.mark.parametrize(
    "stream",
    [
        b"GET / HTTP/1.1\r\n",  # not ZMTP
        GREETING[:10] + b"\x02" + GREETING[11:],  # ZMTP 2
        GREETING[:12] + b"CURVE".ljust(20, b"\0") + GREETING[32:],  # another mechanism
        GREETING + b"\x80\x01x",  # unknown frame flags
    ],
)
def test_frames_refuse_anything_but_zmtp3_null(stream: bytes) -> None:
    with pytest.raises(ProtocolViolation):
        Frames(LIMIT).feed(stream)


async def _through_relay(tmp_path: Path, bound: int, connecting: int) -> tuple[zmq.asyncio.Socket, ...]:
    context = zmq.asyncio.Context.instance()
    kernel_ip = str(tmp_path / "kernel")
    kernel = context.socket(bound)
    kernel.bind(f"ipc://{kernel_ip}-1")
    relay = Relay(kernel_ip, [1], LIMIT)
    host_ip = await relay.start()
    host = context.socket(connecting)
    if connecting == zmq.SUB:
        host.setsockopt(zmq.SUBSCRIBE, b"")
    host.connect(f"ipc://{host_ip}-1")
    return kernel, host, relay  # type: ignore[return-value]


async def _subscribed(kernel: zmq.asyncio.Socket, host: zmq.asyncio.Socket) -> None:
    """Wait until the host's subscription went through the relay to the kernel's PUB socket."""
    for _ in range(100):
        await kernel.send(b"hello")
        if await host.poll(20):
            break
    assert await host.recv() == b"hello"


async def test_a_message_over_the_limit_is_dropped_and_the_connection_kept(tmp_path: Path) -> None:
    kernel, host, relay = await _through_relay(tmp_path, zmq.PUB, zmq.SUB)
    try:
        await _subscribed(kernel, host)
        for parts in ([b"x" * LIMIT], [b"y" * 1024] * 200, [b"z" * (LIMIT // 2)] * 3):  # one part, many, few
            await kernel.send_multipart(parts)
            await kernel.send_multipart([b"after", str(len(parts)).encode()])
            assert await asyncio.wait_for(host.recv_multipart(), 5) == [b"after", str(len(parts)).encode()]
        assert relay.drops == 3
        within = [b"w" * 1000] * 60  # 60 KB in 60 parts: passes whole
        await kernel.send_multipart(within)
        assert await asyncio.wait_for(host.recv_multipart(), 5) == within
        # a Jupyter message small as text whose content would parse to far more than the limit
        # (a `{}` of 3 bytes is a 64-byte dict): dropped; the same size of text in a string passes
        signed = [b"id", b"<IDS|MSG>", b"signature", b"{}", b"{}", b"{}"]
        objects = [*signed, b"[" + b"{}," * 4000 + b"{}]"]
        text = [*signed, b'"' + b"x" * 12_000 + b'"', b"a buffer: [{},{},{}" * 100]
        for message in (objects, text):
            assert sum(map(len, message)) < LIMIT
            await kernel.send_multipart(message)
            await kernel.send_multipart([b"after"])
            assert await asyncio.wait_for(host.recv_multipart(), 5) in ([b"after"], text)
        assert relay.drops == 4
    finally:
        await relay.close()
        kernel.close(0)
        host.close(0)


def _stream(session: Session, text: str, parent_size: int) -> dict[str, Any]:
    """A print's message, its parent header (a frame of its own) padded to `parent_size` bytes."""
    parent = {"msg_id": "m", "msg_type": "execute_request", "username": ""}
    parent["username"] = "u" * (parent_size - len(session.pack(parent)))
    assert len(session.pack(parent)) == parent_size
    return session.msg("stream", {"name": "stdout", "text": text}, parent=parent)


async def test_jupyter_messages_are_counted_by_their_json_parts_own_characters(tmp_path: Path) -> None:
    """A message's JSON parts count as wide as their own widest character: not as one of the
    bytes between them (a frame's size of 0xc4 or more, as a parent header of 200 to 255 bytes
    has, once made a print of a third of the limit count 4 times and be dropped). Bytes that are
    not UTF-8, which jupyter_client reads as U+FFFD (2 bytes a character), count so."""
    kernel, host, relay = await _through_relay(tmp_path, zmq.PUB, zmq.SUB)
    session = Session(key=b"key")
    try:
        await _subscribed(kernel, host)
        ordinary = [  # ASCII prints within the limit, whatever the frames' sizes
            _stream(session, "a" * (LIMIT // 3), 0xF5),  # a parent header of 0xf5 bytes: 4 times
            _stream(session, "b" * (LIMIT // 2 + 1000), 0xDC),  # 2 times
            _stream(session, "c" * (LIMIT * 2 // 3), 0xDC),
            _stream(session, "d" * (0xC4C4 - 34), 0x80),  # the content's frame size holds 0xc4
        ]
        for message in ordinary:
            parts = session.serialize(message, ident=[b"stream.stdout"])
            assert sum(map(len, parts)) < LIMIT
            await kernel.send_multipart(parts)
            received = await asyncio.wait_for(host.recv_multipart(), 5)
            passed = session.deserialize(session.feed_identities(received)[1])
            assert passed["content"] == message["content"]
        assert relay.drops == 0
        signed = [b"stream.stdout", b"<IDS|MSG>", b"", b"{}", b"{}", b"{}"]
        for broken in (b"\x80", b"\xc0\xaf", b"\xc3", b"\xc3\xa9\xa9"):  # read as U+FFFD: 2 bytes each
            content = b'{"name":"stdout","text":"' + broken + b"x" * 40_000 + b'"}'
            await kernel.send_multipart([*signed, content])
            await kernel.send_multipart([b"after"])
            assert await asyncio.wait_for(host.recv_multipart(), 5) == [b"after"], broken
        assert relay.drops == 4
    finally:
        await relay.close()
        kernel.close(0)
        host.close(0)


def _ready(socket_type: bytes) -> bytes:
    name = b"Socket-Type"
    body = b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(socket_type)) + socket_type
    return _frame(body, command=True)


async def test_commands_amid_a_messages_frames_do_not_split_it(tmp_path: Path) -> None:
    """A hostile kernel writes ZMTP itself: a command (a ping) between a message's frames, which
    the host's ZMQ takes and joins the frames around, once cut the message in two for the relay,
    each half within the limit (as bytes, and parsed) and the whole far over it."""
    ping, ping_more = _frame(b"\x04PING\0\0", command=True), b"\x05" + _frame(b"\x04PING\0\0")[1:]
    objects = b"[" + b"{}," * 8000 + b"{}]"  # 24 KB of text, over a MB parsed
    sent: asyncio.Queue[bytes] = asyncio.Queue()

    async def hostile_kernel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(GREETING + _ready(b"PUB"))
        await reader.readexactly(len(GREETING))
        while True:  # the host's frames (its READY, then its subscription): it is ready
            _, size = await reader.readexactly(2)  # short frames, all of them
            body = await reader.readexactly(size)
            if body.startswith((b"\x01", b"\x09SUBSCRIBE")):
                break
        while True:
            writer.write(await sent.get())

    kernel_ip = str(tmp_path / "kernel")
    server = await asyncio.start_unix_server(hostile_kernel, f"{kernel_ip}-1")
    relay = Relay(kernel_ip, [1], LIMIT)
    host = zmq.asyncio.Context.instance().socket(zmq.SUB)
    host.setsockopt(zmq.SUBSCRIBE, b"")
    host.connect(f"ipc://{await relay.start()}-1")
    signed = [_frame(part, more=True) for part in (b"id", b"<IDS|MSG>", b"sig")]
    json_parts = [_frame(b"{}", more=True)] * 3
    try:
        variants = [
            [*signed, ping, *json_parts, _frame(objects)],  # parsed over the limit
            [*signed, *json_parts[:1], ping, *json_parts[1:], _frame(objects)],
            [*signed, ping_more, *json_parts, _frame(objects)],  # the command flagged as having more
            [*[_frame(b"x" * 40_000, more=True), ping] * 3, _frame(b"end")],  # 120 KB as bytes
        ]
        for i, frames in enumerate(variants):
            await sent.put(b"".join(frames) + _frame(str(i).encode()))
            assert await asyncio.wait_for(host.recv_multipart(), 5) == [str(i).encode()], i
        assert relay.drops == len(variants)
        within = [_frame(b"a" * 1000, more=True), ping, _frame(b"b" * 1000)]  # passes whole
        await sent.put(b"".join(within))
        assert await asyncio.wait_for(host.recv_multipart(), 5) == [b"a" * 1000, b"b" * 1000]
    finally:
        await relay.close()
        host.close(0)
        server.close()


async def test_requests_and_replies_pass_both_ways(tmp_path: Path) -> None:
    kernel, host, relay = await _through_relay(tmp_path, zmq.ROUTER, zmq.DEALER)
    try:
        await host.send_multipart([b"request", b"1"])  # sent before the relay reached the kernel
        ident, *request = await asyncio.wait_for(kernel.recv_multipart(), 5)
        assert request == [b"request", b"1"]
        await kernel.send_multipart([ident, b"reply", b"x" * (LIMIT + 1)])  # over: dropped
        await kernel.send_multipart([ident, b"reply", b"2"])
        assert await asyncio.wait_for(host.recv_multipart(), 5) == [b"reply", b"2"]
    finally:
        await relay.close()
        kernel.close(0)
        host.close(0)


async def test_a_peer_speaking_something_else_is_disconnected(tmp_path: Path) -> None:
    kernel_ip = str(tmp_path / "kernel")
    fake = await asyncio.start_unix_server(_say_http, f"{kernel_ip}-1")
    relay = Relay(kernel_ip, [1], LIMIT)
    host_ip = await relay.start()
    try:
        reader, writer = await asyncio.open_unix_connection(f"{host_ip}-1")
        writer.write(GREETING)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing of the fake's passed on
        writer.close()
    finally:
        await relay.close()
        fake.close()


async def _say_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
    await reader.read()
    writer.close()


async def test_a_link_in_place_of_the_kernel_socket_is_never_followed(tmp_path: Path) -> None:
    """A kernel can write its own runtime dir: a link to another socket there is not connected to."""
    elsewhere = await asyncio.start_unix_server(_say_http, str(tmp_path / "host-service"))
    kernel_ip = str(tmp_path / "kernel")
    Path(f"{kernel_ip}-1").symlink_to(tmp_path / "host-service")
    relay = Relay(kernel_ip, [1], LIMIT)
    host_ip = await relay.start()
    try:
        reader, writer = await asyncio.open_unix_connection(f"{host_ip}-1")
        writer.write(GREETING)
        with pytest.raises(TimeoutError):  # held open, never joined to the link's target
            await asyncio.wait_for(reader.read(1), 0.5)
        writer.close()
    finally:
        await relay.close()
        elsewhere.close()
