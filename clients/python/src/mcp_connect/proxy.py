"""`/v1/proxy/{provider}/{path}` (issue 42): an `httpx2.AsyncClient` whose base URL is one
provider's API through mcp-connect, so a tool writes `await http.get("/user")` as it would
against the provider, and mcp-connect attaches the user's credential: the MCP server never
holds it.

The server key and the user's MCP access token are added as a request leaves, on a copy of
it: they are in no header the client, its requests, its event hooks or its logs show. The
provider's answers come back as they are, whatever the status. The proxy's own answers
(those with `MCP-Connect-Error`) raise: `ConnectRequiredError` with the elicitation to show,
`UnavailableError` for 503/429, `ApiError` with the code for the rest. Nothing is retried:
a proxied request need not be idempotent, so the tool decides.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any
from urllib.parse import quote, unquote

import httpx2

from .errors import (
    ApiError,
    ConnectError,
    ConnectRequiredError,
    InvalidResponseError,
    UnavailableError,
    error_body,
    retry_after_seconds,
)
from .models import SERVER_NAME_RULE, ConnectRequired, valid_elicitation_id, valid_server_name
from .secret import ApiKey, Secret, SubjectToken
from .token_source import TokenSource, bearer

__all__ = ["PROXY_TIMEOUT", "ProxyClient", "check_path"]

# The headers a caller addresses the proxy with (mcp-connect forwards none of them).
SUBJECT = "mcp-connect-subject"
SUBJECT_TOKEN = "mcp-connect-subject-token"
SCOPES = "mcp-connect-scopes"
ELICITATION = "mcp-connect-elicitation-id"
ORIGIN = "mcp-connect-origin"
SERVER_NAME = "mcp-connect-server-name"
ASK_HEADERS = (SUBJECT, SUBJECT_TOKEN, SCOPES, ELICITATION, ORIGIN, SERVER_NAME)
# On every answer the proxy makes itself: its error code.
ERROR_HEADER = "mcp-connect-error"
# A proxied exchange's timeouts (connecting, each read and write): the provider's answer is
# streamed, so there is no deadline for the whole of it, unlike a token call's.
PROXY_TIMEOUT = 30.0
# The proxy's own answers are a few hundred bytes; past this one is not.
MAX_ERROR_BODY = 64 * 1024
SUBJECT_TOKEN_MAX = 8192
# mcp-connect's provider ids: it refuses an encoded one, so the name goes in the path as it is.
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# Visible ASCII but `%`: what percent-encoding keeps in a header value (mcp-connect decodes
# each text header once, as UTF-8).
_KEPT = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def check_provider(provider: str) -> str:
    if not isinstance(provider, str) or _PROVIDER.fullmatch(provider) is None:
        raise ValueError("the provider must be 1-64 characters of a-z, 0-9, '-' or '_', from a letter or digit")
    return provider


def check_path(url: httpx2.URL | str) -> None:
    """Refuses what would not reach the provider's API at the path written: a URL or a
    `//host` (the server key would go to that host, or httpx2 would quietly drop it), and a
    dot segment, plain or encoded (httpx2 resolves one before sending, so `../../token`
    would reach another of mcp-connect's endpoints with the server key); a backslash (a
    slash to some servers) and an empty segment too, as the TypeScript SDK does.
    mcp-connect refuses all of these, and more (an encoded slash or percent sign), as
    `proxy_path_refused`. The query is the provider's business."""
    text = str(url)
    parsed = httpx2.URL(url)
    if parsed.scheme or parsed.host or text.startswith("//"):
        raise ValueError("a proxied request takes the path at the provider's API (\"/user\"), not a URL or a //host")
    path = text.partition("#")[0].partition("?")[0]
    segments = path.removeprefix("/").split("/")
    for i, segment in enumerate(segments):
        if "\\" in segment or "%5c" in segment.lower():
            raise ValueError(f"the path {path!r} has a backslash, a slash to some servers")
        if not segment and i + 1 < len(segments):
            raise ValueError(f"the path {path!r} has an empty segment (//)")
        # `..;x` is `..` to servers that strip path parameters.
        if unquote(segment.split(";")[0]) in (".", ".."):
            raise ValueError(f"the path {path!r} has a dot segment: give the provider's path without . or ..")


def _encoded(value: str) -> str:
    return quote(value, safe=_KEPT)


def _scopes(scopes: Collection[str]) -> str:
    # Space-separated on the wire: a scope cannot hold one.
    if isinstance(scopes, str) or any(not isinstance(s, str) or not s or s != "".join(s.split()) for s in scopes):
        raise ValueError("each scope must be a non-empty string without whitespace")
    return " ".join(_encoded(s) for s in scopes)


def _origin(origin: str) -> str:
    # As mcp-connect compares it: scheme and authority, nothing after.
    try:
        parsed = httpx2.URL(origin) if isinstance(origin, str) else None
    except httpx2.InvalidURL:
        parsed = None
    as_compared = f"{parsed.scheme}://{parsed.netloc.decode()}" if parsed is not None else None
    if parsed is None or parsed.scheme not in ("http", "https") or origin != as_compared:
        raise ValueError("origin must be one of the provider's API origins, as scheme://host[:port]")
    return origin


def ask_headers(
    *,
    subject: str | None,
    scopes: Collection[str] | None,
    elicitation_id: str | None,
    server_name: str | None,
    origin: str | None,
) -> tuple[tuple[str, str], ...]:
    """The `MCP-Connect-*` headers but the subject token, checked as mcp-connect checks them."""
    headers: list[tuple[str, str]] = []
    if subject is not None:
        if not isinstance(subject, str) or not subject:
            raise ValueError("the subject must be a non-empty string")
        headers.append((SUBJECT, _encoded(subject)))
    if scopes is not None:
        headers.append((SCOPES, _scopes(scopes)))
    if elicitation_id is not None:
        if not valid_elicitation_id(elicitation_id):
            raise ValueError("not an elicitation id")
        headers.append((ELICITATION, elicitation_id))
    if origin is not None:
        headers.append((ORIGIN, _origin(origin)))
    if server_name is not None:
        if not valid_server_name(server_name):
            raise ValueError(SERVER_NAME_RULE)
        headers.append((SERVER_NAME, _encoded(server_name)))
    return tuple(headers)


def subject_token_of(token: SubjectToken | str | None) -> SubjectToken | None:
    if token is None:
        return None
    token = token if isinstance(token, SubjectToken) else SubjectToken(token)
    if not 0 < len(token.reveal()) <= SUBJECT_TOKEN_MAX:
        raise ValueError(f"subject_token must be 1-{SUBJECT_TOKEN_MAX} characters")
    return token


class ProxyTransport(httpx2.AsyncBaseTransport):
    """Sends a proxied request on `via` (the pool proxied calls share) with the server key
    and the ask headers; turns the proxy's own answers into errors. Closing it leaves `via`
    open."""

    def __init__(
        self,
        via: httpx2.AsyncClient,
        base: httpx2.URL,
        provider: str,
        key: ApiKey | TokenSource,
        subject_token: SubjectToken | None,
        headers: tuple[tuple[str, str], ...],
    ) -> None:
        self.via = via
        self.base = base
        # What every path this client sends starts with: `/…/v1/proxy/github/`, not `…/githubx`.
        self._prefix = base.raw_path.rstrip(b"/") + b"/"
        self.provider = provider
        self._key = key
        self._subject_token = subject_token
        self._headers = headers

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self._check_target(request.url)
        # A copy carries the secrets: the caller's request (and `response.request`) never does.
        # A token source's token as it is now (a rotated one from the next request on).
        sent = httpx2.Request(
            request.method,
            request.url,
            headers=self._with_ask(request.headers, await bearer(self._key)),
            stream=request.stream,
            extensions=request.extensions,
        )
        # No auth of the pool's client: the server key is the one credential mcp-connect takes.
        response = await self.via.send(sent, stream=True, auth=None, follow_redirects=False)
        code = response.headers.get(ERROR_HEADER)
        if code is None:
            return response
        try:
            body = await _capped(response)
        finally:
            await response.aclose()
        raise _refusal(self.provider, response, code, body)

    def _check_target(self, url: httpx2.URL) -> None:
        """Only this provider's proxy path gets the key: not a redirect the tool chose to
        follow, not a request built for another URL and sent on this client."""
        same_origin = (url.scheme, url.host, url.port) == (self.base.scheme, self.base.host, self.base.port)
        if not same_origin or not url.raw_path.startswith(self._prefix):
            raise ValueError(f"refused: {url.path} is outside {self._prefix.decode()}, where this client sends")
        check_path(url.raw_path[len(self._prefix) - 1 :].decode("ascii"))

    def _with_ask(self, given: httpx2.Headers, key: Secret) -> httpx2.Headers:
        headers = httpx2.Headers(given)
        for name in ASK_HEADERS:
            headers.pop(name, None)
        headers["Authorization"] = f"Bearer {key.reveal()}"
        for name, value in self._headers:
            headers[name] = value
        if self._subject_token is not None:
            headers[SUBJECT_TOKEN] = self._subject_token.reveal()
        return headers


async def _capped(response: httpx2.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ERROR_BODY:
            raise InvalidResponseError("the proxy's answer body is too large")
    return bytes(body)


def _refusal(provider: str, response: httpx2.Response, code: str, body: bytes) -> ConnectError:
    """The error for an answer the proxy made itself (its code is the header's)."""
    status = response.status_code
    _, description = error_body(body, status)
    if status == 428 and code == "connect_required":
        try:
            answer = ConnectRequired.model_validate_json(body)
        except ValueError:
            return InvalidResponseError("the proxy's connect_required carried no elicitation")
        return ConnectRequiredError(provider, description, answer)
    if status in (429, 503):
        return UnavailableError(status, code, retry_after_seconds(response.headers.get("retry-after")))
    return ApiError(status, code, description)


class ProxyClient(httpx2.AsyncClient):
    """An `httpx2.AsyncClient` on one provider's API through mcp-connect's proxy (made by
    `ConnectClient.proxied` or `Connection.http()`). Give it the path at the provider's
    API, `"/user"` or `"repos/o/r"` (a query in it or in `params=`); a URL, a `//host` or a
    dot segment raise `ValueError` before anything is sent. Close it (`async with`): the
    connection pool underneath is the `ConnectClient`'s and stays open."""

    def __init__(self, transport: ProxyTransport, timeout: httpx2.Timeout) -> None:
        # `trust_env` off: an environment proxy would route around the transport (the pool
        # it sends on keeps the environment's settings).
        super().__init__(
            base_url=transport.base, transport=transport, timeout=timeout, follow_redirects=False, trust_env=False
        )
        self.provider = transport.provider

    def build_request(self, method: str, url: httpx2.URL | str, **kwargs: Any) -> httpx2.Request:
        check_path(url)
        return super().build_request(method, url, **kwargs)

    def __repr__(self) -> str:
        return f"ProxyClient({self.provider!r}, {str(self.base_url)!r})"
