//! The delivery worker: one on every instance. Each round claims the deliveries that are due
//! (`store::webhooks::claim_due`: `FOR UPDATE SKIP LOCKED`, the first pending event of each
//! stream only), sends them at once, signed afresh for this attempt, and records the
//! outcome: delivered on a 2xx; otherwise the next attempt after an exponential backoff
//! with jitter, until the event is 24 hours old, when the delivery is `failed` and later
//! events of its stream go on. At least once: a worker that dies mid-send leaves its
//! claim to lapse, and another sends the event again under the same `webhook-id`.

use super::sign;
use crate::domain::Clock;
use crate::keys::Keys;
use crate::net::delivery::{DeliveryClient, DeliveryError};
use crate::store::{self, Db, webhooks::Claimed};
use secrecy::SecretString;
use std::sync::Arc;
use std::time::Duration;
use time::OffsetDateTime;

/// How long deliveries are retried.
pub const RETRY_FOR: time::Duration = time::Duration::hours(24);
/// The first retry's delay (before jitter); each next one doubles, up to [`MAX_DELAY`].
pub const FIRST_DELAY: time::Duration = time::Duration::seconds(5);
pub const MAX_DELAY: time::Duration = time::Duration::hours(1);
/// Attempts in flight at once, per instance.
const SLOTS: usize = 16;
/// Attempts in flight at once for one endpoint and for one tenant, across every instance
/// (see `store::webhooks::claim_due`): a tenant's endpoints hold at most half of one
/// instance's slots, whatever their backlog or slowness.
pub const SHARES: store::webhooks::Shares = store::webhooks::Shares { per_endpoint: 4, per_tenant: 8 };
/// How often the backlog gauges are read.
const BACKLOG_EVERY: Duration = Duration::from_secs(15);
/// The most of an answer kept.
pub const RESPONSE_KEPT: usize = 1024;

/// Metric (catalogue: `telemetry::metrics`): attempts by `outcome` (`delivered`, `retry`,
/// `failed`).
pub const ATTEMPTS: &str = "mcp_connect_webhook_attempts_total";
/// Metric: deliveries waiting (`pending`), every tenant's, as this instance last read them.
pub const PENDING: &str = "mcp_connect_webhook_pending";
/// Metric: the age of the oldest pending delivery.
pub const OLDEST_PENDING: &str = "mcp_connect_webhook_oldest_pending_seconds";
/// Metric: deliveries dropped because their tenant had more than
/// `webhooks.max_pending_per_tenant` pending (the oldest go).
pub const DROPPED: &str = "mcp_connect_webhook_dropped_total";

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Delivered,
    RetryAt(OffsetDateTime),
    Failed,
}

/// The delay before attempt `attempts + 1`: `FIRST_DELAY · 2^(attempts-1)`, at most
/// `MAX_DELAY`, of which the upper half is random (`jitter` in `[0, 1)`), so that endpoints
/// back after an outage are not hit by every retry at once.
pub fn backoff(attempts: i32, jitter: f64) -> time::Duration {
    let exp = attempts.saturating_sub(1).clamp(0, 30) as u32;
    let full = FIRST_DELAY.checked_mul(2i32.saturating_pow(exp)).unwrap_or(MAX_DELAY).min(MAX_DELAY);
    full / 2 + (full / 2) * jitter.clamp(0.0, 1.0)
}

/// Pure: what follows attempt number `attempts` of an event made at `created`, at `now`.
/// The last retry is due at most when the event turns 24 hours old; failing that, it fails.
pub fn next_after(delivered: bool, attempts: i32, created: OffsetDateTime, now: OffsetDateTime, jitter: f64) -> Next {
    if delivered {
        return Next::Delivered;
    }
    let deadline = created + RETRY_FOR;
    if now >= deadline {
        return Next::Failed;
    }
    Next::RetryAt((now + backoff(attempts, jitter)).min(deadline))
}

pub struct Worker {
    pub pool: Db,
    pub keys: Arc<Keys>,
    pub client: DeliveryClient,
    /// Moves the database's time for this worker (tests; the system clock moves nothing).
    pub clock: Arc<dyn Clock>,
    /// How often to look for due deliveries.
    pub poll: Duration,
    /// How long a claim holds (longer than a send can take).
    pub lease: Duration,
    /// An attempt that took this long counts against its endpoint as a failure does, even
    /// when it was delivered: a receiver that is slow but answers 200 would otherwise hold
    /// its slots for ever and never rest.
    pub slow_after: Duration,
    /// Pending deliveries a tenant may have; the oldest beyond it are dropped.
    pub max_pending_per_tenant: i64,
}

impl Worker {
    /// Runs the worker for the life of the process; a worker that panicked is started
    /// again (and says so).
    pub fn spawn(self) {
        let worker = Arc::new(self);
        // One set of slots for the life of the process: attempts a crashed run started
        // keep theirs until they end.
        let slots = Arc::new(tokio::sync::Semaphore::new(SLOTS));
        tokio::spawn(async move {
            loop {
                let (w, s) = (worker.clone(), slots.clone());
                let why = match tokio::spawn(async move { w.run(s).await }).await {
                    Err(e) if e.is_panic() => "it panicked",
                    _ => "it ended",
                };
                tracing::error!(why, "the webhook delivery worker stopped; starting it again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Every poll: claims as many due deliveries as there are free slots, and sends each in
    /// a task of its own, so that a slow endpoint holds its own slots only. While claims
    /// come back full (a backlog), it goes on as soon as a slot is free.
    async fn run(self: Arc<Self>, slots: Arc<tokio::sync::Semaphore>) {
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The backlog is trimmed and reported every ten polls (at most every 15 s).
        let backlog_every = (self.poll * 10).min(BACKLOG_EVERY);
        let mut last_backlog = std::time::Instant::now() - backlog_every;
        loop {
            tick.tick().await;
            if last_backlog.elapsed() >= backlog_every {
                last_backlog = std::time::Instant::now();
                self.trim_backlog().await;
                self.report_backlog().await;
            }
            loop {
                // At least one slot (waiting for it when all are busy), and all free ones.
                let Ok(first) = slots.clone().acquire_owned().await else { return };
                let free = 1 + slots.available_permits();
                let claimed =
                    match store::webhooks::claim_due(&self.pool, self.skew_us(), self.lease_us(), free as i64, SHARES)
                        .await
                    {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(error = %e, "webhook deliveries: the database failed; will retry");
                            break;
                        }
                    };
                let full = claimed.len() == free;
                let mut first = Some(first);
                for c in claimed {
                    let permit = match first.take() {
                        Some(p) => p,
                        None => match slots.clone().acquire_owned().await {
                            Ok(p) => p,
                            Err(_) => return,
                        },
                    };
                    let w = self.clone();
                    tokio::spawn(async move {
                        if let Err(e) = w.deliver(c).await {
                            tracing::warn!(error = %e, "a webhook attempt could not be recorded; it is sent again");
                        }
                        drop(permit);
                    });
                }
                if !full {
                    break;
                }
            }
        }
    }

    /// How far the worker's clock is ahead of the real one, in microseconds.
    fn skew_us(&self) -> i64 {
        i64::try_from((self.clock.wall() - OffsetDateTime::now_utc()).whole_microseconds()).unwrap_or(0)
    }

    fn lease_us(&self) -> i64 {
        i64::try_from(self.lease.as_micros()).unwrap_or(i64::MAX)
    }

    /// Ends the deliveries of switched-off tenants, and drops the oldest pending deliveries
    /// of each tenant beyond its cap.
    async fn trim_backlog(&self) {
        match store::webhooks::end_inactive(&self.pool).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(ended = n, "webhook deliveries of switched-off tenants ended"),
            Err(e) => tracing::warn!(error = %e, "webhook deliveries of switched-off tenants not ended"),
        }
        match store::webhooks::drop_beyond_cap(&self.pool, self.max_pending_per_tenant).await {
            Ok(dropped) => {
                for (tenant, n) in dropped {
                    metrics::counter!(DROPPED).increment(n.unsigned_abs());
                    tracing::warn!(tenant = %tenant, dropped = n, cap = self.max_pending_per_tenant,
                        "webhook deliveries dropped: the tenant's pending deliveries were over the cap");
                }
            }
            Err(e) => tracing::warn!(error = %e, "webhook backlog not trimmed"),
        }
    }

    async fn report_backlog(&self) {
        match store::webhooks::backlog(&self.pool, self.skew_us()).await {
            Ok((n, age)) => {
                metrics::gauge!(PENDING).set(n as f64);
                metrics::gauge!(OLDEST_PENDING).set(age);
            }
            Err(e) => tracing::warn!(error = %e, "webhook backlog not read"),
        }
    }

    async fn deliver(&self, c: Claimed) -> Result<(), sqlx::Error> {
        let started = std::time::Instant::now();
        let sent_at = OffsetDateTime::now_utc();
        let outcome = self.send(&c, sent_at).await;
        let slow = started.elapsed() >= self.slow_after;
        // Sent, not yet recorded: a crash here sends the event again (at least once).
        crate::domain::failpoint::stop_here("webhooks.before_record").await;
        // The database's time (as claimed, plus the attempt's length): the rows' own.
        let now = c.claimed_at + started.elapsed();
        let next = next_after(outcome.delivered, c.attempts, c.created_at, now, rand::random::<f64>());
        let label = match next {
            Next::Delivered => "delivered",
            Next::RetryAt(_) => "retry",
            Next::Failed => "failed",
        };
        metrics::counter!(ATTEMPTS, "outcome" => label).increment(1);
        if next == Next::Failed {
            tracing::warn!(webhook = %c.webhook_id, delivery = c.id, attempts = c.attempts, "webhook delivery failed for 24 hours; given up");
        }
        let attempt = store::webhooks::Attempt {
            at: sent_at,
            status: outcome.status,
            error: outcome.error,
            response: outcome.response.as_deref(),
        };
        let retry_at = match next {
            Next::RetryAt(t) => Some(t),
            _ => None,
        };
        // The endpoint rests after a failure or a slow answer, for the backoff of those in a
        // row: a dead or slow endpoint takes one attempt per wait, not one per event, and
        // no other endpoint's slots. Written before the attempt lets go of its claim, so
        // that no claim in between finds the endpoint free and not resting.
        let failures = c.consecutive_failures.saturating_add(1);
        if slow {
            tracing::warn!(webhook = %c.webhook_id, delivered = outcome.delivered, "a webhook endpoint answered slowly; it rests");
        }
        // A slow success rests it for the first backoff only, and adds no failure: a receiver
        // that is slow but answers does not drift towards an hour's rest.
        let failed = if !outcome.delivered {
            Some((failures, now + backoff(failures, rand::random::<f64>())))
        } else if slow {
            // 0: `greatest` keeps the count as it is now (a success since may have reset it).
            Some((0, now + backoff(1, rand::random::<f64>())))
        } else {
            None
        };
        store::webhooks::record_endpoint(&self.pool, c.webhook_id, failed).await?;
        let recorded =
            store::webhooks::record_attempt(&self.pool, c.id, c.attempts, &attempt, outcome.delivered, retry_at)
                .await?;
        if recorded && let Some(t) = retry_at {
            store::webhooks::hold_stream_until(&self.pool, c.id, t).await?;
        }
        Ok(())
    }

    /// One attempt, stamped `at` (the real time: receivers check it against theirs) and
    /// signed with every secret in force by the worker's clock.
    async fn send(&self, c: &Claimed, at: OffsetDateTime) -> Outcome {
        let Ok(url) = url::Url::parse(&c.url) else { return Outcome::error("bad_url") };
        let secrets = match super::open_secrets(&self.keys, c, c.claimed_at).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(webhook = %c.webhook_id, error = %e, "a webhook secret does not open");
                return Outcome::error("secret_unreadable");
            }
        };
        let refs: Vec<&SecretString> = secrets.iter().collect();
        let id = format!("evt_{}", c.event_id.simple());
        let signed = match sign::sign(&refs, &id, at, c.payload.as_bytes()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(webhook = %c.webhook_id, error = %e, "a webhook could not be signed");
                return Outcome::error("secret_unreadable");
            }
        };
        let headers = [
            ("content-type", "application/json".to_owned()),
            ("user-agent", concat!("mcp-connect-webhooks/", env!("CARGO_PKG_VERSION")).to_owned()),
            ("webhook-id", signed.id),
            ("webhook-timestamp", signed.timestamp.to_string()),
            ("webhook-signature", signed.signature),
        ];
        match self.client.post(&url, &headers, c.payload.clone().into_bytes()).await {
            Ok(mut resp) => {
                let status = resp.status();
                let response = read_kept(&mut resp).await;
                Outcome {
                    delivered: status.is_success(),
                    status: Some(i32::from(status.as_u16())),
                    error: (!status.is_success()).then_some("status"),
                    response: Some(response),
                }
            }
            // One code for the tenant (which range a name resolves to is ours to know); the
            // reason is in our log.
            Err(DeliveryError::Refused(r)) => {
                tracing::warn!(webhook = %c.webhook_id, refusal = r.code(), "a webhook address was refused");
                Outcome::error("address_refused")
            }
            Err(DeliveryError::Request(e)) if e.is_timeout() => Outcome::error("timeout"),
            Err(DeliveryError::Request(e)) if e.is_connect() => Outcome::error("connect"),
            Err(DeliveryError::Request(_)) => Outcome::error("request"),
        }
    }
}

struct Outcome {
    delivered: bool,
    status: Option<i32>,
    error: Option<&'static str>,
    response: Option<String>,
}

impl Outcome {
    fn error(code: &'static str) -> Self {
        Self { delivered: false, status: None, error: Some(code), response: None }
    }
}

/// The first [`RESPONSE_KEPT`] bytes of an answer, as text without control characters; the
/// rest is not read.
async fn read_kept(resp: &mut reqwest::Response) -> String {
    let mut kept = Vec::with_capacity(RESPONSE_KEPT);
    while kept.len() < RESPONSE_KEPT {
        match resp.chunk().await {
            Ok(Some(chunk)) => kept.extend_from_slice(&chunk[..chunk.len().min(RESPONSE_KEPT - kept.len())]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&kept).chars().filter(|c| !c.is_control() || *c == '\n').collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_five_seconds_to_an_hour_with_the_upper_half_random() {
        let s = time::Duration::seconds;
        let cases: &[(i32, f64, time::Duration)] = &[
            (1, 0.0, s(5) / 2),
            (1, 0.999_999, s(5) - time::Duration::microseconds(3)),
            (2, 0.0, s(5)),
            (3, 0.5, s(15)),
            (0, 0.0, s(5) / 2),
            (-4, 0.0, s(5) / 2),
            (11, 0.0, s(1800)),
            (12, 1.0, s(3600)),
            (40, 0.0, s(1800)),
            (i32::MAX, 2.0, s(3600)),
        ];
        for (attempts, jitter, want) in cases {
            let got = backoff(*attempts, *jitter);
            assert!((got - *want).abs() < time::Duration::milliseconds(1), "{attempts} {jitter}: {got} != {want}");
        }
    }

    #[test]
    fn a_delivery_is_retried_until_its_event_is_a_day_old_then_fails() {
        let t0 = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let h = time::Duration::hours;
        let cases: &[(bool, i32, time::Duration, Next)] = &[
            (true, 1, h(0), Next::Delivered),
            (true, 30, h(30), Next::Delivered),
            (false, 1, h(0), Next::RetryAt(t0 + time::Duration::seconds(5))),
            (false, 20, h(1), Next::RetryAt(t0 + h(2))),
            (false, 30, h(23) + time::Duration::minutes(50), Next::RetryAt(t0 + h(24))),
            (false, 31, h(24), Next::Failed),
            (false, 3, h(25), Next::Failed),
        ];
        for (delivered, attempts, age, want) in cases {
            assert_eq!(next_after(*delivered, *attempts, t0, t0 + *age, 1.0), *want, "{delivered} {attempts} {age}");
        }
    }
}
