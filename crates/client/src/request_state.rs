//! The MCP `requestState` (2026-07-28, SEP-2322) passes through the client between the
//! `input_required` answer and the retry, so on return it is untrusted input. This module
//! seals it with XChaCha20-Poly1305: the plaintext (elicitation id, expiry) is encrypted,
//! and the call it belongs to (subject, tool name, digest of the arguments) is the
//! associated data, so a state opens only for the same subject making the same tool call
//! with the same arguments, under a key only the MCP server holds, before its expiry.
//!
//! Format: `mcs1.` + base64url(24-byte nonce ‖ ciphertext ‖ tag).

use crate::api::ElicitationId;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::fmt;
use time::OffsetDateTime;

const PREFIX: &str = "mcs1.";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Longer states are refused before decoding: ours are about 150 characters.
const MAX_SEALED_LEN: usize = 2048;
const AD_DOMAIN: &[u8] = b"mcp-connect-client/request-state/v1";

/// The AEAD key(s) for request states: the current one seals, every one opens (so a key
/// can rotate without failing the calls in flight). Keep it out of the client's reach.
#[derive(Clone)]
pub struct RequestStateKey {
    current: [u8; 32],
    previous: Vec<[u8; 32]>,
}

/// A key that is not 32 bytes of standard base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a request-state key is 32 bytes, standard base64 encoded")]
pub struct InvalidRequestStateKey;

impl RequestStateKey {
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self { current: key, previous: Vec::new() }
    }

    /// 32 bytes in standard base64 (e.g. `openssl rand -base64 32`).
    pub fn from_base64(s: &str) -> Result<Self, InvalidRequestStateKey> {
        let bytes = STANDARD.decode(s.trim()).map_err(|_| InvalidRequestStateKey)?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| InvalidRequestStateKey)?;
        Ok(Self::from_bytes(key))
    }

    /// A fresh random key (a single-instance server that may lose its states on restart).
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Self::from_bytes(key)
    }

    /// Also opens states sealed under `old` (key rotation).
    pub fn with_previous(mut self, old: &RequestStateKey) -> Self {
        self.previous.push(old.current);
        self
    }
}

impl fmt::Debug for RequestStateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestStateKey([REDACTED])")
    }
}

/// The tool call a state belongs to. `subject` comes from the validated MCP access token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall<'a> {
    subject: &'a str,
    tool: &'a str,
    arguments: [u8; 32],
}

impl<'a> ToolCall<'a> {
    /// `arguments` as the client sent them; `null` (absent) counts as `{}`.
    pub fn new(subject: &'a str, tool: &'a str, arguments: &serde_json::Value) -> Self {
        Self { subject, tool, arguments: arguments_digest(arguments) }
    }

    fn associated_data(&self) -> Vec<u8> {
        let mut ad = Vec::with_capacity(AD_DOMAIN.len() + self.subject.len() + self.tool.len() + 48);
        for part in [AD_DOMAIN, self.subject.as_bytes(), self.tool.as_bytes(), &self.arguments] {
            // Length-prefixed, so ("ab","c") and ("a","bc") differ.
            ad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            ad.extend_from_slice(part);
        }
        ad
    }
}

/// SHA-256 over a canonical JSON form of the arguments (object keys sorted, no
/// whitespace), so a client that reorders keys on the retry still matches.
pub fn arguments_digest(arguments: &serde_json::Value) -> [u8; 32] {
    let mut canonical = String::new();
    match arguments {
        serde_json::Value::Null => canonical.push_str("{}"),
        v => write_canonical(v, &mut canonical),
    }
    Sha256::digest(canonical.as_bytes()).into()
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// What a sealed state carries: the elicitation of the first round and a deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestState {
    pub elicitation_id: ElicitationId,
    pub expires_at: OffsetDateTime,
}

/// Why a returned `requestState` was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestStateError {
    /// Not a state this helper could have produced.
    #[error("requestState is malformed")]
    Malformed,
    /// It does not authenticate: altered, sealed under another key, or made for another
    /// subject, tool or set of arguments. These are indistinguishable by design.
    #[error("requestState does not belong to this call")]
    Invalid,
    /// Genuine and for this call, but past its deadline.
    #[error("requestState has expired")]
    Expired,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Plain {
    e: ElicitationId,
    x: i64,
}

impl RequestState {
    pub fn new(elicitation_id: ElicitationId, expires_at: OffsetDateTime) -> Self {
        Self { elicitation_id, expires_at }
    }

    /// Seals the state for `call` under the key's current key.
    pub fn seal(&self, key: &RequestStateKey, call: &ToolCall<'_>) -> String {
        let plain = Plain { e: self.elicitation_id.clone(), x: self.expires_at.unix_timestamp() };
        // Serialising two plain fields cannot fail; an empty plaintext would only fail to open.
        let msg = serde_json::to_vec(&plain).unwrap_or_default();
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let ad = call.associated_data();
        let cipher = XChaCha20Poly1305::new((&key.current).into());
        // XChaCha20-Poly1305 encryption fails only for messages beyond 256 GiB.
        let ct = cipher.encrypt(XNonce::from_slice(&nonce), Payload { msg: &msg, aad: &ad }).unwrap_or_default();
        let mut raw = Vec::with_capacity(NONCE_LEN + ct.len());
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&ct);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(raw))
    }

    /// Opens a state the client returned, for `call`, at `now`.
    pub fn open(
        sealed: &str,
        key: &RequestStateKey,
        call: &ToolCall<'_>,
        now: OffsetDateTime,
    ) -> Result<RequestState, RequestStateError> {
        if sealed.len() > MAX_SEALED_LEN {
            return Err(RequestStateError::Malformed);
        }
        let body = sealed.strip_prefix(PREFIX).ok_or(RequestStateError::Malformed)?;
        let raw = URL_SAFE_NO_PAD.decode(body).map_err(|_| RequestStateError::Malformed)?;
        if raw.len() < NONCE_LEN + TAG_LEN {
            return Err(RequestStateError::Malformed);
        }
        let (nonce, ct) = raw.split_at(NONCE_LEN);
        let ad = call.associated_data();
        let msg = std::iter::once(&key.current)
            .chain(key.previous.iter())
            .find_map(|k| {
                XChaCha20Poly1305::new(k.into()).decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: &ad }).ok()
            })
            .ok_or(RequestStateError::Invalid)?;
        // Authenticated, so a parse failure means our own format changed: still refuse.
        let plain: Plain = serde_json::from_slice(&msg).map_err(|_| RequestStateError::Malformed)?;
        let expires_at = OffsetDateTime::from_unix_timestamp(plain.x).map_err(|_| RequestStateError::Malformed)?;
        if now >= expires_at {
            return Err(RequestStateError::Expired);
        }
        Ok(RequestState { elicitation_id: plain.e, expires_at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use time::Duration;

    fn key() -> RequestStateKey {
        RequestStateKey::from_bytes([7u8; 32])
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_900_000_000).unwrap()
    }

    fn state() -> RequestState {
        RequestState::new(
            ElicitationId::parse("3f2b8c1e-0d4a-4e5b-9c6d-7e8f9a0b1c2d").unwrap(),
            now() + Duration::minutes(10),
        )
    }

    fn args() -> serde_json::Value {
        json!({"provider": "github", "verbose": true})
    }

    #[test]
    fn a_sealed_state_opens_for_the_same_call() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let sealed = state().seal(&key(), &call);
        assert!(sealed.starts_with("mcs1."));
        assert_eq!(RequestState::open(&sealed, &key(), &call, now()).unwrap(), state());
    }

    #[test]
    fn the_state_hides_the_elicitation_id_and_the_subject() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let sealed = state().seal(&key(), &call);
        let raw = URL_SAFE_NO_PAD.decode(&sealed[PREFIX.len()..]).unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(!text.contains("3f2b8c1e") && !text.contains("alice"));
        assert_ne!(sealed, state().seal(&key(), &call), "a fresh nonce per seal");
    }

    #[test]
    fn a_tampered_state_is_invalid() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let sealed = state().seal(&key(), &call);
        let mut raw = URL_SAFE_NO_PAD.decode(&sealed[PREFIX.len()..]).unwrap();
        for i in [0, NONCE_LEN, raw.len() - 1] {
            raw[i] ^= 0x01;
            let tampered = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw));
            assert_eq!(
                RequestState::open(&tampered, &key(), &call, now()),
                Err(RequestStateError::Invalid),
                "byte {i}"
            );
            raw[i] ^= 0x01;
        }
        let truncated = &sealed[..sealed.len() - 4];
        assert!(RequestState::open(truncated, &key(), &call, now()).is_err());
    }

    #[test]
    fn an_expired_state_is_refused() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let sealed = state().seal(&key(), &call);
        let deadline = state().expires_at;
        assert!(RequestState::open(&sealed, &key(), &call, deadline - Duration::seconds(1)).is_ok());
        assert_eq!(RequestState::open(&sealed, &key(), &call, deadline), Err(RequestStateError::Expired));
        assert_eq!(
            RequestState::open(&sealed, &key(), &call, deadline + Duration::hours(1)),
            Err(RequestStateError::Expired)
        );
    }

    #[test]
    fn a_state_of_another_subject_is_invalid() {
        let sealed = state().seal(&key(), &ToolCall::new("alice", "whoami_on", &args()));
        let bob = ToolCall::new("bob", "whoami_on", &args());
        assert_eq!(RequestState::open(&sealed, &key(), &bob, now()), Err(RequestStateError::Invalid));
    }

    #[test]
    fn a_state_of_another_tool_call_is_invalid() {
        let sealed = state().seal(&key(), &ToolCall::new("alice", "whoami_on", &args()));
        let other_tool = ToolCall::new("alice", "delete_repo", &args());
        assert_eq!(RequestState::open(&sealed, &key(), &other_tool, now()), Err(RequestStateError::Invalid));
        let other_args = ToolCall::new("alice", "whoami_on", &json!({"provider": "gitlab", "verbose": true}));
        assert_eq!(RequestState::open(&sealed, &key(), &other_args, now()), Err(RequestStateError::Invalid));
        // Boundaries are length-prefixed: moving a character from subject to tool changes the data.
        let shifted = ToolCall::new("alic", "ewhoami_on", &args());
        assert_eq!(RequestState::open(&sealed, &key(), &shifted, now()), Err(RequestStateError::Invalid));
    }

    #[test]
    fn a_state_under_another_key_is_invalid_until_that_key_is_a_previous_one() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let old = RequestStateKey::from_bytes([9u8; 32]);
        let sealed = state().seal(&old, &call);
        assert_eq!(RequestState::open(&sealed, &key(), &call, now()), Err(RequestStateError::Invalid));
        let rotated = key().with_previous(&old);
        assert!(RequestState::open(&sealed, &rotated, &call, now()).is_ok());
    }

    #[test]
    fn key_order_and_absent_arguments_do_not_change_the_digest() {
        assert_eq!(
            arguments_digest(&json!({"a": 1, "b": {"y": [1, 2], "x": "s"}})),
            arguments_digest(&json!({"b": {"x": "s", "y": [1, 2]}, "a": 1}))
        );
        assert_eq!(arguments_digest(&serde_json::Value::Null), arguments_digest(&json!({})));
        assert_ne!(arguments_digest(&json!({"a": 1})), arguments_digest(&json!({"a": "1"})));
    }

    #[test]
    fn malformed_states_are_refused_without_panicking() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        for s in ["", "mcs1.", "mcs1.!!!", "v0.abc", "mcs1.AAAA", &"x".repeat(5000)] {
            assert_eq!(RequestState::open(s, &key(), &call, now()), Err(RequestStateError::Malformed), "{s:.20}");
        }
    }

    #[test]
    fn keys_parse_from_base64_and_never_print() {
        let k = RequestStateKey::from_base64(&STANDARD.encode([1u8; 32])).unwrap();
        assert_eq!(format!("{k:?}"), "RequestStateKey([REDACTED])");
        assert!(RequestStateKey::from_base64("c2hvcnQ=").is_err());
        assert!(RequestStateKey::from_base64("not base64!").is_err());
    }

    proptest::proptest! {
        /// Any call's state opens for that call, and only for it.
        #[test]
        fn a_sealed_state_round_trips_for_any_call(subject in "\\PC{1,40}", tool in "[a-z_]{1,20}", n in proptest::num::i64::ANY) {
            let args = json!({"n": n});
            let call = ToolCall::new(&subject, &tool, &args);
            let sealed = state().seal(&key(), &call);
            proptest::prop_assert_eq!(RequestState::open(&sealed, &key(), &call, now()).unwrap(), state());
            let other = json!({"n": n.wrapping_add(1)});
            let moved = ToolCall::new(&subject, &tool, &other);
            proptest::prop_assert!(matches!(RequestState::open(&sealed, &key(), &moved, now()), Err(RequestStateError::Invalid)));
        }

        /// A change to any byte of the sealed bytes is refused as `Invalid`, and a change
        /// to any character of the text is refused one way or another.
        #[test]
        fn any_change_to_a_sealed_state_is_refused(at in proptest::num::usize::ANY, mask in 1u8..=255, ch in proptest::char::range('-', 'z')) {
            let call = ToolCall::new("alice", "whoami_on", &args());
            let sealed = state().seal(&key(), &call);
            let mut raw = URL_SAFE_NO_PAD.decode(&sealed[PREFIX.len()..]).unwrap();
            let i = at % raw.len();
            raw[i] ^= mask;
            let forged = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw));
            proptest::prop_assert!(matches!(RequestState::open(&forged, &key(), &call, now()), Err(RequestStateError::Invalid)));
            let mut text: Vec<char> = sealed.chars().collect();
            let j = at % text.len();
            proptest::prop_assume!(text[j] != ch);
            text[j] = ch;
            let edited: String = text.into_iter().collect();
            proptest::prop_assert!(RequestState::open(&edited, &key(), &call, now()).is_err());
        }
    }
}
