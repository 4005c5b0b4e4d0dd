//! The lookup's own database connections, one small set per HTTP worker.
//!
//! A sqlx pool pings every connection it gets back (`return_to_pool`), which costs the
//! uncached lookup a second round trip for its one `SELECT`. These connections go back to
//! the set without that: a connection returns only after its query completed; one whose
//! query failed, or whose request was dropped mid-query, is dropped with it. A connection
//! that died while idle (a database restart, a proxy's timeout) is found by the next
//! query, which then runs once more on a new connection: the caller does not see it.
//! Prepared statements stay cached per connection. Behind a transaction pooler
//! (`database.pooler = "transaction"`) there are no such connections: the lookup runs on
//! the pool (`store::db`).

use crate::domain::ConnectionKey;
use crate::store::connections::{self, ConnectionRow};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Semaphore;

const WAIT: Duration = Duration::from_secs(5);

pub struct LookupConnections {
    /// Set behind a transaction pooler: the lookup runs there.
    through: Option<super::Db>,
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    slots: Semaphore,
}

impl LookupConnections {
    pub fn new(options: PgConnectOptions, max: u32) -> Self {
        Self { through: None, options, idle: Mutex::new(Vec::new()), slots: Semaphore::new(max.max(1) as usize) }
    }

    /// [`Self::new`], or the pool itself where it is behind a transaction pooler.
    pub fn for_pool(pool: &super::Db, options: PgConnectOptions, max: u32) -> Self {
        match pool.pooler() {
            super::Pooler::None => Self::new(options, max),
            super::Pooler::Transaction => Self { through: Some(pool.clone()), ..Self::new(options, max) },
        }
    }

    /// [`connections::find_connection`] on one of these connections.
    pub async fn find_connection(&self, key: &ConnectionKey) -> Result<Option<ConnectionRow>, sqlx::Error> {
        if let Some(pool) = &self.through {
            return connections::find_connection(pool, key).await;
        }
        let started = std::time::Instant::now();
        let slot = tokio::time::timeout(WAIT, self.slots.acquire()).await;
        metrics::histogram!(super::POOL_WAIT, "pool" => "lookup").record(started.elapsed().as_secs_f64());
        let _slot = slot.map_err(|_| sqlx::Error::PoolTimedOut)?.map_err(|_| sqlx::Error::PoolClosed)?;
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let reused = idle.is_some();
        let mut conn = match idle {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        let row = match connections::find_connection(&mut conn, key).await {
            Err(e) if reused && connection_lost(&e) => {
                conn = self.connect().await?;
                connections::find_connection(&mut conn, key).await?
            }
            r => r?,
        };
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
        Ok(row)
    }

    async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        tokio::time::timeout(WAIT, PgConnection::connect_with(&self.options))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
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
