"""A stdio front for ipybox's MCP server that answers the handshake at once.

    python path/to/ipybox/cli/front.py -- ipybox --workspace . [options]

(run by path, it imports only the standard library: not even the `ipybox` package.)

A client such as Claude Code gives a stdio server 30 s to answer its opening request (a
2026-07-28 client gives `server/discover` 10 s), and starts all its servers at once. ipybox's
own start (importing `mcp`, pydantic models, jupyter_client) takes 1.5 s of a quiet core, and
many times that on a busy machine or on a plugin's first start, when every module is compiled as
it is imported. The front is a stdlib-only process that starts the server command, forwards
every line between the two unchanged, and meanwhile answers what needs no server: the opening
request of either protocol era (`initialize`, `server/discover`), the list requests without a
cursor, and (handshake era only: the 2026-07-28 era has none) `ping`, from the answers recorded
in `front_answers.json` per protocol version (`--record` writes them; tests/cli/test_front.py
checks them against the live server). The server still gets every message, in order; its
answers to requests the front already answered are dropped (compared first: a difference is
said on stderr). Once the server has answered the opening request, only `ping` is still answered
by the front. A client that opens with another request, or a version with no recording, is only
forwarded.

If the server exits, requests still waiting for an answer, and every later one, get an error
carrying the last lines it wrote to stderr (which also pass through); when the client hangs up,
the front exits with the server's exit status. A stop signal is passed on; before the server
has answered `initialize` (it runs no kernel yet) the front exits at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import IO, Any

ANSWERS = Path(__file__).with_name("front_answers.json")
#: Requests without parameters whose answers are recorded: they describe the server, not a state.
LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")
#: The request each era opens a session with (the 2026-07-28 era names its version in `_meta`).
OPENINGS = ("initialize", "server/discover")
_VERSION_META = "io.modelcontextprotocol/protocolVersion"


class _Front:
    def __init__(self, server: subprocess.Popen[bytes], answers: dict[str, Any]) -> None:
        self.server = server
        self.answers = answers
        self.version: str | None = None  # the protocol version the front opened the session with
        self.opening: int | str | None = None  # the id of the client's opening request
        self.ready = False  # the server answered the opening: it answers everything itself now
        #: Requests the front answered, by id, with its answer: the server's answer is dropped.
        self.dropped: dict[int | str, tuple[str, dict[str, Any]]] = {}
        self.waiting: set[Any] = set()  # ids of requests only the server can answer
        self.stderr_tail: deque[str] = deque(maxlen=10)
        self.gone: str | None = None  # why the server is gone, once it is
        self.lock = threading.Lock()
        self.out = sys.stdout.buffer

    def write(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()

    def _answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The front's own answer to a client message, or None if the server must answer it."""
        method, params = message.get("method"), message.get("params") or {}
        if not isinstance(message.get("id"), (int, str)) or not isinstance(method, str):
            return None
        if not isinstance(params, dict):
            return None
        if method == "ping" and self.version not in MODERN:
            return {}
        if self.ready:
            return None
        if method in OPENINGS and self.version is None:
            version = _opening_version(method, params)
            result = self.answers.get(version, {}).get(method) if isinstance(version, str) else None
            if result is not None:
                self.version = version
                return dict(result)
            return None
        if self.version is not None and method in LISTS and set(params) <= {"_meta"}:
            found: dict[str, Any] | None = self.answers[self.version].get(method)
            return found
        return None

    def from_client(self, stdin: IO[bytes]) -> None:
        assert self.server.stdin is not None
        for line in stdin:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                message = {}
            if self.opening is None and not self.ready:
                if message.get("method") not in OPENINGS or not isinstance(message.get("id"), (int, str)):
                    self.ready = True  # no opening the front knows: forward only
                else:
                    self.opening = message["id"]
            with self.lock:
                gone, answer = self.gone, self._answer(message)
                request_id = message.get("id") if "method" in message else None
                if not isinstance(request_id, (int, str)):  # a notification (or no valid request)
                    request_id = answer = None
                elif answer is not None:
                    self.dropped[request_id] = (message["method"], answer)
                elif gone is None:
                    self.waiting.add(request_id)
            if answer is not None:
                self.write({"jsonrpc": "2.0", "id": request_id, "result": answer})
            elif gone is not None:
                if request_id is not None:
                    self.write(_error(request_id, gone))
                continue
            try:
                self.server.stdin.write(line)
                self.server.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass  # the server is gone: `stop()` answers what it left, and what comes later
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.server.stdin.close()  # the client is gone: the server stops when it reads the end

    def from_server(self) -> None:
        assert self.server.stdout is not None
        for line in self.server.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and "method" not in message and "id" in message:
                request_id = message["id"] if isinstance(message["id"], (int, str)) else None
                with self.lock:
                    given = self.dropped.pop(request_id, None) if request_id is not None else None
                    if given is None:
                        self.waiting.discard(request_id)
                    if request_id is not None and request_id == self.opening:
                        self.ready = True
                if given is not None:
                    method, answer = given
                    if message.get("result") != answer:  # the client was told something else
                        _complain(f"ipybox answers {method} differently than {ANSWERS.name}")
                    continue
            with self.lock:
                self.out.write(line)
                self.out.flush()

    def from_server_stderr(self) -> None:
        assert self.server.stderr is not None
        for line in self.server.stderr:
            self.stderr_tail.append(line.decode(errors="replace").rstrip())
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()

    def stop(self, returncode: int) -> None:
        """The server exited: answer every request it left, and every later one, with why."""
        said = "\n".join(self.stderr_tail) or "(it wrote nothing to stderr)"
        with self.lock:
            self.gone = f"ipybox stopped (exit status {returncode}) before answering:\n{said}"
            waiting, self.waiting = self.waiting, set()
        for request_id in waiting:
            self.write(_error(request_id, self.gone))


def _complain(text: str) -> None:
    sys.stderr.write(f"ipybox front: {text}; record it again (python front.py --record -- ipybox)\n")
    sys.stderr.flush()


def _opening_version(method: str, params: dict[str, Any]) -> Any:
    """The protocol version an opening request asks for."""
    if method == "initialize":
        return params.get("protocolVersion")
    meta = params.get("_meta")
    return meta.get(_VERSION_META) if isinstance(meta, dict) else None


def _error(request_id: int | str, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": text}}


def serve(command: list[str]) -> int:
    """Run `command` behind the front, with this process's stdin and stdout; its exit status.

    After the server exits, the front answers requests with an error until the client hangs up.
    """
    answers = json.loads(ANSWERS.read_text())
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    front = _Front(server, answers)

    def on_signal(signum: int, _: object) -> None:
        server.send_signal(signum)  # the server stops its kernels, then exits
        if not front.ready:  # it has none before it answered the opening: no need to wait for it
            os._exit(128 + signum)  # not sys.exit: the reader threads hold the std streams' locks

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    client = threading.Thread(target=front.from_client, args=(sys.stdin.buffer,), daemon=True)
    client.start()
    errors = threading.Thread(target=front.from_server_stderr, daemon=True)
    errors.start()
    front.from_server()
    returncode = server.wait()
    errors.join(timeout=5)
    front.stop(returncode)
    client.join()
    return returncode


#: The handshake era's protocol versions (mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS).
HANDSHAKE = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: The stateless era's (mcp_types.version.MODERN_PROTOCOL_VERSIONS): every request names its version.
MODERN = ("2026-07-28",)
VERSIONS = HANDSHAKE + MODERN


def record(command: list[str], versions: tuple[str, ...] = VERSIONS) -> dict[str, Any]:
    """The server's answers to the opening request and the list requests, per protocol version."""
    answers: dict[str, Any] = {}
    for version in versions:
        with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as server:
            assert server.stdin is not None and server.stdout is not None

            def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
                assert server.stdin is not None and server.stdout is not None
                request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
                server.stdin.write(json.dumps(request).encode() + b"\n")
                server.stdin.flush()
                while line := server.stdout.readline():
                    if "id" in (reply := json.loads(line)):
                        return dict(reply)
                raise RuntimeError(f"{command[0]} exited without answering {method}")

            params: dict[str, Any]
            if version in MODERN:  # each request says who asks, and in which version
                meta = {
                    _VERSION_META: version,
                    "io.modelcontextprotocol/clientInfo": _CLIENT,
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
                params = {"_meta": meta}
                answers[version] = {"server/discover": ask("server/discover", params)["result"]}
            else:
                init = {"protocolVersion": version, "capabilities": {}, "clientInfo": _CLIENT}
                answers[version] = {"initialize": ask("initialize", init)["result"]}
                server.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
                params = {}
            for method in LISTS:
                if "result" in (reply := ask(method, params)):
                    answers[version][method] = reply["result"]
            server.stdin.close()
            server.wait(timeout=60)
    return answers


_CLIENT = {"name": "ipybox-front", "version": "0"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    recording = args[:1] == ["--record"]
    command = args[1:] if recording else args
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        sys.stderr.write("usage: python front.py [--record] -- COMMAND [ARG...]\n")
        return 2
    if recording:
        ANSWERS.write_text(json.dumps(record(command), indent=1, sort_keys=True) + "\n")
        return 0
    return serve(command)


if __name__ == "__main__":
    sys.exit(main())
