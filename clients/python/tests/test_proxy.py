"""`ConnectClient.proxied`: the provider's API through mcp-connect's `/v1/proxy`, against a
real local HTTP server standing for mcp-connect (answers as openapi.json and
src/http/api/proxy.rs describe them: the provider's own, or the proxy's with
`MCP-Connect-Error`)."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx2
import pytest
from conftest import Canned, Seen, json_answer, serve
from starlette.responses import RedirectResponse, Response, StreamingResponse

from mcp_connect import (
    ApiError,
    ConnectClient,
    ConnectError,
    ConnectRequiredError,
    InvalidResponseError,
    SubjectToken,
    UnavailableError,
)

pytestmark = pytest.mark.anyio

KEY = "mcpc_0123456789abcdef_supersecretkeymaterial"
SUBJECT_TOKEN = "eyJhbGciOiJSUzI1NiJ9.the-users-mcp-access-token.sig"
EID = "3f2b8c1e-0d4a-4e5b-9c6d-7e8f9a0b1c2d"
ME = {"login": "octo"}
CONNECT_REQUIRED = {
    "error": "connect_required",
    "error_description": "no usable connection: show the elicitation, then retry with MCP-Connect-Elicitation-Id",
    "status": "connect_required",
    "elicitation": {"id": EID, "url": f"https://c.example/connect/gh?e={EID}", "expires_at": "2030-01-01T00:00:00Z"},
    "mcp": {
        "mode": "url",
        "message": "Whoami needs GitHub",
        "url": f"https://c.example/connect/gh?e={EID}",
        "elicitationId": EID,
    },
    "provider_name": "GitHub",
}


def proxy_error(status: int, code: str, headers: dict[str, str] | None = None) -> Response:
    """An answer the proxy makes itself: its code in `MCP-Connect-Error` and the body."""
    body = {"error": code, "error_description": f"the proxy says {code}"}
    return Response(
        json.dumps(body), status_code=status, media_type="application/json",
        headers={"MCP-Connect-Error": code, **(headers or {})},
    )


async def test_a_proxied_call_goes_to_the_providers_path_with_the_key_and_the_ask_headers() -> None:
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, ConnectClient(base + "/prefix/", KEY) as client:
        async with client.proxied(
            "github",
            subject="zoë b%",
            scopes=["repo", "read:user"],
            elicitation_id=EID,
            server_name="Whoami Tools",
            origin="https://uploads.github.com",
        ) as http:
            r = await http.get("/repos/o/r/issues", params={"state": "open"})
    assert (r.status_code, r.json()) == (200, ME)
    (seen,) = canned.seen
    assert (seen.method, seen.raw_path) == ("GET", "/prefix/v1/proxy/github/repos/o/r/issues")
    assert seen.query == {"state": "open"}
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["mcp-connect-subject"] == "zo%C3%AB%20b%25", "percent-encoded UTF-8"
    assert seen.headers["mcp-connect-scopes"] == "repo read:user"
    assert seen.headers["mcp-connect-elicitation-id"] == EID
    assert seen.headers["mcp-connect-server-name"] == "Whoami%20Tools"
    assert seen.headers["mcp-connect-origin"] == "https://uploads.github.com"
    assert "mcp-connect-subject-token" not in seen.headers


async def test_what_is_not_given_is_not_sent_and_the_subject_token_goes_as_it_is() -> None:
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject_token=SubjectToken(SUBJECT_TOKEN)) as http:
            await http.post("user/keys", json={"key": "ssh-ed25519 AAAA"})
    (seen,) = canned.seen
    assert (seen.method, seen.raw_path) == ("POST", "/v1/proxy/github/user/keys")
    assert seen.body == {"key": "ssh-ed25519 AAAA"}
    ours = {k: v for k, v in seen.headers.items() if k.startswith("mcp-connect-")}
    assert ours == {"mcp-connect-subject-token": SUBJECT_TOKEN}


async def test_the_key_and_the_subject_token_show_nowhere_on_the_client_side(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice", subject_token=SUBJECT_TOKEN) as http:
            r = await http.get("/user")
            shown = [repr(http), str(http.headers), repr(r.request), str(r.request.headers)]
            shown.append(str(dict(r.request.headers)))
    assert canned.seen[0].headers["mcp-connect-subject-token"] == SUBJECT_TOKEN, "sent"
    for text in [*shown, caplog.text]:
        assert KEY not in text and "supersecret" not in text
        assert SUBJECT_TOKEN not in text


@pytest.mark.parametrize(
    "answer",
    [
        json_answer(404, {"message": "Not Found"}),
        # A provider's own error body, even one shaped like ours, is the provider's.
        json_answer(401, {"error": "bad_credentials", "error_description": "no"}),
        json_answer(422, {"error": "connect_required"}),
        lambda _: Response("rate limited", status_code=429, headers={"Retry-After": "60"}),
        lambda _: Response(status_code=500),
    ],
)
async def test_the_providers_answers_are_returned_as_they_are_whatever_the_status(answer: object) -> None:
    canned = Canned([answer])  # type: ignore[list-item]
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            r = await http.get("/user")
    assert r.status_code >= 400
    assert len(canned.seen) == 1, "never retried: the provider's answer is the tool's to judge"


async def test_a_redirect_is_returned_and_following_it_never_carries_the_key_out_of_the_proxy() -> None:
    canned = Canned([lambda _: RedirectResponse("/v1/token", status_code=302)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            r = await http.get("/moved")
            assert (r.status_code, r.headers["location"]) == (302, "/v1/token")
            with pytest.raises(ValueError, match="outside"):
                await http.get("/moved", follow_redirects=True)
    assert [s.raw_path for s in canned.seen] == ["/v1/proxy/github/moved"] * 2, "/v1/token was never asked"


async def test_connect_required_raises_with_the_elicitation_to_show() -> None:
    canned = Canned([json_answer(428, CONNECT_REQUIRED, {"MCP-Connect-Error": "connect_required"})])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            with pytest.raises(ConnectRequiredError) as e:
                await http.get("/user")
    assert isinstance(e.value, ApiError) and isinstance(e.value, ConnectError)
    assert (e.value.status, e.value.code, e.value.provider) == (428, "connect_required", "github")
    outcome = e.value.outcome
    assert outcome.elicitation.id == outcome.mcp.elicitation_id == EID
    assert (outcome.mcp.message, outcome.provider_name) == ("Whoami needs GitHub", "GitHub")
    assert EID not in str(e.value), "the link is the user's, not the log's"


async def test_a_connect_required_without_the_elicitation_is_an_invalid_response() -> None:
    canned = Canned([lambda _: proxy_error(428, "connect_required")])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            with pytest.raises(InvalidResponseError):
                await http.get("/user")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "proxy_path_refused"),
        (400, "invalid_subject"),
        (403, "proxy_path_not_allowed"),
        (403, "connect_declined"),
        (405, "proxy_method_not_allowed"),
        (413, "payload_too_large"),
        (502, "upstream_unreachable"),
        (504, "upstream_timeout"),
    ],
)
async def test_the_proxys_own_answers_raise_with_their_code(status: int, code: str) -> None:
    canned = Canned([lambda _: proxy_error(status, code)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            with pytest.raises(ApiError) as e:
                await http.delete("/user")
    assert not isinstance(e.value, ConnectRequiredError)
    assert (e.value.status, e.value.code, e.value.description) == (status, code, f"the proxy says {code}")
    assert KEY not in str(e.value)


async def test_a_busy_proxy_raises_unavailable_with_its_retry_after_and_is_not_retried() -> None:
    canned = Canned([lambda _: proxy_error(503, "provider_unavailable", {"Retry-After": "7"})])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            with pytest.raises(UnavailableError) as e:
                await http.post("/user", content=b"once")
    assert (e.value.status, e.value.code, e.value.retry_after) == (503, "provider_unavailable", 7.0)
    assert len(canned.seen) == 1, "a proxied request may not be idempotent: the tool decides"


async def test_a_streamed_answer_arrives_as_the_provider_sends_it_and_a_streamed_refusal_raises() -> None:
    go_on = asyncio.Event()

    async def events() -> object:
        yield b"data: one\n\n"
        await go_on.wait()
        yield b"data: two\n\n"

    canned = Canned(
        [
            lambda _: StreamingResponse(events(), media_type="text/event-stream"),  # type: ignore[arg-type]
            lambda _: proxy_error(403, "proxy_path_not_allowed"),
        ]
    )
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            async with http.stream("GET", "/events") as r:
                chunks = r.aiter_bytes()
                first = await asyncio.wait_for(chunks.__anext__(), 5)
                go_on.set()
                rest = b"".join([c async for c in chunks])
            with pytest.raises(ApiError) as e:
                async with http.stream("GET", "/admin"):
                    pass
    assert (first, rest) == (b"data: one\n\n", b"data: two\n\n")
    assert e.value.code == "proxy_path_not_allowed"


@pytest.mark.parametrize(
    "path",
    [
        "../token",
        "user/../../../token",
        "/repos/./o",
        "/repos/..",
        "/repos/%2e%2e/admin",
        "/repos/%2E./admin",
        "/repos/..;/admin",
        "/repos\\..\\admin",
        "/repos/%5C/admin",
        "/repos//o",
        "//evil.example/steal",
        "https://evil.example/steal",
        "http://127.0.0.1:9/v1/proxy/github/user",
    ],
)
async def test_a_path_that_would_leave_or_change_under_the_proxy_is_refused_before_anything_is_sent(path: str) -> None:
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            with pytest.raises(ValueError, match="path"):
                await http.get(path)
    assert canned.seen == []


async def test_a_query_may_say_what_it_likes_and_a_trailing_slash_is_a_path() -> None:
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            await http.get("/search?q=../x")
            await http.get("/repos/")
            await http.get("")
    assert [(s.raw_path, s.query) for s in canned.seen] == [
        ("/v1/proxy/github/search", {"q": "../x"}),
        ("/v1/proxy/github/repos/", {}),
        ("/v1/proxy/github/", {}),
    ]


@pytest.mark.parametrize(
    ("provider", "options", "message"),
    [
        ("github", {}, "subject"),
        ("GitHub", {"subject": "alice"}, "provider"),
        ("git/hub", {"subject": "alice"}, "provider"),
        ("", {"subject": "alice"}, "provider"),
        ("github", {"subject": ""}, "subject"),
        ("github", {"subject": "alice", "scopes": ["read user"]}, "scope"),
        ("github", {"subject": "alice", "scopes": [""]}, "scope"),
        ("github", {"subject": "alice", "elicitation_id": "a b"}, "elicitation id"),
        ("github", {"subject": "alice", "server_name": "Acme\u202eTools"}, "server_name must be"),
        ("github", {"subject": "alice", "origin": "not an origin"}, "origin"),
    ],
)
async def test_an_ask_mcp_connect_would_refuse_is_a_value_error_at_once(
    provider: str, options: dict[str, object], message: str
) -> None:
    async with ConnectClient("http://127.0.0.1:9", KEY) as client:
        with pytest.raises(ValueError, match=message):
            client.proxied(provider, **options)  # type: ignore[arg-type]


async def test_proxied_clients_share_a_pool_of_their_own_which_outlives_each_of_them() -> None:
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        for _ in range(2):
            async with client.proxied("github", subject="alice") as http:
                assert (await http.get("/user")).status_code == 200
        unclosed = client.proxied("github", subject="bob")
        assert (await unclosed.get("/user")).status_code == 200
    assert len(canned.seen) == 3
    assert isinstance(unclosed, httpx2.AsyncClient)


async def test_a_timeout_is_the_proxied_clients_own() -> None:
    async def slow(_: Seen) -> Response:
        await asyncio.sleep(1.0)
        return Response("late")

    canned = Canned([slow])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice", timeout=0.3) as http:
            with pytest.raises(httpx2.TimeoutException):
                await http.get("/user")


async def test_a_request_built_elsewhere_and_sent_on_the_client_gets_the_key_only_under_its_providers_proxy() -> None:
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, ConnectClient(base, KEY) as client:
        async with client.proxied("github", subject="alice") as http:
            for url in [
                f"{base}/v1/token",
                f"{base}/v1/proxy/githubevil/user",
                f"{base}/v1/proxy/github",
                "http://127.0.0.1:9/v1/proxy/github/user",
            ]:
                with pytest.raises(ValueError, match="outside"):
                    await http.send(httpx2.Request("GET", url))
            ok = await http.send(httpx2.Request("GET", f"{base}/v1/proxy/github/user"))
    assert ok.status_code == 200
    assert [s.raw_path for s in canned.seen] == ["/v1/proxy/github/user"]


async def test_a_given_http_client_carries_the_proxied_calls_too_and_its_auth_never_replaces_the_key() -> None:
    canned = Canned([json_answer(200, ME)])
    async with serve(canned.app()) as base, httpx2.AsyncClient(auth=("user", "pass")) as given:
        client = ConnectClient(base, KEY, http=given)
        async with client.proxied("github", subject="alice") as http:
            assert (await http.get("/user")).status_code == 200
        await client.aclose()
        assert not given.is_closed, "the caller's client is the caller's to close"
    assert canned.seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert client._proxy_http is None, "no pool of its own"
