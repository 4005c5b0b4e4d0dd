//! API-key check, in process against the bench database: `ApiKeyVerifier::verify` for
//! the first request with a new key (database lookup + argon2id), then cached calls, the
//! re-check once the cache interval has passed, many first requests at once, and valid
//! keys checked while a flood of unknown keys arrives.

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
    /// Unknown-key checks per second offered during the flood phase, and how many ran.
    pub flood_rate: u32,
    pub flood_requests: u64,
    /// argon2 runs during the flood phase, the new keys' first verifications included (unknown
    /// ids must cost none: at most `flood_first_keys`).
    pub flood_argon2_runs: u64,
    /// A cached valid key, checked during the flood.
    pub flood_cached_p99_us: f64,
    /// New valid keys verified for the first time (argon2) during the flood.
    pub flood_first_keys: usize,
    pub flood_first_p99_ms: f64,
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
    let key = mcp_connect::flows::api_keys::create_api_key(
        &mcp_connect::store::Db::direct(pool.clone()),
        &tenant,
        KeyScope::Server,
        Some("bench api-key check"),
    )
    .await?;
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
    let verifier =
        ApiKeyVerifier::new(mcp_connect::store::Db::direct(pool.clone()), Duration::from_secs(5), 10_000, 32);
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
    let recheck = ApiKeyVerifier::new(mcp_connect::store::Db::direct(pool.clone()), Duration::ZERO, 10_000, 32);
    recheck.verify(&key).await.map_err(|e| anyhow::anyhow!("verify: {e}"))?;
    let mut rechecks = Vec::with_capacity(1_000);
    for _ in 0..1_000 {
        let t = Instant::now();
        recheck.verify(&key).await.map_err(|e| anyhow::anyhow!("re-check: {e}"))?;
        rechecks.push(t.elapsed());
    }
    let (recheck_median_us, _) = median_and_p99(rechecks);

    // A new instance (or a new key) meeting `herd` concurrent requests.
    let cold = ApiKeyVerifier::new(mcp_connect::store::Db::direct(pool.clone()), Duration::from_secs(5), 10_000, 32);
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
    let flood = flood(pool, &tenant, &key, FLOOD_RATE, FLOOD_FOR).await?;

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
        flood_rate: FLOOD_RATE,
        flood_requests: flood.requests,
        flood_argon2_runs: flood.argon2_runs,
        flood_cached_p99_us: flood.cached_p99_us,
        flood_first_keys: flood.first.len(),
        flood_first_p99_ms: median_and_p99(flood.first).1 / 1e3,
    })
}

const FLOOD_RATE: u32 = 1_000;
const FLOOD_FOR: Duration = Duration::from_secs(4);

struct Flood {
    requests: u64,
    argon2_runs: u64,
    cached_p99_us: f64,
    first: Vec<Duration>,
}

/// Well-formed keys with random (unknown) ids at `rate` per second for `run`, while a
/// cached valid key is checked every millisecond and a new valid key is verified for the
/// first time every 200 ms. Before the hardening every unknown id cost an argon2 run in
/// the same two slots the first verifications need.
async fn flood(pool: &PgPool, tenant: &TenantId, valid: &str, rate: u32, run: Duration) -> anyhow::Result<Flood> {
    let verifier =
        ApiKeyVerifier::new(mcp_connect::store::Db::direct(pool.clone()), Duration::from_secs(5), 10_000, 32);
    verifier.verify(valid).await.map_err(|e| anyhow::anyhow!("verify: {e}"))?;
    let mut fresh = Vec::new();
    for _ in 0..(run.as_millis() / 200) {
        let k = mcp_connect::flows::api_keys::create_api_key(
            &mcp_connect::store::Db::direct(pool.clone()),
            tenant,
            KeyScope::Server,
            Some("bench flood"),
        )
        .await?;
        fresh.push(k.key.expose_secret().to_owned());
    }
    let before = verifier.hash_verifications();
    let deadline = Instant::now() + run;
    let flooder = {
        let verifier = verifier.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut sent = 0u64;
            let mut inflight = tokio::task::JoinSet::new();
            while Instant::now() < deadline {
                tick.tick().await;
                let unknown = mcp_connect::api_keys::NewApiKey::generate();
                let v = verifier.clone();
                inflight.spawn(async move { v.verify(unknown.key.expose_secret()).await.is_err() });
                sent += 1;
            }
            while inflight.join_next().await.is_some() {}
            sent
        })
    };
    let first_keys = {
        let verifier = verifier.clone();
        tokio::spawn(async move {
            let mut out = Vec::with_capacity(fresh.len());
            for k in fresh {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let t = Instant::now();
                if verifier.verify(&k).await.is_ok() {
                    out.push(t.elapsed());
                }
            }
            out
        })
    };
    let mut cached = Vec::new();
    while Instant::now() < deadline {
        let t = Instant::now();
        verifier.verify(valid).await.map_err(|e| anyhow::anyhow!("cached verify: {e}"))?;
        cached.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let requests = flooder.await?;
    let first = first_keys.await?;
    Ok(Flood {
        requests,
        // Every argon2 run in the phase, the new keys' first verifications included: a
        // first verification may or may not need one, so subtracting them underflowed.
        argon2_runs: verifier.hash_verifications() - before,
        cached_p99_us: median_and_p99(cached).1,
        first,
    })
}
