"""Turns a kernel's iopub messages into ordered output events."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


def strip_ansi(text: str) -> str:
    """Remove terminal colour and cursor escapes."""
    return _ANSI.sub("", text)


@dataclass
class KernelEvent:
    """Something a running cell produced: a stream chunk, display text or an image."""

    kind: str  # "stream" | "text" | "image"
    text: str = ""
    data: bytes = b""


class OutputCollector:
    """Collects the output of one execute request, in the order the kernel sent it."""

    def __init__(self, on_event: Callable[[KernelEvent], None]) -> None:
        self.events: list[KernelEvent] = []
        self.error: str | None = None
        self._on_event = on_event

    def _emit(self, event: KernelEvent) -> None:
        self.events.append(event)
        self._on_event(event)

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
