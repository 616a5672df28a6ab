"""JWT authentication against a JWKS file: tokens of the right issuer for this audience get in
(each subject its own principal); wrong audience, issuer, key, algorithm or an expired token do not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from .conftest import running_http_ipybox
from .test_clients import connect, output

pytestmark = pytest.mark.timeout(90)

ISSUER, AUDIENCE = "https://idp.example.com", "ipybox-team"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


KEY, OTHER_KEY = _key(), _key()


def token(key: Any = KEY, **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "iat": now, "exp": now + 600} | claims
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("jwt")
    jwk = json.loads(RSAAlgorithm.to_jwk(KEY.public_key())) | {"kid": "k1", "use": "sig", "alg": "RS256"}
    (base / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    (base / "ws").mkdir()
    args = ["--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwks", str(base / "jwks.json")]
    with running_http_ipybox(base / "ws", base / "state", base / "log", args=args) as (_, url):
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
        jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": 4102444800}, None, algorithm="none"
        ),
        jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": 4102444800}, "x" * 32, algorithm="HS256"
        ),
        token() + "x",
    ],
    ids=["audience", "no-audience", "issuer", "expired", "other-key", "alg-none", "hs256", "tampered"],
)
async def test_wrong_tokens_are_refused(server: str, bad: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": f"Bearer {bad}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient() as http:
        response = await http.post(server, json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "resource_metadata=" in response.headers["www-authenticate"]
