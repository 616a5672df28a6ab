"""Turns a kernel's iopub messages into ordered output events."""

from __future__ import annotations

import base64
import binascii
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ipybox.kernel_mgr.limits import format_size

#: Escape sequences (ECMA-48, in their 7-bit and 8-bit forms), each as a whole: a string's body
#: (OSC, DCS, ...) of printable characters only, so one that never ends takes no text with it;
#: then what is left of one, an introducer or a C1 control, alone.
_ANSI = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor, modes, queries
    r"|(?:\x1b\]|\x9d)[^\x00-\x1f\x7f-\x9f]*(?:\x07|\x1b\\|\x9c)"  # OSC: title, clipboard, links
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x00-\x1f\x7f-\x9f]*(?:\x1b\\|\x9c)"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]"  # the rest: cursor save and restore, reset, character sets
    r"|[\x1b\x80-\x9f]"
)
_C1 = re.compile("[\x80-\x9f]")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences, and the CR of CRLF line ends (pseudo-terminals).

    Every one goes, and only it: text printed between the start of a sequence that never ended
    and a later end stays, and no escape character is left over (where one was cut between two
    messages, the rest of it is shown as text), so what an application prints of a kernel's
    output cannot set the clipboard, make links or redraw the screen."""
    if "\x1b" in text or (not text.isascii() and _C1.search(text)):
        text = _ANSI.sub("", text)
    return text.replace("\r\n", "\n")


#: What the marker says where the output limit dropped characters from the middle of a cell's output.
DROPPED_MARK = "characters of output dropped here"


@dataclass
class KernelEvent:
    """Something a running cell produced: a stream chunk, display text or an image; or what ipybox
    keeps in no text (`other`: display data of other types; `error`: the exception it raised).

    Each event from the kernel carries the iopub message it came from (`msg_type`, `content`), for
    consumers that keep outputs as Jupyter does (the session notebook); a note ipybox adds has none.
    """

    kind: str  # "stream" | "text" | "image" | "other" (other display data, clear_output) | "error"
    text: str = ""
    data: bytes = b""
    #: An image as the kernel sent it (base64), decoded only if it is kept.
    encoded: str = ""
    msg_type: str = field(default="", compare=False)
    content: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def size(self) -> int:
        """Bytes of the image, without decoding it."""
        if not self.encoded:
            return len(self.data)
        encoded = self.encoded.rstrip()
        return len(encoded) * 3 // 4 - encoded[-2:].count("=")  # at least the decoded size

    def image(self) -> bytes:
        """The image's bytes (empty if the kernel sent no valid base64)."""
        try:
            return base64.b64decode(self.encoded) if self.encoded else self.data
        except binascii.Error:
            return b""


class OutputCollector:
    """Turns the iopub messages of one execute request into events, in the order sent."""

    def __init__(self, on_event: Callable[[KernelEvent], None]) -> None:
        self.error: str | None = None
        self._emit = on_event

    def note(self, text: str) -> None:
        """Add ipybox's own words to the output, where they belong in it."""
        self._emit(KernelEvent("stream", text=text))

    def add(self, msg: dict[str, Any]) -> None:
        msg_type = msg["msg_type"]
        content = msg["content"] if isinstance(msg["content"], dict) else {}
        source = {"msg_type": msg_type, "content": content}
        if msg_type == "stream":
            self._emit(KernelEvent("stream", text=strip_ansi(_text(content.get("text", ""))), **source))
        elif msg_type in ("execute_result", "display_data", "update_display_data"):
            data = content.get("data", {})
            data = data if isinstance(data, dict) else {}
            if isinstance(data.get("image/png"), str):
                self._emit(KernelEvent("image", encoded=data["image/png"], **source))
            elif "text/plain" in data:
                self._emit(KernelEvent("text", text=strip_ansi(_text(data["text/plain"])) + "\n", **source))
            else:
                self._emit(KernelEvent("other", **source))
        elif msg_type == "error":
            traceback = content.get("traceback", [])
            self.error = strip_ansi(_text(traceback if isinstance(traceback, list) else [traceback], "\n"))
            if not self.error.strip():
                self.error = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
            self._emit(KernelEvent("error", **source))
        elif msg_type == "clear_output":
            self._emit(KernelEvent("other", **source))


def _text(value: Any, joined_by: str = "") -> str:
    """A kernel's text as text, whatever a hostile kernel sent in its place (a number, a list)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # lines, as notebooks keep them
        return joined_by.join(item if isinstance(item, str) else repr(item) for item in value)
    return repr(value)


class OutputBuffer:
    """The output of one execution, bounded: past `limit` characters only head and tail stay.

    What is dropped from the middle is counted and reported by a marker in `text()`, so a
    cell printing hundreds of megabytes cannot exhaust the host's memory. Images are kept as
    they arrive until `images` of them or `image_bytes` of them are kept; later ones are
    dropped at once (an image that does not fit in the bytes left is dropped, smaller ones after
    it may still be kept), counted, and reported by a note at the end of `text()`.
    """

    def __init__(self, limit: int | None, images: int | None = None, image_bytes: int | None = None) -> None:
        self._limit = limit
        self._max_images, self._max_image_bytes = images, image_bytes
        self._head: list[str] = []
        self._head_size = 0
        self._tail: deque[str] = deque()
        self._tail_size = 0
        self.dropped = 0
        self.images: list[bytes] = []
        self.image_bytes = 0  # of the images kept
        self._images_dropped: dict[str, list[int]] = {}  # limit reached → sizes of the images it dropped

    def add(self, event: KernelEvent) -> None:
        if event.kind == "image":
            self._add_image(event)
            return
        if event.kind not in ("stream", "text"):
            return
        text = event.text
        if self._limit is None:
            self._head.append(text)
            return
        room = self._limit // 2 - self._head_size
        if room > 0:
            self._head.append(text[:room])
            self._head_size += len(text[:room])
            text = text[room:]
        if text:
            self._tail.append(text)
            self._tail_size += len(text)
            self._trim_tail(self._limit - self._limit // 2)

    def _add_image(self, event: KernelEvent) -> None:
        count, size = self._max_images, self._max_image_bytes
        if count is not None and len(self.images) >= count:
            self._images_dropped.setdefault("images", []).append(event.size)
        elif size is not None and self.image_bytes + event.size > size:
            self._images_dropped.setdefault("image_bytes", []).append(event.size)
        elif data := event.image():
            self.images.append(data)
            self.image_bytes += len(data)

    def _trim_tail(self, budget: int) -> None:
        while self._tail_size > budget:
            excess = self._tail_size - budget
            first = self._tail[0]
            cut = min(len(first), excess)
            if cut == len(first):
                self._tail.popleft()
            else:
                self._tail[0] = first[cut:]
            self._tail_size -= cut
            self.dropped += cut

    def text(self) -> str:
        marker = ""
        if self.dropped:
            marker = f"\n[... {self.dropped} {DROPPED_MARK} (output limit {self._limit}) ...]\n"
        text = ("".join(self._head) + marker + "".join(self._tail)).rstrip()
        if note := self.images_note():
            text = f"{text}\n{note}" if text else note
        return text

    def images_note(self) -> str | None:
        """What was said about images dropped at a limit; None if none was."""
        if not self._images_dropped:
            return None
        sizes = [size for dropped in self._images_dropped.values() for size in dropped]
        total = len(self.images) + len(sizes)
        reached = []
        if "images" in self._images_dropped:
            reached.append(f"{self._max_images} images (ResourceLimits.images, ipybox --max-images)")
        if "image_bytes" in self._images_dropped:
            size = format_size(self._max_image_bytes or 0)
            reached.append(f"{size} of images (ResourceLimits.image_bytes, ipybox --max-image-bytes)")
        return (
            f"[ipybox] {len(sizes)} of the {total} images this execution displayed were dropped "
            f"({format_size(sum(sizes))}): an execution keeps at most {' and '.join(reached)}. "
            "Display fewer or smaller images (save the rest to files), or raise the limit."
        )


class LiveBudget:
    """Characters of live output queued for a reader and not taken yet: at most `limit` (None: no
    limit). A reader that falls behind a flood gets what fits; the next chunk after a gap starts
    with a note of how much was dropped (`rest()`: the note at the end); the result keeps head and
    tail regardless."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self.queued = 0
        self._dropped = 0

    def admit(self, text: str) -> str | None:
        """What to queue for the chunk `text`, or None to drop it all."""
        if self._limit is not None and self.queued + len(text) > self._limit:
            room = max(self._limit - self.queued, 0)
            self._dropped += len(text) - room
            text = text[:room]
        elif self._dropped:
            text = f"{self.rest()}\n{text}"
        if not text:
            return None
        self.queued += len(text)
        return text

    def rest(self) -> str | None:
        """The note on what was dropped since the last chunk queued, if anything was."""
        if not self._dropped:
            return None
        dropped, self._dropped = self._dropped, 0
        return (
            f"[ipybox: {dropped} characters of live output dropped here: they came faster than they "
            "were read; the result keeps the output's head and tail]"
        )

    def taken(self, text: str) -> None:
        """The reader took a chunk `admit()` returned."""
        self.queued -= len(text)
