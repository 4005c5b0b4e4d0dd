"""The request and answer types of mcp-connect's `/v1` API (`openapi.json` components).

Field names are the wire names; `tests/test_drift.py` checks them, their required-ness,
the `status` variants and the enums against `openapi.json`. Answers are parsed into
`Connected | ConnectRequired | Declined`, so a caller matches on what happened instead of
reading a `status` string. Unknown fields are ignored (the API may add some).
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, TypeAdapter, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .secret import AccessToken, SubjectToken

__all__ = [
    "Account",
    "CancelReason",
    "Cancelled",
    "ConnectRequired",
    "Connected",
    "Declined",
    "ElicitationInfo",
    "ElicitationLink",
    "ElicitationStatus",
    "ErrorBody",
    "ErrorCode",
    "HandOut",
    "McpElicitation",
    "TokenAnswer",
    "TokenRequest",
    "parse_token_answer",
    "valid_elicitation_id",
    "valid_server_name",
]

# mcp-connect's ids are UUIDs, but the client treats them as opaque: 1-128 visible ASCII
# characters, so one can never carry a path, a query or a control character.
_ELICITATION_ID = re.compile(r"[\x21-\x7e]{1,128}")


def valid_elicitation_id(value: str) -> bool:
    return isinstance(value, str) and _ELICITATION_ID.fullmatch(value) is not None


def _check_id(value: str) -> str:
    if not valid_elicitation_id(value):
        raise ValueError("not an elicitation id")
    return value


# What mcp-connect shows people and models refuses to show (its `domain::shown`): format
# characters (Unicode Cf: bidi overrides and isolates, zero-width ones, tags) and others
# that show nothing or break the line (separators, variation selectors, fillers). Written
# out as the service has them, so an older `unicodedata` refuses no less than it does.
_HIDDEN = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F), (0xE0100, 0xE01EF),
)
MAX_SERVER_NAME = 64
SERVER_NAME_RULE = (
    f"server_name must be 1-{MAX_SERVER_NAME} characters, not only spaces, "
    "with no control or invisible formatting characters"
)


def _shown_as_is(c: str) -> bool:
    if unicodedata.category(c) in ("Cc", "Cf"):
        return False
    return not any(lo <= ord(c) <= hi for lo, hi in _HIDDEN)


def valid_server_name(value: str) -> bool:
    """Whether mcp-connect takes `value` as `server_name`: 1-64 characters, not only
    spaces, none of them a control or invisible formatting character (it answers 400
    `invalid_request` otherwise). The name stands in the message a client shows and a
    model reads, so nothing in it may read differently from what it is."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_SERVER_NAME
        and bool(value.strip())
        and all(_shown_as_is(c) for c in value)
    )


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ErrorCode(StrEnum):
    """The stable `error` codes of `/v1` this package names. New codes may appear: an
    error's `code` stays a plain string."""

    INVALID_API_KEY = "invalid_api_key"
    INSUFFICIENT_SCOPE = "insufficient_scope"
    TENANT_DISABLED = "tenant_disabled"
    WORKLOAD_TOKEN_INVALID = "workload_token_invalid"
    WORKLOAD_TOKEN_ALGORITHM = "workload_token_algorithm"
    WORKLOAD_TOKEN_TYPE = "workload_token_type"
    WORKLOAD_TOKEN_UNKNOWN_KEY = "workload_token_unknown_key"
    WORKLOAD_TOKEN_ISSUER = "workload_token_issuer"
    WORKLOAD_TOKEN_AUDIENCE = "workload_token_audience"
    WORKLOAD_TOKEN_EXPIRED = "workload_token_expired"
    WORKLOAD_TOKEN_NOT_YET_VALID = "workload_token_not_yet_valid"
    WORKLOAD_TOKEN_LIFETIME = "workload_token_lifetime"
    WORKLOAD_TOKEN_REPLAYED = "workload_token_replayed"
    WORKLOAD_NO_RULE = "workload_no_rule"
    WORKLOAD_RULE_AMBIGUOUS = "workload_rule_ambiguous"
    TEMPORARILY_UNAVAILABLE = "temporarily_unavailable"
    TOO_MANY_ATTEMPTS = "too_many_attempts"
    INTERNAL_ERROR = "internal_error"
    INVALID_JSON = "invalid_json"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    INVALID_QUERY = "invalid_query"
    INVALID_REQUEST = "invalid_request"
    INVALID_SUBJECT = "invalid_subject"
    UNKNOWN_PROVIDER = "unknown_provider"
    INVALID_SCOPE = "invalid_scope"
    INVALID_ELICITATION_ID = "invalid_elicitation_id"
    ELICITATION_NOT_FOUND = "elicitation_not_found"
    ELICITATION_MISMATCH = "elicitation_mismatch"
    PROVIDER_NOT_ALLOWED = "provider_not_allowed"
    PROVIDER_DISABLED = "provider_disabled"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    PROVIDER_MISCONFIGURED = "provider_misconfigured"
    SUBJECT_TOKEN_REQUIRED = "subject_token_required"
    SUBJECT_TOKEN_NOT_ACCEPTED = "subject_token_not_accepted"
    SUBJECT_TOKEN_INVALID = "subject_token_invalid"
    SUBJECT_TOKEN_ISSUER = "subject_token_issuer"
    SUBJECT_TOKEN_AUDIENCE = "subject_token_audience"
    SUBJECT_TOKEN_EXPIRED = "subject_token_expired"
    SUBJECT_TOKEN_NOT_YET_VALID = "subject_token_not_yet_valid"
    SUBJECT_TOKEN_SUBJECT = "subject_token_subject"
    # `/v1/proxy`'s own answers (with `MCP-Connect-Error`).
    CONNECT_REQUIRED = "connect_required"
    CONNECT_DECLINED = "connect_declined"
    PROXY_NOT_CONFIGURED = "proxy_not_configured"
    PROXY_PATH_REFUSED = "proxy_path_refused"
    PROXY_PATH_NOT_ALLOWED = "proxy_path_not_allowed"
    PROXY_METHOD_NOT_ALLOWED = "proxy_method_not_allowed"
    PROXY_ORIGIN_NOT_ALLOWED = "proxy_origin_not_allowed"
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    UPSTREAM_REFUSED = "upstream_refused"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    RATE_LIMITED = "rate_limited"
    UPSTREAM_TOO_LARGE = "upstream_too_large"


class HandOut(StrEnum):
    """What `/v1/token` hands out for a connection. `hand_out` stays a plain string on
    `Connected` (a later service may add modes); compare it with these members."""

    # The credential itself (`access_token`, and `fields` for a typed one).
    CREDENTIALS = "credentials"
    # Nothing: the tenant keeps credentials to the proxy (`/v1/proxy`, `Connection.http()`).
    NONE = "none"


class ElicitationStatus(StrEnum):
    PENDING = "pending"
    COMPLETED = "completed"
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class CancelReason(StrEnum):
    """What the MCP client answered to a URL elicitation when it did not accept it."""

    CANCEL = "cancel"
    DECLINE = "decline"

    @classmethod
    def from_action(cls, action: str | None) -> CancelReason | None:
        """From an MCP `ElicitResult.action`; `accept` (or anything else) is not a cancel."""
        return {"cancel": cls.CANCEL, "decline": cls.DECLINE}.get(action or "")


def _revealed(t: SubjectToken) -> str:
    return t.reveal()


class TokenRequest(_Wire):
    """The body of `POST /v1/token`. `subject` is the `sub` of the validated MCP access
    token, never a tool argument; `subject_token` is that access token itself, which
    mcp-connect checks (signature, issuer, the tenant's audience, expiry, `sub`). A tenant
    with `require_subject_token` needs it; one without `subject_token_audience` refuses it."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    subject: str | None = None
    # Sent in the body only; never printed (`SubjectToken`).
    subject_token: Annotated[SubjectToken, PlainSerializer(_revealed, return_type=str)] | None = None
    provider: str
    scopes: list[str] | None = None
    # On a retried tool call: the elicitation the first round handed out, so mcp-connect
    # reconciles it (pending, completed, declined) instead of starting anew.
    elicitation_id: str | None = None
    # With `elicitation_id`: hold the answer up to this long while it is still pending.
    wait_seconds: Annotated[int, Field(ge=0, le=30)] | None = None
    mcp_session_id: str | None = None
    # The MCP server asking, named in the elicitation's message ("{server_name} needs
    # access to your ... account"); without it mcp-connect names the tenant.
    server_name: str | None = None

    @field_validator("elicitation_id")
    @classmethod
    def _id(cls, v: str | None) -> str | None:
        return None if v is None else _check_id(v)

    @field_validator("server_name")
    @classmethod
    def _server_name(cls, v: str | None) -> str | None:
        if v is not None and not valid_server_name(v):
            raise ValueError(SERVER_NAME_RULE)
        return v

    def body(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class Account(_Wire):
    """The downstream account a connection belongs to."""

    id: str
    login: str | None = None


class ElicitationLink(_Wire):
    """The elicitation mcp-connect made (or reused) for a `connect_required` answer."""

    id: str
    # The connect page: an opaque handle, no secret, useless to anyone but the subject.
    url: str
    expires_at: datetime

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return _check_id(v)


class McpElicitation(_Wire):
    """The `params` of a URL-mode `elicitation/create`, as mcp-connect wrote them."""

    mode: str
    message: str
    url: str
    elicitation_id: str = Field(alias="elicitationId")


def _redacted(_: AccessToken) -> str:
    return "[REDACTED]"


def _redacted_all(v: dict[str, AccessToken]) -> dict[str, str]:
    return {k: "[REDACTED]" for k in v}


class Connected(_Wire):
    """A usable token (refreshed first if it was about to expire); or, where the tenant
    hands out no credential (`hand_out` "none"), a usable connection to call through the
    proxy, without `access_token` and `fields`."""

    status: Literal["connected"] = "connected"
    # Never printed, and dumped as "[REDACTED]": `access_token.reveal()` reads it. None
    # only when `hand_out` says nothing is handed out.
    access_token: Annotated[AccessToken, PlainSerializer(_redacted, return_type=str)] | None = None
    # `oauth2` (a bearer token), `api_key` or `basic` (typed on mcp-connect's page).
    credential_type: str
    # `api_key` and `basic`: every field typed, by name, each redacted like the token.
    fields: Annotated[dict[str, AccessToken], PlainSerializer(_redacted_all, return_type=dict)] | None = None
    token_type: str
    expires_at: datetime | None = None
    scopes: list[str]
    account: Account | None = None
    connection_id: str
    # `credentials` (what an older service always did, so the default) or `none`; a
    # plain string, see `HandOut`.
    hand_out: str = HandOut.CREDENTIALS.value

    model_config = ConfigDict(extra="ignore", frozen=True, arbitrary_types_allowed=True)

    @field_validator("access_token", mode="before")
    @classmethod
    def _wrap(cls, v: Any) -> AccessToken | None:
        if v is None or isinstance(v, AccessToken):
            return v
        if not isinstance(v, str):
            raise ValueError("access_token must be a string")
        return AccessToken(v)

    @field_validator("fields", mode="before")
    @classmethod
    def _wrap_fields(cls, v: Any) -> dict[str, AccessToken] | None:
        if v is None:
            return None
        if not isinstance(v, dict) or not all(isinstance(x, (str, AccessToken)) for x in v.values()):
            raise ValueError("fields must map names to strings")
        return {str(k): x if isinstance(x, AccessToken) else AccessToken(x) for k, x in v.items()}

    @model_validator(mode="after")
    def _handed_out(self) -> Connected:
        # A service that says it hands out the credential and sends none is not the API.
        # (The error's type names the field: an invalid answer is reported by its errors'
        # places and types only.)
        if self.hand_out == HandOut.CREDENTIALS and self.access_token is None:
            raise PydanticCustomError("access_token_missing", "access_token is missing")
        return self


class ConnectRequired(_Wire):
    """The user has to connect: show `mcp` as a URL-mode elicitation, keep
    `elicitation.id` for the retry."""

    status: Literal["connect_required"] = "connect_required"
    elicitation: ElicitationLink
    mcp: McpElicitation
    # The provider's display name (e.g. "GitHub"); an older mcp-connect does not send it.
    provider_name: str | None = None


class Declined(_Wire):
    """The user declined the elicitation named in the request: a normal outcome."""

    status: Literal["declined"] = "declined"
    elicitation_id: str
    # The provider's display name; an older mcp-connect does not send it.
    provider_name: str | None = None


TokenAnswer = Annotated[Connected | ConnectRequired | Declined, Field(discriminator="status")]
_TOKEN_ANSWER: TypeAdapter[Connected | ConnectRequired | Declined] = TypeAdapter(TokenAnswer)


def parse_token_answer(data: bytes) -> Connected | ConnectRequired | Declined:
    return _TOKEN_ANSWER.validate_json(data)


class ElicitationInfo(_Wire):
    """`GET /v1/elicitations/{id}`. `status` is a plain string for statuses this version
    does not know; compare it with `ElicitationStatus` members."""

    id: str
    status: str
    subject: str
    provider: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime
    completed_at: datetime | None = None
    # For an elicitation the MCP client closed: `cancel` or `decline`.
    cancel_reason: str | None = None


class Cancelled(_Wire):
    """`POST /v1/elicitations/{id}/cancel`: the elicitation's status afterwards."""

    id: str
    status: str
    cancel_reason: str | None = None
    # Whose link it was: the provider's id and display name (an older mcp-connect sends
    # neither).
    provider: str | None = None
    provider_name: str | None = None


class ErrorBody(_Wire):
    """Every error of `/v1`: a stable code and a text for people."""

    error: str
    error_description: str
