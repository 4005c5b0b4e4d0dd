//! The provider's RS256 signing key, the JWKS that publishes it, and JWT signing
//! (RFC 7515 compact serialisation, RFC 7518 §3.3 RSASSA-PKCS1-v1_5 with SHA-256; for the
//! tampering switches also `none` and HS256).

use crate::crypto::b64url;
use hmac::{Hmac, Mac};
use rsa::traits::PublicKeyParts;
use rsa::{Pkcs1v15Sign, RsaPrivateKey};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

const KEY_BITS: usize = 2048;

/// Signing failed; with a 2048-bit key and SHA-256 this does not happen in practice.
#[derive(Debug)]
pub(crate) struct SignError(String);

impl std::fmt::Display for SignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot sign a JWT: {}", self.0)
    }
}

pub(crate) struct SigningKeys {
    key: RsaPrivateKey,
    kid: String,
    /// Generated on first use: only the wrong-key switch needs it, and generation is slow.
    wrong: OnceLock<RsaPrivateKey>,
}

impl SigningKeys {
    /// Blocks for the key generation; call it off the async threads.
    pub(crate) fn generate() -> Result<Self, SignError> {
        let key = new_key()?;
        // RFC 7638-like: the kid is derived from the modulus, so it is stable for this key.
        let kid = b64url(&Sha256::digest(key.n().to_bytes_be())[..12]);
        Ok(Self { key, kid, wrong: OnceLock::new() })
    }

    /// RFC 7517 JWK Set with the one public key.
    pub(crate) fn jwks(&self) -> serde_json::Value {
        json!({
            "keys": [{
                "kty": "RSA",
                "use": "sig",
                "alg": "RS256",
                "kid": self.kid,
                "n": b64url(&self.key.n().to_bytes_be()),
                "e": b64url(&self.key.e().to_bytes_be()),
            }]
        })
    }

    /// Makes sure the key behind the wrong-key switch exists. Blocks; call it off the async
    /// threads before signing with `wrong_key`.
    pub(crate) fn prepare_wrong_key(&self) -> Result<(), SignError> {
        self.wrong_key().map(|_| ())
    }

    fn wrong_key(&self) -> Result<&RsaPrivateKey, SignError> {
        if let Some(key) = self.wrong.get() {
            return Ok(key);
        }
        // Two racing first uses each generate a key; one wins and both sign with it.
        let generated = new_key()?;
        Ok(self.wrong.get_or_init(|| generated))
    }

    /// Compact JWS of `claims` with header `{"alg":..,"typ":typ,"kid":kid}`, signed as
    /// `signing` says, under the published kid unless `kid` names another.
    pub(crate) fn sign(
        &self,
        typ: &str,
        claims: &serde_json::Value,
        signing: Signing<'_>,
        kid: Option<&str>,
    ) -> Result<String, SignError> {
        let alg = match signing {
            Signing::Published | Signing::WrongKey => "RS256",
            Signing::Unsigned => "none",
            Signing::Hs256(_) => "HS256",
        };
        let header = json!({"alg": alg, "typ": typ, "kid": kid.unwrap_or(&self.kid)});
        let header = serde_json::to_vec(&header).map_err(|e| SignError(e.to_string()))?;
        let payload = serde_json::to_vec(claims).map_err(|e| SignError(e.to_string()))?;
        let signing_input = format!("{}.{}", b64url(&header), b64url(&payload));
        let signature = match signing {
            Signing::Published => rs256(&self.key, &signing_input)?,
            Signing::WrongKey => rs256(self.wrong_key()?, &signing_input)?,
            Signing::Unsigned => Vec::new(),
            Signing::Hs256(secret) => {
                let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|e| SignError(e.to_string()))?;
                mac.update(signing_input.as_bytes());
                mac.finalize().into_bytes().to_vec()
            }
        };
        Ok(format!("{signing_input}.{}", b64url(&signature)))
    }
}

/// How a JWS is signed: honestly, or the ways a forger or a broken provider would.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Signing<'a> {
    /// RS256 with the published key.
    Published,
    /// RS256 with a key that is not in the JWKS (under the published kid, as a forger would).
    WrongKey,
    /// `alg: none` and an empty signature (RFC 7519 §6).
    Unsigned,
    /// HS256 (RFC 7518 §3.2) keyed with these bytes.
    Hs256(&'a [u8]),
}

fn rs256(key: &RsaPrivateKey, signing_input: &str) -> Result<Vec<u8>, SignError> {
    let digest = Sha256::digest(signing_input.as_bytes());
    key.sign(Pkcs1v15Sign::new::<Sha256>(), &digest).map_err(|e| SignError(e.to_string()))
}

fn new_key() -> Result<RsaPrivateKey, SignError> {
    RsaPrivateKey::new(&mut rsa::rand_core::OsRng, KEY_BITS).map_err(|e| SignError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use rsa::RsaPublicKey;

    fn verify(jwt: &str, jwks: &serde_json::Value) -> bool {
        let (input, sig) = jwt.rsplit_once('.').unwrap();
        let jwk = &jwks["keys"][0];
        let n = URL_SAFE_NO_PAD.decode(jwk["n"].as_str().unwrap()).unwrap();
        let e = URL_SAFE_NO_PAD.decode(jwk["e"].as_str().unwrap()).unwrap();
        let public = RsaPublicKey::new(rsa::BigUint::from_bytes_be(&n), rsa::BigUint::from_bytes_be(&e)).unwrap();
        let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
        public.verify(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(input.as_bytes()), &sig).is_ok()
    }

    #[test]
    fn a_signed_jwt_verifies_with_the_published_key_and_a_wrong_key_one_does_not() {
        let keys = SigningKeys::generate().unwrap();
        let claims = json!({"sub": "alice"});
        let good = keys.sign("JWT", &claims, Signing::Published, None).unwrap();
        let bad = keys.sign("JWT", &claims, Signing::WrongKey, None).unwrap();
        assert!(verify(&good, &keys.jwks()));
        assert!(!verify(&bad, &keys.jwks()));

        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(bad.split('.').next().unwrap()).unwrap()).unwrap();
        assert_eq!(header["kid"], keys.jwks()["keys"][0]["kid"], "the forgery names the published kid");
        assert_eq!(header["alg"], "RS256");
    }

    fn header(jwt: &str) -> serde_json::Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(jwt.split('.').next().unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn unsigned_hs256_and_other_kid_tokens_say_so_in_their_header() {
        let keys = SigningKeys::generate().unwrap();
        let claims = json!({"sub": "alice"});

        let unsigned = keys.sign("JWT", &claims, Signing::Unsigned, None).unwrap();
        assert_eq!(header(&unsigned)["alg"], "none");
        assert!(unsigned.ends_with('.'), "an empty signature: {unsigned}");

        let hs = keys.sign("JWT", &claims, Signing::Hs256(b"the-client-secret"), None).unwrap();
        assert_eq!(header(&hs)["alg"], "HS256");
        let (input, sig) = hs.rsplit_once('.').unwrap();
        let mut mac = Hmac::<Sha256>::new_from_slice(b"the-client-secret").unwrap();
        mac.update(input.as_bytes());
        mac.verify_slice(&URL_SAFE_NO_PAD.decode(sig).unwrap()).expect("an HMAC with the secret");

        let other = keys.sign("JWT", &claims, Signing::Published, Some("rotated-away")).unwrap();
        assert_eq!(header(&other)["kid"], "rotated-away");
        assert!(verify(&other, &keys.jwks()), "still signed with the published key");
    }
}
