//! Standard Webhooks signatures (<https://www.standardwebhooks.com>), by the official
//! `standardwebhooks` crate: `webhook-signature` holds `v1,<base64 HMAC-SHA256 of
//! "<id>.<timestamp>.<body>">`, one per secret in force (two while a rotated secret keeps
//! working), separated by spaces.

use base64::Engine;
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;

/// A new signing secret as Standard Webhooks spells it: `whsec_` and 32 random bytes in
/// base64. Shown to the operator once; stored sealed.
pub fn new_secret() -> SecretString {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    SecretString::from(format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key)))
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// Not `whsec_` and 24-64 bytes of base64.
    #[error("a signing secret is malformed")]
    BadSecret,
    /// The body is not UTF-8 (the signature covers it as text).
    #[error("the body is not UTF-8")]
    BadBody,
    #[error("no signing secret")]
    NoSecret,
}

/// The headers of one delivery attempt: `webhook-id` (the event's stable id),
/// `webhook-timestamp` (this attempt's time: a retry is signed afresh) and
/// `webhook-signature` (one `v1,` signature per secret).
pub struct Signed {
    pub id: String,
    pub timestamp: i64,
    pub signature: String,
}

pub fn sign(secrets: &[&SecretString], id: &str, at: OffsetDateTime, body: &[u8]) -> Result<Signed, SignError> {
    if secrets.is_empty() {
        return Err(SignError::NoSecret);
    }
    let timestamp = at.unix_timestamp();
    let mut signatures = Vec::with_capacity(secrets.len());
    std::str::from_utf8(body).map_err(|_| SignError::BadBody)?;
    for secret in secrets {
        let key = secret
            .expose_secret()
            .strip_prefix("whsec_")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .filter(|k| (24..=64).contains(&k.len()))
            .ok_or(SignError::BadSecret)?;
        let hook = standardwebhooks::Webhook::from_bytes(key).map_err(|_| SignError::BadSecret)?;
        signatures.push(hook.sign(id, timestamp, body).map_err(|_| SignError::BadBody)?);
    }
    Ok(Signed { id: id.to_owned(), timestamp, signature: signatures.join(" ") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(s: &Signed) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert("webhook-id", s.id.parse().unwrap());
        h.insert("webhook-timestamp", s.timestamp.to_string().parse().unwrap());
        h.insert("webhook-signature", s.signature.parse().unwrap());
        h
    }

    #[test]
    fn a_signature_verifies_with_each_secret_in_force_and_with_no_other() {
        let (old, new, other) = (new_secret(), new_secret(), new_secret());
        let body = br#"{"type":"connection.revoked"}"#;
        let s = sign(&[&new, &old], "msg_1", OffsetDateTime::now_utc(), body).unwrap();
        assert_eq!(s.signature.matches("v1,").count(), 2);
        for secret in [&new, &old] {
            let hook = standardwebhooks::Webhook::new(secret.expose_secret()).unwrap();
            hook.verify(body, &headers(&s)).unwrap();
            assert!(hook.verify(br#"{"type":"connection.created"}"#, &headers(&s)).is_err(), "another body");
        }
        let hook = standardwebhooks::Webhook::new(other.expose_secret()).unwrap();
        assert!(hook.verify(body, &headers(&s)).is_err(), "another secret");
    }

    #[test]
    fn secrets_are_fresh_and_in_the_standard_form() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a.expose_secret(), b.expose_secret());
        let raw = a.expose_secret().strip_prefix("whsec_").unwrap();
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(raw).unwrap().len(), 32);
        assert!(matches!(sign(&[], "msg_1", OffsetDateTime::now_utc(), b""), Err(SignError::NoSecret)));
        for bad in ["whsec_***", "whsec_", "whsec_AAAA", "secret"] {
            let bad = SecretString::from(bad.to_owned());
            assert!(matches!(sign(&[&bad], "msg_1", OffsetDateTime::now_utc(), b""), Err(SignError::BadSecret)));
        }
        assert!(matches!(sign(&[&a], "msg_1", OffsetDateTime::now_utc(), &[0xff]), Err(SignError::BadBody)));
    }
}
