"""A recorded session's notebook, rendered by nbconvert, in a real headless browser.

It makes docs/images/session-notebook.png (the picture in docs/notebooks.md) afresh where the
checkout is writable, and checks what the browser made of the page: the kernel's text stayed text.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from .conftest import Recorded

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "docs" / "images" / "session-notebook.png"
BROWSER = next(
    (p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None
)
WIDTH, HEIGHT = 1000, 1650


def _browser(*args: str) -> subprocess.CompletedProcess[str]:
    # --no-sandbox: the page is a local file of our making, and chromium's own sandbox needs user
    # namespaces that containers (and CI) often do not give
    options = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    return subprocess.run(
        [str(BROWSER), *options, *args], capture_output=True, text=True, timeout=120, check=True
    )


@pytest.mark.skipif(BROWSER is None, reason="no chromium or chrome on PATH to render the notebook in")
def test_the_rendered_notebook_in_a_headless_browser(recorded: Recorded, tmp_path: Path) -> None:
    html, _ = HTMLExporter().from_notebook_node(nbformat.read(recorded.notebook, as_version=4))
    page = tmp_path / "session.html"
    page.write_text(html)
    dom = _browser("--dump-dom", page.as_uri()).stdout
    assert dom.count('class="ipybox-tool-call"') == 2 and "data:image/png;base64," in dom
    assert "<script>alert('kernel')" not in dom and "onerror=alert" not in dom.replace(
        "onerror=alert(1)&gt;", ""
    )

    shot = tmp_path / "session.png"
    _browser(f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}", page.as_uri())
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT)
    assert len(data) > 30_000  # a page with text and a plot, not a blank one
    if os.access(SCREENSHOT.parent, os.W_OK):
        shutil.copyfile(shot, SCREENSHOT)
