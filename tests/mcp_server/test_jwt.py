"""JWT authentication against a JWKS file or URL: tokens of the right issuer for this audience get in
(each subject its own principal); wrong audience, issuer, key, algorithm or an expired token do not.
A JWKS URL that serves no keys stops ipybox at start; one that goes away later refuses tokens and
says why in the log."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2 as httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from servers.launch import free_port

from .conftest import IPYBOX_COMMAND, running_http_ipybox, server_env
from .test_clients import connect, output

pytestmark = pytest.mark.timeout(90)

ISSUER, AUDIENCE = "https://idp.example.com", "ipybox-team"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


KEY, OTHER_KEY = _key(), _key()


def token(key: Any = KEY, kid: str = "k1", **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "iat": now, "exp": now + 600} | claims
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})


def _jwks() -> str:
    jwk = json.loads(RSAAlgorithm.to_jwk(KEY.public_key())) | {"kid": "k1", "use": "sig", "alg": "RS256"}
    return json.dumps({"keys": [jwk]})


#: What the identity provider in these tests serves, by path: (status, body).
IDP_PAGES = {
    "/jwks.json": (200, _jwks()),
    "/no-keys.json": (200, '{"keys": []}'),
    "/login": (200, "<html>sign in</html>"),
}


class _IdentityProvider(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = IDP_PAGES.get(self.path, (404, "not found"))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@contextlib.contextmanager
def identity_provider() -> Iterator[str]:
    """A real HTTP server on loopback serving IDP_PAGES; its base URL (nothing listens there after)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _IdentityProvider)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _jwt_args(jwks: str, *, shared_trust: bool = True) -> list[str]:
    """JWT options; JWTs are many users, so without --sandbox they need --shared-trust."""
    trust = ["--shared-trust"] if shared_trust else []
    return ["--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwks", jwks, *trust]


@pytest.fixture(scope="module", params=["file", "url"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """ipybox taking JWTs whose keys it reads from a JWKS file, or fetches from the provider's URL."""
    base = tmp_path_factory.mktemp("jwt")
    (base / "jwks.json").write_text(_jwks())
    (base / "ws").mkdir()
    with identity_provider() as idp:
        jwks = str(base / "jwks.json") if request.param == "file" else f"{idp}/jwks.json"
        with running_http_ipybox(base / "ws", base / "state", base / "log", args=_jwt_args(jwks)) as (_, url):
            yield url


async def test_valid_token_gets_its_own_kernel(server: str) -> None:
    async with connect(server, token(sub="carol"), "auto") as carol:
        await output(carol, "secret = 1")
        assert await output(carol, "import os\nprint(secret, os.path.basename(os.getcwd()))") == "1 carol"
    async with connect(server, token(sub="dave"), "auto") as dave:
        assert (
            "NameError" in (await dave.call_tool("execute_ipython_cell", {"code": "secret"})).content[0].text
        )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "bad",
    [
        token(aud="another-service"),
        token(aud=[]),
        token(iss="https://evil.example.com"),
        token(exp=int(time.time()) - 60),
        token(OTHER_KEY),
        token(OTHER_KEY, kid="k2"),
        jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": 4102444800}, None, algorithm="none"
        ),
        jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": 4102444800}, "x" * 32, algorithm="HS256"
        ),
        token() + "x",
    ],
    ids=[
        "audience",
        "no-audience",
        "issuer",
        "expired",
        "other-key",
        "unknown-key",
        "alg-none",
        "hs256",
        "tampered",
    ],
)
async def test_wrong_tokens_are_refused(server: str, bad: str) -> None:
    response = await _post(server, bad)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "resource_metadata=" in response.headers["www-authenticate"]


@pytest.mark.parametrize(
    ("path", "cause"),
    [
        (None, "cannot connect ("),  # nothing listens there
        ("/keys-moved.json", "it answered HTTP 404 Not Found"),
        ("/login", "its answer is not JSON"),
        ("/no-keys.json", "no usable signing keys"),
    ],
    ids=["refused", "404", "html", "no-keys"],
)
def test_jwks_url_without_keys_stops_ipybox_at_start(tmp_path: Path, path: str | None, cause: str) -> None:
    with identity_provider() as idp:
        jwks = f"http://127.0.0.1:{free_port()}/jwks.json" if path is None else f"{idp}{path}"
        command = [*IPYBOX_COMMAND, "--workspace", str(tmp_path / "ws"), "--transport", "streamable-http"]
        command += ["--port", str(free_port()), *_jwt_args(jwks)]
        started = subprocess.run(
            command,
            env=server_env(tmp_path / "state"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert started.returncode == 1
    assert f"--jwks {jwks}: {cause}" in started.stderr, started.stderr
    assert "check the URL" in started.stderr


def test_jwts_without_sandbox_or_shared_trust_stop_ipybox_at_start(tmp_path: Path) -> None:
    """Every subject is a user of its own: without --sandbox they could read each other's secrets."""
    (tmp_path / "jwks.json").write_text(_jwks())
    command = [*IPYBOX_COMMAND, "--workspace", str(tmp_path / "ws"), "--transport", "streamable-http"]
    command += ["--port", str(free_port()), *_jwt_args(str(tmp_path / "jwks.json"), shared_trust=False)]
    started = subprocess.run(
        command, env=server_env(tmp_path / "state"), capture_output=True, text=True, timeout=60, check=False
    )
    assert started.returncode == 1
    for words in ("refusing JWTs of many users without --sandbox", "/proc/PID/environ", "--shared-trust"):
        assert words in started.stderr, started.stderr


async def test_jwks_url_gone_after_start_refuses_tokens_and_says_why(tmp_path: Path) -> None:
    """ipybox fetches the keys when the first token comes: the provider is down by then."""
    (tmp_path / "ws").mkdir()
    log = tmp_path / "log"
    with contextlib.ExitStack() as provider:
        jwks = f"{provider.enter_context(identity_provider())}/jwks.json"
        with running_http_ipybox(tmp_path / "ws", tmp_path / "state", log, args=_jwt_args(jwks)) as (_, url):
            provider.close()
            response = await _post(url, token())
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert f"cannot fetch the JWKS from {jwks}: cannot connect (" in log.read_text()


async def _post(url: str, bearer: str) -> httpx.Response:
    """A tools/list request with `bearer`, as any HTTP client sends it."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": f"Bearer {bearer}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient() as http:
        return await http.post(url, json=body, headers=headers)
