//! The keys mcp-connect authenticates itself with at providers' and IdPs' token endpoints
//! instead of a client secret (RFC 7523 §2.2 `private_key_jwt`, docs/keys.md): ES256 key
//! pairs the service makes; the private half sealed by the vault under the service's data
//! key (so it opens only with the key store, as every secret here), bound to its kid; the
//! public half served at `/.well-known/jwks.json`, where a provider registered for
//! `private_key_jwt` fetches it. The provider knows no secret of ours.
//!
//! Rotation (`mcp-connect client-keys rotate`): the new key is published at once and signs
//! only from `publish_ahead` later (providers cache a JWKS), and the keys before stay
//! published `overlap` after that (an assertion in flight, a provider's cached JWKS).
//!
//! Signing and JWKs are `jsonwebtoken`'s (its `rust_crypto` backend); the key pair is made
//! by `p256`, from the service's random source.

use super::{Keys, KeysError, Scope};
use crate::store::{self, Db, client_keys::NewKey};
use jsonwebtoken::jwk::{Jwk, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rand::RngCore;
use std::sync::Arc;
use time::OffsetDateTime;
use zeroize::Zeroizing;

/// What the sealed private key is bound to, besides its kid.
const PURPOSE: &str = "client_signing_key";
/// RFC 7523 §2.2's assertion type.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// How long an assertion is valid: one request's worth.
const ASSERTION_LIFETIME: time::Duration = time::Duration::seconds(60);

#[derive(Debug, thiserror::Error)]
pub enum ClientKeyError {
    #[error(transparent)]
    Keys(#[from] KeysError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("client signing key: {0}")]
    Key(String),
}

impl ClientKeyError {
    /// The key store or the database did not answer: worth a retry.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientKeyError::Keys(KeysError::Store(e)) => e.is_transient(),
            ClientKeyError::Keys(KeysError::Database(_)) | ClientKeyError::Database(_) => true,
            ClientKeyError::Keys(KeysError::Vault(_)) | ClientKeyError::Key(_) => false,
        }
    }
}

impl From<crate::vault::VaultError> for ClientKeyError {
    fn from(e: crate::vault::VaultError) -> Self {
        ClientKeyError::Keys(KeysError::Vault(e))
    }
}

/// The service's client signing keys.
pub struct ClientKeys {
    pool: Db,
    keys: Arc<Keys>,
}

impl std::fmt::Debug for ClientKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKeys").finish_non_exhaustive()
    }
}

/// The claims of a client assertion (RFC 7523 §3).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct AssertionClaims {
    pub iss: String,
    pub sub: String,
    pub aud: String,
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
}

/// A key pair made now: its kid, its public JWK, its private half (PKCS#8 DER).
struct Made {
    kid: String,
    public_jwk: serde_json::Value,
    private_der: Zeroizing<Vec<u8>>,
}

/// A key pair made now, its private half sealed.
struct SealedNew {
    made: Made,
    key_id: String,
    sealed: Vec<u8>,
}

impl SealedNew {
    fn signing_from(&self, sign_from: OffsetDateTime) -> NewKey<'_> {
        NewKey {
            kid: &self.made.kid,
            public_jwk: &self.made.public_jwk,
            key_id: &self.key_id,
            private_sealed: &self.sealed,
            sign_from,
        }
    }
}

fn key_error(e: impl std::fmt::Display) -> ClientKeyError {
    ClientKeyError::Key(e.to_string())
}

/// A new P-256 key pair; its kid is the RFC 7638 thumbprint of its public key.
fn make() -> Result<Made, ClientKeyError> {
    use p256::pkcs8::EncodePrivateKey;
    let secret = loop {
        let mut bytes = Zeroizing::new([0u8; 32]);
        rand::rng().fill_bytes(&mut *bytes);
        // Not every 32 bytes are a scalar below the group order (about 2^-32 are not).
        if let Ok(s) = p256::SecretKey::from_slice(&*bytes) {
            break s;
        }
    };
    let der = Zeroizing::new(secret.to_pkcs8_der().map_err(key_error)?.as_bytes().to_vec());
    let mut jwk = Jwk::from_encoding_key(&EncodingKey::from_ec_der(&der), Algorithm::ES256).map_err(key_error)?;
    let kid = jwk.thumbprint(ThumbprintHash::SHA256).map_err(key_error)?;
    jwk.common.key_id = Some(kid.clone());
    jwk.common.public_key_use = Some(PublicKeyUse::Signature);
    Ok(Made { kid, public_jwk: serde_json::to_value(&jwk).map_err(key_error)?, private_der: der })
}

impl ClientKeys {
    pub fn new(pool: Db, keys: Arc<Keys>) -> Self {
        Self { pool, keys }
    }

    /// A fresh assertion naming `client_id` for `audience` (the endpoint it is sent to),
    /// signed by the key that signs now (the first key is made on first use).
    pub async fn assertion(
        &self,
        client_id: &str,
        audience: &str,
        now: OffsetDateTime,
    ) -> Result<String, ClientKeyError> {
        let row = match store::client_keys::signing(&self.pool, now).await? {
            Some(row) => row,
            None => {
                self.make_first(now).await?;
                store::client_keys::signing(&self.pool, now).await?.ok_or_else(|| key_error("no signing key"))?
            }
        };
        let opened = self.keys.opening(&row.key_id, Scope::Service).await?;
        let der = opened.open_aux(PURPOSE, row.kid.as_bytes(), &row.private_sealed)?;
        let claims = AssertionClaims {
            iss: client_id.to_owned(),
            sub: client_id.to_owned(),
            aud: audience.to_owned(),
            iat: now.unix_timestamp(),
            exp: (now + ASSERTION_LIFETIME).unix_timestamp(),
            jti: crate::crypto::random_token(16),
        };
        let header = Header { typ: Some("JWT".to_owned()), kid: Some(row.kid), ..Header::new(Algorithm::ES256) };
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(&der)).map_err(key_error)
    }

    /// The public keys published now, as a JWK Set (RFC 7517 §5). Reads only: the first key
    /// is made at start where a server is set to `private_key_jwt` ([`Self::ensure`]).
    pub async fn jwks(&self, now: OffsetDateTime) -> Result<serde_json::Value, ClientKeyError> {
        let keys = store::client_keys::published(&self.pool, now).await?;
        Ok(serde_json::json!({ "keys": keys }))
    }

    /// Makes the first key unless there is one, so that a provider can register our JWKS
    /// before the first request needs it.
    pub async fn ensure(&self, now: OffsetDateTime) -> Result<(), ClientKeyError> {
        if store::client_keys::published(&self.pool, now).await?.is_empty() {
            self.make_first(now).await?;
        }
        Ok(())
    }

    /// A new key, published now, signing from `now + publish_ahead`; the keys published
    /// before stay published until `overlap` after that. Its kid.
    pub async fn rotate(
        &self,
        now: OffsetDateTime,
        publish_ahead: time::Duration,
        overlap: time::Duration,
    ) -> Result<String, ClientKeyError> {
        let sign_from = now + publish_ahead;
        let new = self.sealed_new().await?;
        store::client_keys::rotate(&self.pool, &new.signing_from(sign_from), sign_from + overlap).await?;
        Ok(new.made.kid)
    }

    async fn make_first(&self, now: OffsetDateTime) -> Result<(), ClientKeyError> {
        let new = self.sealed_new().await?;
        // Another instance's first key may have won: then that one is the key.
        store::client_keys::insert_first(&self.pool, &new.signing_from(now)).await?;
        Ok(())
    }

    async fn sealed_new(&self) -> Result<SealedNew, ClientKeyError> {
        let made = make()?;
        let sealing = self.keys.sealing(Scope::Service).await?;
        let sealed = sealing.seal_aux(PURPOSE, made.kid.as_bytes(), &made.private_der)?;
        Ok(SealedNew { made, key_id: sealing.key().column(), sealed })
    }
}

/// Re-seals the private keys not under the service's active data key (sealed by the keyring
/// before data keys, or under a data key since rotated): `rotate-key`'s step. How many.
pub async fn reseal(pool: &Db, keys: &Keys) -> Result<u64, ClientKeyError> {
    let rows = store::client_keys::not_under_active_key(pool).await?;
    let mut done = 0;
    for row in rows {
        let opening = keys.opening(&row.key_id, Scope::Service).await?;
        let der = opening.open_aux(PURPOSE, row.kid.as_bytes(), &row.private_sealed)?;
        let sealing = keys.sealing(Scope::Service).await?;
        let sealed = sealing.seal_aux(PURPOSE, row.kid.as_bytes(), &der)?;
        if store::client_keys::store_resealed(pool, &row, &sealing.key().column(), &sealed).await? {
            done += 1;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_key_has_its_thumbprint_as_kid_and_publishes_only_its_public_half() {
        let made = make().unwrap();
        let jwk = &made.public_jwk;
        assert_eq!(jwk["kid"], made.kid.as_str());
        assert_eq!(
            (jwk["kty"].as_str(), jwk["crv"].as_str(), jwk["use"].as_str()),
            (Some("EC"), Some("P-256"), Some("sig"))
        );
        assert!(jwk.get("d").is_none(), "no private part: {jwk}");
        assert_ne!(make().unwrap().kid, made.kid, "each key its own");
    }
}
