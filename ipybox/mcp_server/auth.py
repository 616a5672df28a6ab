"""Bearer-token authentication of HTTP clients: the server's own token, a file of named tokens, or
JWTs of an identity provider. Each verifier maps a token to its principal (`AccessToken.client_id`)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import urllib.error
from pathlib import Path
from typing import Any

from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings

from ipybox.mcp_server.kernels import LOCAL

logger = logging.getLogger(__name__)

#: Seconds to wait for an identity provider's JWKS.
JWKS_TIMEOUT = 10.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HEX = re.compile(r"[0-9a-f]{64}")


class TokenFile:
    """Tokens from a file of `NAME TOKEN` or `NAME sha256:HEX` lines (`#` starts a comment).

    Every presented token is hashed and compared with every entry in constant time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[tuple[str, bytes]] = []
        try:
            lines = path.read_text().splitlines()
        except OSError as e:
            raise ValueError(f"cannot read the token file {path}: {e.strerror or e}") from None
        for number, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not _NAME.fullmatch(parts[0]):
                raise ValueError(
                    f"{path}, line {number}: expected 'NAME TOKEN' or 'NAME sha256:HEX' with NAME of "
                    "letters, digits, '_', '.' or '-'"
                )
            name, secret = parts
            if secret.startswith("sha256:"):
                if not _HEX.fullmatch(secret[7:]):
                    raise ValueError(f"{path}, line {number}: sha256: takes 64 lowercase hex digits")
                digest = bytes.fromhex(secret[7:])
            elif len(secret) < 16:
                raise ValueError(f"{path}, line {number}: the token of {name!r} is under 16 characters")
            else:
                digest = hashlib.sha256(secret.encode()).digest()
            self._entries.append((name, digest))
        if not self._entries:
            raise ValueError(f"the token file {path} has no tokens")

    @property
    def names(self) -> set[str]:
        """The users the file names."""
        return {name for name, _ in self._entries}

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode(errors="surrogatepass")).digest()
        found: str | None = None
        for name, expected in self._entries:  # no early exit: the time does not depend on the match
            if hmac.compare_digest(digest, expected) and found is None:
                found = name
        if found is None:
            return None
        return AccessToken(token=token, client_id=found, scopes=[], subject=found)


class LocalAccessToken(AccessToken):
    """An access token that `LocalToken` accepted: its holder is the local principal, never a
    user of that name (only `LocalToken` makes these; other verifiers name `user:` principals)."""


class LocalToken:
    """The one token of an HTTP server without `--auth-tokens`: made at the first start and kept in
    `path` (mode 0600, outside any workspace), so that only this operating-system user can connect.

    Whoever presents it is the local principal, the same as over stdio.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token = _read_or_make_token(path)
        self._digest = hashlib.sha256(self.token.encode()).digest()

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode(errors="surrogatepass")).digest()
        if not hmac.compare_digest(digest, self._digest):
            return None
        return LocalAccessToken(token=token, client_id=LOCAL, scopes=[], subject=LOCAL)


def local_token_file() -> Path:
    """Where `LocalToken` keeps the token: ipybox's per-user state dir, which sandboxes hide."""
    from ipybox.tool_exec.registry import state_dir

    return state_dir() / "http-token"


def _read_or_make_token(path: Path) -> str:
    """The token in `path`, made first if missing; ValueError when the file is not this user's alone."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as file:
            info = os.fstat(file.fileno())
            token = file.read(1024).strip()
    except OSError as e:
        raise ValueError(f"cannot keep the HTTP token in {path}: {e.strerror or e}") from None
    others = hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o077)  # POSIX
    if not stat.S_ISREG(info.st_mode) or others:
        raise ValueError(
            f"the HTTP token file {path} is not a file only this user can read (mode "
            f"{stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid}); remove it and start ipybox again"
        )
    if len(token) < 32 or not token.isprintable() or " " in token:
        raise ValueError(f"the HTTP token file {path} holds no usable token; remove it and start ipybox")
    return token


class JwtVerifier:
    """JWTs signed with a key of a JWKS (file or URL), from `issuer`, for `audience`."""

    def __init__(self, issuer: str, audience: str, jwks: str) -> None:
        import jwt

        self.issuer, self.audience = issuer, audience
        self._client: jwt.PyJWKClient | None = None
        self._keys: jwt.PyJWKSet | None = None
        self._jwks = jwks
        if jwks.startswith(("https://", "http://")):
            _check_jwks_url(jwks)
            self._client = jwt.PyJWKClient(jwks, cache_keys=True, timeout=JWKS_TIMEOUT)
        else:
            try:
                self._keys = jwt.PyJWKSet.from_json(Path(jwks).expanduser().read_text())
            except OSError as e:
                raise ValueError(f"cannot read the JWKS file {jwks}: {e.strerror or e}") from None
            except (jwt.PyJWKSetError, json.JSONDecodeError) as e:
                raise ValueError(f"the JWKS file {jwks} holds no usable keys: {e}") from None

    async def verify_token(self, token: str) -> AccessToken | None:
        import jwt

        try:
            key = await asyncio.to_thread(self._signing_key, token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "EdDSA"],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.PyJWTError, KeyError, ValueError):
            return None
        subject = str(claims["sub"])
        return AccessToken(
            token=token,
            client_id=subject,
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            subject=subject,
            claims={"iss": claims["iss"]},
        )

    def _signing_key(self, token: str) -> Any:
        import jwt

        if self._client is not None:
            try:
                return self._client.get_signing_key_from_jwt(token).key
            except (jwt.PyJWKClientConnectionError, ValueError) as e:  # the provider, not the token
                problem = _jwks_problem(e)
                logger.warning("refusing a JWT: cannot fetch the JWKS from %s: %s", self._jwks, problem)
                raise
        assert self._keys is not None
        kid = jwt.get_unverified_header(token).get("kid")
        keys = [k for k in self._keys.keys if kid is None or k.key_id == kid]
        if not keys:
            raise KeyError(kid)
        return keys[0].key


def _check_jwks_url(url: str) -> None:
    """Refuse to start with a JWKS URL that does not serve signing keys (ValueError naming the cause)."""
    import jwt

    try:
        jwt.PyJWKClient(url, cache_jwk_set=False, timeout=JWKS_TIMEOUT).get_signing_keys()
    except (jwt.PyJWTError, ValueError) as e:
        raise ValueError(
            f"--jwks {url}: {_jwks_problem(e)}; check the URL and that the identity provider is reachable "
            "from here"
        ) from None


def _jwks_problem(error: Exception) -> str:
    """Why a JWKS could not be had, in words for the operator."""
    cause = error.__cause__
    if isinstance(cause, urllib.error.HTTPError):
        return f"it answered HTTP {cause.code} {cause.reason}"
    if isinstance(cause, urllib.error.URLError):
        return f"cannot connect ({cause.reason})"
    if isinstance(cause, TimeoutError):
        return f"no answer within {JWKS_TIMEOUT:g} s"
    if isinstance(error, json.JSONDecodeError):
        return f"its answer is not JSON ({error})"
    return f"no usable signing keys there ({error})"


def auth_settings(resource_url: str, issuer: str | None) -> AuthSettings:
    """What the SDK needs to challenge (401 with WWW-Authenticate) and describe the protected resource."""
    return AuthSettings(
        issuer_url=issuer or resource_url,  # type: ignore[arg-type]
        resource_server_url=resource_url,  # type: ignore[arg-type]
        validate_token_resource=False,  # the verifiers check the audience themselves
    )


__all__ = ["JwtVerifier", "LocalToken", "TokenFile", "TokenVerifier", "auth_settings", "local_token_file"]
