"""The `mcs2` requestState: the shared vectors (clients/request-state-vectors.json, the
same file the Rust and TypeScript libraries read) and the refusals."""

from __future__ import annotations

import base64
import json
import pickle
from typing import Any

import pytest
from conftest import VECTORS
from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_encrypt

from mcp_connect import (
    CanonicalizationError,
    InvalidRequestStateKeyError,
    RequestState,
    RequestStateError,
    RequestStateKey,
    ToolCall,
    arguments_digest,
    canonical_json,
)

V: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
KEYS = {k["name"]: RequestStateKey.from_base64(k["key"]) for k in V["keys"]}
EID = "3f2b8c1e-0d4a-4e5b-9c6d-7e8f9a0b1c2d"
NOW = 1_900_000_000


def ring(names: list[str]) -> RequestStateKey:
    """The first key is the opener's current one, the rest previous keys."""
    key = KEYS[names[0]]
    for name in names[1:]:
        key = key.with_previous(KEYS[name])
    return key


def call_of(e: dict[str, Any]) -> ToolCall:
    return ToolCall.of(e["subject"], e["tool"], e["arguments"])


def test_the_vectors_are_mcs2() -> None:
    assert V["format"] == "mcs2"


@pytest.mark.parametrize("k", V["keys"], ids=lambda k: k["name"])
def test_key_ids(k: dict[str, Any]) -> None:
    assert KEYS[k["name"]].key_id == k["kid"]


@pytest.mark.parametrize("c", V["canonical"], ids=lambda c: c["canonical"][:40])
def test_canonical_json_and_digest(c: dict[str, Any]) -> None:
    assert canonical_json(c["arguments"]) == c["canonical"]
    assert arguments_digest(c["arguments"]).hex() == c["sha256"]


def test_the_numbers_the_doc_names_are_written_as_ecmascript_writes_them() -> None:
    # Parsed from text, as the arguments arrive: 2^53 + 1 is an int in Python.
    args = json.loads('{"n":[1.0,1e21,1e-7,-0.0,9007199254740993,true]}')
    assert canonical_json(args) == '{"n":[1,1e+21,1e-7,0,9007199254740992,true]}'
    assert canonical_json(None) == canonical_json({}) == "{}"


@pytest.mark.parametrize("e", V["seal"], ids=lambda e: e["tool"] + "/" + e["key"])
def test_sealing_with_the_given_nonce_gives_exactly_the_state(e: dict[str, Any]) -> None:
    state = RequestState(e["elicitation_id"], e["expires_at"])
    assert state._seal_with_nonce(KEYS[e["key"]], call_of(e), bytes.fromhex(e["nonce"])) == e["state"]
    assert RequestState.open(e["state"], KEYS[e["key"]], call_of(e), e["now"]) == state


@pytest.mark.parametrize("e", V["open"], ids=lambda e: e["name"])
def test_opens(e: dict[str, Any]) -> None:
    got = RequestState.open(e["state"], ring(e["keys"]), call_of(e), e["now"])
    assert got == RequestState(e["elicitation_id"], e["expires_at"])


@pytest.mark.parametrize("e", V["refuse"], ids=lambda e: e["name"])
def test_refusals_give_exactly_the_reason(e: dict[str, Any]) -> None:
    with pytest.raises(RequestStateError) as err:
        RequestState.open(e["state"], ring(e["keys"]), call_of(e), e["now"])
    assert err.value.reason == e["error"]
    assert "requestState" in str(err.value)


@pytest.mark.parametrize("e", V["refuse"], ids=lambda e: e["name"])
def test_open_even_expired_returns_only_an_authentic_expired_state_and_refuses_the_rest(e: dict[str, Any]) -> None:
    if e["error"] != "expired":
        with pytest.raises(RequestStateError) as err:
            RequestState.open_even_expired(e["state"], ring(e["keys"]), call_of(e), e["now"])
        assert err.value.reason == e["error"]
        return
    state, expired = RequestState.open_even_expired(e["state"], ring(e["keys"]), call_of(e), e["now"])
    assert expired and state.expires_at <= e["now"]
    assert state.elicitation_id == EID


def test_open_even_expired_flags_a_live_state_as_not_expired() -> None:
    sealed, call = alices_state()
    assert RequestState.open_even_expired(sealed, KEYS["k1"], call, NOW) == (RequestState(EID, NOW + 600), False)
    assert RequestState.open_even_expired(sealed, KEYS["k1"], call, NOW + 600) == (RequestState(EID, NOW + 600), True)
    with pytest.raises(RequestStateError) as err:
        RequestState.open(sealed, KEYS["k1"], call, NOW + 600)
    assert err.value.reason == "expired", "open itself still refuses it"


def alices_state() -> tuple[str, ToolCall]:
    call = ToolCall.of("alice", "whoami_on", {"provider": "github"})
    return RequestState(EID, NOW + 600).seal(KEYS["k1"], call), call


def test_a_fresh_nonce_per_seal_and_nothing_readable_in_the_state() -> None:
    sealed, call = alices_state()
    assert sealed.startswith(f"mcs2.{KEYS['k1'].key_id}.")
    assert sealed != RequestState(EID, NOW + 600).seal(KEYS["k1"], call)
    raw = base64.urlsafe_b64decode(sealed.rsplit(".", 1)[1] + "==")
    assert b"3f2b8c1e" not in raw and b"alice" not in raw and "alice" not in sealed


def test_a_non_canonical_base64url_body_is_malformed() -> None:
    # A body whose last character has spare bits set decodes leniently to the same bytes,
    # but no sealer writes it: refused as malformed before any key is tried (leniently
    # decoded, it would get as far as "invalid"), as in the Rust library.
    sealed, call = alices_state()
    head, body = sealed.rsplit(".", 1)
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    raw += bytes((1 - len(raw)) % 3)  # len % 3 == 1: the last character carries 4 spare bits
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    odd = text[:-1] + alphabet[alphabet.index(text[-1]) | 0b1111]
    assert base64.urlsafe_b64decode(odd + "==") == raw
    with pytest.raises(RequestStateError) as e:
        RequestState.open(f"{head}.{text}", KEYS["k1"], call, NOW)
    assert e.value.reason == "invalid", "the canonical form gets as far as the key"
    with pytest.raises(RequestStateError) as e:
        RequestState.open(f"{head}.{odd}", KEYS["k1"], call, NOW)
    assert e.value.reason == "malformed"
    for padded in (f"{sealed}==", f"{head}.{body[:10]} {body[10:]}"):
        with pytest.raises(RequestStateError) as e:
            RequestState.open(padded, KEYS["k1"], call, NOW)
        assert e.value.reason == "malformed"


def test_the_length_limit_counts_bytes() -> None:
    sealed, call = alices_state()
    with pytest.raises(RequestStateError) as e:
        RequestState.open(sealed + "é" * (2049 - len(sealed)), KEYS["k1"], call, NOW)
    assert e.value.reason == "malformed"


def test_a_state_sealed_under_the_previous_key_opens_after_rotation_and_not_without_it() -> None:
    sealed, call = alices_state()
    rotated = KEYS["k2"].with_previous(KEYS["k1"])
    assert RequestState.open(sealed, rotated, call, NOW).elicitation_id == EID
    assert rotated.key_id == KEYS["k2"].key_id, "the current key seals"
    with pytest.raises(RequestStateError) as e:
        RequestState.open(sealed, KEYS["k2"], call, NOW)
    assert e.value.reason == "invalid"


def test_an_authenticated_plaintext_with_a_duplicate_or_odd_field_is_malformed() -> None:
    call = ToolCall.of("alice", "whoami_on", {})
    k = KEYS["k1"]
    for plain in (
        f'{{"e":"{EID}","x":1900000600,"x":1}}',
        f'{{"e":"{EID}","x":1.5}}',
        f'{{"e":"{EID}","x":true}}',
        '{"e":"a b","x":1900000600}',
        f'{{"e":"{EID}","x":99999999999999}}',
    ):
        nonce = bytes(24)
        ct = crypto_aead_xchacha20poly1305_ietf_encrypt(
            plain.encode(), call.associated_data(k.key_id), nonce, k._current.secret
        )
        state = f"mcs2.{k.key_id}." + base64.urlsafe_b64encode(nonce + ct).decode().rstrip("=")
        with pytest.raises(RequestStateError) as e:
            RequestState.open(state, k, call, NOW)
        assert e.value.reason == "malformed", plain


@pytest.mark.parametrize(
    "arguments",
    [
        {"s": "\ud800"},
        {"\udc00": 1},
        {"n": float("nan")},
        {"n": float("inf")},
        {"n": 10**400},
        {"b": b"bytes"},
        {1: "non-string key"},
    ],
    ids=["lone-surrogate", "surrogate-key", "nan", "inf", "beyond-a-double", "not-json", "int-key"],
)
def test_a_call_without_a_canonical_form_cannot_be_sealed(arguments: Any) -> None:
    with pytest.raises(CanonicalizationError):
        ToolCall.of("alice", "whoami_on", arguments)


def test_a_subject_that_is_not_utf8_cannot_be_sealed() -> None:
    with pytest.raises(CanonicalizationError):
        ToolCall.of("al\ud800ice", "whoami_on", {})


def test_booleans_are_not_numbers() -> None:
    assert canonical_json({"t": True, "f": False}) == '{"f":false,"t":true}'


def test_keys_parse_from_standard_base64_and_never_print() -> None:
    key = RequestStateKey.from_base64(base64.b64encode(bytes(range(32))).decode())
    assert repr(key) == str(key) == "RequestStateKey([REDACTED])"
    with pytest.raises(TypeError):
        pickle.dumps(key)
    for bad in ("c2hvcnQ=", "not base64!", base64.b64encode(bytes(33)).decode(), ""):
        with pytest.raises(ValueError):
            RequestStateKey.from_base64(bad)


def test_a_key_that_is_not_32_bytes_is_an_invalid_request_state_key_error() -> None:
    for bad in ("c2hvcnQ=", "not base64!", base64.b64encode(bytes(33)).decode(), ""):
        with pytest.raises(InvalidRequestStateKeyError):
            RequestStateKey.from_base64(bad)
    with pytest.raises(InvalidRequestStateKeyError):
        RequestStateKey(bytes(31))
    assert issubclass(InvalidRequestStateKeyError, ValueError)


def test_seal_refuses_what_the_format_cannot_carry() -> None:
    call = ToolCall.of("alice", "whoami_on", {})
    with pytest.raises(ValueError):
        RequestState("not an id", NOW).seal(KEYS["k1"], call)
    with pytest.raises(TypeError):
        RequestState(EID, NOW + 0.5).seal(KEYS["k1"], call)  # type: ignore[arg-type]
