//! The few primitives the flow needs, in one place: random tokens, hashes for lookup, and
//! the one constant-time comparison every secret check goes through.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// `n` random bytes from the OS-seeded CSPRNG, base64url without padding.
pub fn random_token(n: usize) -> String {
    let mut b = vec![0u8; n];
    rand::rng().fill_bytes(&mut b);
    let s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&b);
    zeroize::Zeroize::zeroize(&mut b);
    s
}

/// SHA-256 of a secret, for storing a lookup key instead of the secret itself. Domain
/// separated, so a hash made for one purpose never matches a hash made for another.
pub fn lookup_hash(purpose: &str, secret: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(purpose.as_bytes());
    h.update([0u8]);
    h.update(secret.as_bytes());
    h.finalize().into()
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// A random token of 256 bits is 43 base64url characters; anything else is not ours.
pub fn looks_like_token(s: &str) -> bool {
    s.len() == 43 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_256_bits_and_distinct() {
        let a = random_token(32);
        assert!(looks_like_token(&a));
        assert_ne!(a, random_token(32));
    }

    #[test]
    fn lookup_hashes_are_domain_separated() {
        assert_ne!(lookup_hash("session", "x"), lookup_hash("state", "x"));
        assert_eq!(lookup_hash("session", "x"), lookup_hash("session", "x"));
    }

    #[test]
    fn constant_time_eq_compares_content_and_length() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
