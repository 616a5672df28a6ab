"""What a client shows a person while a cell runs: its output, as progress and log notifications.

Every character of it comes from kernel code, so it reaches the client as data: the redraws and
hidden characters of `servers.hostile_args` are escapes there, lines stay lines. The cell's result
(for the agent, shown by clients too) has carriage returns applied as a terminal applies them and
the other characters that act escaped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mcp.types import LoggingMessageNotificationParams
from servers.hostile_args import CASES, assert_shown_safely

from .conftest import open_ipybox, text_of

pytestmark = pytest.mark.timeout(60)

#: Kernel code printing each hostile string on a line of its own, the escape split across two
#: writes as well (each write is a message of its own), then a marker.
PRINTS = CASES + (
    "import sys\n"
    "for bad in REDRAWS + HIDERS:\n"
    "    print('before', bad, 'after', flush=True)\n"
    "sys.stdout.write('split \\x1b'); sys.stdout.flush()\n"
    "sys.stdout.write('[8m hidden\\n'); sys.stdout.flush()\n"
    "print('two\\nlines\\tand a tab', flush=True)\n"
    "print('large \\x9b2J' + '\\u6f22' * 10_000, flush=True)\n"  # escaped off the event loop
    "for i in range(5):\n"
    "    print(f'\\rprogress {i}/4', end='', flush=True)\n"
    "print()\n"
)


async def test_live_output_reaches_the_client_as_data(workspace: Path, state_dir: Path) -> None:
    shown: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        shown.append(message or "")

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        shown.append(str(params.data))

    async with open_ipybox(workspace, state_dir, logging_callback=on_log) as box:
        result = await box.run(PRINTS, progress_callback=on_progress, timeout=30)
        # a long line, then a million one-character overwrites: applied character by character
        # from the start, 4 MB of output took the server's event loop minutes (quadratic)
        redrawn = await box.run("print('a' * 2_000_000 + '\\rb' * 1_000_000)", timeout=30)

    assert text_of(redrawn).startswith("baaa"), text_of(redrawn)[:100]

    assert not result.is_error, text_of(result)
    live = [text for text in shown if text != "running"]
    assert "".join(live).count("after") >= 2 * 15, live  # every line, as progress and as a log
    for text in live:
        assert_shown_safely(text, lines=True)
        assert "\x1b" not in text
    joined = "".join(live)
    assert "before \\r after" in joined  # the redraw is shown, not done
    assert "split [8m hidden" in joined  # an escape cut between two writes: its start dropped
    assert "two\nlines" in joined  # lines stay lines
    assert "large " + "\u6f22" * 10_000 in joined  # an 8-bit CSI goes like a 7-bit one
    # the result, which the client shows too: only what acts escaped, what is drawn kept
    result_text = text_of(result)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]", result_text)
    assert "split [8m hidden" in result_text
    # carriage returns as a terminal applies them: a progress bar's last state, a line's overwrite
    assert "progress 4/4" in result_text and "progress 3/4" not in result_text
    assert "before \\r after" not in result_text and " after " in result_text.splitlines()
    assert "before hi\U000e0173" in result_text  # a tag character, drawn as nothing, kept for the agent
