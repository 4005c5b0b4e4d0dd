//! API keys: `mcpc_<id>_<secret>`, the id for lookup and 256 bits of secret.
//!
//! Only an argon2id hash of the whole key is stored. Verifying one costs tens of
//! milliseconds on purpose, so a key is verified once and then served from a bounded
//! in-memory cache keyed by its SHA-256, under the one scheme of [`crate::changes`]: a
//! change notification or the change log naming the key or its tenant drops the entry
//! (the key) or marks it for a re-check against the database (the tenant: one read, no
//! argon2), and an entry is used only up to `cache_ttl` after its read or the last read of
//! the change log. So a revoked key stops working at once where the notification arrives,
//! and within a read of the change log on every instance.
//!
//! Strangers cannot make argon2 run: the key id is 64 random bits and not a secret, so an
//! id that does not exist is refused after one indexed read (and remembered for a few
//! seconds, while the change listener is up, so a flood of one id costs no read either).
//! Timing therefore tells whether an id exists, which is harmless: the id alone grants
//! nothing. Waiting for one of the two argon2 slots is bounded in queue length and time;
//! past either, the caller gets 503 + `Retry-After` instead of queueing without end.
//!
//! Nor can someone who knows a live id (ids are in audit rows and key prefixes) make
//! argon2 run on every request with wrong secrets. Each key also stores a fast verifier, a
//! domain-separated SHA-256 of the whole key ([`verifier_of`]): the secret is 256 random
//! bits, so it resists an offline guess as well as argon2 does, and a presented key is
//! checked against it in microseconds, wrong or right, on any instance, throttling nobody.
//! Keys made before verifiers existed are checked by argon2 until their first success
//! fills theirs in; for them, one id is verified one request at a time (a burst waits for
//! the first, and finds the key cached or the id throttled), and after [`FREE_FAILURES`]
//! wrong secrets within [`FAILURE_WINDOW`] only one verification a second is let through;
//! the rest are refused at once with 429 + `Retry-After`.

use crate::changes::{ChangeWatch, Found, Ticket};
use crate::domain::{ApiKeyId, Clock, KeyScope, SystemClock, TenantId};
use crate::store;
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine;
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// The fast verifier of a key (see the module doc).
pub fn verifier_of(key: &str) -> [u8; 32] {
    crate::crypto::lookup_hash(VERIFIER_PURPOSE, key)
}

const VERIFIER_PURPOSE: &str = "api_key_verifier";

/// argon2id with the crate's default (OWASP) parameters. CPU-heavy: call from
/// `spawn_blocking`.
pub fn hash_key(key: &SecretString) -> Result<String, argon2::password_hash::Error> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt)?;
    Ok(Argon2::default().hash_password(key.expose_secret().as_bytes(), &salt)?.to_string())
}

/// The key's row, as read, still says what was verified: not revoked, its tenant active,
/// and the same tenant and scope (a re-check that asked only "usable" would keep a scope
/// changed meanwhile).
fn still_as(row: &store::api_keys::ApiKeyRow, key: &VerifiedKey) -> bool {
    row.revoked_at.is_none() && row.tenant_active && row.tenant_id == key.tenant && row.scope == key.scope
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
    /// `None` for an operator key (and only for one: the database pairs them).
    pub tenant: Option<TenantId>,
    pub scope: KeyScope,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyRejection {
    #[error("malformed api key")]
    Malformed,
    #[error("unknown, wrong or revoked api key")]
    Invalid,
    /// The key is right, but its tenant is switched off (told only to whoever holds the
    /// key's secret).
    #[error("the key's tenant is switched off")]
    TenantInactive,
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("verification task failed")]
    Task,
    #[error("too many key verifications waiting; retry shortly")]
    Busy,
    /// Several wrong secrets for this id just now: retry after the wait.
    #[error("too many wrong secrets for this key id; retry shortly")]
    Throttled(Duration),
}

/// How long an id found missing is remembered (only while the change listener is up: a
/// key created meanwhile announces itself and clears the entry at once).
const NEGATIVE_TTL: Duration = Duration::from_secs(5);
/// Longest wait for an argon2 slot before answering 503.
const HASH_WAIT: Duration = Duration::from_secs(2);
/// Wrong secrets for one id that are each verified, within [`FAILURE_WINDOW`]; past them,
/// one verification per [`PASS_EVERY`].
pub const FREE_FAILURES: u32 = 3;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
pub const PASS_EVERY: Duration = Duration::from_secs(1);

/// Wrong secrets presented for one id lately.
struct Failures {
    count: u32,
    first_at: Instant,
    /// When the next verification may run, once the free ones are spent.
    next_pass: Instant,
}

/// Metrics (catalogue: `telemetry::metrics`): time waited for an argon2 slot (0 when one
/// was free), and checks refused because the queue was full or the wait too long.
pub const METRIC_HASH_WAIT: &str = "mcp_connect_api_key_hash_wait_seconds";
pub const METRIC_HASH_QUEUE_FULL: &str = "mcp_connect_api_key_hash_refused_total";

/// Verifies presented keys, with the cache described in the module doc.
pub struct ApiKeyVerifier {
    pool: store::Db,
    /// Verified keys by the SHA-256 of the presented key.
    cache: crate::changes::Cached<[u8; 32], VerifiedKey>,
    /// Ids found missing, and when.
    missing: RwLock<HashMap<ApiKeyId, Instant>>,
    /// Wrong secrets per live id (see the module doc).
    failures: std::sync::Mutex<HashMap<ApiKeyId, Failures>>,
    /// One argon2 verification per id at a time.
    in_flight: crate::domain::gate::Gates<ApiKeyId>,
    /// Verifiers seen, by id: a wrong secret for one of them is refused with no read.
    verifiers: RwLock<HashMap<ApiKeyId, [u8; 32]>>,
    capacity: usize,
    /// Bounds concurrent argon2 runs, so a flood of wrong secrets queues instead of
    /// starving every other request of CPU. A permit travels into the blocking task, so a
    /// request dropped mid-hash does not free a slot while its argon2 still runs.
    hashing: Arc<Semaphore>,
    /// Callers waiting for a slot now, and how many may.
    waiting: AtomicUsize,
    max_waiting: usize,
    /// How many argon2 verifications ran (observability, and the tests' proof that the
    /// cache works and that unknown ids cost none).
    verifications: AtomicU64,
    clock: Arc<dyn Clock>,
}

impl ApiKeyVerifier {
    pub fn new(pool: store::Db, ttl: Duration, capacity: usize, max_waiting: usize) -> Arc<Self> {
        Self::with_clock(pool, ttl, capacity, max_waiting, Arc::new(SystemClock))
    }

    /// [`Self::new`] reading time from `clock` (tests move it instead of sleeping).
    pub fn with_clock(
        pool: store::Db,
        ttl: Duration,
        capacity: usize,
        max_waiting: usize,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Self::sharing(pool, ttl, capacity, max_waiting, clock.clone(), ChangeWatch::new(clock))
    }

    /// [`Self::with_clock`] sharing `watch` (listening, drops, confirmations) with the other
    /// caches of the process.
    pub fn sharing(
        pool: store::Db,
        ttl: Duration,
        capacity: usize,
        max_waiting: usize,
        clock: Arc<dyn Clock>,
        watch: Arc<ChangeWatch>,
    ) -> Arc<Self> {
        Arc::new(Self {
            pool,
            cache: crate::changes::Cached::new(watch, ttl, capacity),
            missing: RwLock::new(HashMap::new()),
            failures: std::sync::Mutex::new(HashMap::new()),
            in_flight: std::sync::Mutex::new(HashMap::new()),
            verifiers: RwLock::new(HashMap::new()),
            capacity,
            hashing: Arc::new(Semaphore::new(2)),
            waiting: AtomicUsize::new(0),
            max_waiting,
            verifications: AtomicU64::new(0),
            clock,
        })
    }

    pub async fn verify(&self, presented: &str) -> Result<VerifiedKey, KeyRejection> {
        let id = parse_key(presented).ok_or(KeyRejection::Malformed)?;
        let fingerprint: [u8; 32] = Sha256::digest(presented.as_bytes()).into();

        if let Some(verified) = self.verified_before(&fingerprint).await? {
            return Ok(verified);
        }
        if self.known_missing(&id) {
            return Err(KeyRejection::Invalid);
        }
        // A wrong secret for an id whose verifier this instance has seen: refused with no
        // read and no wait (keys never change, so a verifier seen once stays true).
        if self.known_wrong(&id, presented) {
            return Err(KeyRejection::Invalid);
        }
        let ticket = self.cache.watch().ticket();
        let Some(row) = store::api_keys::find_api_key(&self.pool, &id).await? else {
            self.remember_missing(id);
            return Err(KeyRejection::Invalid);
        };
        // A revoked key, or one of an inactive tenant, is refused whatever its secret: no
        // argon2 run for it either. The holder of a right key of an inactive tenant is told
        // why, where its verifier says so at no cost.
        if row.revoked_at.is_some() {
            return Err(KeyRejection::Invalid);
        }
        if !row.tenant_active {
            let right =
                row.verifier.as_ref().is_some_and(|v| crate::crypto::constant_time_eq(v, &verifier_of(presented)));
            return Err(if right { KeyRejection::TenantInactive } else { KeyRejection::Invalid });
        }
        if let Some(verifier) = &row.verifier {
            self.remember_verifier(&id, verifier);
            if !crate::crypto::constant_time_eq(verifier, &verifier_of(presented)) {
                return Err(KeyRejection::Invalid);
            }
            return self.accept(id, &row, fingerprint, ticket).await;
        }
        // A key made before verifiers: argon2, one request of this id at a time. The gate's
        // entry goes when the last holder is done, however the request ends (also when it is
        // dropped while waiting).
        let gate = crate::domain::gate::Gate::new(&self.in_flight, id.clone());
        let _held = gate.acquire().await;
        self.verify_by_argon2(id, &row, presented, fingerprint, ticket).await
    }

    /// A wrong secret for an id whose verifier is remembered.
    fn known_wrong(&self, id: &ApiKeyId, presented: &str) -> bool {
        let Ok(v) = self.verifiers.read() else { return false };
        v.get(id).is_some_and(|known| !crate::crypto::constant_time_eq(known, &verifier_of(presented)))
    }

    fn remember_verifier(&self, id: &ApiKeyId, verifier: &[u8]) {
        let Ok(known) = <[u8; 32]>::try_from(verifier) else { return };
        if let Ok(mut v) = self.verifiers.write() {
            if v.len() >= self.capacity && !v.contains_key(id) {
                v.clear();
            }
            v.insert(id.clone(), known);
        }
    }

    /// [`Self::verify`] of a key without a verifier, holding its id's gate.
    async fn verify_by_argon2(
        &self,
        id: ApiKeyId,
        row: &store::api_keys::ApiKeyRow,
        presented: &str,
        fingerprint: [u8; 32],
        ticket: Ticket,
    ) -> Result<VerifiedKey, KeyRejection> {
        // The request before this one may have verified this very key.
        if let Some(verified) = self.verified_before(&fingerprint).await? {
            return Ok(verified);
        }
        if let Some(wait) = self.throttled(&id) {
            return Err(KeyRejection::Throttled(wait));
        }
        let phc = row.hash.clone();
        let presented_owned = SecretString::from(presented.to_owned());
        let permit = self.hash_slot().await?;
        // A burst of first requests with one new key: whoever waited for the permit finds
        // the key verified by the one before it, and skips its own argon2 run.
        // (Or, its entry marked due meanwhile, re-checks it with one read instead of argon2.)
        if let Some(verified) = self.verified_before(&fingerprint).await? {
            return Ok(verified);
        }
        let (matches, permit) =
            tokio::task::spawn_blocking(move || (verify_hash(presented_owned.expose_secret(), &phc), permit))
                .await
                .map_err(|_| KeyRejection::Task)?;
        self.verifications.fetch_add(1, Ordering::Relaxed);
        if !matches {
            self.record_failure(&id);
            return Err(KeyRejection::Invalid);
        }
        self.clear_failures(&id);
        // Its verifier from now on (argon2 need not run for it again, on any instance).
        let verifier = verifier_of(presented);
        if let Err(e) = store::api_keys::set_verifier(&self.pool, &id, &verifier).await {
            tracing::warn!(error = %e, "could not store an api key's verifier");
        }
        self.remember_verifier(&id, &verifier);
        let r = self.accept(id, row, fingerprint, ticket).await;
        // Released only now, so the next waiter finds the key in the cache.
        drop(permit);
        r
    }

    /// A key found right: cached, its use recorded.
    async fn accept(
        &self,
        id: ApiKeyId,
        row: &store::api_keys::ApiKeyRow,
        fingerprint: [u8; 32],
        ticket: Ticket,
    ) -> Result<VerifiedKey, KeyRejection> {
        let key = VerifiedKey { id, tenant: row.tenant_id.clone(), scope: row.scope };
        self.remember_verified(fingerprint, &key, ticket).await?;
        let pool = self.pool.clone();
        let key_id = key.id.clone();
        tokio::spawn(async move {
            if let Err(e) = store::api_keys::touch_api_key(&pool, &key_id).await {
                tracing::warn!(error = %e, "could not record api key use");
            }
        });
        Ok(key)
    }

    /// Caches a key argon2 has just verified. If a key or tenant changed while the check ran
    /// (it read the row before), the database is asked again (one read, no argon2) first.
    async fn remember_verified(
        &self,
        fingerprint: [u8; 32],
        key: &VerifiedKey,
        ticket: Ticket,
    ) -> Result<(), KeyRejection> {
        // Stored, or not stored only because the cache is full of keys in use.
        if self.cache.insert(&ticket, fingerprint, key.clone()) || self.cache.watch().admits(&ticket) {
            return Ok(());
        }
        let ticket = self.cache.watch().ticket();
        if !self.still_as_verified(key).await? {
            return Err(KeyRejection::Invalid);
        }
        self.cache.insert(&ticket, fingerprint, key.clone());
        Ok(())
    }

    /// The key's row, read again now, still says what was verified: not revoked, its
    /// tenant active, and the same tenant and scope (a re-check that asked only "usable"
    /// would keep a scope changed meanwhile).
    async fn still_as_verified(&self, key: &VerifiedKey) -> Result<bool, KeyRejection> {
        Ok(store::api_keys::find_api_key(&self.pool, &key.id).await?.is_some_and(|row| still_as(&row, key)))
    }

    /// A key verified before: as cached within its re-check interval, or (due) after asking
    /// the database whether it is still allowed (one read, no argon2). `None`: not cached.
    async fn verified_before(&self, fp: &[u8; 32]) -> Result<Option<VerifiedKey>, KeyRejection> {
        match self.cache.get(fp) {
            None => Ok(None),
            Some(Found::Fresh(key)) => Ok(Some(key)),
            Some(Found::Due(key)) => {
                let ticket = self.cache.watch().ticket();
                let row = store::api_keys::find_api_key(&self.pool, &key.id).await?;
                if row.as_ref().is_some_and(|r| still_as(r, &key)) {
                    self.cache.insert(&ticket, *fp, key.clone());
                    return Ok(Some(key));
                }
                self.cache.remove(fp);
                // Verified before (its secret is right): its tenant switched off since.
                match row {
                    Some(r) if r.revoked_at.is_none() && !r.tenant_active => Err(KeyRejection::TenantInactive),
                    _ => Err(KeyRejection::Invalid),
                }
            }
        }
    }

    /// `Some(wait)` when `id` has had its free wrong secrets within the window and the
    /// next verification may run only after `wait`; otherwise `None` (and, when throttled,
    /// this caller takes the one pass of the second).
    fn throttled(&self, id: &ApiKeyId) -> Option<Duration> {
        let mut m = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let f = m.get_mut(id)?;
        let now = self.clock.now();
        if self.clock.since(f.first_at) >= FAILURE_WINDOW {
            m.remove(id);
            return None;
        }
        if f.count < FREE_FAILURES {
            return None;
        }
        if now >= f.next_pass {
            f.next_pass = now + PASS_EVERY;
            return None;
        }
        Some(f.next_pass.saturating_duration_since(now))
    }

    fn record_failure(&self, id: &ApiKeyId) {
        let mut m = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = self.clock.now();
        if m.len() >= self.capacity && !m.contains_key(id) {
            m.retain(|_, f| self.clock.since(f.first_at) < FAILURE_WINDOW);
            if m.len() >= self.capacity {
                // Still full: start over rather than grow (a flood over that many live ids
                // is bounded by the argon2 slots' queue all the same).
                m.clear();
            }
        }
        let f = m.entry(id.clone()).or_insert(Failures { count: 0, first_at: now, next_pass: now });
        if self.clock.since(f.first_at) >= FAILURE_WINDOW {
            *f = Failures { count: 0, first_at: now, next_pass: now };
        }
        f.count = f.count.saturating_add(1);
        if f.count >= FREE_FAILURES {
            f.next_pass = f.next_pass.max(now + PASS_EVERY);
        }
    }

    fn clear_failures(&self, id: &ApiKeyId) {
        self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }

    /// One of the argon2 slots, waited for at most [`HASH_WAIT`] and only while fewer than
    /// `max_waiting` others wait.
    async fn hash_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, KeyRejection> {
        if let Ok(permit) = self.hashing.clone().try_acquire_owned() {
            metrics::histogram!(METRIC_HASH_WAIT).record(0.0);
            return Ok(permit);
        }
        // Counted while waiting, and uncounted however the wait ends (also when the request
        // is dropped meanwhile).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.waiting);
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            metrics::counter!(METRIC_HASH_QUEUE_FULL).increment(1);
            return Err(KeyRejection::Busy);
        }
        let started = Instant::now();
        let got = tokio::time::timeout(HASH_WAIT, self.hashing.clone().acquire_owned()).await;
        metrics::histogram!(METRIC_HASH_WAIT).record(started.elapsed().as_secs_f64());
        match got {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(KeyRejection::Task),
            Err(_) => {
                metrics::counter!(METRIC_HASH_QUEUE_FULL).increment(1);
                Err(KeyRejection::Busy)
            }
        }
    }

    fn known_missing(&self, id: &ApiKeyId) -> bool {
        self.cache.watch().is_listening()
            && self.missing.read().is_ok_and(|m| m.get(id).is_some_and(|at| self.clock.since(*at) < NEGATIVE_TTL))
    }

    fn remember_missing(&self, id: ApiKeyId) {
        if !self.cache.watch().is_listening() {
            return;
        }
        if let Ok(mut m) = self.missing.write() {
            if m.len() >= self.capacity {
                m.retain(|_, at| self.clock.since(*at) < NEGATIVE_TTL);
                if m.len() >= self.capacity {
                    m.clear();
                }
            }
            m.insert(id, self.clock.now());
        }
    }

    /// Whether `presented` is cached and fresh here (a verification would need no read).
    pub fn is_cached(&self, presented: &str) -> bool {
        let fingerprint: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        matches!(self.cache.get(&fingerprint), Some(Found::Fresh(_)))
    }

    /// Callers waiting for an argon2 slot right now.
    pub fn hash_waiters(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    pub fn hash_verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }

    /// A change notification named this key (revoked, changed or deleted somewhere): its
    /// verifications and any memory of it being missing go.
    pub fn key_changed(&self, id: &str) {
        self.cache.remove_where(|_, k| k.id.as_str() == id);
        if let Ok(mut m) = self.missing.write() {
            m.retain(|k, _| k.as_str() != id);
        }
    }

    /// A tenant was created, renamed, deactivated, reactivated or deleted: its keys are
    /// re-checked against the database on their next use (one read, no argon2).
    pub fn tenant_changed(&self, tenant: &str) {
        self.cache.mark_due_where(|_, k| k.tenant.as_ref().is_some_and(|t| t.as_str() == tenant));
    }

    /// The change listener is up (`true`) or lost its connection (`false`). While it is
    /// down nothing missing is remembered; when it goes down every cached verification is
    /// marked due for a database re-check (notifications may have been missed), which
    /// costs one read on the next use and no argon2.
    pub fn set_listening(&self, up: bool) {
        // Going down, this also moves the drop counter: nothing in flight is cached.
        self.cache.watch().set_listening(up);
        if !up {
            // Notifications may be missed from now on: nothing verified before is trusted
            // without a re-check.
            if let Ok(mut m) = self.missing.write() {
                m.clear();
            }
        }
        // Coming up: entries cached while it was down were never covered by a notification
        // (they were checked within the re-check interval, which bounds them meanwhile).
        self.mark_all_due();
    }

    /// A key was created somewhere: forget that its id was unknown.
    pub fn key_created(&self, id: &str) {
        if let Ok(mut m) = self.missing.write() {
            m.retain(|k, _| k.as_str() != id);
        }
    }

    /// Applies a payload of the `mcpc_api_keys` channel: `new:<id>`, `key:<id>`,
    /// `tenant:<id>` or `provider:<id>`.
    pub fn on_notification(&self, payload: &str) {
        match payload.split_once(':') {
            Some(("new", id)) => self.key_created(id),
            Some(("key", id)) => self.key_changed(id),
            Some(("tenant", t)) => self.tenant_changed(t),
            // A provider changed: no key did.
            Some(("provider", _)) => {}
            // Unknown (a newer schema): be safe, re-check everything.
            _ => self.mark_all_due(),
        }
    }

    /// Every cached verification is re-checked against the database before its next use
    /// (one read each, no argon2).
    pub fn mark_all_due(&self) {
        self.cache.mark_due_where(|_, _| true);
    }
}

#[cfg(test)]
mod props;

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
