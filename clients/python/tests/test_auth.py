"""The JWT access-token verifier against a real local IdP (discovery document + JWKS)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import jwt
import pytest
from conftest import serve
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp_connect import JwtVerifier

pytestmark = pytest.mark.anyio

AUD = "http://127.0.0.1:8090/mcp"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Idp:
    def __init__(self) -> None:
        self.issuer = ""
        self.jwks_fetches = 0
        self.claimed_issuer: str | None = None
        self.jwks_status = 200
        self.pulled: set[str] = set()

    async def discovery(self, _: Request) -> JSONResponse:
        issuer = self.claimed_issuer or self.issuer
        return JSONResponse({"issuer": issuer, "jwks_uri": f"{self.issuer}/jwks"})

    async def jwks(self, _: Request) -> JSONResponse:
        self.jwks_fetches += 1
        if self.jwks_status != 200:
            return JSONResponse({"error": "server_error"}, status_code=self.jwks_status)
        rsa_jwk = RSAAlgorithm.to_jwk(RSA_KEY.public_key(), as_dict=True) | {"kid": "r1", "alg": "RS256", "use": "sig"}
        ec_jwk = ECAlgorithm.to_jwk(EC_KEY.public_key(), as_dict=True) | {"kid": "e1"}
        return JSONResponse({"keys": [k for k in (rsa_jwk, ec_jwk) if k["kid"] not in self.pulled]})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/.well-known/openid-configuration", self.discovery), Route("/jwks", self.jwks)])


@pytest.fixture
async def idp() -> AsyncIterator[Idp]:
    idp = Idp()
    async with serve(idp.app()) as base:
        idp.issuer = base
        yield idp


def token(
    idp: Idp, *, key: Any = RSA_KEY, alg: str = "RS256", kid: str = "r1", typ: str | None = "at+jwt", **claims: Any
) -> str:
    now = int(time.time())
    body = {"iss": idp.issuer, "aud": AUD, "sub": "alice", "exp": now + 300, "iat": now, "client_id": "c1"} | claims
    body = {k: v for k, v in body.items() if v is not None}
    # PyJWT drops a typ given as None (it would otherwise write "JWT").
    headers: dict[str, Any] = {"kid": kid, "typ": typ}
    return jwt.encode(body, key, algorithm=alg, headers=headers)


async def test_a_genuine_token_gives_its_subject(idp: Idp) -> None:
    v = await JwtVerifier.discover(idp.issuer, AUD)
    got = await v.verify_token(token(idp, scope="a b"))
    assert got is not None
    assert (got.subject, got.client_id, got.scopes, got.resource) == ("alice", "c1", ["a", "b"], AUD)
    ec_token = token(idp, key=EC_KEY, alg="ES256", kid="e1")
    assert (await v.verify_token(ec_token)) is not None, "ES256 is accepted"


@pytest.mark.parametrize("typ", ["at+jwt", "AT+JWT", "application/at+jwt", "Application/At+JWT"])
async def test_a_token_whose_typ_is_at_jwt_in_any_case_is_accepted(idp: Idp, typ: str) -> None:
    v = await JwtVerifier.discover(idp.issuer, AUD)
    got = await v.verify_token(token(idp, typ=typ))
    assert got is not None and got.subject == "alice", typ


@pytest.mark.parametrize(
    ("typ", "reason"),
    [
        (None, "no typ"),
        ("JWT", "typ is not at+jwt"),
        ("application/jwt", "typ is not at+jwt"),
        ("at+jwt; charset=utf-8", "typ is not at+jwt"),
        (1, "typ is not at+jwt"),
    ],
)
async def test_a_token_without_typ_at_jwt_is_refused_with_its_reason(
    idp: Idp, typ: Any, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    # RFC 9068 §4, as the service checks a subject token (src/oauth/access_token.rs): an
    # ID token, or any other JWT of the IdP that does not say it is an access token, is not
    # one, whatever its audience and signature.
    v = await JwtVerifier.discover(idp.issuer, AUD)
    tok = token(idp, typ=typ)
    if typ is None:
        assert "typ" not in jwt.get_unverified_header(tok), "the token has no typ at all"
    with caplog.at_level(logging.INFO, logger="mcp_connect.auth"):
        assert await v.verify_token(tok) is None, repr(typ)
    assert f"access token refused: {reason}" in caplog.messages, caplog.messages


@pytest.mark.parametrize(
    ("why", "make"),
    [
        ("another audience", lambda idp: token(idp, aud="https://other.example/mcp")),
        ("another issuer", lambda idp: token(idp, iss="https://evil.example")),
        ("expired", lambda idp: token(idp, exp=int(time.time()) - 120)),
        ("not yet valid", lambda idp: token(idp, nbf=int(time.time()) + 600)),
        ("no exp", lambda idp: token(idp, exp=None)),
        ("no sub", lambda idp: token(idp, sub=None)),
        ("empty sub", lambda idp: token(idp, sub="")),
        ("typ JWT (an ID token)", lambda idp: token(idp, typ="JWT")),
        ("no typ", lambda idp: token(idp, typ=None)),
        ("signed by another key", lambda idp: token(idp, key=OTHER_KEY)),
        ("unknown kid", lambda idp: token(idp, kid="nope")),
        ("PS256 with a key published for RS256", lambda idp: token(idp, alg="PS256")),
        ("RS512", lambda idp: token(idp, alg="RS512")),
        ("HS256 keyed with the public key", lambda idp: hs256_with_public_key(idp)),
        ("alg none", lambda idp: jwt.encode({"sub": "alice", "iss": idp.issuer, "aud": AUD}, None, algorithm="none")),
        ("garbage", lambda idp: "a.b.c"),
    ],
)
async def test_refused(idp: Idp, why: str, make: Any) -> None:
    v = await JwtVerifier.discover(idp.issuer, AUD)
    assert await v.verify_token(make(idp)) is None, why


def hs256_with_public_key(idp: Idp) -> str:
    import base64
    import hashlib
    import hmac
    import json

    pem = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def b64(d: bytes) -> str:
        return base64.urlsafe_b64encode(d).decode().rstrip("=")

    head = b64(json.dumps({"alg": "HS256", "kid": "r1", "typ": "at+jwt"}).encode())
    claims = {"iss": idp.issuer, "aud": AUD, "sub": "alice", "exp": int(time.time()) + 300}
    body = b64(json.dumps(claims).encode())
    sig = b64(hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


async def test_an_unknown_kid_refetches_the_jwks_at_most_every_30_seconds(idp: Idp) -> None:
    v = await JwtVerifier.discover(idp.issuer, AUD)
    assert idp.jwks_fetches == 1
    for _ in range(5):
        assert await v.verify_token(token(idp, kid="rotated")) is None
    assert idp.jwks_fetches == 1, "within 30 s of the last fetch: no refetch"
    v._fetched -= 31
    assert await v.verify_token(token(idp, kid="rotated")) is None
    assert idp.jwks_fetches == 2


async def test_a_key_the_idp_pulled_stops_verifying_once_the_jwks_is_older_than_ten_minutes(idp: Idp) -> None:
    # Security review (issue 41): a known kid never refetched, so a pulled key lived on.
    v = await JwtVerifier.discover(idp.issuer, AUD)
    tok = token(idp)
    assert await v.verify_token(tok) is not None
    idp.pulled.add("r1")
    v._loaded -= 599
    v._fetched -= 599
    assert await v.verify_token(tok) is not None, "young keys are not fetched again"
    assert idp.jwks_fetches == 1
    v._loaded -= 2
    v._fetched -= 2
    assert await v.verify_token(tok) is None
    assert idp.jwks_fetches == 2


async def test_with_the_idp_down_the_keys_held_serve_an_hour_past_their_age(idp: Idp) -> None:
    v = await JwtVerifier.discover(idp.issuer, AUD)
    tok = token(idp)
    idp.jwks_status = 500
    v._loaded -= 601
    v._fetched -= 601
    assert await v.verify_token(tok) is not None, "within the grace"
    assert idp.jwks_fetches == 2, "it tried"
    v._loaded -= 3600
    v._fetched -= 3600
    assert await v.verify_token(tok) is None


async def test_a_jwks_without_a_usable_key_does_not_replace_the_keys_held(idp: Idp) -> None:
    v = await JwtVerifier.discover(idp.issuer, AUD)
    idp.pulled.update({"r1", "e1"})
    v._loaded -= 601
    v._fetched -= 601
    assert await v.verify_token(token(idp)) is not None


async def test_an_http_issuer_off_loopback_is_refused() -> None:
    with pytest.raises(ValueError, match="https"):
        await JwtVerifier.discover("http://idp.example", AUD)


async def test_a_discovery_document_naming_another_issuer_is_refused(idp: Idp) -> None:
    idp.claimed_issuer = "https://evil.example"
    with pytest.raises(ValueError, match="issuer"):
        await JwtVerifier.discover(idp.issuer, AUD)


async def resource_server_status(v: JwtVerifier, tok: str) -> int:
    """What the SDK's bearer middleware answers for `tok`, with `v` as its verifier."""
    auth = AuthSettings(issuer_url=v.issuer, resource_server_url=AUD, validate_token_resource=False)
    server = MCPServer("t", token_verifier=v, auth=auth)
    async with serve(server.streamable_http_app(json_response=True)) as base, httpx2.AsyncClient() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"Authorization": f"Bearer {tok}", "Accept": "application/json, text/event-stream"}
        return (await http.post(f"{base}/mcp", json=body, headers=headers)).status_code


@pytest.mark.parametrize("idp_state", ["down", "answers 500"])
async def test_an_unknown_kid_while_the_jwks_cannot_be_fetched_is_a_401_not_a_server_error(
    idp_state: str, caplog: pytest.LogCaptureFixture
) -> None:
    idp = Idp()
    async with serve(idp.app()) as base:
        idp.issuer = base
        v = await JwtVerifier.discover(idp.issuer, AUD)
        rotated, genuine = token(idp, kid="rotated"), token(idp)
        if idp_state == "answers 500":
            idp.jwks_status = 500
            v._fetched -= 31
            with caplog.at_level(logging.INFO, logger="mcp_connect.auth"):
                assert await v.verify_token(rotated) is None
            assert idp.jwks_fetches == 2, "the refetch was tried"
            v._fetched -= 31
            assert await resource_server_status(v, rotated) == 401
    if idp_state == "down":  # the IdP's server has stopped: the refetch cannot connect
        v._fetched -= 31
        with caplog.at_level(logging.INFO, logger="mcp_connect.auth"):
            assert await v.verify_token(rotated) is None, "the refetch failed: refused, not raised"
        assert "the JWKS could not be fetched (ConnectError)" in caplog.text
        v._fetched -= 31
        assert await resource_server_status(v, rotated) == 401, "the SDK answers 401, not 500"
    assert rotated not in caplog.text and rotated.split(".")[2] not in caplog.text, "the token is not logged"
    got = await v.verify_token(genuine)
    assert got is not None and got.subject == "alice", "known keys keep working while the IdP is away"
