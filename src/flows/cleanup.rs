//! Periodic clean-up, safe to run on every instance at once (each statement is
//! idempotent): overdue elicitations expire, spent states and logins go, expired
//! sessions go, workload tokens' spent `jti`s go, hand-out audit batch ids a week old go,
//! the audit partitions of the coming months are made and those past retention dropped
//! (`store::audit`: every instance may do it at once). Nothing pending is touched.

use crate::store::{self, Db};
use crate::webhooks::EventKind;
use std::time::Duration;
use time::OffsetDateTime;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CleanupReport {
    pub elicitations_expired: u64,
    pub states_deleted: u64,
    pub login_states_deleted: u64,
    pub sessions_deleted: u64,
    /// Month partitions past retention dropped whole (the default partition's rows past it
    /// are deleted), and the coming months' partitions made.
    pub audit_partitions_dropped: u64,
    pub audit_partitions_made: u64,
    /// Webhook deliveries finished more than [`WEBHOOK_DELIVERIES_KEPT`] ago.
    pub webhook_deliveries_deleted: u64,
    /// Typed-credential check budgets whose window is over.
    pub credential_budgets_deleted: u64,
    /// Workload tokens' `jti`s whose tokens expired (beyond any issuer's skew).
    pub workload_jtis_deleted: u64,
    /// Ids of hand-out audit batches written over [`HANDOUT_BATCHES_KEPT`] ago.
    pub handout_batches_deleted: u64,
}

/// How long the id of a written hand-out audit batch is kept: a writer that tries a batch
/// again (its commit's reply lost) does so within seconds, or after the database came back.
pub const HANDOUT_BATCHES_KEPT: time::Duration = time::Duration::days(7);

/// How long a finished webhook delivery stays listed.
pub const WEBHOOK_DELIVERIES_KEPT: time::Duration = time::Duration::days(30);

pub async fn run_once(pool: &Db, now: OffsetDateTime, audit_retention: Duration) -> Result<CleanupReport, sqlx::Error> {
    let retention = time::Duration::try_from(audit_retention).unwrap_or(time::Duration::days(365));
    let mut tx = store::begin(pool).await?;
    let expired = store::elicitations::expire_overdue(&mut *tx, now).await?;
    super::events::links_closed(&mut tx, EventKind::ElicitationExpired, &expired, "service", "expired").await?;
    tx.commit().await?;
    let expired = expired.len() as u64;
    crate::telemetry::metrics::elicitations_finished(crate::domain::ElicitationStatus::Expired, expired);
    Ok(CleanupReport {
        webhook_deliveries_deleted: store::webhooks::delete_finished_before(pool, now - WEBHOOK_DELIVERIES_KEPT)
            .await?,
        elicitations_expired: expired,
        credential_budgets_deleted: store::credential_checks::delete_before(
            pool,
            now - super::credential::CHECK_WINDOW,
        )
        .await?,
        states_deleted: store::states::delete_spent_states(pool, now).await?,
        login_states_deleted: store::sessions::delete_spent_login_states(pool, now).await?,
        sessions_deleted: store::sessions::delete_expired_sessions(pool, now).await?,
        workload_jtis_deleted: store::workload::purge_jtis(pool, now - time::Duration::minutes(10)).await?,
        handout_batches_deleted: store::audit::delete_handout_batches_before(pool, now - HANDOUT_BATCHES_KEPT).await?,
        audit_partitions_made: store::audit::ensure_partitions(pool, now).await?,
        audit_partitions_dropped: store::audit::drop_partitions_before(pool, now - retention).await?,
    })
}

/// Runs `run_once` every `interval` until the process ends.
pub fn spawn(pool: Db, interval: Duration, audit_retention: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        // The coming months' partitions at once (a service down for months finds its month
        // missing); the rest waits for the first interval.
        if let Err(e) = store::audit::ensure_partitions(&pool, OffsetDateTime::now_utc()).await {
            tracing::warn!(error = %e, "making the audit partitions failed; the clean-up will retry");
        }
        loop {
            tick.tick().await;
            match run_once(&pool, OffsetDateTime::now_utc(), audit_retention).await {
                Ok(r) => tracing::info!(report = ?r, "clean-up"),
                Err(e) => tracing::warn!(error = %e, "clean-up failed; will retry"),
            }
        }
    });
}
