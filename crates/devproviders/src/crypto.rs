//! Randomness, hashing and comparison for secrets. Tokens and codes are kept only as SHA-256
//! digests, so the provider's memory never holds a usable credential.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// SHA-256 of a token or code: the key under which it is stored.
pub(crate) type TokenHash = [u8; 32];

/// 32 random bytes, base64url without padding (43 characters).
pub(crate) fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn token_hash(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

pub(crate) fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Compares two secrets without an early exit, so response time does not tell how many
/// leading bytes matched. Hashing first makes the lengths equal.
pub(crate) fn constant_time_eq(a: &str, b: &str) -> bool {
    let (x, y) = (token_hash(a), token_hash(b));
    x.iter().zip(y.iter()).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tokens_are_43_url_safe_characters_and_differ() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 43);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(a, b);
    }

    #[test]
    fn constant_time_eq_tells_equal_from_different() {
        assert!(constant_time_eq("secret", "secret"));
        assert!(!constant_time_eq("secret", "secreT"));
        assert!(!constant_time_eq("secret", "secret2"));
    }
}
