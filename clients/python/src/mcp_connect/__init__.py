"""mcp-connect for Python MCP servers.

Without extras (no MCP SDK needed):
- `ConnectClient`: the async token client of mcp-connect's `/v1` API, its `/v1` models
  and errors (`ConnectError` and its kinds); `ConnectClient.proxied()`: a `ProxyClient`
  (an `httpx2.AsyncClient`) on a provider's API through `/v1/proxy`.
- `RequestStateKey` / `RequestState`: the `mcs2` sealed `requestState`.
- `ApiKey`, `AccessToken`, `SubjectToken`, `WorkloadToken`: secrets that never print.
- `TokenFile` (and any function returning the token): a workload token in the API key's
  place, read for each request (`TokenSource`); `WorkloadTokenError` when there is none.

With the `mcp` extra (`pip install 'mcp-connect[mcp]'`, the official MCP SDK), imported on
first use:
- `McpConnect`: the decorator that hands a tool the user's downstream token, or answers
  with an `input_required` URL elicitation, the `-32042` error or a setup link.
- `JwtVerifier`: the SDK `TokenVerifier` for the IdP's JWT access tokens.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._lazy import renamed
from .client import ConnectClient, RetryPolicy
from .errors import (
    ApiError,
    ConnectError,
    ConnectRequiredError,
    InvalidResponseError,
    TransportError,
    UnavailableError,
    WorkloadTokenError,
)
from .models import (
    Account,
    Cancelled,
    CancelReason,
    Connected,
    ConnectRequired,
    Declined,
    ElicitationInfo,
    ElicitationLink,
    ElicitationStatus,
    ErrorCode,
    HandOut,
    McpElicitation,
    TokenRequest,
)
from .proxy import ProxyClient
from .request_state import (
    CanonicalizationError,
    InvalidRequestStateKeyError,
    RequestState,
    RequestStateError,
    RequestStateKey,
    ToolCall,
    arguments_digest,
    canonical_json,
)
from .secret import AccessToken, ApiKey, Secret, SubjectToken, WorkloadToken
from .settings import MissingSettingError
from .token_source import TokenFile, TokenFunction, TokenSource

if TYPE_CHECKING:
    from .adapter import Connection, McpConnect, UrlElicitation, url_elicitation
    from .auth import JwtVerifier
    from .replies import Replies

    # The earlier names; at run time answered by `__getattr__`, with a `DeprecationWarning`.
    McpConnectClient = ConnectClient
    McpConnectError = ConnectError
    Unavailable = UnavailableError
    InvalidResponse = InvalidResponseError
    UnsealableCall = CanonicalizationError

__all__ = [
    "AccessToken",
    "Account",
    "ApiError",
    "ApiKey",
    "CancelReason",
    "Cancelled",
    "CanonicalizationError",
    "ConnectClient",
    "ConnectError",
    "ConnectRequired",
    "ConnectRequiredError",
    "Connected",
    "Connection",
    "Declined",
    "ElicitationInfo",
    "ElicitationLink",
    "ElicitationStatus",
    "ErrorCode",
    "HandOut",
    "InvalidRequestStateKeyError",
    "InvalidResponseError",
    "JwtVerifier",
    "McpConnect",
    "McpElicitation",
    "MissingSettingError",
    "ProxyClient",
    "Replies",
    "RequestState",
    "RequestStateError",
    "RequestStateKey",
    "RetryPolicy",
    "Secret",
    "SubjectToken",
    "TokenFile",
    "TokenFunction",
    "TokenRequest",
    "TokenSource",
    "ToolCall",
    "TransportError",
    "UnavailableError",
    "UrlElicitation",
    "WorkloadToken",
    "WorkloadTokenError",
    "arguments_digest",
    "canonical_json",
    "url_elicitation",
]

# The names that need the MCP SDK, by the module that has them: imported on first use, so
# the rest of the package works without the `mcp` extra.
_WITH_MCP = {
    "Connection": "adapter",
    "McpConnect": "adapter",
    "UrlElicitation": "adapter",
    "url_elicitation": "adapter",
    "JwtVerifier": "auth",
    "Replies": "replies",
}


def _with_mcp(name: str) -> Any:
    module = _WITH_MCP.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Without the extra, the module raises an ImportError that names it.
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if not TYPE_CHECKING:  # a type checker reads the imports and names above instead
    # The earlier names (the TypeScript package's are the ones now), with a warning.
    _RENAMED = {
        "McpConnectClient": "ConnectClient",
        "McpConnectError": "ConnectError",
        "Unavailable": "UnavailableError",
        "InvalidResponse": "InvalidResponseError",
        "UnsealableCall": "CanonicalizationError",
    }
    __getattr__ = renamed(__name__, _RENAMED, globals(), otherwise=_with_mcp)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
