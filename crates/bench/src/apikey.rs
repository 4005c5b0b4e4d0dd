//! API-key check, in process against the bench database: `ApiKeyVerifier::verify` for
//! the first request with a new key (database lookup + argon2id), then cached calls, the
//! re-check once the cache interval has passed, and many first requests at once.

use mcp_connect::api_keys::{ApiKeyVerifier, hash_key};
use mcp_connect::domain::{KeyScope, TenantId};
use mcp_connect::store::PgPool;
use secrecy::ExposeSecret;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize)]
pub struct ApiKeyResult {
    /// First `verify` of a new key: lookup, argon2id verify, cache insert.
    pub first_ms: f64,
    /// argon2 runs the first call caused (one verify is the bound).
    pub first_argon2_runs: u64,
    /// One argon2id verify with the same parameters, alone (the bound for `first_ms`).
    pub argon2_verify_ms: f64,
    pub cached_calls: usize,
    pub cached_median_us: f64,
    pub cached_p99_us: f64,
    /// A cached key whose re-check interval has passed: one database round trip.
    pub recheck_median_us: f64,
    /// `herd` first requests with the same new key at once.
    pub herd: usize,
    pub herd_wall_ms: f64,
    /// argon2 runs those `herd` requests caused (1 would mean single flight).
    pub herd_argon2_runs: u64,
}

fn median_and_p99(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort_unstable();
    let at = |p: f64| {
        let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
        v.get(rank - 1).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.5), at(0.99))
}

pub async fn measure(pool: &PgPool, cached_calls: usize, herd: usize) -> anyhow::Result<ApiKeyResult> {
    let tenant = TenantId::parse(crate::db::TENANT)?;
    let key = mcp_connect::cli::create_api_key(pool, &tenant, KeyScope::Server, Some("bench api-key check")).await?;
    let key = key.key.expose_secret().to_owned();

    // One argon2 verify alone, on a hash made with the service's parameters.
    let secret = secrecy::SecretString::from(key.clone());
    let argon2_verify_ms = tokio::task::spawn_blocking(move || -> anyhow::Result<f64> {
        use argon2::password_hash::{PasswordHash, PasswordVerifier};
        let phc = hash_key(&secret).map_err(|e| anyhow::anyhow!("hash: {e}"))?;
        let parsed = PasswordHash::new(&phc).map_err(|e| anyhow::anyhow!("hash: {e}"))?;
        let t = Instant::now();
        argon2::Argon2::default()
            .verify_password(secret.expose_secret().as_bytes(), &parsed)
            .map_err(|e| anyhow::anyhow!("verify: {e}"))?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    })
    .await??;

    // The service's defaults: 5 s re-check interval, 10,000 keys.
    let verifier = ApiKeyVerifier::new(pool.clone(), Duration::from_secs(5), 10_000)
        .map_err(|e| anyhow::anyhow!("verifier: {e}"))?;
    let runs_before = verifier.hash_verifications();
    let t = Instant::now();
    verifier.verify(&key).await.map_err(|e| anyhow::anyhow!("first verify: {e}"))?;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let first_argon2_runs = verifier.hash_verifications() - runs_before;

    let mut cached = Vec::with_capacity(cached_calls);
    for _ in 0..cached_calls {
        let t = Instant::now();
        verifier.verify(&key).await.map_err(|e| anyhow::anyhow!("cached verify: {e}"))?;
        cached.push(t.elapsed());
    }
    let (cached_median_us, cached_p99_us) = median_and_p99(cached);

    // Interval 0: every call after the first finds a stale entry and asks the database.
    let recheck =
        ApiKeyVerifier::new(pool.clone(), Duration::ZERO, 10_000).map_err(|e| anyhow::anyhow!("verifier: {e}"))?;
    recheck.verify(&key).await.map_err(|e| anyhow::anyhow!("verify: {e}"))?;
    let mut rechecks = Vec::with_capacity(1_000);
    for _ in 0..1_000 {
        let t = Instant::now();
        recheck.verify(&key).await.map_err(|e| anyhow::anyhow!("re-check: {e}"))?;
        rechecks.push(t.elapsed());
    }
    let (recheck_median_us, _) = median_and_p99(rechecks);

    // A new instance (or a new key) meeting `herd` concurrent requests.
    let cold = ApiKeyVerifier::new(pool.clone(), Duration::from_secs(5), 10_000)
        .map_err(|e| anyhow::anyhow!("verifier: {e}"))?;
    let before = cold.hash_verifications();
    let t = Instant::now();
    let key = Arc::new(key);
    let mut handles = Vec::with_capacity(herd);
    for _ in 0..herd {
        let (cold, key) = (cold.clone(), key.clone());
        handles.push(tokio::spawn(async move { cold.verify(&key).await.is_ok() }));
    }
    for h in handles {
        if !h.await? {
            anyhow::bail!("a concurrent first verify failed");
        }
    }
    let herd_wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let herd_argon2_runs = cold.hash_verifications() - before;

    Ok(ApiKeyResult {
        first_ms,
        first_argon2_runs,
        argon2_verify_ms,
        cached_calls,
        cached_median_us,
        cached_p99_us,
        recheck_median_us,
        herd,
        herd_wall_ms,
        herd_argon2_runs,
    })
}
