"""The official MCP SDK side: a decorator that gets a tool the user's downstream token
from mcp-connect, or answers for it, the same way as the Rust example's
`downstream_token`:

- 2026-07-28 with `elicitation.url` in the request's capabilities: an `input_required`
  result with a URL-mode `elicitation/create` under key `connect` and a sealed `mcs2`
  `requestState`; the retry opens the state and asks mcp-connect about that elicitation.
- 2025-11-25 with `elicitation.url` declared at `initialize`: the `-32042` error, the
  elicitation remembered for the session's next identical call, and
  `notifications/elicitation/complete` sent when the connect finishes.
- anything else: a normal result naming the setup link, never a form.

The same answer goes out when the tool body raises `ConnectRequiredError`: a call through
the proxy (`connection.http()`) found no usable connection, e.g. the grant was revoked
after the token call.

The SDK's `MCPServer` seals every `requestState` in its own envelope. `install()` puts a
middleware in front of that boundary which takes our tools' states out of its way, so the
`mcs2` state (the same in all three libraries) is what goes on the wire; every other tool
keeps the SDK's protection.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import re
import time
import typing
from collections.abc import Awaitable, Callable, Collection, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum
from typing import Any

import httpx2

from ._lazy import mcp_missing

try:
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.request_state import RequestStateBoundary
    from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
    from mcp_types import (
        INTERNAL_ERROR,
        INVALID_PARAMS,
        CallToolResult,
        ClientCapabilities,
        ElicitRequest,
        ElicitRequestURLParams,
        InputRequiredResult,
    )
    from mcp_types.version import is_version_at_least
except ModuleNotFoundError as e:
    mcp_missing("The MCP adapter (mcp_connect.adapter: McpConnect, Connection)", e)

from .client import ConnectClient, RetryPolicy
from .errors import ConnectError, ConnectRequiredError
from .models import (
    SERVER_NAME_RULE,
    Account,
    CancelReason,
    Connected,
    ConnectRequired,
    Declined,
    HandOut,
    TokenRequest,
    valid_server_name,
)
from .pending import CallKey, PendingElicitations
from .proxy import PROXY_TIMEOUT, ProxyClient
from .replies import Replies
from .request_state import CanonicalizationError, RequestState, RequestStateError, RequestStateKey, ToolCall
from .secret import AccessToken, ApiKey, SubjectToken
from .settings import STATE_KEY, URL, setting
from .token_source import TokenSource, credential_from_env
from .watch import CompletionWatchers

__all__ = ["Connection", "McpConnect", "UrlElicitation", "url_elicitation"]

logger = logging.getLogger("mcp_connect")

# The key of our request in `inputRequests` / `inputResponses`.
INPUT_KEY = "connect"
# A `requestState` lives no longer than this (and never beyond its elicitation).
STATE_TTL = 600
# Background waits for 2025-11-25 completion notifications (one session waiting on one
# elicitation each), at most this many at once, and this many for one subject.
MAX_WATCHERS = 10_000
MAX_WATCHERS_PER_SUBJECT = 4
# Their long polls (one per elicitation) run on a connection pool of their own, this many
# at a time: the token calls never wait behind them.
WATCH_CONNECTIONS = 8
_SESSION_ID = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,256}")
# The name `MCPServer` gives a server given none: no name to show anyone.
_SDK_PLACEHOLDER_NAME = "mcp-server"


class UrlElicitation(Enum):
    """How this request's client can be asked to open a URL."""

    # 2026-07-28 (and later) with `elicitation.url` in this request's capabilities.
    INPUT_REQUIRED = "input_required"
    # 2025-11-25 with `elicitation.url` declared at `initialize`.
    ERROR_32042 = "-32042"
    # No URL mode (none, form only, or an older revision): a setup link in a normal result.
    UNSUPPORTED = "setup_link"


def url_elicitation(version: str | None, capabilities: ClientCapabilities | None) -> UrlElicitation:
    """The decision, from the negotiated revision and the capabilities that apply to this
    request (2026-07-28: the request's `_meta`; before: those declared at `initialize`).
    An `elicitation` without `url` (form only) is not URL support; an unknown revision is
    treated as an old one."""
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or elicitation.url is None or version is None:
        return UrlElicitation.UNSUPPORTED
    if is_version_at_least(version, "2026-07-28"):
        return UrlElicitation.INPUT_REQUIRED
    if version == "2025-11-25":
        return UrlElicitation.ERROR_32042
    return UrlElicitation.UNSUPPORTED


@dataclass(frozen=True)
class Connection:
    """What a decorated tool gets: the user's connection at the provider. `http()` calls
    the provider's API through mcp-connect's proxy, which attaches the credential. Where
    the tenant hands the credential out, `access_token` holds it too: it prints as
    `[REDACTED]`; `connection.headers()` or `access_token.reveal()` reads it."""

    provider: str
    subject: str
    # None when the tenant hands out no credential (`hand_out` "none"): use `http()`.
    access_token: AccessToken | None
    token_type: str
    scopes: tuple[str, ...]
    expires_at: datetime | None
    account: Account | None
    connection_id: str
    hand_out: str = HandOut.CREDENTIALS.value
    # Opens the proxied client for this call's provider and user (`http()`).
    _proxied: Callable[..., ProxyClient] | None = field(default=None, repr=False, compare=False)

    def headers(self) -> dict[str, str]:
        """`Authorization: Bearer <token>` for calls to the provider's API."""
        if self.access_token is None:
            raise RuntimeError(
                f"mcp-connect hands out no credential for {self.provider} to this server: call the provider's "
                'API through the proxy, `async with connection.http() as http: await http.get("/...")`'
            )
        return {"Authorization": f"Bearer {self.access_token.reveal()}"}

    def http(self, *, origin: str | None = None, timeout: float | httpx2.Timeout = PROXY_TIMEOUT) -> ProxyClient:
        """An `httpx2.AsyncClient` on the provider's API through mcp-connect's proxy, as this
        call's user: `async with connection.http() as http: r = await http.get("/user")`.
        The provider's answers are returned as they are; a `ConnectRequiredError` left to
        propagate is answered as a first call's `connect_required` (the user is asked to
        connect). `origin`: another of the provider's API origins than its first."""
        if self._proxied is None:
            raise RuntimeError("this Connection was not made by McpConnect: it has no proxy to call through")
        return self._proxied(origin=origin, timeout=timeout)


@dataclass
class _Slot:
    """One tools/call of one of our tools, as the middleware saw it on the wire."""

    tool: str
    arguments: Any
    request_state: Any
    # The name of the server the call came to, for the elicitation's message.
    server_name: str | None = None
    outbound_state: str | None = None


_SLOT: ContextVar[_Slot | None] = ContextVar("mcp_connect_slot", default=None)


class _StateMiddleware:
    """Takes our tools' `requestState` out of the SDK boundary's way, in and out."""

    def __init__(self, tools: Collection[str], server_name: str | None) -> None:
        self._tools = tools
        self._server_name = server_name

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not params or params.get("name") not in self._tools:
            return await call_next(ctx)
        rest = dict(params)
        slot = _Slot(
            tool=str(rest["name"]),
            arguments=rest.get("arguments"),
            request_state=rest.pop("requestState", None),
            server_name=self._server_name,
        )
        token = _SLOT.set(slot)
        try:
            result = await call_next(replace(ctx, params=rest))
        finally:
            _SLOT.reset(token)
        if (
            slot.outbound_state is not None
            and isinstance(result, dict)
            and result.get("resultType") == "input_required"
        ):
            return {**result, "requestState": slot.outbound_state}
        return result


@dataclass(frozen=True)
class _Call:
    subject: str
    # The access token the subject was taken from, for mcp-connect to check.
    subject_token: SubjectToken | None
    provider: str
    tool: str
    arguments: Any
    scopes: tuple[str, ...] | None
    request_state: Any
    answer: str | None
    mode: UrlElicitation
    session_id: str | None
    legacy: bool
    server_name: str | None


def _server_name_of(server: MCPServer[Any]) -> str | None:
    """The server's own human-facing name: its `title`, else its `name` (not the SDK's
    placeholder), the first that mcp-connect takes; None leaves the naming to mcp-connect
    (the tenant's display name)."""
    name = getattr(server, "name", None)
    candidates = (getattr(server, "title", None), None if name == _SDK_PLACEHOLDER_NAME else name)
    for candidate in candidates:
        if not isinstance(candidate, str) or not candidate.strip():
            continue
        if valid_server_name(candidate.strip()):
            return candidate.strip()
        # Not a reason to fail a tool call: the message names the tenant instead.
        logger.warning("the MCP server's name %r is not one mcp-connect takes; left out", candidate[:80])
    return None


def _subject_from_auth(ctx: Context[Any, Any]) -> str | None:
    """The `sub` of the access token the SDK's bearer middleware validated."""
    token = get_access_token()
    return token.subject if token is not None and token.subject else None


def _subject_token_from_auth(ctx: Context[Any, Any]) -> SubjectToken | None:
    """The access token the SDK's bearer middleware validated, to send as `subject_token`."""
    token = get_access_token()
    return SubjectToken(token.token) if token is not None and token.token else None


def _reply(method: Callable[..., CallToolResult], *args: str, provider_name: str | None) -> CallToolResult:
    """`method(*args, provider_name=...)`, leaving out a name not known and one the method
    does not take (a `Replies` subclass written before it)."""
    if provider_name is None or not _takes_keyword(method, "provider_name"):
        return method(*args)
    return method(*args, provider_name=provider_name)


def _takes_keyword(method: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return any((p.name == name and p.kind in keyword) or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class McpConnect:
    """mcp-connect for the tools of one MCP server.

    ```python
    connect = McpConnect(os.environ["MCP_CONNECT_URL"], os.environ["MCP_CONNECT_API_KEY"], state_key)
    connect.install(server)

    @server.tool()
    @connect.requires_connection(provider_arg="provider")
    async def whoami_on(provider: str, connection: Connection) -> CallToolResult: ...
    ```

    `api_key` as for `ConnectClient`: the API key, or a token source in its place (a
    `TokenFile`, or a function returning the workload token).
    """

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> McpConnect:
        """`McpConnect` for `MCP_CONNECT_URL`, `MCP_CONNECT_API_KEY` and `MCP_STATE_KEY` (the
        names `mcp-connect dev` writes to its env file); where no key is set, a `TokenFile`
        of `MCP_CONNECT_TOKEN_FILE` (a workload token's file) takes the key's place. A
        missing one raises `MissingSettingError` naming it (both names when neither the key
        nor the token file is set). `kwargs` as for the constructor."""
        return cls(setting(URL, environ), credential_from_env(environ), setting(STATE_KEY, environ), **kwargs)

    def __init__(
        self,
        url: str,
        api_key: ApiKey | str | TokenSource,
        state_key: RequestStateKey | str,
        *,
        wait_seconds: int = 20,
        retry: RetryPolicy | None = None,
        replies: Replies | None = None,
        client: ConnectClient | None = None,
        subject: Callable[[Context[Any, Any]], str | None] = _subject_from_auth,
        subject_token: Callable[[Context[Any, Any]], SubjectToken | None] = _subject_token_from_auth,
        watch_client: ConnectClient | None = None,
        server_name: str | None = None,
    ) -> None:
        if not 0 <= wait_seconds <= 30:
            raise ValueError("wait_seconds is 0 (off) to 30")
        if server_name is not None and not valid_server_name(server_name):
            raise ValueError(SERVER_NAME_RULE)
        # The name the elicitation's message gives this server; by default the installed
        # server's own (`title`, else `name`).
        self.server_name = server_name
        self.client = client or ConnectClient(url, api_key, retry=retry)
        # The 2025-11-25 completion watchers' long polls: never on the token calls' pool.
        if watch_client is None:
            watch_client = self.client.with_own_pool(WATCH_CONNECTIONS)
        elif watch_client is self.client or watch_client._http is self.client._http:
            raise ValueError("watch_client must have a connection pool of its own, not the token client's")
        self.watch_client = watch_client
        self.state_key = state_key if isinstance(state_key, RequestStateKey) else RequestStateKey.from_base64(state_key)
        self.wait_seconds = wait_seconds
        self.replies = replies or Replies()
        self._subject = subject
        self._subject_token = subject_token
        self._tools: set[str] = set()
        self._pending = PendingElicitations()
        self._watchers = CompletionWatchers(
            watch_client, connections=WATCH_CONNECTIONS, total=MAX_WATCHERS, per_subject=MAX_WATCHERS_PER_SUBJECT
        )

    def __repr__(self) -> str:
        return f"McpConnect({self.client!r})"

    async def aclose(self) -> None:
        await self._watchers.aclose()
        await self.watch_client.aclose()
        await self.client.aclose()

    # --- Registration ---------------------------------------------------------------

    def install(self, server: MCPServer[Any]) -> None:
        """Puts the state middleware right outside the SDK's `RequestStateBoundary`
        (idempotent). Required: a decorated tool refuses to run without it. The middleware
        also carries the server's name (`title`, else `name`) to its tools' token requests,
        unless `server_name` was given."""
        chain = server.middleware
        if any(isinstance(m, _StateMiddleware) and m._tools is self._tools for m in chain):
            return
        at = next((i for i, m in enumerate(chain) if isinstance(m, RequestStateBoundary)), len(chain))
        chain.insert(at, _StateMiddleware(self._tools, _server_name_of(server)))

    def tool(self, server: MCPServer[Any], *, name: str | None = None, **options: Any) -> Callable[[Any], Any]:
        """`install(server)`, `requires_connection(**options)` and `server.tool(name)` in one."""
        self.install(server)
        tool_options = {
            k: options.pop(k) for k in ("title", "description", "annotations", "icons", "meta") if k in options
        }

        def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            wrapped = self.requires_connection(name=name, **options)(fn)
            server.add_tool(wrapped, name=name, **tool_options)
            return wrapped

        return decorate

    def requires_connection(
        self,
        provider: str | None = None,
        *,
        provider_arg: str | None = None,
        scopes: Collection[str] | None = None,
        providers: Collection[str] | None = None,
        name: str | None = None,
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        """Decorates an `async def` tool with a `Connection`-typed parameter (or one named
        `connection`). The provider is `provider`, or the tool argument `provider_arg`;
        `providers` limits which names the argument may take; `scopes` go to mcp-connect;
        `name` is the tool's registered name when it is not the function's."""
        if (provider is None) == (provider_arg is None):
            raise TypeError("give exactly one of provider= and provider_arg=")
        fixed_scopes = tuple(scopes) if scopes is not None else None
        allowed = frozenset(providers) if providers is not None else None

        def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError("requires_connection decorates an async def tool")
            sig = inspect.signature(fn, eval_str=True)
            hints = typing.get_type_hints(fn, include_extras=True)
            conn = next((p for p in sig.parameters if hints.get(p) is Connection), None)
            conn = conn or ("connection" if "connection" in sig.parameters else None)
            if conn is None:
                raise TypeError(f"{fn.__name__} needs a parameter annotated Connection")
            if provider_arg is not None and provider_arg not in sig.parameters:
                raise TypeError(f"{fn.__name__} has no parameter {provider_arg!r}")
            own_ctx = next((p for p, h in hints.items() if isinstance(h, type) and issubclass(h, Context)), None)
            ctx_name = own_ctx or "mcp_connect_context"
            params = [p for p in sig.parameters.values() if p.name != conn]
            if own_ctx is None:
                extra = inspect.Parameter(ctx_name, inspect.Parameter.KEYWORD_ONLY, annotation=Context)
                tail = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
                params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD] + [extra, *tail]
            tool_name = name or fn.__name__
            self._tools.add(tool_name)

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                ctx = kwargs[ctx_name] if own_ctx else kwargs.pop(ctx_name)
                prov = provider if provider is not None else kwargs.get(provider_arg or "")
                if not isinstance(prov, str) or not prov:
                    raise MCPError(code=INVALID_PARAMS, message=f"{provider_arg} is required")
                if allowed is not None and prov not in allowed:
                    return self.replies.unknown_provider(prov)
                call, slot = self._call(ctx, prov, fixed_scopes)
                access = await self._downstream_token(call, slot, ctx)
                if not isinstance(access, Connection):
                    return access
                try:
                    return await fn(*args, **kwargs, **{conn: access})
                except ConnectRequiredError as e:
                    if e.provider != call.provider:
                        raise  # another provider's: not this call's to ask for
                    return self._connect_required_in_call(call, e.outcome, slot, ctx)

            # The SDK reads the tool's schema from this signature: the tool's own
            # parameters without the Connection, plus the Context the adapter needs.
            wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
            wrapper.__annotations__ = {k: v for k, v in hints.items() if k != conn} | {ctx_name: Context}
            return wrapper

        return decorate

    # --- One call ----------------------------------------------------------------------

    def _call(self, ctx: Context[Any, Any], provider: str, scopes: tuple[str, ...] | None) -> tuple[_Call, _Slot]:
        slot = _SLOT.get()
        if slot is None:
            logger.error("a requires_connection tool ran without McpConnect.install(server), or under another name")
            raise MCPError(code=INTERNAL_ERROR, message="the tool is not wired to mcp-connect")
        subject = self._subject(ctx)
        if not subject:
            raise MCPError(code=INTERNAL_ERROR, message="no authenticated subject on the request")
        version = ctx.protocol_version
        responses = ctx.input_responses or {}
        answer = getattr(responses.get(INPUT_KEY), "action", None)
        legacy = version is not None and not is_version_at_least(version, "2026-07-28")
        session_id = None
        if legacy:
            sid = (ctx.headers or {}).get("mcp-session-id")
            session_id = sid if sid is not None and _SESSION_ID.fullmatch(sid) else None
        call = _Call(
            subject=subject,
            subject_token=self._subject_token(ctx),
            provider=provider,
            tool=slot.tool,
            arguments=slot.arguments,
            scopes=scopes,
            request_state=slot.request_state,
            answer=answer if isinstance(answer, str) else None,
            mode=url_elicitation(version, ctx.client_capabilities),
            session_id=session_id,
            legacy=legacy,
            server_name=self.server_name or slot.server_name,
        )
        return call, slot

    @staticmethod
    def _keys(call: _Call) -> tuple[ToolCall | None, CallKey | None]:
        """The call as a sealed state binds it, and as a 2025-11-25 session remembers it
        (None where the arguments have no canonical form, or the revision needs none)."""
        try:
            tool_call = ToolCall.of(call.subject, call.tool, call.arguments)
        except CanonicalizationError:
            return None, None
        legacy_key = (call.session_id or "", call.subject, call.tool, tool_call.digest) if call.legacy else None
        return tool_call, legacy_key

    async def _downstream_token(
        self, call: _Call, slot: _Slot, ctx: Context[Any, Any]
    ) -> Connection | CallToolResult | InputRequiredResult:
        """The user's token for the provider, or what to answer instead."""
        now = time.time()
        tool_call, legacy_key = self._keys(call)
        reason = CancelReason.from_action(call.answer)
        # A retry names the elicitation of round one: in the sealed requestState
        # (2026-07-28), or remembered for this session (2025-11-25, which has no state).
        resumed: str | None = None
        # The elicitation of an authentic state past its deadline: never resumed, but a
        # decline or cancel still closes its link (an elicitation outlives its state).
        stale: str | None = None
        if call.request_state is not None:
            try:
                if tool_call is None:
                    raise RequestStateError("invalid")
                state, expired = RequestState.open_even_expired(call.request_state, self.state_key, tool_call, now)
            except RequestStateError as e:
                raise MCPError(code=INVALID_PARAMS, message=str(e)) from None
            if not expired:
                resumed = state.elicitation_id
            elif reason is not None:
                stale = state.elicitation_id
            # An expired state with any other answer: too old, start over.
        elif legacy_key is not None:
            resumed = self._pending.take(legacy_key, now)
        # `decline` or `cancel` in the client is an answer, not an error: no new prompt,
        # and the link it answered is closed at mcp-connect (opened later, it connects nothing).
        if reason is not None:
            answered = resumed or stale
            name = await self._close(answered, reason, call.provider) if answered is not None else None
            return _reply(self.replies.not_connected, call.provider, provider_name=name)
        if call.answer is not None and call.answer != "accept":
            return self.replies.not_connected(call.provider)
        # `accept` only means the user opened the link: mcp-connect knows the outcome, and
        # may hold the answer a little while the connect is still under way.
        wait = self.wait_seconds if resumed is not None and call.answer == "accept" and self.wait_seconds else None
        request = TokenRequest(
            subject=call.subject,
            subject_token=call.subject_token,
            provider=call.provider,
            scopes=list(call.scopes) if call.scopes is not None else None,
            elicitation_id=resumed,
            wait_seconds=wait,
            mcp_session_id=call.session_id,
            server_name=call.server_name,
        )
        try:
            outcome = await self.client.token(request)
        except ConnectError as e:
            logger.warning("mcp-connect could not answer (%s)", e.code or type(e).__name__)
            return self.replies.failed(call.provider, e.code or "unavailable")
        if isinstance(outcome, Connected):
            return self._connection(call, outcome)
        if isinstance(outcome, Declined):
            return _reply(self.replies.not_connected, call.provider, provider_name=outcome.provider_name)
        return self._ask(call, outcome, tool_call, legacy_key, slot, ctx, now)

    def _connection(self, call: _Call, outcome: Connected) -> Connection:
        # Proxied calls ask as the token call did: the same user (and proof), scopes and name.
        proxied = functools.partial(
            self.client.proxied,
            call.provider,
            subject=call.subject,
            subject_token=call.subject_token,
            scopes=call.scopes,
            server_name=call.server_name,
        )
        return Connection(
            provider=call.provider,
            subject=call.subject,
            access_token=outcome.access_token,
            token_type=outcome.token_type,
            scopes=tuple(outcome.scopes),
            expires_at=outcome.expires_at,
            account=outcome.account,
            connection_id=outcome.connection_id,
            hand_out=outcome.hand_out,
            _proxied=proxied,
        )

    def _connect_required_in_call(
        self, call: _Call, outcome: ConnectRequired, slot: _Slot, ctx: Context[Any, Any]
    ) -> CallToolResult | InputRequiredResult:
        """A proxied call in the tool body found no usable connection (the grant was revoked
        after the token call): the user is asked exactly as for `/v1/token`'s answer, and the
        retry resumes that elicitation."""
        logger.info("a proxied call to %s needs the user to connect again", call.provider)
        tool_call, legacy_key = self._keys(call)
        return self._ask(call, outcome, tool_call, legacy_key, slot, ctx, time.time())

    async def _close(self, elicitation_id: str, reason: CancelReason, provider: str) -> str | None:
        """Closes the link the client declined or cancelled at mcp-connect; the provider's
        display name from its answer, when it says one for this provider."""
        try:
            cancelled = await self.client.cancel_elicitation(elicitation_id, reason)
        except ConnectError as e:
            logger.warning("could not close the link at mcp-connect (%s)", e.code or type(e).__name__)
            return None
        return cancelled.provider_name if cancelled.provider in (None, provider) else None

    def _ask(
        self,
        call: _Call,
        outcome: ConnectRequired,
        tool_call: ToolCall | None,
        legacy_key: CallKey | None,
        slot: _Slot,
        ctx: Context[Any, Any],
        now: float,
    ) -> CallToolResult | InputRequiredResult:
        link, mcp = outcome.elicitation, outcome.mcp
        expires_at = link.expires_at.timestamp()
        if call.mode is UrlElicitation.INPUT_REQUIRED:
            if tool_call is not None:
                deadline = math.floor(min(expires_at, now + STATE_TTL))
                slot.outbound_state = RequestState(link.id, deadline).seal(self.state_key, tool_call)
            # Without a state (arguments with no canonical form) the retry simply asks again.
            params = ElicitRequestURLParams(message=mcp.message, url=mcp.url)
            return InputRequiredResult(input_requests={INPUT_KEY: ElicitRequest(params=params)})
        if call.mode is UrlElicitation.ERROR_32042:
            if legacy_key is not None:
                self._pending.remember(legacy_key, link.id, expires_at, now)
            if call.session_id is not None:
                self._watch(ctx, call.session_id, call.subject, link.id, expires_at)
            params = ElicitRequestURLParams(message=mcp.message, url=mcp.url, elicitation_id=mcp.elicitation_id)
            raise UrlElicitationRequiredError([params], message=mcp.message)
        return _reply(self.replies.setup_link, call.provider, link.url, provider_name=outcome.provider_name)

    # --- 2025-11-25: notifications/elicitation/complete ----------------------------------

    def _watch(
        self, ctx: Context[Any, Any], session_id: str, subject: str, elicitation_id: str, expires_at: float
    ) -> None:
        """Waits in the background for the elicitation to complete, then notifies the
        session; ended by the session's end or the elicitation's expiry. One long poll per
        elicitation, on its own pool, however many sessions wait on it; capped per subject
        and in all (past a cap the client is not told, but its next call gets the account)."""
        session = ctx.session
        watch = self._watchers.watch(session, session_id, subject, elicitation_id, expires_at)
        if watch is None:
            return
        # The SDK unwinds a connection's exit stack when the session ends; the session
        # object does not expose its connection publicly, hence the guarded lookup.
        stack = getattr(getattr(session, "_connection", None), "exit_stack", None)
        if stack is not None:
            stack.callback(self._watchers.unwatch, session_id, elicitation_id, watch)
