//! Why an ID token was refused (OIDC Core §3.1.3.7): one reason per check, each with a
//! stable code for the audit row, the metric label and the log. Never the token's content.

use openidconnect::{ClaimsVerificationError, SignatureVerificationError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdTokenRefusal {
    #[error("the token response holds no ID token")]
    Missing,
    #[error("the ID token is not a well-formed JWT")]
    Malformed,
    #[error("the provider has no issuer, keys or accepted algorithm to verify against")]
    NotVerifiable,
    #[error("the ID token is signed with an algorithm we do not accept")]
    Algorithm,
    #[error("no key of the provider's JWKS matches the ID token's")]
    UnknownKey,
    #[error("the ID token's signature does not verify")]
    Signature,
    #[error("the ID token's `iss` is not the provider's issuer")]
    Issuer,
    #[error("the ID token's `aud` does not name us, or names an untrusted other audience")]
    Audience,
    #[error("the ID token's `azp` is another client, or missing with several audiences")]
    Azp,
    #[error("the ID token's nonce is not the one sent")]
    Nonce,
    #[error("the ID token has expired (beyond the clock skew)")]
    Expired,
    #[error("the ID token was issued in the future (beyond the clock skew)")]
    IssuedInFuture,
    /// Anything else openidconnect refuses: a `typ`, `cty` or `crit` header, an encrypted
    /// token, a time out of range. (A token without `sub` does not parse: `Malformed`.)
    #[error("the ID token failed another check")]
    Other,
}

impl IdTokenRefusal {
    pub fn code(self) -> &'static str {
        match self {
            IdTokenRefusal::Missing => "id_token_missing",
            IdTokenRefusal::Malformed => "id_token_malformed",
            IdTokenRefusal::NotVerifiable => "id_token_not_verifiable",
            IdTokenRefusal::Algorithm => "id_token_algorithm",
            IdTokenRefusal::UnknownKey => "id_token_unknown_key",
            IdTokenRefusal::Signature => "id_token_signature",
            IdTokenRefusal::Issuer => "id_token_issuer",
            IdTokenRefusal::Audience => "id_token_audience",
            IdTokenRefusal::Azp => "id_token_azp",
            IdTokenRefusal::Nonce => "id_token_nonce",
            IdTokenRefusal::Expired => "id_token_expired",
            IdTokenRefusal::IssuedInFuture => "id_token_iat_in_future",
            IdTokenRefusal::Other => "id_token_invalid",
        }
    }

    /// openidconnect's verdict as a reason. `iat_refused`: our own `iat` check said no
    /// (openidconnect reports it as `Expired`).
    pub fn of(e: &ClaimsVerificationError, iat_refused: bool) -> Self {
        use ClaimsVerificationError as C;
        use SignatureVerificationError as S;
        match e {
            C::Expired(_) if iat_refused => IdTokenRefusal::IssuedInFuture,
            C::Expired(_) => IdTokenRefusal::Expired,
            C::InvalidAudience(_) => IdTokenRefusal::Audience,
            C::InvalidIssuer(_) => IdTokenRefusal::Issuer,
            C::InvalidNonce(_) => IdTokenRefusal::Nonce,
            C::SignatureVerification(S::DisallowedAlg(_) | S::UnsupportedAlg(_) | S::NoSignature) => {
                IdTokenRefusal::Algorithm
            }
            C::SignatureVerification(S::NoMatchingKey | S::AmbiguousKeyId(_)) => IdTokenRefusal::UnknownKey,
            C::SignatureVerification(_) => IdTokenRefusal::Signature,
            _ => IdTokenRefusal::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IdTokenRefusal;
    use openidconnect::{ClaimsVerificationError as C, SignatureVerificationError as S};

    #[test]
    fn each_verdict_of_the_verifier_has_its_own_reason() {
        let s = String::new;
        let cases = [
            (C::Expired(s()), false, "id_token_expired"),
            (C::Expired(s()), true, "id_token_iat_in_future"),
            (C::InvalidAudience(s()), false, "id_token_audience"),
            (C::InvalidIssuer(s()), false, "id_token_issuer"),
            (C::InvalidNonce(s()), false, "id_token_nonce"),
            (C::InvalidSubject(s()), false, "id_token_invalid"),
            (C::Unsupported(s()), false, "id_token_invalid"),
            (C::SignatureVerification(S::DisallowedAlg(s())), false, "id_token_algorithm"),
            (C::SignatureVerification(S::NoSignature), false, "id_token_algorithm"),
            (C::SignatureVerification(S::NoMatchingKey), false, "id_token_unknown_key"),
            (C::SignatureVerification(S::CryptoError(s())), false, "id_token_signature"),
            (C::Other(s()), false, "id_token_invalid"),
        ];
        for (e, iat, code) in cases {
            assert_eq!(IdTokenRefusal::of(&e, iat).code(), code, "{e:?}");
        }
    }
}
