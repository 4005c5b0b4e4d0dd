//! Refresh storm: many callers ask at once for the token of one connection whose access
//! token has expired, spread over two service instances on one database, while the
//! provider's token endpoint takes 50 ms. The single-flight rule (docs/operations.md "Refresh
//! behaviour") says the provider sees exactly one refresh and every caller gets the new
//! token.

use crate::http1::{Conn, Target};
use crate::service::Service;
use anyhow::Context;
use mcp_connect::store::PgPool;
use mcp_connect_devproviders::DevProvider;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize)]
pub struct StormResult {
    pub callers: usize,
    pub instances: usize,
    pub provider_delay_ms: u64,
    /// Refresh grants the provider answered during the storm.
    pub refresh_calls: u64,
    /// Answers with `status: connected` and the one new token.
    pub got_new_token: usize,
    pub distinct_tokens: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    /// The connection's generation counter afterwards (1 = refreshed once).
    pub version_after: i64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub wall_ms: f64,
}

struct Answer {
    latency: Duration,
    token: Result<String, String>,
}

async fn one_call(
    target: Arc<Target>,
    mut conn: Conn,
    subject: String,
    provider: String,
    go: Arc<tokio::sync::Barrier>,
) -> Answer {
    let mut request = Vec::with_capacity(512);
    target.token_request(&mut request, &subject, &provider);
    go.wait().await;
    let t0 = Instant::now();
    let token = match conn.send(&request).await {
        Ok(r) if r.is_connected() => serde_json::from_slice::<serde_json::Value>(r.body)
            .ok()
            .and_then(|v| v.get("access_token").and_then(|t| t.as_str()).map(str::to_owned))
            .ok_or_else(|| "no access_token in the answer".to_owned()),
        Ok(r) => Err(format!("status {} body {}", r.status, String::from_utf8_lossy(r.body))),
        Err(e) => Err(format!("{e:#}")),
    };
    Answer { latency: t0.elapsed(), token }
}

/// The storm's subject: a connection outside the load phases' key space.
pub struct StormConnection {
    pub id: uuid::Uuid,
    pub subject: String,
    pub provider: String,
    pub old_access_token: String,
}

/// Sets the provider's token delay, fires `callers` lookups of the connection at once
/// (alternating between the instances; connections are opened first and the requests
/// released together), and counts what the provider saw.
pub async fn run(
    instances: &[&Service],
    api_key: &str,
    provider: &DevProvider,
    pool: &PgPool,
    conn: &StormConnection,
    callers: usize,
    delay: Duration,
) -> anyhow::Result<StormResult> {
    let targets: Vec<Arc<Target>> = instances.iter().map(|s| Arc::new(Target::token(s.addr, api_key))).collect();
    let go = Arc::new(tokio::sync::Barrier::new(callers + 1));
    let mut handles = Vec::with_capacity(callers);
    for i in 0..callers {
        let target = targets.get(i % targets.len()).context("no instance")?.clone();
        let c = Conn::connect(target.addr).await?;
        handles.push(tokio::spawn(one_call(target, c, conn.subject.clone(), conn.provider.clone(), go.clone())));
    }
    provider.switches().set_token_delay(delay);
    let refreshes_before = provider.stats().refresh_calls;
    go.wait().await;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(callers);
    let mut tokens = std::collections::HashSet::new();
    let (mut fresh, mut errors, mut first_error) = (0, 0, None);
    for h in handles {
        let a = tokio::time::timeout(Duration::from_secs(60), h).await.context("a storm caller hung")??;
        latencies.push(a.latency);
        match a.token {
            Ok(t) => {
                if t != conn.old_access_token {
                    fresh += 1;
                }
                tokens.insert(t);
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    let wall = started.elapsed();
    provider.switches().set_token_delay(Duration::ZERO);
    let refresh_calls = provider.stats().refresh_calls.saturating_sub(refreshes_before);
    latencies.sort_unstable();
    let ms = |p: f64| {
        let rank = ((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len().max(1));
        latencies.get(rank - 1).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    Ok(StormResult {
        callers,
        instances: instances.len(),
        provider_delay_ms: delay.as_millis() as u64,
        refresh_calls,
        // Every caller got the new token only if there is one distinct token and it is
        // not the expired one.
        got_new_token: if tokens.len() == 1 { fresh } else { 0 },
        distinct_tokens: tokens.len(),
        errors,
        first_error,
        version_after: crate::db::connection_version(pool, conn.id).await?,
        p50_ms: ms(0.50),
        p99_ms: ms(0.99),
        max_ms: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        wall_ms: wall.as_secs_f64() * 1e3,
    })
}
