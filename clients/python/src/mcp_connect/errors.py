"""Why a call to mcp-connect did not produce an answer. No error carries a secret: the API
key, tokens and request bodies never go into a message."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ._lazy import renamed

if TYPE_CHECKING:
    from .models import ConnectRequired

__all__ = [
    "ApiError",
    "ConnectError",
    "ConnectRequiredError",
    "InvalidResponseError",
    "TransportError",
    "UnavailableError",
    "WorkloadTokenError",
]


class ConnectError(Exception):
    """Base of every error of the token client."""

    @property
    def code(self) -> str | None:
        """mcp-connect's stable error code, where it sent one."""
        return None


class ApiError(ConnectError):
    """mcp-connect refused the request with a stable code (e.g. `provider_not_allowed`,
    `elicitation_mismatch`, `invalid_api_key`)."""

    def __init__(self, status: int, code: str, description: str) -> None:
        super().__init__(f"mcp-connect answered {status}: {code}: {description}")
        self.status = status
        self._code = code
        self.description = description

    @property
    def code(self) -> str:
        return self._code


class ConnectRequiredError(ApiError):
    """The proxy found no usable connection for the user at `provider` (428
    `connect_required`, e.g. the grant was revoked): `outcome` is the elicitation to show,
    as `/v1/token` would have answered; retry with its `elicitation.id`. A tool under
    `McpConnect` can let it propagate: the adapter asks the user to connect as for a first
    call. The message names neither the link (it is for the user only) nor a secret."""

    def __init__(self, provider: str, description: str, outcome: ConnectRequired) -> None:
        super().__init__(428, "connect_required", description)
        self.provider = provider
        self.outcome = outcome


class UnavailableError(ConnectError):
    """mcp-connect or the provider is temporarily unavailable (503 or 429) and the retry
    budget is spent, or the server asked for a longer wait than the policy allows.
    `retry_after` is the server's `Retry-After` in seconds, when it sent one."""

    def __init__(self, status: int, code: str, retry_after: float | None) -> None:
        super().__init__(f"mcp-connect is temporarily unavailable ({code})")
        self.status = status
        self._code = code
        self.retry_after = retry_after

    @property
    def code(self) -> str:
        return self._code


class TransportError(ConnectError):
    """The request did not reach mcp-connect, or its answer did not arrive in time."""


class WorkloadTokenError(ConnectError):
    """The workload token could not be had, so nothing was sent: its file is missing,
    unreadable, empty or holds no token, or the token function failed or returned none.
    The message names the file (or the function's failure), never the token."""


class InvalidResponseError(ConnectError):
    """An answer that is not what the API documents (or larger than 64 KiB)."""


def retry_after_seconds(value: str | None) -> float | None:
    """`Retry-After` as delay-seconds (RFC 9110 §10.2.3). An HTTP-date counts as absent:
    mcp-connect sends seconds, and a clock-skewed date is worse than the default delay."""
    if value is None or not value.strip().isdigit():
        return None
    return float(int(value.strip()))


def error_body(body: bytes, status: int) -> tuple[str, str]:
    """The API's `{"error", "error_description"}`, or a stand-in naming the status."""
    try:
        data = json.loads(body)
        code = data["error"]
        if isinstance(code, str) and code:
            description = data.get("error_description")
            return code, description if isinstance(description, str) else ""
    except (ValueError, TypeError, KeyError, AttributeError):
        pass
    return f"http_{status}", "the answer carried no JSON error body"


if TYPE_CHECKING:
    # The earlier names (the TypeScript package's are the ones now). At run time they are
    # answered by `__getattr__`, with a `DeprecationWarning`.
    McpConnectError = ConnectError
    Unavailable = UnavailableError
    InvalidResponse = InvalidResponseError
else:
    _RENAMED = {
        "McpConnectError": "ConnectError",
        "Unavailable": "UnavailableError",
        "InvalidResponse": "InvalidResponseError",
    }
    __getattr__ = renamed(__name__, _RENAMED, globals())
