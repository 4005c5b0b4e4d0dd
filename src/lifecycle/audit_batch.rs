//! "Token handed out" events, written in batches off the request path: the lookup only
//! queues the event; a background task writes up to 2,000 at a time in one statement, at
//! least every 250 ms, and marks the connections used (to the minute). A full queue makes
//! the caller wait: events are never dropped.

use crate::store::{self, PgPool, audit::AuditEvent};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const BATCH: usize = 2000;
const TOUCH_EVERY: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct HandoutAudit {
    tx: mpsc::Sender<(time::OffsetDateTime, AuditEvent)>,
}

impl HandoutAudit {
    pub fn spawn(pool: PgPool) -> Self {
        let (tx, rx) = mpsc::channel(10_000);
        tokio::spawn(writer(pool, rx));
        Self { tx }
    }

    pub async fn record(&self, ev: AuditEvent) {
        let item = (time::OffsetDateTime::now_utc(), ev);
        if let Err(mpsc::error::TrySendError::Full(item)) = self.tx.try_send(item) {
            let _ = self.tx.send(item).await;
        }
    }
}

/// Connections this instance marked as used in the last minute: marking them again would
/// change nothing (`last_used_at` is kept to the minute) and cost a write each.
struct RecentlyTouched {
    at: HashMap<uuid::Uuid, Instant>,
}

impl RecentlyTouched {
    fn fresh(&mut self, ids: impl Iterator<Item = uuid::Uuid>) -> Vec<uuid::Uuid> {
        let now = Instant::now();
        if self.at.len() > 500_000 {
            self.at.retain(|_, t| now.duration_since(*t) < TOUCH_EVERY);
        }
        let mut out: Vec<uuid::Uuid> =
            ids.filter(|id| self.at.get(id).is_none_or(|t| now.duration_since(*t) >= TOUCH_EVERY)).collect();
        out.sort_unstable();
        out.dedup();
        for id in &out {
            self.at.insert(*id, now);
        }
        out
    }
}

async fn writer(pool: PgPool, mut rx: mpsc::Receiver<(time::OffsetDateTime, AuditEvent)>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut touched = RecentlyTouched { at: HashMap::new() };
    loop {
        let Some(first) = rx.recv().await else { return };
        batch.push(first);
        let deadline = tokio::time::sleep(Duration::from_millis(250));
        tokio::pin!(deadline);
        while batch.len() < BATCH {
            tokio::select! {
                ev = rx.recv() => match ev { Some(ev) => batch.push(ev), None => break },
                _ = &mut deadline => break,
            }
        }
        let ids = touched.fresh(batch.iter().filter_map(|(_, e)| e.connection_id));
        let mut attempt = 0;
        loop {
            let r = async {
                store::audit::insert_events(&pool, &batch).await?;
                if ids.is_empty() { Ok(()) } else { store::connections::touch_connections(&pool, &ids).await }
            }
            .await;
            match r {
                Ok(()) => break,
                Err(e) if attempt < 5 => {
                    attempt += 1;
                    tracing::warn!(error = %e, attempt, "audit batch write failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, events = batch.len(), "audit batch could not be written");
                    break;
                }
            }
        }
        batch.clear();
    }
}
