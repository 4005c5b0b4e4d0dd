//! "Token handed out" events, written in batches off the request path: the lookup only
//! appends the event to a queue; a background task writes up to 2,000 at a time in one
//! statement, every 100 ms or as soon as 2,000 are waiting, and a second one helps with
//! full batches only (so one batch is written while the next is committed, and at lower
//! rates the two never keep both cores busy at once). Appending wakes nobody below
//! that (a wake-up per request would cost a thread switch per request). A full queue
//! (10,000) makes the caller wait: events are never dropped. While the writers keep up, a
//! batch goes to Postgres 64 rows at a time with a pause between, so that its backend never
//! holds a core for long (`store::audit::insert_events_paced`).
//! Marking connections used (`last_used_at`, to the minute) is a second task's job, so that
//! those row updates never hold up the events (or, through a full queue, the lookups).

use crate::store::{self, PgPool, audit::AuditEvent};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};

/// Each batch is one transaction, so one WAL flush: smaller batches (500) made the
/// writer wait on flushes and fall behind the lookups in the benchmark.
const BATCH: usize = 2000;
const CAPACITY: usize = 10_000;
const EVERY: Duration = Duration::from_millis(100);
/// Between chunks of a batch's rows (the timer's resolution: 1-2 ms).
const PAUSE: Duration = Duration::from_millis(1);
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Writers on their own connections: at 28,000 hand-outs/s on two cores one writer was the
/// bottleneck (the queue stayed full with a third of the CPU idle).
const WRITERS: usize = 2;

/// Metrics (catalogue: `telemetry::metrics`).
pub const QUEUE_DEPTH: &str = "mcp_connect_handout_queue_depth";
pub const QUEUE_WAIT: &str = "mcp_connect_handout_queue_wait_seconds";
pub const BATCH_FAILURES: &str = "mcp_connect_handout_batch_failures_total";

type Queued = (time::OffsetDateTime, AuditEvent);

struct Queue {
    events: Mutex<Vec<Queued>>,
    /// A full batch is waiting.
    batch_ready: Notify,
    /// The writer took events out.
    room: Notify,
    /// Events taken out of the queue and not yet written (or given up).
    in_flight: AtomicUsize,
}

#[derive(Clone)]
pub struct HandoutAudit {
    queue: Arc<Queue>,
}

impl HandoutAudit {
    pub fn spawn(pool: PgPool) -> Self {
        let queue = Arc::new(Queue {
            events: Mutex::new(Vec::with_capacity(BATCH)),
            batch_ready: Notify::new(),
            room: Notify::new(),
            in_flight: AtomicUsize::new(0),
        });
        // Unbounded, but the toucher takes ids off it far faster than they come; only the
        // ones not marked within the last minute (RecentlyTouched) reach the database.
        let (touch_tx, touch_rx) = mpsc::unbounded_channel();
        for helper in 0..WRITERS {
            tokio::spawn(writer(pool.clone(), queue.clone(), touch_tx.clone(), helper > 0));
        }
        tokio::spawn(toucher(pool, touch_rx));
        Self { queue }
    }

    pub async fn record(&self, ev: AuditEvent) {
        let mut item = Some((time::OffsetDateTime::now_utc(), ev));
        let mut waited: Option<Instant> = None;
        loop {
            // Registered before looking, so that room made in between is not missed.
            let room = self.queue.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if let Ok(mut q) = self.queue.events.lock() {
                if q.len() < CAPACITY {
                    q.extend(item.take());
                    if q.len() == BATCH {
                        self.queue.batch_ready.notify_one();
                    }
                    drop(q);
                    if let Some(since) = waited {
                        metrics::histogram!(QUEUE_WAIT).record(since.elapsed().as_secs_f64());
                    }
                    return;
                }
            } else {
                return;
            }
            waited.get_or_insert_with(Instant::now);
            room.await;
        }
    }

    /// Events recorded and not yet written (or given up): queued, or in a batch being written.
    pub fn pending(&self) -> usize {
        let queued = self.queue.events.lock().map(|q| q.len()).unwrap_or(0);
        queued + self.queue.in_flight.load(Ordering::Acquire)
    }

    /// Waits until every event recorded so far is written (or its batch given up after its
    /// retries), for at most `within`; the writers are woken rather than waiting out their
    /// 100 ms. Used at shutdown. Returns whether the queue emptied in time.
    pub async fn drain(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.pending() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            self.queue.batch_ready.notify_one();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// Connections this instance marked as used lately: marking them again would change
/// nothing (`last_used_at` is kept to the minute) and cost a write each. Two generations of
/// ids, a minute each: an id is marked again one to two minutes after it was last marked.
/// Kept as 64 bits of each id (half the memory); two ids sharing them would only mean one
/// mark skipped for a minute, and the audit events hold every use anyway.
struct RecentlyTouched {
    current: HashSet<u64>,
    previous: HashSet<u64>,
    since: Instant,
}

fn short(id: &uuid::Uuid) -> u64 {
    id.as_u64_pair().0 ^ id.as_u64_pair().1
}

impl RecentlyTouched {
    fn new() -> Self {
        Self { current: HashSet::new(), previous: HashSet::new(), since: Instant::now() }
    }

    fn fresh(&mut self, ids: impl Iterator<Item = uuid::Uuid>) -> Vec<uuid::Uuid> {
        if self.since.elapsed() >= TOUCH_EVERY {
            self.previous = std::mem::take(&mut self.current);
            self.since = Instant::now();
        }
        let mut out: Vec<uuid::Uuid> = ids
            .filter(|id| {
                let s = short(id);
                !self.current.contains(&s) && !self.previous.contains(&s)
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        self.current.extend(out.iter().map(short));
        out
    }
}

/// Retries a batch write a few times, then reports it lost.
async fn with_retries<F, Fut>(what: &str, n: usize, mut write: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), sqlx::Error>>,
{
    for attempt in 0.. {
        match write().await {
            Ok(()) => return,
            Err(e) if attempt < 5 => {
                metrics::counter!(BATCH_FAILURES).increment(1);
                tracing::warn!(error = %e, attempt = attempt + 1, what, "batch write failed; retrying");
                tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
            }
            Err(e) => {
                metrics::counter!(BATCH_FAILURES).increment(1);
                tracing::error!(error = %e, what, rows = n, "batch could not be written");
                return;
            }
        }
    }
}

/// A `helper` writes full batches only: it waits for one to be ready.
async fn writer(pool: PgPool, queue: Arc<Queue>, touch: mpsc::UnboundedSender<Vec<uuid::Uuid>>, helper: bool) {
    let mut batch: Vec<Queued> = Vec::with_capacity(BATCH);
    loop {
        let waiting = queue.events.lock().map(|q| q.len()).unwrap_or(0);
        if helper {
            if waiting < BATCH {
                queue.batch_ready.notified().await;
                continue;
            }
        } else if waiting < BATCH {
            let _ = tokio::time::timeout(EVERY, queue.batch_ready.notified()).await;
        }
        if let Ok(mut q) = queue.events.lock() {
            let n = q.len().min(BATCH);
            batch.extend(q.drain(..n));
            // Counted while the queue is locked: `pending` never sees the batch in neither.
            queue.in_flight.fetch_add(n, Ordering::AcqRel);
            metrics::gauge!(QUEUE_DEPTH).set(q.len() as f64);
        }
        queue.room.notify_waiters();
        if batch.is_empty() {
            continue;
        }
        // Paced while the lookups leave the writers time to spare: a short pause between
        // chunks lets the lookups' threads run (store::audit::insert_events_paced).
        let pause = || {
            let behind = queue.events.lock().map(|q| q.len() >= BATCH).unwrap_or(true);
            async move {
                if !behind {
                    tokio::time::sleep(PAUSE).await;
                }
            }
        };
        with_retries("audit events", batch.len(), || store::audit::insert_events_paced(&pool, &batch, pause)).await;
        let _ = touch.send(batch.iter().filter_map(|(_, e)| e.connection_id).collect());
        queue.in_flight.fetch_sub(batch.len(), Ordering::AcqRel);
        batch.clear();
    }
}

/// Marks connections used, in batches, as fast as the database takes it.
async fn toucher(pool: PgPool, mut rx: mpsc::UnboundedReceiver<Vec<uuid::Uuid>>) {
    let mut touched = RecentlyTouched::new();
    while let Some(first) = rx.recv().await {
        let mut ids = touched.fresh(first.into_iter());
        while ids.len() < BATCH {
            match rx.try_recv() {
                Ok(more) => ids.extend(touched.fresh(more.into_iter())),
                Err(_) => break,
            }
        }
        if ids.is_empty() {
            continue;
        }
        with_retries("last use of connections", ids.len(), || store::connections::touch_connections(&pool, &ids)).await;
    }
}
