//! The lookup's own database connections, one small set per HTTP worker (of
//! `database.lookup_connections_per_worker`, default one: docs/operations.md, "Connections
//! per instance", has the figures for one against four near and far).
//!
//! A sqlx pool pings every connection it gets back (`return_to_pool`), which costs the
//! uncached lookup a second round trip for its one `SELECT`. These connections go back to
//! the set without that: a connection returns only after its statement completed; one
//! whose statement failed or took longer than [`STATEMENT`] is dropped. A connection that
//! died while idle (a database restart, a proxy's timeout) is found by the next
//! statement, which then runs once more on a new connection: the callers do not see it.
//! Prepared statements stay cached per connection. Behind a transaction pooler
//! (`database.pooler = "transaction"`) there are no such connections: the lookup runs on
//! the pool (`store::db`), one statement each.
//!
//! Lookups that wait for a connection are sent together. Each caller queues its key and
//! waits for a slot (a connection of the set); whoever gets one takes the keys queued
//! longest, up to [`BATCH`] with its own, into one statement
//! ([`connections::find_connections`]), and each caller gets the row of its own key. A
//! caller whose key went with another's statement meanwhile gives up waiting for a slot.
//! Alone, a lookup is the one-key `SELECT` as before, at once; under load, PostgreSQL
//! wakes once and starts one statement for several (in issue 46's profile of the uncached
//! hand-out, the statement's round trip, the backend's wake-up included, was a third of
//! the service's CPU, and the statement's own overhead most of PostgreSQL's). The
//! statement runs in a task of its own: a caller that goes away (its client hung up)
//! neither stops the others' lookups nor leaves a connection mid-statement, and cannot
//! cancel it either, hence the statement's own time limit.

use crate::domain::ConnectionKey;
use crate::store::connections::{self, ConnectionRow};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// The longest a lookup waits for a slot, and for a new connection.
const WAIT: Duration = Duration::from_secs(5);
/// The longest one statement may take (an index probe for each of at most [`BATCH`]
/// keys): past it its callers get a transient error and its connection is dropped (a
/// lock held on the table, a connection that stopped answering).
pub const STATEMENT: Duration = Duration::from_secs(10);
/// The most keys one statement looks up; the rest wait for the next slot.
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
    next_id: AtomicU64,
    statements: AtomicU64,
}

struct Waiting {
    id: u64,
    key: ConnectionKey,
    answer: oneshot::Sender<Answer>,
}

impl LookupConnections {
    pub fn new(options: PgConnectOptions, max: u32) -> Self {
        let set = Set {
            options,
            idle: Mutex::default(),
            queue: Mutex::default(),
            next_id: AtomicU64::new(0),
            statements: AtomicU64::new(0),
        };
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
        let id = self.set.next_id.fetch_add(1, Ordering::Relaxed);
        self.set.queue.lock().map_err(|_| sqlx::Error::PoolClosed)?.push(Waiting { id, key: key.clone(), answer });
        let started = std::time::Instant::now();
        let slot = tokio::select! {
            biased;
            // Another caller's statement took this key while this one waited.
            answer = &mut mine => return received(answer),
            slot = tokio::time::timeout(WAIT, self.slots.clone().acquire_owned()) => slot,
        };
        metrics::histogram!(super::POOL_WAIT, "pool" => "lookup").record(started.elapsed().as_secs_f64());
        let slot = slot.map_err(|_| sqlx::Error::PoolTimedOut)?.map_err(|_| sqlx::Error::PoolClosed)?;
        let batch = self.set.take(id);
        if batch.is_empty() {
            // This key went with another statement, whose answer is on its way.
            drop(slot);
        } else {
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
    /// The keys queued longest, and the caller's own (`own`) if it is still queued: the
    /// caller holds the slot, and no one else may come to take it. Callers that went away
    /// are left out.
    fn take(&self, own: u64) -> Vec<Waiting> {
        let Ok(mut queue) = self.queue.lock() else { return Vec::new() };
        queue.retain(|w| !w.answer.is_closed());
        let n = queue.len().min(BATCH - 1);
        let mut batch: Vec<Waiting> = queue.drain(..n).collect();
        if let Some(i) = queue.iter().position(|w| w.id == own) {
            batch.push(queue.remove(i));
        }
        batch
    }

    /// One statement for `batch`'s keys, each caller answered with its own key's row;
    /// `_slot` is held until the connection is back in the set. When a statement of
    /// several keys fails for another cause than the connection (e.g. a row this binary
    /// cannot read), each key is looked up alone, so that only its own callers get the
    /// error.
    async fn send(self: Arc<Self>, batch: Vec<Waiting>, _slot: OwnedSemaphorePermit) {
        let mut asked: Vec<(ConnectionKey, Vec<oneshot::Sender<Answer>>)> = Vec::new();
        for w in batch {
            match asked.iter_mut().find(|(key, _)| *key == w.key) {
                Some((_, callers)) => callers.push(w.answer),
                None => asked.push((w.key, vec![w.answer])),
            }
        }
        let keys: Vec<&ConnectionKey> = asked.iter().map(|(key, _)| key).collect();
        let found = self.query(&keys).await;
        drop(keys);
        match found {
            Ok(mut rows) => {
                for (key, callers) in asked {
                    let row = row_of(&mut rows, &key);
                    to_each(callers, Ok(row));
                }
            }
            Err(e) if asked.len() > 1 && !transient(&e) => {
                tracing::warn!(error = %e, "a batch of lookups failed; each key is looked up alone");
                for (key, callers) in asked {
                    let found = self.query(&[&key]).await.map(|mut rows| row_of(&mut rows, &key));
                    to_each(callers, found);
                }
            }
            Err(e) => to_each(asked.into_iter().flat_map(|(_, callers)| callers).collect(), Err(e)),
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
    /// batching, and as the bench's floor runs it). Past [`STATEMENT`]: `PoolTimedOut`
    /// (transient, and not taken for a lost connection: not run again).
    async fn statement(
        &self,
        conn: &mut PgConnection,
        keys: &[&ConnectionKey],
    ) -> Result<Vec<ConnectionRow>, sqlx::Error> {
        self.statements.fetch_add(1, Ordering::Relaxed);
        let run = async {
            match keys {
                [key] => Ok(connections::find_connection(&mut *conn, key).await?.into_iter().collect()),
                _ => connections::find_connections(&mut *conn, keys).await,
            }
        };
        tokio::time::timeout(STATEMENT, run).await.unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        tokio::time::timeout(WAIT, PgConnection::connect_with(&self.options))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
    }
}

/// The row of `key` among `rows` (tenant, subject and provider all alike), taken out.
fn row_of(rows: &mut Vec<ConnectionRow>, key: &ConnectionKey) -> Option<ConnectionRow> {
    let at = rows
        .iter()
        .position(|r| r.tenant_id == key.tenant && r.subject == key.subject && r.provider == key.provider)?;
    Some(rows.swap_remove(at))
}

/// `found` to each of `callers` (a copy to each but the last: neither the row nor
/// `sqlx::Error` is shared). A caller that went away does not take it.
fn to_each(mut callers: Vec<oneshot::Sender<Answer>>, found: Answer) {
    let last = callers.pop();
    for caller in callers {
        let copy = match &found {
            Ok(row) => Ok(row.clone()),
            Err(e) => Err(copy_of(e)),
        };
        let _ = caller.send(copy);
    }
    if let Some(caller) = last {
        let _ = caller.send(found);
    }
}

/// A retry may cure it: the database is unreachable, busy or stopping, or the connection
/// was out of step with it (`flows::Fault::is_transient` for a database error). A protocol
/// error: the connection read a message it did not expect (a notification a pooler let
/// through; `store::db` closes such a connection outside a transaction, a transaction's is
/// rolled back and checked by the pool on its return).
pub fn transient(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Protocol(_))
        || connection_lost(e)
        || server_busy(e)
}

/// The error of a statement, for each caller of its batch but one (who gets the error
/// itself): `sqlx::Error` is not `Clone`. The copy keeps whether it is transient
/// ([`transient`]) and the message.
fn copy_of(e: &sqlx::Error) -> sqlx::Error {
    match e {
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        sqlx::Error::Protocol(m) => sqlx::Error::Protocol(m.clone()),
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
