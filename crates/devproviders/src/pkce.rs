//! PKCE, RFC 7636: only S256 is offered, as OAuth 2.1 recommends.

use crate::crypto::b64url;
use sha2::{Digest, Sha256};

/// RFC 7636 §4.1: 43 to 128 characters of `[A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~"`.
fn verifier_is_well_formed(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// RFC 7636 §4.6: BASE64URL(SHA256(ASCII(code_verifier))) == code_challenge.
pub(crate) fn verify_s256(verifier: &str, challenge: &str) -> bool {
    verifier_is_well_formed(verifier)
        && crate::crypto::constant_time_eq(&b64url(&Sha256::digest(verifier.as_bytes())), challenge)
}

/// RFC 7636 §4.2: a challenge is itself 43 to 128 unreserved characters; S256 gives 43.
pub(crate) fn challenge_is_well_formed(challenge: &str) -> bool {
    verifier_is_well_formed(challenge)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of RFC 7636 Appendix B.
    const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    #[test]
    fn the_rfc_7636_example_verifies() {
        assert!(verify_s256(VERIFIER, CHALLENGE));
    }

    #[test]
    fn a_different_verifier_does_not_verify() {
        assert!(!verify_s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXj", CHALLENGE));
    }

    #[test]
    fn a_too_short_verifier_is_rejected_even_if_its_hash_matched() {
        let short = "abc";
        let challenge = b64url(&Sha256::digest(short.as_bytes()));
        assert!(!verify_s256(short, &challenge));
    }

    #[test]
    fn the_challenge_itself_is_not_a_valid_verifier_for_itself() {
        assert!(!verify_s256(CHALLENGE, CHALLENGE));
    }
}
