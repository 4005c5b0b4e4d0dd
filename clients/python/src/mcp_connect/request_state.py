"""The MCP `requestState` (2026-07-28) passes through the client between the
`input_required` answer and the retry, so on return it is untrusted input. It is sealed
with XChaCha20-Poly1305: the plaintext (elicitation id, deadline) is encrypted, and the
call it belongs to (subject, tool name, digest of the arguments) is the associated data,
so a state opens only for the same subject making the same tool call with the same
arguments, under a key only the MCP server holds, before its deadline.

Format `mcs2`, byte for byte the same as the Rust and TypeScript libraries
(`docs/request-state.md`, vectors in `clients/request-state-vectors.json`):
`mcs2.<kid>.` + base64url(24-byte nonce ‖ ciphertext ‖ tag).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import rfc8785
from nacl.bindings import (
    crypto_aead_xchacha20poly1305_ietf_decrypt,
    crypto_aead_xchacha20poly1305_ietf_encrypt,
)
from nacl.exceptions import CryptoError

from ._lazy import renamed
from .models import valid_elicitation_id

__all__ = [
    "CanonicalizationError",
    "InvalidRequestStateKeyError",
    "RequestState",
    "RequestStateError",
    "RequestStateKey",
    "ToolCall",
    "arguments_digest",
    "canonical_json",
]

PREFIX = "mcs2."
NONCE_LEN = 24
TAG_LEN = 16
# Longer states are refused before decoding: ours are about 120 characters.
MAX_SEALED_LEN = 2048
AD_DOMAIN = b"mcp-connect/request-state/v2"
KID_DOMAIN = b"mcp-connect/request-state/v2/key-id"
# The key id is this many bytes of the hash: 8 characters of base64url.
KID_BYTES = 6
# The Unix seconds a deadline may take (the years -9999 to 9999, as the Rust library reads them).
_MIN_UNIX, _MAX_UNIX = -377705116800, 253402300799
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _b64url_decode(text: str) -> bytes | None:
    """Strict base64url without padding: the alphabet only, and only the canonical
    encoding (no stray trailing bits), as the Rust library decodes it."""
    if _B64URL.fullmatch(text) is None or len(text) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if _b64url(raw) == text else None


class _Key:
    """One 32-byte key and its id."""

    __slots__ = ("kid", "secret")

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.kid = _b64url(hashlib.sha256(KID_DOMAIN + secret).digest()[:KID_BYTES])


class InvalidRequestStateKeyError(ValueError):
    """A request-state key that is not 32 bytes (of standard base64, from a string)."""


class RequestStateKey:
    """The AEAD key(s) for request states: the current one seals, the one a state names by
    its key id opens it (a key can rotate without failing the calls in flight). Keep it
    out of the client's reach. Never printed."""

    __slots__ = ("_current", "_previous")

    def __init__(self, key: bytes, previous: tuple[_Key, ...] = ()) -> None:
        if not isinstance(key, bytes | bytearray) or len(key) != 32:
            raise InvalidRequestStateKeyError("a request-state key is 32 bytes")
        self._current = _Key(bytes(key))
        self._previous = previous

    @classmethod
    def from_base64(cls, text: str) -> RequestStateKey:
        """32 bytes in standard base64 (e.g. `openssl rand -base64 32`)."""
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequestStateKeyError("a request-state key is 32 bytes, standard base64 encoded") from None
        if len(raw) != 32:
            raise InvalidRequestStateKeyError("a request-state key is 32 bytes, standard base64 encoded")
        return cls(raw)

    @classmethod
    def generate(cls) -> RequestStateKey:
        """A fresh random key (a single-instance server that may lose its states on restart)."""
        return cls(os.urandom(32))

    def with_previous(self, old: RequestStateKey) -> RequestStateKey:
        """This key, also opening states sealed under `old`'s current key (rotation)."""
        ring = RequestStateKey.__new__(RequestStateKey)
        ring._current = self._current
        ring._previous = (*self._previous, old._current)
        return ring

    @property
    def key_id(self) -> str:
        """The current key's id, as it appears in the states it seals."""
        return self._current.kid

    def _by_kid(self, kid: str) -> _Key | None:
        return next((k for k in (self._current, *self._previous) if k.kid == kid), None)

    def __repr__(self) -> str:
        return "RequestStateKey([REDACTED])"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("RequestStateKey cannot be pickled")


class CanonicalizationError(ValueError):
    """The call's arguments have no RFC 8785 form (an unpaired surrogate, a number beyond
    a double): no state can be sealed for it, and the server asks again without one."""


def _as_doubles(v: Any) -> Any:
    """Every number made the IEEE-754 double nearest to it: a TypeScript server has only
    that double, so an integer beyond 2^53 must digest as the double it rounds to."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        try:
            f = float(v)
        except OverflowError:
            raise CanonicalizationError("a number beyond the range of a double") from None
        if not math.isfinite(f):
            raise CanonicalizationError("a number that is not finite")
        return f
    if isinstance(v, list | tuple):
        return [_as_doubles(x) for x in v]
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise CanonicalizationError("an object key that is not a string")
            out[k] = _as_doubles(x)
        return out
    raise CanonicalizationError(f"a value that is not JSON ({type(v).__name__})")


def canonical_json(arguments: Any) -> str:
    """RFC 8785 (JCS) text of the arguments, every number first made a double; absent
    arguments (`None`) are `{}`."""
    if arguments is None:
        return "{}"
    try:
        return rfc8785.dumps(_as_doubles(arguments)).decode("utf-8")
    except CanonicalizationError:
        raise
    except (rfc8785.CanonicalizationError, UnicodeError) as e:
        # RFC 8785 §3.2.2.2: strings with unpaired surrogates cannot be canonicalised.
        raise CanonicalizationError(str(e)) from None


def arguments_digest(arguments: Any) -> bytes:
    """SHA-256 of the canonical JSON, so a client that reorders keys still matches."""
    return hashlib.sha256(canonical_json(arguments).encode("utf-8")).digest()


@dataclass(frozen=True)
class ToolCall:
    """The call a state belongs to. `subject` comes from the validated MCP access token;
    `arguments` are the tool call's arguments as the client sent them."""

    subject: bytes
    tool: bytes
    digest: bytes

    @classmethod
    def of(cls, subject: str, tool: str, arguments: Any) -> ToolCall:
        """Raises `CanonicalizationError` for text or arguments without a canonical form."""
        return cls(_utf8(subject), _utf8(tool), arguments_digest(arguments))

    def associated_data(self, kid: str) -> bytes:
        out = bytearray()
        for part in (AD_DOMAIN, kid.encode("utf-8", "surrogatepass"), self.subject, self.tool, self.digest):
            # Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
            out += len(part).to_bytes(8, "big") + part
        return bytes(out)


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeError:
        raise CanonicalizationError("text that is not UTF-8") from None


Reason = Literal["malformed", "invalid", "expired"]
_MESSAGES: dict[str, str] = {
    "malformed": "requestState is malformed",
    "invalid": "requestState does not belong to this call",
    "expired": "requestState has expired",
}


class RequestStateError(Exception):
    """Why a returned `requestState` was not accepted: `malformed` (not a state this
    library could have produced), `invalid` (altered, sealed under another key, or made
    for another subject, tool or arguments: indistinguishable by design) or `expired`."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(_MESSAGES[reason])
        self.reason: Reason = reason


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate field")
    return dict(pairs)


@dataclass(frozen=True)
class RequestState:
    """What a sealed state carries: the elicitation of the first round and a deadline
    (whole Unix seconds)."""

    elicitation_id: str
    expires_at: int

    def seal(self, key: RequestStateKey, call: ToolCall) -> str:
        """Sealed for `call` under the key's current key, with a fresh random nonce."""
        return self._seal_with_nonce(key, call, os.urandom(NONCE_LEN))

    def _seal_with_nonce(self, key: RequestStateKey, call: ToolCall, nonce: bytes) -> str:
        if not valid_elicitation_id(self.elicitation_id):
            raise ValueError("not an elicitation id")
        if isinstance(self.expires_at, bool) or not isinstance(self.expires_at, int):
            raise TypeError("expires_at is whole Unix seconds")
        if len(nonce) != NONCE_LEN:
            raise ValueError("the nonce is 24 bytes")
        # Exactly {"e":"<id>","x":<deadline>}: field order and spacing are the format.
        plain = json.dumps({"e": self.elicitation_id, "x": self.expires_at}, separators=(",", ":"))
        k = key._current
        ct = crypto_aead_xchacha20poly1305_ietf_encrypt(
            plain.encode("ascii"), call.associated_data(k.kid), nonce, k.secret
        )
        return f"{PREFIX}{k.kid}.{_b64url(nonce + ct)}"

    @classmethod
    def open(cls, sealed: str, key: RequestStateKey, call: ToolCall, now: float | None = None) -> RequestState:
        """Opens a state the client returned, for `call`, at `now` (Unix seconds; default
        the current time). Raises `RequestStateError`."""
        state, expired = cls.open_even_expired(sealed, key, call, now)
        if expired:
            raise RequestStateError("expired")
        return state

    @classmethod
    def open_even_expired(
        cls, sealed: str, key: RequestStateKey, call: ToolCall, now: float | None = None
    ) -> tuple[RequestState, bool]:
        """As `open`, except that an authentic state past its deadline is returned too:
        `(state, expired)`. Only for closing the link of an elicitation the client
        declined or cancelled after the deadline (an elicitation outlives its state);
        never for resuming a call. Every other refusal raises `RequestStateError` as
        `open` does."""
        now = time.time() if now is None else now
        if not isinstance(sealed, str) or len(sealed.encode("utf-8", "surrogatepass")) > MAX_SEALED_LEN:
            raise RequestStateError("malformed")
        if not sealed.startswith(PREFIX):
            raise RequestStateError("malformed")
        kid, dot, body = sealed[len(PREFIX) :].partition(".")
        if not dot:
            raise RequestStateError("malformed")
        raw = _b64url_decode(body)
        if raw is None or len(raw) < NONCE_LEN + TAG_LEN:
            raise RequestStateError("malformed")
        # A key id we hold no key for looks like any other state that does not open.
        k = key._by_kid(kid)
        if k is None:
            raise RequestStateError("invalid")
        try:
            plain = crypto_aead_xchacha20poly1305_ietf_decrypt(
                raw[NONCE_LEN:], call.associated_data(kid), raw[:NONCE_LEN], k.secret
            )
        except CryptoError:
            raise RequestStateError("invalid") from None
        # Authenticated, so a parse failure means our own format changed: still refuse.
        try:
            fields = json.loads(plain.decode("utf-8"), object_pairs_hook=_no_duplicates)
            e, x = fields["e"], fields["x"]
        except (ValueError, TypeError, KeyError):
            raise RequestStateError("malformed") from None
        if not valid_elicitation_id(e) or isinstance(x, bool) or not isinstance(x, int):
            raise RequestStateError("malformed")
        if not _MIN_UNIX <= x <= _MAX_UNIX:
            raise RequestStateError("malformed")
        return cls(e, x), now >= x


if TYPE_CHECKING:
    # The earlier name; at run time answered by `__getattr__`, with a `DeprecationWarning`.
    UnsealableCall = CanonicalizationError
else:
    __getattr__ = renamed(__name__, {"UnsealableCall": "CanonicalizationError"}, globals())
