//! API keys: `mcpc_<id>_<secret>`, the id for lookup and 256 bits of secret.
//!
//! Only an argon2id hash of the whole key is stored. Verifying one costs tens of
//! milliseconds on purpose, so a key is verified once and then served from a bounded
//! in-memory cache keyed by its SHA-256; a cached entry is re-checked against the
//! database (revoked? tenant removed?) at most every `cache_ttl`, so a revoked key stops
//! working within that time on every instance. Unknown ids are checked against a dummy
//! hash so that unknown and wrong keys take the same time.

use crate::domain::{ApiKeyId, KeyScope, TenantId};
use crate::store;
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine;
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const PREFIX: &str = "mcpc_";
const SECRET_LEN: usize = 43; // base64url of 32 bytes, no padding

/// A freshly made key: shown once, then only its hash exists.
pub struct NewApiKey {
    pub id: ApiKeyId,
    pub key: SecretString,
}

impl NewApiKey {
    pub fn generate() -> Self {
        let id = ApiKeyId::generate();
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let key = format!("{PREFIX}{id}_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret));
        zeroize::Zeroize::zeroize(&mut secret);
        Self { id, key: SecretString::from(key) }
    }
}

/// Splits a presented key into its id, or refuses a malformed one without touching the
/// database.
pub fn parse_key(presented: &str) -> Option<ApiKeyId> {
    let rest = presented.strip_prefix(PREFIX)?;
    if rest.len() != 16 + 1 + SECRET_LEN || rest.as_bytes()[16] != b'_' {
        return None;
    }
    let id = ApiKeyId::parse(rest.get(..16)?).ok()?;
    let secret = rest.get(17..)?;
    if !secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return None;
    }
    Some(id)
}

/// argon2id with the crate's default (OWASP) parameters. CPU-heavy: call from
/// `spawn_blocking`.
pub fn hash_key(key: &SecretString) -> Result<String, argon2::password_hash::Error> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt)?;
    Ok(Argon2::default().hash_password(key.expose_secret().as_bytes(), &salt)?.to_string())
}

fn verify_hash(key: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(h) => Argon2::default().verify_password(key.as_bytes(), &h).is_ok(),
        Err(_) => false,
    }
}

/// An authenticated caller's key.
#[derive(Debug, Clone)]
pub struct VerifiedKey {
    pub id: ApiKeyId,
    pub tenant: TenantId,
    pub scope: KeyScope,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyRejection {
    #[error("malformed api key")]
    Malformed,
    #[error("unknown, wrong or revoked api key")]
    Invalid,
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("verification task failed")]
    Task,
}

struct Cached {
    key: VerifiedKey,
    checked_at: Instant,
}

/// Verifies presented keys, with the cache described in the module doc.
pub struct ApiKeyVerifier {
    pool: store::PgPool,
    cache: RwLock<HashMap<[u8; 32], Cached>>,
    ttl: Duration,
    capacity: usize,
    dummy_hash: String,
    /// Bounds concurrent argon2 runs, so a flood of wrong keys queues instead of starving
    /// every other request of CPU.
    hashing: Semaphore,
    /// How many argon2 verifications ran (observability, and the tests' proof that the
    /// cache works and that unknown ids cost a hash too).
    verifications: AtomicU64,
}

impl ApiKeyVerifier {
    pub fn new(pool: store::PgPool, ttl: Duration, capacity: usize) -> Result<Arc<Self>, argon2::password_hash::Error> {
        let dummy_hash = hash_key(&NewApiKey::generate().key)?;
        Ok(Arc::new(Self {
            pool,
            cache: RwLock::new(HashMap::new()),
            ttl,
            capacity,
            dummy_hash,
            hashing: Semaphore::new(2),
            verifications: AtomicU64::new(0),
        }))
    }

    pub async fn verify(&self, presented: &str) -> Result<VerifiedKey, KeyRejection> {
        let id = parse_key(presented).ok_or(KeyRejection::Malformed)?;
        let fingerprint: [u8; 32] = Sha256::digest(presented.as_bytes()).into();

        match self.lookup(&fingerprint)? {
            Some((key, true)) => return Ok(key),
            Some((key, false)) => {
                // Verified before; only ask whether it is still allowed.
                if store::api_keys::api_key_usable(&self.pool, key.id.as_str()).await? {
                    self.insert(fingerprint, key.clone(), Instant::now());
                    return Ok(key);
                }
                self.remove(&fingerprint);
                return Err(KeyRejection::Invalid);
            }
            None => {}
        }

        let row = store::api_keys::find_api_key(&self.pool, id.as_str()).await?;
        let phc = row.as_ref().map_or_else(|| self.dummy_hash.clone(), |r| r.hash.clone());
        let presented_owned = SecretString::from(presented.to_owned());
        let permit = self.hashing.acquire().await.map_err(|_| KeyRejection::Task)?;
        // A burst of first requests with one new key: whoever waited for the permit finds
        // the key verified by the one before it, and skips its own argon2 run.
        if let Some((hit, true)) = self.lookup(&fingerprint)? {
            return Ok(hit);
        }
        let matches = tokio::task::spawn_blocking(move || verify_hash(presented_owned.expose_secret(), &phc))
            .await
            .map_err(|_| KeyRejection::Task)?;
        self.verifications.fetch_add(1, Ordering::Relaxed);
        let row = match row {
            Some(r) if matches && r.revoked_at.is_none() && r.tenant_active => r,
            _ => return Err(KeyRejection::Invalid),
        };
        let key = VerifiedKey {
            id,
            tenant: TenantId::parse(&row.tenant_id).map_err(|_| KeyRejection::Invalid)?,
            scope: KeyScope::parse(&row.scope).map_err(|_| KeyRejection::Invalid)?,
        };
        self.insert(fingerprint, key.clone(), Instant::now());
        // Released only now, so the next waiter finds the key in the cache.
        drop(permit);
        let pool = self.pool.clone();
        let key_id = key.id.clone();
        tokio::spawn(async move {
            if let Err(e) = store::api_keys::touch_api_key(&pool, key_id.as_str()).await {
                tracing::warn!(error = %e, "could not record api key use");
            }
        });
        Ok(key)
    }

    /// A cached verification, and whether it is still within its re-check interval.
    fn lookup(&self, fp: &[u8; 32]) -> Result<Option<(VerifiedKey, bool)>, KeyRejection> {
        let cache = self.cache.read().map_err(|_| KeyRejection::Task)?;
        Ok(cache.get(fp).map(|c| (c.key.clone(), c.checked_at.elapsed() < self.ttl)))
    }

    fn insert(&self, fp: [u8; 32], key: VerifiedKey, checked_at: Instant) {
        if let Ok(mut cache) = self.cache.write() {
            if cache.len() >= self.capacity && !cache.contains_key(&fp) {
                let ttl = self.ttl;
                cache.retain(|_, c| c.checked_at.elapsed() < ttl);
                if cache.len() >= self.capacity {
                    // Still full of live entries: start over rather than grow. Dropped keys
                    // are verified again on their next use.
                    cache.clear();
                }
            }
            cache.insert(fp, Cached { key, checked_at });
        }
    }

    fn remove(&self, fp: &[u8; 32]) {
        if let Ok(mut cache) = self.cache.write() {
            cache.remove(fp);
        }
    }

    pub fn hash_verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }

    /// Drops every cached verification (a key was revoked or a tenant removed somewhere).
    pub fn forget_all(&self) {
        if let Ok(mut cache) = self.cache.write() {
            cache.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_and_carry_256_bits() {
        let k = NewApiKey::generate();
        let s = k.key.expose_secret();
        assert!(s.starts_with("mcpc_"));
        assert_eq!(parse_key(s), Some(k.id.clone()));
        let secret = &s[5 + 17..];
        assert_eq!(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(secret).unwrap().len(), 32);
    }

    #[test]
    fn malformed_keys_do_not_parse() {
        let k = NewApiKey::generate();
        let s = k.key.expose_secret().to_owned();
        assert!(parse_key(&s[1..]).is_none());
        assert!(parse_key(&format!("{s}x")).is_none());
        assert!(parse_key(&s.replace("mcpc_", "mcpx_")).is_none());
        assert!(parse_key(&format!("{}!", &s[..s.len() - 1])).is_none());
        assert!(parse_key("").is_none());
        assert!(parse_key("mcpc_").is_none());
    }

    #[test]
    fn a_hash_verifies_only_its_key() {
        let k = NewApiKey::generate();
        let h = hash_key(&k.key).unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_hash(k.key.expose_secret(), &h));
        assert!(!verify_hash(NewApiKey::generate().key.expose_secret(), &h));
        assert!(!verify_hash(k.key.expose_secret(), "not a hash"));
    }
}
