"""Secret-holding values: the mcp-connect API key or workload token, and the provider tokens
it hands out.

`repr`, `str`, `format` and f-strings print a placeholder; `json.dumps` refuses them (it
has no hook to print a placeholder, and refusing is safe); pickling is refused. The value
is kept in a closure, not in an attribute, so `vars()`, `inspect.getmembers()`, pretty
printers and tracebacks that show locals or attributes do not find it. Reading it takes an
explicit `reveal()`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["AccessToken", "ApiKey", "Secret", "SubjectToken", "WorkloadToken"]


class Secret:
    """A string that never prints."""

    __slots__ = ("_get",)
    _get: Callable[[], str]

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"{type(self).__name__} takes a str")
        object.__setattr__(self, "_get", lambda: value)

    def reveal(self) -> str:
        """The secret itself. Pass it on only where it is meant to go (an HTTP header)."""
        return self._get()

    def __repr__(self) -> str:
        return f"{type(self).__name__}([REDACTED])"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be pickled")

    def __eq__(self, other: object) -> bool:
        # Equal only to the same kind of secret with the same value, compared in constant
        # time; never to a plain str.
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Secret)
        return hmac.compare_digest(self.reveal().encode(), other.reveal().encode())

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.reveal()))


class ApiKey(Secret):
    """A server-scope API key of mcp-connect (`mcpc_<id>_<secret>`)."""

    __slots__ = ()


class WorkloadToken(Secret):
    """A workload token presented in the API key's place (a Kubernetes projected
    service-account token, a GitHub Actions OIDC token, a client-credentials token), as a
    `TokenFile` or a token function gave it."""

    __slots__ = ()


class AccessToken(Secret):
    """A downstream provider's access token, as `POST /v1/token` hands it out."""

    __slots__ = ()


class SubjectToken(Secret):
    """The user's own MCP access token, sent as `subject_token` to prove the subject."""

    __slots__ = ()
