"""mcp-connect for Python MCP servers on the official MCP SDK.

- `McpConnect`: the decorator that hands a tool the user's downstream token, or answers
  with an `input_required` URL elicitation, the `-32042` error or a setup link.
- `McpConnectClient`: the async token client of mcp-connect's `/v1` API.
- `RequestStateKey` / `RequestState`: the `mcs2` sealed `requestState`.
- `JwtVerifier`: the SDK `TokenVerifier` for the IdP's JWT access tokens.
"""

from .adapter import Connection, McpConnect, UrlElicitation, url_elicitation
from .auth import JwtVerifier
from .client import McpConnectClient, RetryPolicy
from .errors import ApiError, InvalidResponse, McpConnectError, TransportError, Unavailable
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
    McpElicitation,
    TokenRequest,
)
from .replies import Replies
from .request_state import (
    RequestState,
    RequestStateError,
    RequestStateKey,
    ToolCall,
    UnsealableCall,
    arguments_digest,
    canonical_json,
)
from .secret import AccessToken, ApiKey, Secret, SubjectToken

__all__ = [
    "AccessToken",
    "Account",
    "ApiError",
    "ApiKey",
    "CancelReason",
    "Cancelled",
    "ConnectRequired",
    "Connected",
    "Connection",
    "Declined",
    "ElicitationInfo",
    "ElicitationLink",
    "ElicitationStatus",
    "ErrorCode",
    "InvalidResponse",
    "JwtVerifier",
    "McpConnect",
    "McpConnectClient",
    "McpConnectError",
    "McpElicitation",
    "Replies",
    "RequestState",
    "RequestStateError",
    "RequestStateKey",
    "RetryPolicy",
    "Secret",
    "SubjectToken",
    "TokenRequest",
    "ToolCall",
    "TransportError",
    "Unavailable",
    "UnsealableCall",
    "UrlElicitation",
    "arguments_digest",
    "canonical_json",
    "url_elicitation",
]
