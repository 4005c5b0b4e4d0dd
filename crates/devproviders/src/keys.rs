//! The provider's RS256 signing key, the JWKS that publishes it, and JWT signing
//! (RFC 7515 compact serialisation, RFC 7518 §3.3 RSASSA-PKCS1-v1_5 with SHA-256).

use crate::crypto::b64url;
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

    /// Compact JWS of `claims` with header `{"alg":"RS256","typ":typ,"kid":kid}`. With
    /// `wrong_key` it is signed by a key that is not in the JWKS but names the published kid,
    /// as a forger would.
    pub(crate) fn sign(&self, typ: &str, claims: &serde_json::Value, wrong_key: bool) -> Result<String, SignError> {
        let header = json!({"alg": "RS256", "typ": typ, "kid": self.kid});
        let header = serde_json::to_vec(&header).map_err(|e| SignError(e.to_string()))?;
        let payload = serde_json::to_vec(claims).map_err(|e| SignError(e.to_string()))?;
        let signing_input = format!("{}.{}", b64url(&header), b64url(&payload));
        let key = if wrong_key { self.wrong_key()? } else { &self.key };
        let digest = Sha256::digest(signing_input.as_bytes());
        let signature = key.sign(Pkcs1v15Sign::new::<Sha256>(), &digest).map_err(|e| SignError(e.to_string()))?;
        Ok(format!("{signing_input}.{}", b64url(&signature)))
    }
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
        let good = keys.sign("JWT", &claims, false).unwrap();
        let bad = keys.sign("JWT", &claims, true).unwrap();
        assert!(verify(&good, &keys.jwks()));
        assert!(!verify(&bad, &keys.jwks()));

        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(bad.split('.').next().unwrap()).unwrap()).unwrap();
        assert_eq!(header["kid"], keys.jwks()["keys"][0]["kid"], "the forgery names the published kid");
        assert_eq!(header["alg"], "RS256");
    }
}
