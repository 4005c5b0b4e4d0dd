//! How fast the hand-out audit writers could go if they had the machine to themselves: the
//! statement the writer runs per batch (`store::audit::insert_handouts`) and the one the
//! toucher runs for the batch's connections (`store::connections::touch_connections`),
//! timed in process on batches of the writer's size against the bench database. Compared
//! with the lookup rate and the queue backlog, this tells whether the writers are limited
//! by Postgres or by getting scheduled.

use mcp_connect::store::{self, PgPool, audit::HandoutRow};
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
    /// Rows per second the writer could insert back to back (it marks connections used
    /// in a task of its own).
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
        let now = time::OffsetDateTime::now_utc();
        let minute = now.replace_second(0).unwrap_or(now).replace_nanosecond(0).unwrap_or(now);
        let key = mcp_connect::domain::ApiKeyId::parse("0123456789abcdef")?;
        let events: Vec<HandoutRow> = rows
            .iter()
            .map(|(id, _, _)| HandoutRow {
                minute,
                connection_id: *id,
                api_key_id: key.clone(),
                proxied: None,
                count: 3,
                first_at: now,
                last_at: now,
                holder: None,
            })
            .collect();
        let mut ids: Vec<uuid::Uuid> = rows.iter().map(|(id, _, _)| *id).collect();
        ids.sort_unstable();
        let t = Instant::now();
        store::audit::insert_handouts(pool, "bench-00000000", uuid::Uuid::new_v4(), &events).await?;
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
