"""The HTTP side: one `httpx2.AsyncClient` (redirects off, a total deadline per exchange,
answer bodies capped at 64 KiB), the API key (or the workload token of a token source, as
it is when the request leaves) on every call, JSON errors mapped to
`ApiError` with mcp-connect's stable code, and `503`/`429` with `Retry-After` retried
within a `RetryPolicy`. Retrying is safe: `/v1/token` is idempotent and the elicitation
lookup is a GET. `proxied()` opens a client on a provider's API through `/v1/proxy`
(`proxy.py`), on a pool of its own."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
import httpx2

from ._lazy import renamed
from .errors import (
    ApiError,
    ConnectError,
    InvalidResponseError,
    TransportError,
    UnavailableError,
    error_body,
    retry_after_seconds,
)
from .models import (
    Cancelled,
    CancelReason,
    Connected,
    ConnectRequired,
    Declined,
    ElicitationInfo,
    TokenRequest,
    parse_token_answer,
    valid_elicitation_id,
)
from .proxy import PROXY_TIMEOUT, ProxyClient, ProxyTransport, ask_headers, check_provider, subject_token_of
from .secret import ApiKey, SubjectToken
from .settings import URL, setting
from .token_source import TokenSource, bearer, credential_from_env, credential_of, describe

__all__ = ["ConnectClient", "RetryPolicy"]

logger = logging.getLogger("mcp_connect")

# mcp-connect's answers are a few hundred bytes; anything past this is not one.
MAX_BODY = 64 * 1024
# The deadline of one exchange without a wait; a waiting request gets its wait on top.
BASE_TIMEOUT = 15.0


@dataclass(frozen=True)
class RetryPolicy:
    """How long the client waits for mcp-connect to become available again."""

    # Retries after the first attempt.
    max_retries: int = 2
    # A `Retry-After` longer than this is not waited for: the caller gets `UnavailableError`
    # at once (a tool call should not hang for minutes).
    max_delay: float = 10.0
    # The sum of all waits stays within this.
    max_total: float = 15.0
    # The wait when a 503/429 carries no usable `Retry-After`.
    default_delay: float = 1.0

    @classmethod
    def none(cls) -> RetryPolicy:
        return cls(max_retries=0)


class ConnectClient:
    """A client of mcp-connect's `/v1` API for one tenant (the API key decides which).

    `base_url` is mcp-connect's public base URL, e.g. `https://connect.example.com` (a
    path prefix is kept). `api_key` is the server-scope API key (`ApiKey`, or a `str`), or
    a token source in its place (docs/workload-identity.md): a `TokenFile`, or a function,
    plain or `async`, returning the workload token; the token is read for each request (a
    `TokenFile` again only when the file changed), and one that cannot be had raises
    `WorkloadTokenError` before anything is sent. Use as `async with`, or call `aclose()`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: ApiKey | str | TokenSource,
        *,
        retry: RetryPolicy | None = None,
        timeout: float = BASE_TIMEOUT,
        connect_timeout: float = 5.0,
        http: httpx2.AsyncClient | None = None,
        max_connections: int | None = None,
    ) -> None:
        url = httpx2.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError("the mcp-connect base URL must be an http(s) URL")
        if max_connections is not None and (http is not None or max_connections < 1):
            raise ValueError("max_connections (at least 1) sizes the client's own pool, not a given http client")
        self._base = str(url.copy_with(query=None, fragment=None)).rstrip("/")
        # The API key, or the token source read as each request leaves.
        self._key = credential_of(api_key)
        self.retry = retry or RetryPolicy()
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._owns_http = http is None
        # Redirects off: a redirect would carry the API key to wherever it points.
        limits = (
            httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
            if max_connections is not None
            else httpx2.Limits(max_connections=100, max_keepalive_connections=20)
        )
        self._http = http or httpx2.AsyncClient(
            follow_redirects=False, timeout=httpx2.Timeout(timeout, connect=connect_timeout), limits=limits
        )
        self._limits = limits
        # Proxied calls' pool, made on first use (see `_proxy_pool`).
        self._proxy_http: httpx2.AsyncClient | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> ConnectClient:
        """A client for `MCP_CONNECT_URL` with `MCP_CONNECT_API_KEY` (the names `mcp-connect
        dev` writes), or, where no key is set, with a `TokenFile` of `MCP_CONNECT_TOKEN_FILE`
        (a workload token's file); a missing one raises `MissingSettingError` naming it
        (both names when neither is set). `kwargs` as for the constructor."""
        return cls(setting(URL, environ), credential_from_env(environ), **kwargs)

    def with_own_pool(self, max_connections: int) -> ConnectClient:
        """A client of the same service, API key (or the same token source), retry policy
        and timeouts on a connection pool of its own, of at most `max_connections`: for long
        polls, which must never hold the connections the token calls need. Close it
        separately."""
        return ConnectClient(
            self._base,
            self._key,
            retry=self.retry,
            timeout=self._timeout,
            connect_timeout=self._connect_timeout,
            max_connections=max_connections,
        )

    def __repr__(self) -> str:
        return f"ConnectClient({self._base!r}, {describe(self._key)})"

    async def __aenter__(self) -> ConnectClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()
        if self._proxy_http is not None:
            await self._proxy_http.aclose()

    def proxied(
        self,
        provider: str,
        *,
        subject: str | None = None,
        subject_token: SubjectToken | str | None = None,
        scopes: Collection[str] | None = None,
        elicitation_id: str | None = None,
        server_name: str | None = None,
        origin: str | None = None,
        timeout: float | httpx2.Timeout = PROXY_TIMEOUT,
    ) -> ProxyClient:
        """An `httpx2.AsyncClient` on `provider`'s API through mcp-connect's `/v1/proxy`, as
        the user `subject` (or whose MCP access token `subject_token` is; both may go):
        `async with client.proxied("github", subject=sub) as http: r = await http.get("/user")`.
        mcp-connect attaches the user's credential. The provider's answers are returned as
        they are; the proxy's own raise (`ConnectRequiredError` with the elicitation to show,
        else a `ConnectError` with its code). `scopes`, `elicitation_id` (the retry after a
        `connect_required`) and `server_name` as for `token()`; `origin`: another of the
        provider's API origins than its first. Arguments mcp-connect would refuse raise
        `ValueError` here."""
        if subject is None and subject_token is None:
            raise ValueError("give the subject, its MCP access token (subject_token), or both")
        headers = ask_headers(
            subject=subject, scopes=scopes, elicitation_id=elicitation_id, server_name=server_name, origin=origin
        )
        base = httpx2.URL(self._url(("v1", "proxy", check_provider(provider))))
        transport = ProxyTransport(
            self._proxy_pool(), base, provider, self._key, subject_token_of(subject_token), headers
        )
        if not isinstance(timeout, httpx2.Timeout):
            timeout = httpx2.Timeout(timeout, connect=min(timeout, self._connect_timeout))
        return ProxyClient(transport, timeout)

    def _proxy_pool(self) -> httpx2.AsyncClient:
        """The given `http` client (its settings are the caller's choice), else a pool of
        the proxied calls' own: a provider's answer may stream for long, and must never hold
        a connection the token calls need."""
        if not self._owns_http:
            return self._http
        if self._proxy_http is None:
            self._proxy_http = httpx2.AsyncClient(follow_redirects=False, limits=self._limits)
        return self._proxy_http

    async def token(self, request: TokenRequest) -> Connected | ConnectRequired | Declined:
        """`POST /v1/token`: the token, or an elicitation to send, or "declined"."""
        body = await self._send("POST", ("v1", "token"), json_body=request.body(), wait=request.wait_seconds)
        try:
            return parse_token_answer(body)
        except ValueError as e:
            # pydantic's message quotes the input, and the input may hold a token.
            raise InvalidResponseError(f"token answer: {_fields_of(e)}") from None

    async def elicitation(self, elicitation_id: str, *, wait_seconds: int | None = None) -> ElicitationInfo:
        """`GET /v1/elicitations/{id}`; with `wait_seconds` (0-30) a pending one is answered
        when it changes or when the wait runs out."""
        query = None if wait_seconds is None else {"wait_seconds": str(int(wait_seconds))}
        body = await self._send("GET", ("v1", "elicitations", self._id(elicitation_id)), query=query, wait=wait_seconds)
        try:
            return ElicitationInfo.model_validate_json(body)
        except ValueError as e:
            raise InvalidResponseError(f"elicitation answer: {_fields_of(e)}") from None

    async def cancel_elicitation(self, elicitation_id: str, reason: CancelReason) -> Cancelled:
        """`POST /v1/elicitations/{id}/cancel`: the MCP client answered the URL elicitation
        with `cancel` or `decline`, so the link must stop working. Harmless to repeat."""
        path = ("v1", "elicitations", self._id(elicitation_id), "cancel")
        body = await self._send("POST", path, json_body={"reason": CancelReason(reason).value})
        try:
            return Cancelled.model_validate_json(body)
        except ValueError as e:
            raise InvalidResponseError(f"cancel answer: {_fields_of(e)}") from None

    @staticmethod
    def _id(elicitation_id: str) -> str:
        if not valid_elicitation_id(elicitation_id):
            raise ValueError("not an elicitation id")
        return elicitation_id

    def _url(self, segments: tuple[str, ...]) -> str:
        # Each segment escaped whole, so an id can never add a path segment or a query.
        return self._base + "/" + "/".join(quote(s, safe="") for s in segments)

    async def _send(
        self,
        method: str,
        segments: tuple[str, ...],
        *,
        json_body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
        wait: int | None = None,
    ) -> bytes:
        """Sends, retrying 503/429 within the policy; returns the body of a 200."""
        url = self._url(segments)
        deadline = self._timeout + (wait or 0)
        waited = 0.0
        attempt = 0
        while True:
            status, retry_after, body = await self._exchange(method, url, json_body, query, deadline)
            if status == 200:
                return body
            code, description = error_body(body, status)
            if status not in (429, 503):
                raise ApiError(status, code, description)
            delay = self.retry.default_delay if retry_after is None else retry_after
            within = (
                attempt < self.retry.max_retries
                and delay <= self.retry.max_delay
                and waited + delay <= self.retry.max_total
            )
            if not within:
                raise UnavailableError(status, code, retry_after)
            logger.info("mcp-connect asked to retry (status %d, %s) in %.1f s", status, code, delay)
            await anyio.sleep(delay)
            waited += delay
            attempt += 1

    async def _exchange(
        self, method: str, url: str, json_body: dict[str, Any] | None, query: dict[str, str] | None, deadline: float
    ) -> tuple[int, float | None, bytes]:
        # Read for each attempt: a token source's rotated token goes with the next one.
        token = await bearer(self._key)
        headers = {"Authorization": f"Bearer {token.reveal()}", "Accept": "application/json"}
        timeout = httpx2.Timeout(deadline, connect=min(deadline, 5.0))
        try:
            # One deadline for the whole exchange, body included (httpx2's timeouts are
            # per read, so a server trickling bytes would otherwise hold the call).
            with anyio.fail_after(deadline):
                async with self._http.stream(
                    method, url, json=json_body, params=query, headers=headers, timeout=timeout, follow_redirects=False
                ) as resp:
                    body = bytearray()
                    async for chunk in resp.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_BODY:
                            raise InvalidResponseError("answer body too large")
                    return resp.status_code, retry_after_seconds(resp.headers.get("retry-after")), bytes(body)
        except ConnectError:
            raise
        except TimeoutError:
            raise TransportError(f"no answer from mcp-connect within {deadline:.0f} s") from None
        except httpx2.HTTPError as e:
            # The exception's text may quote the request; only its kind is kept.
            raise TransportError(f"request to mcp-connect failed ({type(e).__name__})") from None


def _fields_of(e: ValueError) -> str:
    """The locations of a pydantic error, never the values."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            return ", ".join(".".join(str(p) for p in err["loc"]) + f" ({err['type']})" for err in errors())
        except Exception:  # noqa: BLE001 - only describing an error
            pass
    return type(e).__name__


if TYPE_CHECKING:
    # The earlier name; at run time answered by `__getattr__`, with a `DeprecationWarning`.
    McpConnectClient = ConnectClient
else:
    __getattr__ = renamed(__name__, {"McpConnectClient": "ConnectClient"}, globals())
