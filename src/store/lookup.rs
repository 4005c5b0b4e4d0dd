//! The lookup's own database connections, one small set per HTTP worker.
//!
//! A sqlx pool pings every connection it gets back (`return_to_pool`), which costs the
//! uncached lookup a second round trip for its one `SELECT`. These connections go back to
//! the set without that: a connection returns only after its query completed; one whose
//! query failed is dropped. A connection that died while idle (a database restart, a
//! proxy's timeout) is found by the next query, which then runs once more on a new
//! connection: the callers do not see it. Prepared statements stay cached per connection.
//! Behind a transaction pooler (`database.pooler = "transaction"`) there are no such
//! connections: the lookup runs on the pool (`store::db`).
//!
//! Lookups that wait for a connection are sent together: each caller queues its key, and
//! whoever gets a connection takes every key queued by then (up to [`BATCH`]) into one
//! statement ([`connections::find_connections`]), then hands each caller the row of its
//! own key. Alone, a lookup is the one-key `SELECT` as before, at once; under load,
//! PostgreSQL wakes once and starts one statement for several of them (in issue 46's
//! profile of the uncached hand-out, the statement's round trip, the backend's wake-up
//! included, was a third of the service's CPU and most of PostgreSQL's). The statement
//! runs in a task of its own, so a caller that goes away (its client hung up) neither
//! stops the others' lookups nor leaves a connection mid-query.

use crate::domain::ConnectionKey;
use crate::store::connections::{self, ConnectionRow};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

const WAIT: Duration = Duration::from_secs(5);
/// The most keys one statement looks up; the rest wait for the next connection free.
pub const BATCH: usize = 32;

type Answer = Result<Option<ConnectionRow>, sqlx::Error>;

pub struct LookupConnections {
    /// Set behind a transaction pooler: the lookup runs there.
    through: Option<super::Db>,
    set: Arc<Set>,
    slots: Arc<Semaphore>,
}

/// What the statements' tasks share with the callers.
struct Set {
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    /// Callers whose key no statement has taken yet, oldest first.
    queue: Mutex<Vec<Waiting>>,
    statements: AtomicU64,
}

struct Waiting {
    key: ConnectionKey,
    answer: oneshot::Sender<Answer>,
}

impl LookupConnections {
    pub fn new(options: PgConnectOptions, max: u32) -> Self {
        // The batch's statement takes arrays: left to choose, PostgreSQL plans it anew for
        // nearly every execution (a custom plan for each array length it sees, 88 µs each
        // in issue 46's bench, more than the statement ran). Its generic plan is the one
        // wanted: an index probe per key. The one-key statement's is generic already.
        let options = options.options([("plan_cache_mode", "force_generic_plan")]);
        let set = Set { options, idle: Mutex::default(), queue: Mutex::default(), statements: AtomicU64::new(0) };
        Self { through: None, set: Arc::new(set), slots: Arc::new(Semaphore::new(max.max(1) as usize)) }
    }

    /// [`Self::new`], or the pool itself where it is behind a transaction pooler.
    pub fn for_pool(pool: &super::Db, options: PgConnectOptions, max: u32) -> Self {
        match pool.pooler() {
            super::Pooler::None => Self::new(options, max),
            super::Pooler::Transaction => Self { through: Some(pool.clone()), ..Self::new(options, max) },
        }
    }

    /// [`connections::find_connection`] on one of these connections, alone or in one
    /// statement with other callers' keys (see the module's doc).
    pub async fn find_connection(&self, key: &ConnectionKey) -> Answer {
        if let Some(pool) = &self.through {
            return connections::find_connection(pool, key).await;
        }
        let (answer, mut mine) = oneshot::channel();
        self.set.queue.lock().map_err(|_| sqlx::Error::PoolClosed)?.push(Waiting { key: key.clone(), answer });
        let started = std::time::Instant::now();
        let slot = tokio::select! {
            biased;
            // Another caller's statement took this key while this one waited.
            answer = &mut mine => return received(answer),
            slot = tokio::time::timeout(WAIT, self.slots.clone().acquire_owned()) => slot,
        };
        metrics::histogram!(super::POOL_WAIT, "pool" => "lookup").record(started.elapsed().as_secs_f64());
        let slot = slot.map_err(|_| sqlx::Error::PoolTimedOut)?.map_err(|_| sqlx::Error::PoolClosed)?;
        let batch = self.set.take();
        // Empty: this key went with another statement, whose answer is on its way.
        if !batch.is_empty() {
            tokio::spawn(self.set.clone().send(batch, slot));
        }
        received(mine.await)
    }

    /// Statements these connections sent to PostgreSQL so far (one per batch of keys).
    pub fn statements(&self) -> u64 {
        self.set.statements.load(Ordering::Relaxed)
    }
}

/// The answer the statement sent; none when its task ended first (the runtime stopping).
fn received(answer: Result<Answer, oneshot::error::RecvError>) -> Answer {
    answer.unwrap_or(Err(sqlx::Error::PoolClosed))
}

impl Set {
    /// The keys queued longest, up to [`BATCH`], leaving out callers that went away.
    fn take(&self) -> Vec<Waiting> {
        let Ok(mut queue) = self.queue.lock() else { return Vec::new() };
        queue.retain(|w| !w.answer.is_closed());
        let n = queue.len().min(BATCH);
        queue.drain(..n).collect()
    }

    /// One statement for `batch`'s keys, each caller answered with its own key's row;
    /// `_slot` is held until the connection is back in the set.
    async fn send(self: Arc<Self>, batch: Vec<Waiting>, _slot: OwnedSemaphorePermit) {
        let mut keys: Vec<&ConnectionKey> = Vec::with_capacity(batch.len());
        for w in &batch {
            if !keys.contains(&&w.key) {
                keys.push(&w.key);
            }
        }
        let found = self.query(&keys).await;
        drop(keys);
        match found {
            Ok(mut rows) => {
                // The last caller of a key takes its row; any before it, a copy.
                let last: Vec<bool> =
                    (0..batch.len()).map(|i| !batch[i + 1..].iter().any(|later| later.key == batch[i].key)).collect();
                for (w, last) in batch.into_iter().zip(last) {
                    let row = match rows.iter().position(|r| is_row_of(r, &w.key)) {
                        Some(p) if last => Some(rows.swap_remove(p)),
                        Some(p) => Some(rows[p].clone()),
                        None => None,
                    };
                    // A caller that went away does not take it.
                    let _ = w.answer.send(Ok(row));
                }
            }
            Err(e) => {
                let mut waiting = batch.into_iter();
                let first = waiting.next();
                for w in waiting {
                    let _ = w.answer.send(Err(copy_of(&e)));
                }
                if let Some(w) = first {
                    let _ = w.answer.send(Err(e));
                }
            }
        }
    }

    async fn query(&self, keys: &[&ConnectionKey]) -> Result<Vec<ConnectionRow>, sqlx::Error> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let reused = idle.is_some();
        let mut conn = match idle {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        let rows = match self.statement(&mut conn, keys).await {
            Err(e) if reused && connection_lost(&e) => {
                conn = self.connect().await?;
                self.statement(&mut conn, keys).await?
            }
            r => r?,
        };
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
        Ok(rows)
    }

    /// One key alone is the one-key `SELECT` (the plan and the statement as before
    /// batching, and as the bench's floor runs it).
    async fn statement(
        &self,
        conn: &mut PgConnection,
        keys: &[&ConnectionKey],
    ) -> Result<Vec<ConnectionRow>, sqlx::Error> {
        self.statements.fetch_add(1, Ordering::Relaxed);
        match keys {
            [key] => Ok(connections::find_connection(conn, key).await?.into_iter().collect()),
            _ => connections::find_connections(conn, keys).await,
        }
    }

    async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        tokio::time::timeout(WAIT, PgConnection::connect_with(&self.options))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
    }
}

fn is_row_of(row: &ConnectionRow, key: &ConnectionKey) -> bool {
    row.tenant_id == key.tenant && row.subject == key.subject && row.provider == key.provider
}

/// The error of a statement, for each caller of its batch after the first (who gets the
/// error itself): `sqlx::Error` is not `Clone`. The copy keeps what callers decide on
/// (`flows::Fault::is_transient`) and the message.
fn copy_of(e: &sqlx::Error) -> sqlx::Error {
    match e {
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        e if connection_lost(e) || server_busy(e) => sqlx::Error::Io(std::io::Error::other(e.to_string())),
        e => sqlx::Error::Decode(e.to_string().into()),
    }
}

/// The connection, not the query, failed: an I/O error, or the server ending the session
/// (SQLSTATE classes 08, connection exception, and 57, operator intervention).
pub fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| c.starts_with("08") || c.starts_with("57")),
        _ => false,
    }
}

/// The server is out of a resource, e.g. `too many clients` (SQLSTATE class 53): try later.
pub fn server_busy(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| c.starts_with("53")))
}
