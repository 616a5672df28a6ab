"""Turns a kernel's iopub messages into ordered output events."""

from __future__ import annotations

import base64
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


def strip_ansi(text: str) -> str:
    """Remove terminal colour and cursor escapes, and the CR of CRLF line ends (pseudo-terminals)."""
    return _ANSI.sub("", text).replace("\r\n", "\n")


@dataclass
class KernelEvent:
    """Something a running cell produced: a stream chunk, display text or an image."""

    kind: str  # "stream" | "text" | "image"
    text: str = ""
    data: bytes = b""


class OutputCollector:
    """Turns the iopub messages of one execute request into events, in the order sent."""

    def __init__(self, on_event: Callable[[KernelEvent], None]) -> None:
        self.error: str | None = None
        self._emit = on_event

    def add(self, msg: dict[str, Any]) -> None:
        msg_type = msg["msg_type"]
        content = msg["content"]
        if msg_type == "stream":
            self._emit(KernelEvent("stream", text=strip_ansi(content.get("text", ""))))
        elif msg_type in ("execute_result", "display_data", "update_display_data"):
            data = content.get("data", {})
            if "image/png" in data:
                self._emit(KernelEvent("image", data=base64.b64decode(data["image/png"])))
            elif "text/plain" in data:
                self._emit(KernelEvent("text", text=strip_ansi(data["text/plain"]) + "\n"))
        elif msg_type == "error":
            self.error = strip_ansi("\n".join(content.get("traceback", [])))
            if not self.error.strip():
                self.error = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"


class OutputBuffer:
    """The output of one execution, bounded: past `limit` characters only head and tail stay.

    What is dropped from the middle is counted and reported by a marker in `text()`, so a
    cell printing hundreds of megabytes cannot exhaust the host's memory.
    """

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._head: list[str] = []
        self._head_size = 0
        self._tail: deque[str] = deque()
        self._tail_size = 0
        self.dropped = 0
        self.images: list[bytes] = []

    def add(self, event: KernelEvent) -> None:
        if event.kind == "image":
            self.images.append(event.data)
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
            marker = (
                f"\n[... {self.dropped} characters of output dropped here (output limit {self._limit}) ...]\n"
            )
        return ("".join(self._head) + marker + "".join(self._tail)).rstrip()
