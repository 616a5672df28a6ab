"""An HTTP server on 127.0.0.1 that records every request it gets: where a secret must never arrive."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest


class Attacker:
    """Records each request's method, path (with query) and headers; answers 404."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        attacker = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                attacker.requests.append(f"{self.command} {self.path}\n{self.headers}")
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_DELETE = _record

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self._httpd.server_address[1]}"
        self.url = f"http://{self.host}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def attacker() -> Iterator[Attacker]:
    server = Attacker()
    try:
        yield server
    finally:
        server.close()
