"""MCP authorization, resource-server side: a `TokenVerifier` for the official SDK that
checks the IdP's JWT access tokens (RFC 9068): an RS256, PS256 or ES256 signature against
the JWKS named by the issuer's discovery document, `typ` `at+jwt` (RFC 9068 §4), `iss`,
`aud` = this server's resource, `exp` (and `nbf`), and a non-empty `sub`. The SDK's bearer
middleware turns a refusal into `401` with the RFC 9728 metadata pointer.

The subject of an MCP call is the token's `sub`, and only that: tool arguments never name
the user. Why a token was refused goes to the log at INFO, never to the client.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import anyio
import httpx2
import jwt

from ._lazy import mcp_missing

try:
    from mcp.server.auth.provider import AccessToken
except ModuleNotFoundError as e:
    mcp_missing("JwtVerifier (mcp_connect.auth)", e)

__all__ = ["JwtVerifier"]

logger = logging.getLogger("mcp_connect.auth")

# The asymmetric algorithms IdPs sign access tokens with; never `none` or HMAC (an HMAC
# "signed" with the public key would otherwise verify).
ALGORITHMS = ("RS256", "PS256", "ES256")
# A kid the cached JWKS lacks triggers a refetch at most this often (key rotation without
# letting garbage tokens hammer the IdP).
JWKS_REFRESH_MIN = 30.0
# Keys older than this are fetched again before use: a key the IdP pulled (a compromised
# one) stops verifying within this time, even with its kid still cached.
JWKS_MAX_AGE = 600.0
# While the IdP cannot be reached, the keys held still serve this long past their age.
JWKS_GRACE = 3600.0
MAX_DOCUMENT = 256 * 1024


def _secure_or_loopback(url: str) -> bool:
    """https, or http on a loopback host (a development IdP): keys read over plain http
    could be anyone's on the way."""
    u = httpx2.URL(url)
    return u.scheme == "https" or (u.scheme == "http" and u.host in ("127.0.0.1", "::1", "localhost"))


async def _get_json(http: httpx2.AsyncClient, url: str) -> Any:
    async with http.stream("GET", url, follow_redirects=False) as r:
        if r.status_code != 200:
            raise ValueError(f"{url} answered {r.status_code}")
        body = bytearray()
        async for chunk in r.aiter_bytes():
            body += chunk
            if len(body) > MAX_DOCUMENT:
                raise ValueError(f"{url} answered more than {MAX_DOCUMENT} bytes")
    return json.loads(body)


class JwtVerifier:
    """Validates access tokens of one issuer for one audience (`verify_token` is the SDK's
    `TokenVerifier` protocol). Build it with `await JwtVerifier.discover(issuer, resource)`."""

    def __init__(
        self, issuer: str, audience: str, jwks_uri: str, jwks: dict[str, Any], http: httpx2.AsyncClient
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self._jwks_uri = jwks_uri
        self._keys = _keys_of(jwks)
        self._fetched = time.monotonic()
        self._loaded = self._fetched
        self._http = http
        self._lock = anyio.Lock()

    @classmethod
    async def discover(cls, issuer: str, audience: str, *, http: httpx2.AsyncClient | None = None) -> JwtVerifier:
        """Reads `<issuer>/.well-known/openid-configuration` and its JWKS. The document must
        name the same issuer (RFC 8414 §3.3)."""
        if not _secure_or_loopback(issuer):
            raise ValueError(f"the issuer {issuer!r} must be https (http only on loopback)")
        http = http or httpx2.AsyncClient(timeout=10.0, follow_redirects=False)
        doc = await _get_json(http, issuer.rstrip("/") + "/.well-known/openid-configuration")
        if doc.get("issuer") != issuer:
            raise ValueError(f"discovery names issuer {doc.get('issuer')!r}, expected {issuer!r}")
        jwks_uri = doc.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise ValueError("the discovery document has no jwks_uri")
        if not _secure_or_loopback(jwks_uri):
            raise ValueError(f"the jwks_uri {jwks_uri[:64]!r} must be https (http only on loopback)")
        return cls(issuer, audience, jwks_uri, await _get_json(http, jwks_uri), http)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            return await self._verify(token)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError) as e:
            logger.info("access token refused: %s", type(e).__name__ if isinstance(e, KeyError) else e)
            return None
        except httpx2.HTTPError as e:
            # The JWKS refetch for an unknown kid failed (the IdP is down or unreachable):
            # the token cannot be verified, so it is refused (401), not a server error.
            # Only the error's kind is logged: its text may quote the request.
            logger.warning("access token refused: the JWKS could not be fetched (%s)", type(e).__name__)
            return None

    async def _verify(self, token: str) -> AccessToken:
        header = jwt.get_unverified_header(token)
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise ValueError(f"algorithm {alg!r} is not accepted")
        # RFC 9068 §4: an access token says so (`at+jwt`, or its full media type, compared
        # as media types are: ASCII case-insensitively). An ID token or any other JWT of
        # the IdP is refused, whatever its audience. The same check as the service's.
        typ = header.get("typ")
        if typ is None:
            raise ValueError("no typ")
        if not isinstance(typ, str) or not typ.isascii() or typ.lower() not in ("at+jwt", "application/at+jwt"):
            raise ValueError("typ is not at+jwt")
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise ValueError("no kid")
        key, declared = await self._key(kid)
        # A key published for one algorithm is used with that one only.
        if declared is not None and declared != alg:
            raise ValueError("the token's alg is not its key's")
        claims = jwt.decode(
            token,
            key.key,
            algorithms=[alg],
            audience=self.audience,
            issuer=self.issuer,
            leeway=30,
            options={"require": ["exp", "iss", "aud", "sub"], "verify_nbf": True},
        )
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise ValueError("empty sub")
        scope = claims.get("scope")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or ""),
            scopes=scope.split() if isinstance(scope, str) else [],
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=sub,
            claims={"iss": claims["iss"]},
        )

    async def _key(self, kid: str) -> tuple[jwt.PyJWK, str | None]:
        """The key of `kid`. An unknown kid, or keys older than ten minutes, fetch the JWKS
        again (at most every 30 s); while the IdP cannot be reached, the keys held serve an
        hour past their age."""
        if kid not in self._keys or time.monotonic() - self._loaded >= JWKS_MAX_AGE:
            try:
                await self._refetch()
            except (httpx2.HTTPError, ValueError) as e:
                if kid not in self._keys or time.monotonic() - self._loaded >= JWKS_MAX_AGE + JWKS_GRACE:
                    raise
                logger.warning("the JWKS could not be fetched again; the keys held still serve (%s)", type(e).__name__)
        if kid not in self._keys:
            raise ValueError("no key with that kid")
        return self._keys[kid]

    async def _refetch(self) -> None:
        async with self._lock:
            if time.monotonic() - self._fetched < JWKS_REFRESH_MIN:
                return
            self._fetched = time.monotonic()
            keys = _keys_of(await _get_json(self._http, self._jwks_uri))
            # An empty or broken set would refuse every token: the keys held stay.
            if not keys:
                raise ValueError("the JWKS has no usable key")
            self._keys = keys
            self._loaded = time.monotonic()


def _keys_of(jwks: Any) -> dict[str, tuple[jwt.PyJWK, str | None]]:
    """The JWKS's signing keys by kid, each with the `alg` it was published for (if any).
    Keys this library cannot use (other types, encryption keys) are left out."""
    keys: dict[str, tuple[jwt.PyJWK, str | None]] = {}
    for data in jwks.get("keys", []) if isinstance(jwks, dict) else []:
        if not isinstance(data, dict) or data.get("use", "sig") != "sig" or not isinstance(data.get("kid"), str):
            continue
        try:
            keys[data["kid"]] = (jwt.PyJWK(data), data.get("alg"))
        except jwt.PyJWTError:
            continue
    return keys
