//! How fast the hand-out audit writers could go if they had the machine to themselves: the
//! statement a writer runs per batch (`store::audit::insert_events`) and the one the
//! toucher runs for the batch's connections (`store::connections::touch_connections`),
//! timed in process on batches of the writer's size against the bench database. Compared
//! with the lookup rate and the queue backlog, this tells whether the writers are limited
//! by Postgres or by getting scheduled.

use mcp_connect::store::{self, PgPool, audit::AuditEvent};
use serde::Serialize;
use std::time::{Duration, Instant};

/// `store::handouts` writes up to this many events per batch.
const BATCH: usize = 2_000;
const ROUNDS: usize = 5;

#[derive(Debug, Clone, Serialize)]
pub struct AuditWriterResult {
    pub batch: usize,
    pub insert_median_ms: f64,
    pub touch_median_ms: f64,
    /// Events per second one writer could insert back to back (the service runs two, and
    /// marks connections used in a task of its own).
    pub events_per_second: f64,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub async fn measure(pool: &PgPool) -> anyhow::Result<AuditWriterResult> {
    let (mut inserts, mut touches) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        // Random connections, as hand-outs of random keys would name them; their last use
        // is cleared so that the touch really writes each row (the worst case).
        let rows: Vec<(uuid::Uuid, String, String)> = sqlx::query_as(
            "WITH picked AS (SELECT id, subject, provider FROM connections TABLESAMPLE SYSTEM (5) LIMIT $1),
                  cleared AS (DELETE FROM connection_usage WHERE connection_id IN (SELECT id FROM picked))
             SELECT id, subject, provider FROM picked",
        )
        .bind(BATCH as i64)
        .fetch_all(pool)
        .await?;
        let events: Vec<(time::OffsetDateTime, AuditEvent)> = rows
            .iter()
            .map(|(id, subject, provider)| {
                let mut ev = AuditEvent::new("token_handed_out");
                ev.tenant_id = Some(crate::db::TENANT.to_owned());
                ev.subject = Some(subject.clone());
                ev.provider = Some(provider.clone());
                ev.connection_id = Some(*id);
                ev.api_key_id = Some("0123456789abcdef".to_owned());
                (time::OffsetDateTime::now_utc(), ev)
            })
            .collect();
        let mut ids: Vec<uuid::Uuid> = rows.iter().map(|(id, _, _)| *id).collect();
        ids.sort_unstable();
        let t = Instant::now();
        store::audit::insert_events(pool, &events).await?;
        inserts.push(t.elapsed());
        let t = Instant::now();
        store::connections::touch_connections(pool, &ids).await?;
        touches.push(t.elapsed());
    }
    let (insert, touch) = (median(inserts), median(touches));
    Ok(AuditWriterResult {
        batch: BATCH,
        insert_median_ms: insert.as_secs_f64() * 1e3,
        touch_median_ms: touch.as_secs_f64() * 1e3,
        events_per_second: BATCH as f64 / insert.as_secs_f64().max(1e-9),
    })
}
