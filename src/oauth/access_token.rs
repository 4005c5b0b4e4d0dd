//! The MCP user's access token, checked (`subject_token` on `POST /v1/token`): an RFC 9068
//! JWT of the primary IdP, meant for the tenant's MCP server, not expired; its `sub` is
//! the subject. The same checks an MCP server makes of the token (RFC 9068 §4): `typ`
//! `at+jwt`, an asymmetric signature by a key of the IdP's JWKS, `iss`, `aud`, `exp`,
//! `nbf`. Signature, `iss` and `aud` are jsonwebtoken's; the times are checked here
//! against the `now` given (jsonwebtoken reads the system clock), so that the check is a
//! function of its inputs.

use openidconnect::JsonWebKey;
use openidconnect::core::CoreJsonWebKeySet;

/// Why a subject token was refused: one reason per check (each its own error code of the
/// API, `http::error`). Never the token's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessTokenRefusal {
    /// Not a compact JWS, no `kid`, a signature that does not verify, a missing claim, or
    /// a `sub` that is no subject.
    #[error("the subject token is not a valid access token of the IdP")]
    Invalid,
    /// An algorithm we never accept (`none`, HMAC: the key is public).
    #[error("the token is signed with an algorithm that is never accepted (none, HMAC)")]
    Algorithm,
    /// A `typ` other than the one the issuer's tokens carry (`at+jwt` for a subject token).
    #[error("the token's typ is not the issuer's")]
    Type,
    /// A key id the issuer does not publish (after fetching its keys again).
    #[error("the token names a key its issuer does not publish")]
    UnknownKey,
    #[error("the subject token was issued by another issuer")]
    Issuer,
    #[error("the subject token is meant for another audience")]
    Audience,
    #[error("the subject token has expired")]
    Expired,
    #[error("the subject token is not valid yet")]
    NotYetValid,
}

/// The asymmetric algorithms accepted (never `none` or HMAC: the key is public).
fn accepted(alg: jsonwebtoken::Algorithm) -> bool {
    use jsonwebtoken::Algorithm as A;
    matches!(alg, A::RS256 | A::RS384 | A::RS512 | A::PS256 | A::PS384 | A::PS512 | A::ES256 | A::ES384 | A::EdDSA)
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    nbf: Option<i64>,
}

#[derive(serde::Deserialize)]
struct IssuerOnly {
    iss: Option<String>,
}

/// What the token's header says, read before any key is looked up.
pub struct Header {
    alg: jsonwebtoken::Algorithm,
    /// The key id: the caller fetches the IdP's keys again when it is unknown.
    pub kid: String,
    typ: Option<String>,
}

impl Header {
    /// Whether the header's `typ` is `want` (or `application/<want>`), without case.
    pub fn typ_is(&self, want: &str) -> bool {
        let typ = self.typ.as_deref().unwrap_or_default();
        typ.eq_ignore_ascii_case(want)
            || typ.get(..12).is_some_and(|p| p.eq_ignore_ascii_case("application/"))
                && typ[12..].eq_ignore_ascii_case(want)
    }
}

#[derive(serde::Deserialize)]
struct AlgOnly {
    alg: Option<String>,
}

/// The header's own checks (`alg`, `kid`). An algorithm jsonwebtoken does not know
/// (`none`) is refused as one we never accept, not as a malformed token.
pub fn read_header(raw: &str) -> Result<Header, AccessTokenRefusal> {
    let Ok(header) = jsonwebtoken::decode_header(raw) else {
        use base64::Engine as _;
        let first = raw.split('.').next().unwrap_or_default();
        let alg = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(first)
            .ok()
            .and_then(|b| serde_json::from_slice::<AlgOnly>(&b).ok())
            .and_then(|h| h.alg);
        return Err(if alg.is_some() { AccessTokenRefusal::Algorithm } else { AccessTokenRefusal::Invalid });
    };
    if !accepted(header.alg) {
        return Err(AccessTokenRefusal::Algorithm);
    }
    let kid = header.kid.filter(|k| !k.is_empty()).ok_or(AccessTokenRefusal::Invalid)?;
    Ok(Header { alg: header.alg, kid, typ: header.typ })
}

/// The `iss` the token names, unverified: only to pick the keys and checks it is held
/// to (or to refuse another issuer's token with its own reason before looking for a key:
/// its signature could not verify with ours anyway).
pub fn unverified_issuer(raw: &str) -> Option<String> {
    jsonwebtoken::dangerous::insecure_decode::<IssuerOnly>(raw).ok()?.claims.iss
}

/// The header's checks (`alg`, `typ`, `kid`) and the issuer it names.
pub fn precheck(raw: &str, issuer: &str) -> Result<Header, AccessTokenRefusal> {
    let header = read_header(raw)?;
    // RFC 9068 §4: `at+jwt` (or its full media type); an ID token or another JWT of the
    // IdP is not an access token, whatever its audience.
    if !header.typ_is("at+jwt") {
        return Err(AccessTokenRefusal::Type);
    }
    if unverified_issuer(raw).as_deref() != Some(issuer) {
        return Err(AccessTokenRefusal::Issuer);
    }
    Ok(header)
}

/// The token's subject, when it verifies with a key of `jwks`, names `issuer` and
/// `audience`, and is valid at `now` give or take `skew`.
pub fn verify(
    raw: &str,
    header: &Header,
    jwks: &CoreJsonWebKeySet,
    issuer: &str,
    audience: &str,
    now: time::OffsetDateTime,
    skew: time::Duration,
) -> Result<String, AccessTokenRefusal> {
    let claims: Claims = decode(raw, header, jwks, issuer, &[audience])?;
    times(claims.exp, claims.nbf, now, skew)?;
    Ok(claims.sub)
}

/// The claims of a token whose signature verifies with the key of `jwks` its header names,
/// and that names `issuer` and one of `audiences` (with `exp`, `iss`, `aud` and `sub`).
/// Its times are the caller's to check ([`times`]).
pub fn decode<T: serde::de::DeserializeOwned>(
    raw: &str,
    header: &Header,
    jwks: &CoreJsonWebKeySet,
    issuer: &str,
    audiences: &[&str],
) -> Result<T, AccessTokenRefusal> {
    let jwk = jwks
        .keys()
        .iter()
        .find(|k| k.key_id().is_some_and(|id| id.as_str() == header.kid))
        .ok_or(AccessTokenRefusal::UnknownKey)?;
    // openidconnect's key, as jsonwebtoken reads it: both are RFC 7517 JSON.
    let jwk: jsonwebtoken::jwk::Jwk =
        serde_json::to_value(jwk).and_then(serde_json::from_value).map_err(|_| AccessTokenRefusal::Invalid)?;
    // A key published for encryption, or for another algorithm, signs nothing we take
    // (RFC 7517 §4.2, §4.4; RFC 8725 §3.1). Both algorithms compared by their JOSE names.
    let other_use =
        jwk.common.public_key_use.as_ref().is_some_and(|u| *u != jsonwebtoken::jwk::PublicKeyUse::Signature);
    let other_alg =
        jwk.common.key_algorithm.is_some_and(|a| serde_json::to_value(a).ok() != serde_json::to_value(header.alg).ok());
    if other_use || other_alg {
        return Err(AccessTokenRefusal::Invalid);
    }
    let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).map_err(|_| AccessTokenRefusal::Invalid)?;
    let mut v = jsonwebtoken::Validation::new(header.alg);
    v.set_issuer(&[issuer]);
    v.set_audience(audiences);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    // The times are checked below against `now`.
    v.validate_exp = false;
    v.validate_nbf = false;
    let data = jsonwebtoken::decode::<T>(raw, &key, &v).map_err(|e| {
        use jsonwebtoken::errors::ErrorKind as K;
        match e.kind() {
            K::InvalidIssuer => AccessTokenRefusal::Issuer,
            K::InvalidAudience => AccessTokenRefusal::Audience,
            _ => AccessTokenRefusal::Invalid,
        }
    })?;
    Ok(data.claims)
}

/// Valid while `now - skew < exp`, and from `nbf - skew` on.
pub fn times(
    exp: i64,
    nbf: Option<i64>,
    now: time::OffsetDateTime,
    skew: time::Duration,
) -> Result<(), AccessTokenRefusal> {
    let (now, skew) = (now.unix_timestamp(), skew.whole_seconds());
    if exp.saturating_add(skew) <= now {
        return Err(AccessTokenRefusal::Expired);
    }
    if nbf.is_some_and(|nbf| nbf.saturating_sub(skew) > now) {
        return Err(AccessTokenRefusal::NotYetValid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_valid_from_nbf_to_exp_give_or_take_the_skew() {
        let now = time::OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        let skew = time::Duration::seconds(30);
        let t = 1_000_000;
        for (exp, nbf, want) in [
            (t + 1, None, Ok(())),
            (t - 29, None, Ok(())),
            (t - 30, None, Err(AccessTokenRefusal::Expired)),
            (t - 3600, None, Err(AccessTokenRefusal::Expired)),
            (i64::MIN, None, Err(AccessTokenRefusal::Expired)),
            (t + 60, Some(t + 30), Ok(())),
            (t + 60, Some(t + 31), Err(AccessTokenRefusal::NotYetValid)),
            (i64::MAX, Some(i64::MAX), Err(AccessTokenRefusal::NotYetValid)),
        ] {
            assert_eq!(times(exp, nbf, now, skew), want, "exp {exp} nbf {nbf:?}");
        }
    }

    #[test]
    fn only_asymmetric_algorithms_are_accepted() {
        use jsonwebtoken::Algorithm as A;
        for (alg, ok) in [
            (A::RS256, true),
            (A::PS256, true),
            (A::ES256, true),
            (A::EdDSA, true),
            (A::HS256, false),
            (A::HS384, false),
            (A::HS512, false),
        ] {
            assert_eq!(accepted(alg), ok, "{alg:?}");
        }
    }
}
