"""What the host keeps of a cell's output is bounded.

Images are kept up to `ResourceLimits.images` and `image_bytes`: past them each one is dropped as it
arrives, and the cell's output says how many, which limit and how to raise it; its text and the
images within the limits stay. Live chunks a slow reader has not taken stay within `output`.
No single message over `message_bytes` is taken in at all: the kernel's side sends long text in
pieces and replaces a display too large for one message by a line; a message a sandboxed kernel
writes past that (as a hostile kernel can) is dropped by ipybox's relay, and the cell says so and
still ends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from servers.launch import SANDBOX_PATH, eventually, require_sandbox

from ipybox import CodeExecutionChunk, CodeExecutionError, CodeExecutionResult, CodeExecutor, ResourceLimits
from ipybox.kernel_mgr import cell as cell_module
from ipybox.kernel_mgr.output import KernelEvent, LiveBudget, OutputBuffer

MIB = 1 << 20
#: Kernel code: `show(size, times)` displays a PNG of `size` bytes (incompressible) `times` times.
SHOW = """
import base64, os
from IPython.display import display
def show(size, times):
    png = base64.b64encode(b"\\x89PNG\\r\\n\\x1a\\n" + os.urandom(size - 8)).decode()
    for _ in range(times):
        display({"image/png": png, "text/plain": "<image>"}, raw=True)
"""


def test_output_buffer_keeps_images_up_to_count_and_bytes() -> None:
    buffer = OutputBuffer(limit=None, images=3, image_bytes=10)
    for data in (b"aaaa", b"bbbbbbbbbbb", b"cccc", b"dd", b"e"):  # b's 11 bytes never fit; e is the 4th
        buffer.add(KernelEvent("image", data=data))
    buffer.add(KernelEvent("stream", text="text stays"))
    assert buffer.images == [b"aaaa", b"cccc", b"dd"] and buffer.image_bytes == 10
    assert buffer.text() == (
        "text stays\n[ipybox] 2 of the 5 images this execution displayed were dropped (12 bytes): an "
        "execution keeps at most 3 images (ResourceLimits.images, ipybox --max-images) and 10 bytes of "
        "images (ResourceLimits.image_bytes, ipybox --max-image-bytes). Display fewer or smaller images "
        "(save the rest to files), or raise the limit."
    )
    for encoded, size in (("AAAA", 3), ("AAA=", 2), ("AA==\n", 1), ("A", 0)):  # "A": not base64
        event = KernelEvent("image", encoded=encoded)
        assert event.size >= len(event.image()) == size
    unlimited = OutputBuffer(limit=None)
    for _ in range(500):
        unlimited.add(KernelEvent("image", data=b"x"))
    assert len(unlimited.images) == 500 and unlimited.images_note() is None


@pytest.mark.timeout(120)
async def test_image_floods_are_cut_at_the_limits(tmp_path: Path) -> None:
    limits = ResourceLimits(images=50, image_bytes=8 * MIB)
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False, limits=limits) as executor:
        await executor.execute(SHOW)

        # one 3 MiB image shown 8 times: 2 kept, 6 dropped as they came
        result = await executor.execute("print('before')\nshow(3 * 2**20, 8)\nprint('after')")
        assert [len(png) for png in result.png] == [3 * MIB] * 2 and len(result.images) == 2
        assert result.text == (
            "before\nafter\n[ipybox] 6 of the 8 images this execution displayed were dropped (18.0 MiB): "
            "an execution keeps at most 8.0 MiB of images (ResourceLimits.image_bytes, ipybox "
            "--max-image-bytes). Display fewer or smaller images (save the rest to files), or raise "
            "the limit."
        )

        # many small ones: 50 kept; a cell that then fails keeps the note in its output
        with pytest.raises(CodeExecutionError) as failed:
            await executor.execute("show(1000, 80)\nraise ValueError('late')")
        assert "[ipybox] 30 of the 80 images" in failed.value.output
        assert "at most 50 images (ResourceLimits.images, ipybox --max-images)" in failed.value.output

        # the limits are per execution
        result = await executor.execute("show(1000, 50)")
        assert len(result.images) == 50 and result.text is None


#: Kernel code: `raw(kind, size, frames=0)` writes a message straight to the iopub socket, past the
#: kernel's own hooks: `size` characters of display data or stream text, plus `frames` buffers
#: (or with its first character replaced by the JSON text `escape`; or `content` as given).
RAW = """
def raw(kind, size, frames=0, escape="", content=None):
    pub = get_ipython().display_pub
    content = content if content is not None else (
        {"name": "stdout", "text": "x" * size} if kind == "stream"
        else {"data": {"image/png": "A" * size}, "metadata": {}}
    )
    msg = pub.session.msg(kind, content, parent=pub.parent_header)
    if escape:  # put in its JSON text as it is (json.dumps would escape the backslash)
        parts = [pub.session.pack(msg[part]) for part in ("header", "parent_header", "metadata", "content")]
        parts[3] = parts[3].replace(b'"x', b'"' + escape.encode(), 1)
        pub.pub_socket.send_multipart([pub.topic, b"<IDS|MSG>", pub.session.sign(parts), *parts])
        return
    pub.session.send(pub.pub_socket, msg, ident=pub.topic, buffers=[b"b" * size] * frames)
"""
DROPPED = "larger than 1.0 MiB, the most ipybox takes in one message, as bytes or as it would parse"


@pytest.mark.timeout(120)
async def test_ordinary_output_stays_within_the_message_limit(tmp_path: Path) -> None:
    limits = ResourceLimits(message_bytes=1 * MIB)
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False, limits=limits) as executor:
        await executor.execute(SHOW)
        # long text arrives whole (in pieces), an image too large is replaced by a line
        text = (await executor.execute("print('x' * 3_000_000 + 'end')")).text
        assert text is not None and len(text) == 3_000_003 and text.endswith("end")
        result = await executor.execute("show(2 * 2**20, 1)\nshow(1000, 1)\nprint('after')")
        assert len(result.images) == 1 and result.text is not None
        assert result.text.startswith("[ipybox] An output of 2.7 MiB (image/png, text/plain) was not sent")
        assert "(ResourceLimits.message_bytes, ipybox --max-message-bytes)" in result.text


@pytest.mark.timeout(180)
async def test_messages_over_the_size_limit_are_dropped_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_sandbox()  # written past the kernel's hooks: what a (sandboxed) hostile kernel does
    monkeypatch.setenv("PATH", SANDBOX_PATH)
    executor = CodeExecutor(
        working_dir=tmp_path, spare_kernel=False, limits=ResourceLimits(message_bytes=1 * MIB), sandbox=True
    )
    async with executor:
        await executor.execute(RAW)
        # dropped, said, and the cell ends; also as its last output
        for code in (
            "raw('display_data', 2 * 2**20)\nprint('after')",
            "raw('stream', 2 * 2**20)\nprint('after')",
            "print('after')\nraw('display_data', 2 * 2**20)",
            "raw('display_data', 2 * 2**20)\nraw('stream', 3 * 2**20)\nprint('after')",
            "raw('display_data', 1000, frames=1)\nraw('display_data', 2 * 2**20, frames=1)\nprint('after')",
        ):
            text = (await executor.execute(code)).text
            assert text is not None and DROPPED in text and "after" in text, (code, text)
        assert (await executor.execute("print('next')")).text == "next"
        # half a character (a lone surrogate's JSON escape) in a message written past the kernel's
        # code: read as U+FFFD (as UTF-8 it failed whatever wrote it on: an MCP reply ended the server)
        halves = "raw('stream', 3, escape='\\\\udc00\\\\ud800')\nprint('after')"
        assert (await executor.execute(halves)).text == "\ufffd\ufffdxxafter"
        # fields of the wrong type (a number, a list, a dict where text goes) once failed the cell
        # with a bare TypeError: shown as text, and the cell's own output kept
        for content, shown in (
            ("{'name': 'stdout', 'text': 123}", "123"),
            ("{'name': 'stdout', 'text': ['a', 'b']}", "ab"),
            ("{'data': [], 'metadata': {}}", ""),
            ("{'data': {'image/png': 5, 'text/plain': 7}, 'metadata': {}}", "7\n"),
            ("{'data': {'text/plain': {'a': 1}}, 'metadata': {}}", "{'a': 1}\n"),
        ):
            kind = "stream" if "name" in content else "display_data"
            result = await executor.execute(f"raw({kind!r}, 0, content={content})\nprint('after')")
            assert result.text == shown + "after", (content, result.text)
        # images within the limit are kept, whatever bytes the sizes of the message's frames hold
        # (one of 0xc4 or more once counted every character of its JSON 2 or 4 times: dropped)
        for size in (450_000, 550_000, 650_000):
            png = f"b'\\x89PNG\\r\\n\\x1a\\n' + bytes({size})"
            code = f"from IPython.display import Image, display\ndisplay(Image(data={png}, format='png'))"
            result = await executor.execute(code)
            assert len(result.images) == 1 and not result.text, (size, result.text)


def test_live_budget_drops_what_a_reader_has_not_room_for_and_says_so() -> None:
    live = LiveBudget(10)
    assert live.admit("a" * 6) == "a" * 6
    assert live.admit("b" * 6) == "bbbb"  # what fits; 2 dropped
    assert live.admit("c") is None
    live.taken("a" * 6)
    note = live.admit("d")
    assert note is not None and note.startswith("[ipybox: 3 characters of live output dropped here")
    assert note.endswith("]\nd") and live.queued == 4 + len(note)
    assert live.rest() is None


class _Recorded(LiveBudget):
    """The cell's own `LiveBudget`, recording what came and the most it held."""

    made: list[_Recorded] = []

    def __init__(self, limit: int | None) -> None:
        super().__init__(limit)
        self.came = self.peak = 0
        _Recorded.made.append(self)

    def admit(self, text: str) -> str | None:
        self.came += len(text)
        admitted = super().admit(text)
        self.peak = max(self.peak, self.queued)
        return admitted


@pytest.mark.timeout(120)
async def test_a_reader_of_chunks_that_falls_behind_holds_at_most_the_output_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cell_module, "LiveBudget", _Recorded)
    limit = 20_000
    flood = "for i in range(2000):\n    print(f'{i:099d}', flush=True)"  # 200,000 characters
    async with CodeExecutor(
        working_dir=tmp_path, spare_kernel=False, limits=ResourceLimits(output=limit)
    ) as executor:
        stream = executor.stream(flood, chunks=True)
        items = [await anext(stream)]
        live = _Recorded.made[-1]
        assert await eventually(lambda: live.came == 200_000)  # all of it reached ipybox; nobody read
        items += [item async for item in stream]
    assert live.peak <= limit + 200  # a note on a gap may come on top
    chunks = "".join(item.text for item in items if isinstance(item, CodeExecutionChunk))
    assert len(chunks) < 2 * limit and "characters of live output dropped here" in chunks
    result = items[-1]
    assert isinstance(result, CodeExecutionResult) and result.text is not None
    assert result.text.endswith(f"{1999:099d}") and "characters of output dropped here" in result.text
