//! The MCP `requestState` (2026-07-28, SEP-2322) passes through the client between the
//! `input_required` answer and the retry, so on return it is untrusted input. This module
//! seals it with XChaCha20-Poly1305: the plaintext (elicitation id, expiry) is encrypted,
//! and the call it belongs to (subject, tool name, digest of the arguments) is the
//! associated data, so a state opens only for the same subject making the same tool call
//! with the same arguments, under a key only the MCP server holds, before its expiry.
//!
//! Format `mcs2`, shared byte for byte with the Python and TypeScript libraries
//! (`docs/request-state.md`, vectors in `clients/request-state-vectors.json`):
//! `mcs2.<kid>.` + base64url(24-byte nonce ‖ ciphertext ‖ tag).

use crate::api::ElicitationId;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::fmt;
use time::OffsetDateTime;

const PREFIX: &str = "mcs2.";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Longer states are refused before decoding: ours are about 120 characters.
const MAX_SEALED_LEN: usize = 2048;
const AD_DOMAIN: &[u8] = b"mcp-connect/request-state/v2";
const KID_DOMAIN: &[u8] = b"mcp-connect/request-state/v2/key-id";
/// The key id is this many bytes of the hash, 8 characters of base64url.
const KID_BYTES: usize = 6;

/// One 32-byte key and its id.
#[derive(Clone)]
struct Key {
    bytes: [u8; 32],
    kid: String,
}

impl Key {
    fn new(bytes: [u8; 32]) -> Self {
        let mut h = Sha256::new();
        h.update(KID_DOMAIN);
        h.update(bytes);
        let kid = URL_SAFE_NO_PAD.encode(&h.finalize()[..KID_BYTES]);
        Self { bytes, kid }
    }
}

/// The AEAD key(s) for request states: the current one seals, the one a state names by
/// its key id opens it (so a key can rotate without failing the calls in flight). Keep it
/// out of the client's reach.
#[derive(Clone)]
pub struct RequestStateKey {
    current: Key,
    previous: Vec<Key>,
}

/// A key that is not 32 bytes of standard base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a request-state key is 32 bytes, standard base64 encoded")]
pub struct InvalidRequestStateKey;

impl RequestStateKey {
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self { current: Key::new(key), previous: Vec::new() }
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
        self.previous.push(old.current.clone());
        self
    }

    /// The current key's id, as it appears in the states it seals.
    pub fn key_id(&self) -> &str {
        &self.current.kid
    }

    fn by_kid(&self, kid: &str) -> Option<&Key> {
        std::iter::once(&self.current).chain(self.previous.iter()).find(|k| k.kid == kid)
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

    fn associated_data(&self, kid: &str) -> Vec<u8> {
        let mut ad = Vec::with_capacity(AD_DOMAIN.len() + kid.len() + self.subject.len() + self.tool.len() + 72);
        for part in [AD_DOMAIN, kid.as_bytes(), self.subject.as_bytes(), self.tool.as_bytes(), &self.arguments] {
            // Length-prefixed, so ("ab","c") and ("a","bc") differ.
            ad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            ad.extend_from_slice(part);
        }
        ad
    }
}

/// SHA-256 over the RFC 8785 canonical JSON of the arguments, so a client that reorders
/// keys on the retry still matches.
pub fn arguments_digest(arguments: &serde_json::Value) -> [u8; 32] {
    Sha256::digest(canonical_json(arguments).as_bytes()).into()
}

/// RFC 8785 (JCS) text of `v`, with every number first made the IEEE-754 double nearest
/// to it: a TypeScript server parses arguments into doubles, so an integer beyond 2^53
/// must digest as the double it rounds to in every language (docs/request-state.md).
/// `null` (absent arguments) is `{}`.
pub(crate) fn canonical_json(v: &serde_json::Value) -> String {
    fn as_doubles(v: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match v {
            Value::Number(n) => {
                n.as_f64().and_then(serde_json::Number::from_f64).map_or_else(|| v.clone(), Value::Number)
            }
            Value::Array(items) => Value::Array(items.iter().map(as_doubles).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), as_doubles(v))).collect()),
            other => other.clone(),
        }
    }
    match v {
        serde_json::Value::Null => "{}".to_owned(),
        // Serialising a JSON value fails only for non-finite numbers, which JSON has not.
        v => serde_jcs::to_string(&as_doubles(v)).unwrap_or_default(),
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

/// The plaintext, `{"e":"<id>","x":<unix seconds>}`: field order is the wire format.
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
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        self.seal_with_nonce(key, call, &nonce)
    }

    fn seal_with_nonce(&self, key: &RequestStateKey, call: &ToolCall<'_>, nonce: &[u8; NONCE_LEN]) -> String {
        let plain = Plain { e: self.elicitation_id.clone(), x: self.expires_at.unix_timestamp() };
        // Serialising two plain fields cannot fail; an empty plaintext would only fail to open.
        let msg = serde_json::to_vec(&plain).unwrap_or_default();
        let kid = &key.current.kid;
        let ad = call.associated_data(kid);
        let cipher = XChaCha20Poly1305::new((&key.current.bytes).into());
        // XChaCha20-Poly1305 encryption fails only for messages beyond 256 GiB.
        let ct = cipher.encrypt(XNonce::from_slice(nonce), Payload { msg: &msg, aad: &ad }).unwrap_or_default();
        let mut raw = Vec::with_capacity(NONCE_LEN + ct.len());
        raw.extend_from_slice(nonce);
        raw.extend_from_slice(&ct);
        format!("{PREFIX}{kid}.{}", URL_SAFE_NO_PAD.encode(raw))
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
        let rest = sealed.strip_prefix(PREFIX).ok_or(RequestStateError::Malformed)?;
        let (kid, body) = rest.split_once('.').ok_or(RequestStateError::Malformed)?;
        let raw = URL_SAFE_NO_PAD.decode(body).map_err(|_| RequestStateError::Malformed)?;
        if raw.len() < NONCE_LEN + TAG_LEN {
            return Err(RequestStateError::Malformed);
        }
        // A key id we hold no key for looks like any other state that does not open.
        let k = key.by_kid(kid).ok_or(RequestStateError::Invalid)?;
        let (nonce, ct) = raw.split_at(NONCE_LEN);
        let ad = call.associated_data(kid);
        let msg = XChaCha20Poly1305::new((&k.bytes).into())
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: &ad })
            .map_err(|_| RequestStateError::Invalid)?;
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
    use serde_json::{Value, json};
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

    fn args() -> Value {
        json!({"provider": "github", "verbose": true})
    }

    /// The nonce ‖ ciphertext ‖ tag of a sealed state, and the text before it.
    fn split(sealed: &str) -> (String, Vec<u8>) {
        let (head, body) = sealed.rsplit_once('.').unwrap();
        (format!("{head}."), URL_SAFE_NO_PAD.decode(body).unwrap())
    }

    #[test]
    fn a_sealed_state_opens_for_the_same_call() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let sealed = state().seal(&key(), &call);
        assert!(sealed.starts_with(&format!("mcs2.{}.", key().key_id())), "{sealed}");
        assert_eq!(key().key_id().len(), 8);
        assert_eq!(RequestState::open(&sealed, &key(), &call, now()).unwrap(), state());
    }

    #[test]
    fn the_state_hides_the_elicitation_id_and_the_subject() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let sealed = state().seal(&key(), &call);
        let text = String::from_utf8_lossy(&split(&sealed).1).into_owned();
        assert!(!text.contains("3f2b8c1e") && !text.contains("alice") && !sealed.contains("alice"));
        assert_ne!(sealed, state().seal(&key(), &call), "a fresh nonce per seal");
    }

    #[test]
    fn a_tampered_state_is_invalid() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let sealed = state().seal(&key(), &call);
        let (head, mut raw) = split(&sealed);
        for i in [0, NONCE_LEN, raw.len() - 1] {
            raw[i] ^= 0x01;
            let tampered = format!("{head}{}", URL_SAFE_NO_PAD.encode(&raw));
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
        // The key id picks the key; a state relabelled with the other key's id does not open.
        let relabelled = sealed.replacen(old.key_id(), key().key_id(), 1);
        assert_eq!(RequestState::open(&relabelled, &rotated, &call, now()), Err(RequestStateError::Invalid));
    }

    #[test]
    fn key_order_and_absent_arguments_do_not_change_the_digest() {
        assert_eq!(
            arguments_digest(&json!({"a": 1, "b": {"y": [1, 2], "x": "s"}})),
            arguments_digest(&json!({"b": {"x": "s", "y": [1, 2]}, "a": 1}))
        );
        assert_eq!(arguments_digest(&Value::Null), arguments_digest(&json!({})));
        assert_ne!(arguments_digest(&json!({"a": 1})), arguments_digest(&json!({"a": "1"})));
    }

    #[test]
    fn malformed_states_are_refused_without_panicking() {
        let call = ToolCall::new("alice", "whoami_on", &args());
        let kid = key().key_id().to_owned();
        for s in [
            "".to_owned(),
            "mcs2.".to_owned(),
            format!("mcs2.{kid}"),
            format!("mcs2.{kid}.!!!"),
            format!("mcs2.{kid}.AAAA"),
            "mcs1.AAAA".to_owned(),
            "x".repeat(5000),
        ] {
            assert_eq!(RequestState::open(&s, &key(), &call, now()), Err(RequestStateError::Malformed), "{s:.20}");
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
            // A neighbour that is still another double (integers past 2^53 round together).
            let other = json!({"n": (n as f64) * 2.0 + 1.0});
            let moved = ToolCall::new(&subject, &tool, &other);
            proptest::prop_assert!(matches!(RequestState::open(&sealed, &key(), &moved, now()), Err(RequestStateError::Invalid)));
        }

        /// A change to any byte of the sealed bytes is refused as `Invalid`, and a change
        /// to any character of the text is refused one way or another.
        #[test]
        fn any_change_to_a_sealed_state_is_refused(at in proptest::num::usize::ANY, mask in 1u8..=255, ch in proptest::char::range('-', 'z')) {
            let call = ToolCall::new("alice", "whoami_on", &args());
            let sealed = state().seal(&key(), &call);
            let (head, mut raw) = split(&sealed);
            let i = at % raw.len();
            raw[i] ^= mask;
            let forged = format!("{head}{}", URL_SAFE_NO_PAD.encode(&raw));
            proptest::prop_assert!(matches!(RequestState::open(&forged, &key(), &call, now()), Err(RequestStateError::Invalid)));
            let mut text: Vec<char> = sealed.chars().collect();
            let j = at % text.len();
            proptest::prop_assume!(text[j] != ch);
            text[j] = ch;
            let edited: String = text.into_iter().collect();
            proptest::prop_assert!(RequestState::open(&edited, &key(), &call, now()).is_err());
        }
    }

    // --- The shared vectors (clients/request-state-vectors.json) ---------------------------

    const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/request-state-vectors.json");

    fn vector_key(n: u8) -> (String, RequestStateKey) {
        let bytes: [u8; 32] = std::array::from_fn(|i| i as u8 + 32 * n);
        (STANDARD.encode(bytes), RequestStateKey::from_bytes(bytes))
    }

    fn keyring(names: &[&str]) -> RequestStateKey {
        let pick = |name: &str| vector_key(name[1..].parse::<u8>().unwrap() - 1).1;
        let mut ring = pick(names[0]);
        for n in &names[1..] {
            ring = ring.with_previous(&pick(n));
        }
        ring
    }

    fn nonce(n: u8) -> [u8; NONCE_LEN] {
        std::array::from_fn(|i| 0xa0u8.wrapping_add(i as u8).wrapping_add(n))
    }

    /// Seals any plaintext (a state our format would not write), for the refusal of one.
    fn seal_raw(key: &RequestStateKey, call: &ToolCall<'_>, msg: &[u8]) -> String {
        let kid = key.key_id();
        let ct = XChaCha20Poly1305::new((&key.current.bytes).into())
            .encrypt(XNonce::from_slice(&nonce(9)), Payload { msg, aad: &call.associated_data(kid) })
            .unwrap();
        format!("{PREFIX}{kid}.{}", URL_SAFE_NO_PAD.encode([nonce(9).as_slice(), &ct].concat()))
    }

    /// Arguments written as JSON text, so the file carries `1.0`, `-0.0` and integers past
    /// 2^53 as written.
    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn canonical_inputs() -> Vec<Value> {
        [
            r#"{"provider":"github"}"#,
            "null",
            "{}",
            r#"{"b":{"y":[1,2],"x":"s"},"a":1}"#,
            r#"{"n":[1.0,0.1,1e21,1e-7,-0.0,9007199254740993,123456789012345680000,5e-324,1.5e300,-12.5,100]}"#,
            r#"{"s":"é\u0000\u001f\"\\/\n\t\u007f\u2028 😀","€":1,"\r":2,"😀":3,"ﬀ":4,"":0}"#,
            r#"{"a":[true,false,null,{},[]],"A":"x"}"#,
        ]
        .into_iter()
        .map(parse)
        .collect()
    }

    struct Call {
        subject: &'static str,
        tool: &'static str,
        arguments: Value,
    }

    impl Call {
        fn tool_call(&self) -> ToolCall<'_> {
            ToolCall::new(self.subject, self.tool, &self.arguments)
        }
    }

    fn the_vectors() -> Value {
        let keys: Vec<Value> = (0..2)
            .map(|n| {
                let (b64, k) = vector_key(n);
                json!({"name": format!("k{}", n + 1), "key": b64, "kid": k.key_id()})
            })
            .collect();
        let canonical: Vec<Value> = canonical_inputs()
            .into_iter()
            .map(|a| {
                let text = canonical_json(&a);
                let digest: String = arguments_digest(&a).iter().map(|b| format!("{b:02x}")).collect();
                json!({"arguments": a, "canonical": text, "sha256": digest})
            })
            .collect();
        let t0 = 1_900_000_000i64;
        let ids = ["3f2b8c1e-0d4a-4e5b-9c6d-7e8f9a0b1c2d", "0b9e6a52-64c1-4f7e-8a3d-2c5b1e9f7a60"];
        let github = || parse(r#"{"provider":"github"}"#);
        let seals = [
            ("k1", 0u8, Call { subject: "alice", tool: "whoami_on", arguments: github() }, ids[0]),
            ("k1", 1, Call { subject: "Zoë 😀", tool: "list_repos", arguments: Value::Null }, ids[1]),
            ("k2", 2, Call { subject: "alice", tool: "whoami_on", arguments: canonical_inputs()[4].clone() }, ids[0]),
        ];
        let mut seal = Vec::new();
        let mut sealed_states = Vec::new();
        for (k, n, call, id) in &seals {
            let st = RequestState::new(
                ElicitationId::parse(id).unwrap(),
                OffsetDateTime::from_unix_timestamp(t0 + 600).unwrap(),
            );
            let s = st.seal_with_nonce(&keyring(&[k]), &call.tool_call(), &nonce(*n));
            seal.push(json!({
                "key": k, "nonce": nonce(*n).iter().map(|b| format!("{b:02x}")).collect::<String>(),
                "subject": call.subject, "tool": call.tool, "arguments": call.arguments,
                "elicitation_id": id, "expires_at": t0 + 600, "now": t0, "state": s,
            }));
            sealed_states.push(s);
        }
        let [alice, _, under_k2] = &sealed_states[..] else { unreachable!() };
        let open = vec![
            json!({"name": "a state of a previous key opens after rotation", "keys": ["k1", "k2"], "state": under_k2,
                   "subject": "alice", "tool": "whoami_on", "arguments": canonical_inputs()[4], "now": t0 + 599,
                   "elicitation_id": ids[0], "expires_at": t0 + 600}),
            json!({"name": "reordered arguments and one second before the deadline", "keys": ["k2", "k1"], "state": alice,
                   "subject": "alice", "tool": "whoami_on", "arguments": parse(r#"{ "provider" : "github" }"#),
                   "now": t0 + 599, "elicitation_id": ids[0], "expires_at": t0 + 600}),
        ];
        let (head, raw) = split(alice);
        let flip = |i: usize| {
            let mut r = raw.clone();
            r[i] ^= 0x01;
            format!("{head}{}", URL_SAFE_NO_PAD.encode(r))
        };
        let k1_kid = keyring(&["k1"]).key_id().to_owned();
        let k2_kid = keyring(&["k2"]).key_id().to_owned();
        let bad_plain = seal_raw(&keyring(&["k1"]), &seals[0].2.tool_call(), br#"{"e":1}"#);
        let refuse_one =
            |name: &str, keys: &[&str], state: &str, subject: &str, tool: &str, args: Value, now: i64, error: &str| {
                json!({"name": name, "keys": keys, "state": state, "subject": subject, "tool": tool,
                   "arguments": args, "now": now, "error": error})
            };
        let r = |name: &str, state: &str, error: &str| {
            refuse_one(name, &["k1"], state, "alice", "whoami_on", github(), t0, error)
        };
        let refuse = vec![
            r("a changed nonce byte", &flip(0), "invalid"),
            r("a changed ciphertext byte", &flip(NONCE_LEN), "invalid"),
            r("a changed tag byte", &flip(raw.len() - 1), "invalid"),
            refuse_one("another subject", &["k1"], alice, "bob", "whoami_on", github(), t0, "invalid"),
            refuse_one("another tool", &["k1"], alice, "alice", "delete_repo", github(), t0, "invalid"),
            refuse_one(
                "other arguments",
                &["k1"],
                alice,
                "alice",
                "whoami_on",
                parse(r#"{"provider":"gitlab"}"#),
                t0,
                "invalid",
            ),
            refuse_one(
                "a character moved from the subject to the tool",
                &["k1"],
                alice,
                "alic",
                "ewhoami_on",
                github(),
                t0,
                "invalid",
            ),
            refuse_one(
                "no arguments instead of some",
                &["k1"],
                alice,
                "alice",
                "whoami_on",
                Value::Null,
                t0,
                "invalid",
            ),
            refuse_one(
                "a key id the opener has no key for",
                &["k2"],
                alice,
                "alice",
                "whoami_on",
                github(),
                t0,
                "invalid",
            ),
            refuse_one(
                "relabelled with another key's id",
                &["k1", "k2"],
                &alice.replacen(&k1_kid, &k2_kid, 1),
                "alice",
                "whoami_on",
                github(),
                t0,
                "invalid",
            ),
            refuse_one("at its deadline", &["k1"], alice, "alice", "whoami_on", github(), t0 + 600, "expired"),
            refuse_one("past its deadline", &["k1"], alice, "alice", "whoami_on", github(), t0 + 86_400, "expired"),
            refuse_one(
                "past its deadline and for another subject",
                &["k1"],
                alice,
                "bob",
                "whoami_on",
                github(),
                t0 + 86_400,
                "invalid",
            ),
            r("the earlier format's prefix", &alice.replacen("mcs2.", "mcs1.", 1), "malformed"),
            r("empty", "", "malformed"),
            r("no key id", &format!("mcs2.{}", &alice[PREFIX.len() + 9..]), "malformed"),
            r("a body that is not base64url", &format!("mcs2.{k1_kid}.!!!!"), "malformed"),
            r(
                "a body too short for a nonce and a tag",
                &format!("mcs2.{k1_kid}.{}", URL_SAFE_NO_PAD.encode([0u8; 39])),
                "malformed",
            ),
            r("longer than 2048 characters", &format!("{alice}{}", "A".repeat(2049 - alice.len())), "malformed"),
            r("an authenticated plaintext that is not a state", &bad_plain, "malformed"),
        ];
        json!({
            "format": "mcs2",
            "about": "docs/request-state.md; written by crates/client request_state::tests::the_shared_vectors_hold with UPDATE_VECTORS=1",
            "keys": keys, "canonical": canonical, "seal": seal, "open": open, "refuse": refuse,
        })
    }

    fn at(v: &Value) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(v.as_i64().unwrap()).unwrap()
    }

    #[test]
    fn the_shared_vectors_hold() {
        let made = serde_json::to_string_pretty(&the_vectors()).unwrap() + "\n";
        if std::env::var_os("UPDATE_VECTORS").is_some() {
            assert!(std::env::var_os("CI").is_none(), "vectors are written by a developer, never by CI");
            std::fs::write(VECTORS, &made).unwrap();
        }
        let file = std::fs::read_to_string(VECTORS).unwrap();
        let v: Value = serde_json::from_str(&file).unwrap();
        // The file is what this code writes (a change of format shows here first)...
        assert_eq!(file, made, "clients/request-state-vectors.json is stale: UPDATE_VECTORS=1 rewrites it");
        // ...and this code reads it as the other libraries do.
        for c in v["canonical"].as_array().unwrap() {
            assert_eq!(canonical_json(&c["arguments"]), c["canonical"].as_str().unwrap());
        }
        for k in v["keys"].as_array().unwrap() {
            assert_eq!(RequestStateKey::from_base64(k["key"].as_str().unwrap()).unwrap().key_id(), k["kid"]);
        }
        let keys_of =
            |e: &Value| keyring(&e["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect::<Vec<_>>());
        let call_of = |e: &Value| {
            (e["subject"].as_str().unwrap().to_owned(), e["tool"].as_str().unwrap().to_owned(), e["arguments"].clone())
        };
        for e in v["seal"].as_array().unwrap().iter().chain(v["open"].as_array().unwrap()) {
            let ring = if e.get("keys").is_some() { keys_of(e) } else { keyring(&[e["key"].as_str().unwrap()]) };
            let (s, t, a) = call_of(e);
            let got =
                RequestState::open(e["state"].as_str().unwrap(), &ring, &ToolCall::new(&s, &t, &a), at(&e["now"]))
                    .unwrap();
            assert_eq!(got.elicitation_id.as_str(), e["elicitation_id"]);
            assert_eq!(got.expires_at, at(&e["expires_at"]));
        }
        for e in v["refuse"].as_array().unwrap() {
            let (s, t, a) = call_of(e);
            let got = RequestState::open(
                e["state"].as_str().unwrap(),
                &keys_of(e),
                &ToolCall::new(&s, &t, &a),
                at(&e["now"]),
            );
            let want = match e["error"].as_str().unwrap() {
                "malformed" => RequestStateError::Malformed,
                "invalid" => RequestStateError::Invalid,
                _ => RequestStateError::Expired,
            };
            assert_eq!(got, Err(want), "{}", e["name"]);
        }
    }
}
