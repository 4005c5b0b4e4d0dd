//! Periodic clean-up, safe to run on every instance at once (each statement is
//! idempotent): overdue elicitations expire, spent states and logins go, expired
//! sessions go, and audit events past retention are trimmed. Nothing pending is touched.

use crate::store::{self, PgPool};
use std::time::Duration;
use time::OffsetDateTime;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CleanupReport {
    pub elicitations_expired: u64,
    pub states_deleted: u64,
    pub login_states_deleted: u64,
    pub sessions_deleted: u64,
    pub audit_events_deleted: u64,
}

pub async fn run_once(
    pool: &PgPool,
    now: OffsetDateTime,
    audit_retention: Duration,
) -> Result<CleanupReport, sqlx::Error> {
    let retention = time::Duration::try_from(audit_retention).unwrap_or(time::Duration::days(365));
    let expired = store::elicitations::expire_overdue(pool, now).await?;
    crate::telemetry::metrics::elicitations_finished(crate::domain::ElicitationStatus::Expired, expired);
    Ok(CleanupReport {
        elicitations_expired: expired,
        states_deleted: store::states::delete_spent_states(pool, now).await?,
        login_states_deleted: store::sessions::delete_spent_login_states(pool, now).await?,
        sessions_deleted: store::sessions::delete_expired_sessions(pool, now).await?,
        audit_events_deleted: store::audit::delete_events_before(pool, now - retention).await?,
    })
}

/// Runs `run_once` every `interval` until the process ends.
pub fn spawn(pool: PgPool, interval: Duration, audit_retention: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            match run_once(&pool, OffsetDateTime::now_utc(), audit_retention).await {
                Ok(r) => tracing::info!(report = ?r, "clean-up"),
                Err(e) => tracing::warn!(error = %e, "clean-up failed; will retry"),
            }
        }
    });
}
