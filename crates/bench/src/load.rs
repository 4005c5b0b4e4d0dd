//! The load generator: `POST /v1/token` for random (subject, provider) pairs over keep-alive
//! connections, one request in flight per connection.
//!
//! - **closed loop**: every connection sends its next request as soon as the last answer
//!   is in; throughput is the saturating rate, and Little's law (mean latency ≈ connections
//!   / throughput) checks that the client measured what the server did, not its own delays;
//! - **open loop**: requests leave on a fixed schedule at a given rate, spread over the
//!   connections; a request that could not leave on time because its connection was still
//!   busy is timed from when it should have left (no coordinated omission);
//! - **sweep**: every key once, to fill the lookup cache.
//!
//! The workers run on their own runtime with `threads` OS threads, so the client's share of
//! the two cores is bounded and known.

use crate::http1::{Conn, Target};
use anyhow::Context;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The 100,000 (subject, provider) pairs: key `i` is subject `i / providers`, provider
/// `i % providers + 1`.
#[derive(Debug, Clone, Copy)]
pub struct KeySpace {
    pub subjects: usize,
    pub providers: usize,
}

impl KeySpace {
    pub fn len(&self) -> usize {
        self.subjects * self.providers
    }

    pub fn subject(i: usize) -> String {
        format!("user{i:05}")
    }

    pub fn provider(i: usize) -> String {
        format!("p{i}")
    }

    pub fn key(&self, i: usize) -> (String, String) {
        (Self::subject(i / self.providers), Self::provider(i % self.providers + 1))
    }
}

/// Results of one load phase. Latencies in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub mode: &'static str,
    /// Who sent the load: `bench` (this crate's generator) or `wrk` ([`crate::wrk`]).
    pub generator: &'static str,
    pub connections: usize,
    pub client_threads: usize,
    pub seconds: f64,
    pub requests: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub rps: f64,
    /// The rate asked for (open loop only).
    pub offered_rps: Option<f64>,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Little's law: throughput × mean latency = requests in flight on average. Closed loop:
    /// should be close to `connections`; well below means the client, not the server, was
    /// the bottleneck.
    pub in_flight_little: f64,
    /// Closed loop: connections / throughput, the mean latency Little's law predicts.
    pub little_mean_us: f64,
    /// Where the slow requests (over [`SLOW`]) lie in time: the 100 ms windows holding the
    /// most of them, by when they were due (UTC), most first; tells a tail that comes in
    /// bursts (a pause: the host's, or the service's) from one spread over the phase.
    pub slow_windows: Vec<SlowWindow>,
}

/// A request slower than this counts in [`Summary::slow_windows`].
pub const SLOW: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, Serialize)]
pub struct SlowWindow {
    /// The window's start, UTC, to the millisecond (`HH:MM:SS.mmm`).
    pub at: String,
    pub slow: u64,
    pub max_us: f64,
}

#[derive(Default)]
struct WorkerResult {
    latencies_ns: Vec<u64>,
    /// Requests slower than [`SLOW`]: when they were due, and their latency.
    slow: Vec<(Instant, u64)>,
    errors: u64,
    first_error: Option<String>,
}

impl WorkerResult {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }
}

/// A worker gives up after this many errors (a dead service must not spin for the whole
/// phase).
const MAX_ERRORS_PER_WORKER: u64 = 1_000;

#[derive(Debug, Clone, Copy)]
enum Plan {
    Closed { duration: Duration },
    Open { duration: Duration, rate: f64 },
    Sweep,
}

pub fn closed_loop(
    target: &Target,
    keys: KeySpace,
    conns: usize,
    threads: usize,
    duration: Duration,
) -> anyhow::Result<Summary> {
    run(target, keys, conns, threads, Plan::Closed { duration })
}

pub fn open_loop(
    target: &Target,
    keys: KeySpace,
    conns: usize,
    threads: usize,
    duration: Duration,
    rate: f64,
) -> anyhow::Result<Summary> {
    run(target, keys, conns, threads, Plan::Open { duration, rate })
}

pub fn sweep(target: &Target, keys: KeySpace, conns: usize, threads: usize) -> anyhow::Result<Summary> {
    run(target, keys, conns, threads, Plan::Sweep)
}

fn run(target: &Target, keys: KeySpace, conns: usize, threads: usize, plan: Plan) -> anyhow::Result<Summary> {
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?
    };
    let target = Arc::new(target.clone());
    let next_key = Arc::new(AtomicUsize::new(0));
    let (results, elapsed, started) = runtime.block_on(async move {
        // Connect everyone first, so the phase measures requests, not handshakes.
        let mut connections = Vec::with_capacity(conns);
        for _ in 0..conns {
            connections.push(Conn::connect(target.addr).await?);
        }
        let start = Instant::now();
        let wall = time::OffsetDateTime::now_utc();
        let mut handles = Vec::with_capacity(conns);
        for (i, conn) in connections.into_iter().enumerate() {
            let target = target.clone();
            let next_key = next_key.clone();
            let seed = 0x6d63_7063_u64.wrapping_mul(i as u64 + 1);
            handles.push(tokio::spawn(async move {
                match plan {
                    Plan::Closed { duration } => closed_worker(&target, conn, keys, start + duration, seed).await,
                    Plan::Open { duration, rate } => {
                        let interval = Duration::from_secs_f64(conns as f64 / rate);
                        // Stagger the connections evenly over one interval.
                        let first = start + interval.mul_f64(i as f64 / conns as f64);
                        open_worker(&target, conn, keys, first, interval, start + duration, seed).await
                    }
                    Plan::Sweep => sweep_worker(&target, conn, keys, &next_key).await,
                }
            }));
        }
        let mut results = Vec::with_capacity(conns);
        for h in handles {
            results.push(h.await.context("load worker panicked")?);
        }
        anyhow::Ok((results, start.elapsed(), (start, wall)))
    })?;
    let (mode, offered) = match plan {
        Plan::Closed { .. } => ("closed", None),
        Plan::Open { rate, .. } => ("open", Some(rate)),
        Plan::Sweep => ("sweep", None),
    };
    Ok(summarize(mode, conns, threads.max(1), offered, elapsed, started, results))
}

async fn request(target: &Target, conn: &mut Conn, buf: &mut Vec<u8>, keys: KeySpace, i: usize) -> Result<(), String> {
    let (subject, provider) = keys.key(i);
    target.request(buf, &subject, &provider);
    match conn.send(buf).await {
        Ok(r) if r.answers(target.ask) => Ok(()),
        Ok(r) => Err(format!("{subject}/{provider}: status {} body {}", r.status, String::from_utf8_lossy(r.body))),
        Err(e) => Err(format!("{subject}/{provider}: {e:#}")),
    }
}

/// After an error the connection may be unusable (closed, or a half-read answer): start
/// a new one.
async fn recover(target: &Target, conn: &mut Conn, result: &mut WorkerResult) -> bool {
    if result.errors >= MAX_ERRORS_PER_WORKER {
        return false;
    }
    match Conn::connect(target.addr).await {
        Ok(c) => {
            *conn = c;
            true
        }
        Err(e) => {
            result.error(format!("reconnect: {e:#}"));
            false
        }
    }
}

/// Sends request `i` and records its latency from `origin`; `false` when the connection
/// failed and could not be made again (the worker stops).
async fn timed(
    target: &Target,
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    keys: KeySpace,
    i: usize,
    origin: Instant,
    result: &mut WorkerResult,
) -> bool {
    let outcome = request(target, conn, buf, keys, i).await;
    let took = origin.elapsed();
    result.latencies_ns.push(took.as_nanos() as u64);
    if took > SLOW {
        result.slow.push((origin, took.as_nanos() as u64));
    }
    match outcome {
        Ok(()) => true,
        Err(e) => {
            result.error(e);
            recover(target, conn, result).await
        }
    }
}

async fn closed_worker(target: &Target, mut conn: Conn, keys: KeySpace, deadline: Instant, seed: u64) -> WorkerResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut result = WorkerResult { latencies_ns: Vec::with_capacity(64 * 1024), ..WorkerResult::default() };
    let mut buf = Vec::with_capacity(512);
    // At least one request, however short the phase.
    loop {
        let i = rng.random_range(0..keys.len());
        if !timed(target, &mut conn, &mut buf, keys, i, Instant::now(), &mut result).await {
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    result
}

async fn open_worker(
    target: &Target,
    mut conn: Conn,
    keys: KeySpace,
    first: Instant,
    interval: Duration,
    deadline: Instant,
    seed: u64,
) -> WorkerResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut result = WorkerResult { latencies_ns: Vec::with_capacity(32 * 1024), ..WorkerResult::default() };
    let mut buf = Vec::with_capacity(512);
    let mut due = first;
    while due < deadline {
        let now = Instant::now();
        // On time: wait for the slot and time from the actual send (the 1 ms timer may wake
        // a little late; that is the client's delay, not the server's). Behind schedule
        // because the last answer came late: send now and time from the slot it missed.
        let origin = if now < due {
            tokio::time::sleep_until(due.into()).await;
            Instant::now()
        } else {
            due
        };
        let i = rng.random_range(0..keys.len());
        if !timed(target, &mut conn, &mut buf, keys, i, origin, &mut result).await {
            break;
        }
        due += interval;
    }
    result
}

async fn sweep_worker(target: &Target, mut conn: Conn, keys: KeySpace, next: &AtomicUsize) -> WorkerResult {
    let mut result = WorkerResult { latencies_ns: Vec::with_capacity(8 * 1024), ..WorkerResult::default() };
    let mut buf = Vec::with_capacity(512);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= keys.len() {
            break;
        }
        if !timed(target, &mut conn, &mut buf, keys, i, Instant::now(), &mut result).await {
            break;
        }
    }
    result
}

/// The 100 ms windows (from `start`, which was `wall`) with the most slow requests, by
/// when those were due: at most eight, most first (the earlier of two alike).
fn slow_windows(slow: &[(Instant, u64)], start: Instant, wall: time::OffsetDateTime) -> Vec<SlowWindow> {
    let mut windows: std::collections::BTreeMap<u64, (u64, u64)> = std::collections::BTreeMap::new();
    for (due, ns) in slow {
        let w = windows.entry(due.saturating_duration_since(start).as_millis() as u64 / 100).or_default();
        w.0 += 1;
        w.1 = w.1.max(*ns);
    }
    let mut v: Vec<_> = windows.into_iter().collect();
    v.sort_by_key(|(w, (n, _))| (std::cmp::Reverse(*n), *w));
    v.truncate(8);
    v.into_iter()
        .map(|(w, (slow, max_ns))| {
            let t = wall + Duration::from_millis(w * 100);
            SlowWindow {
                at: format!("{:02}:{:02}:{:02}.{:03}", t.hour(), t.minute(), t.second(), t.millisecond()),
                slow,
                max_us: max_ns as f64 / 1_000.0,
            }
        })
        .collect()
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied().unwrap_or(0)
}

fn summarize(
    mode: &'static str,
    conns: usize,
    threads: usize,
    offered: Option<f64>,
    elapsed: Duration,
    (start, wall): (Instant, time::OffsetDateTime),
    results: Vec<WorkerResult>,
) -> Summary {
    let mut all = Vec::with_capacity(results.iter().map(|r| r.latencies_ns.len()).sum());
    let mut errors = 0;
    let mut first_error = None;
    let mut slow = Vec::new();
    for r in results {
        all.extend_from_slice(&r.latencies_ns);
        slow.extend_from_slice(&r.slow);
        errors += r.errors;
        if first_error.is_none() {
            first_error = r.first_error;
        }
    }
    all.sort_unstable();
    let n = all.len();
    let secs = elapsed.as_secs_f64();
    let rps = if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let us = |ns: u64| ns as f64 / 1_000.0;
    let mean_us = if n == 0 { 0.0 } else { all.iter().map(|&x| x as f64).sum::<f64>() / n as f64 / 1_000.0 };
    Summary {
        mode,
        generator: "bench",
        connections: conns,
        client_threads: threads,
        seconds: secs,
        requests: n as u64,
        errors,
        first_error,
        rps,
        offered_rps: offered,
        mean_us,
        p50_us: us(percentile(&all, 0.50)),
        p90_us: us(percentile(&all, 0.90)),
        p99_us: us(percentile(&all, 0.99)),
        p999_us: us(percentile(&all, 0.999)),
        max_us: us(all.last().copied().unwrap_or(0)),
        in_flight_little: rps * mean_us / 1e6,
        little_mean_us: if rps > 0.0 { conns as f64 / rps * 1e6 } else { 0.0 },
        slow_windows: slow_windows(&slow, start, wall),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn slow_requests_are_counted_in_the_100_ms_window_they_were_due_most_first() {
        let start = Instant::now();
        let wall = time::macros::datetime!(2026-12-07 03:40:50.000 UTC);
        let at = |ms: u64, latency_ms: u64| (start + Duration::from_millis(ms), latency_ms * 1_000_000);
        let mut slow = vec![at(250, 6), at(299, 12), at(1_300, 7), at(1_350, 9), at(1_399, 6), at(5_000, 30)];
        // Nine windows of one each after the first three: only eight are named.
        slow.extend((0..9).map(|i| at(6_000 + i * 100, 6)));
        let w = slow_windows(&slow, start, wall);
        assert_eq!(w.len(), 8);
        let named: Vec<(&str, u64, f64)> = w.iter().map(|w| (w.at.as_str(), w.slow, w.max_us)).collect();
        assert_eq!(
            named[..4],
            [
                ("03:40:51.300", 3, 9_000.0),
                ("03:40:50.200", 2, 12_000.0),
                ("03:40:55.000", 1, 30_000.0),
                ("03:40:56.000", 1, 6_000.0),
            ]
        );
    }

    #[test]
    fn keys_cover_every_subject_and_provider() {
        let k = KeySpace { subjects: 25_000, providers: 4 };
        assert_eq!(k.len(), 100_000);
        assert_eq!(k.key(0), ("user00000".to_owned(), "p1".to_owned()));
        assert_eq!(k.key(99_999), ("user24999".to_owned(), "p4".to_owned()));
    }
}
