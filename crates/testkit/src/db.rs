//! Test databases: one per test, dropped when the test ends (pass or fail), and any left
//! by a run that crashed dropped by the next.
//!
//! How a leftover is told from a database another test is using right now: each test
//! process holds a session-level advisory lock named after its database, on a connection
//! of its own, from before `CREATE DATABASE` until the drop. PostgreSQL releases the lock
//! when that session ends, also when the process is killed. A sweep drops every
//! `mcpc_test_*` database whose lock it can take, so it never touches a live one.

use anyhow::{Context, Result};
use sqlx::Connection;

/// The advisory-lock class of test databases ("mcpc"); the object id comes from the name.
const LOCK_CLASS: i32 = 0x6d63_7063;
const PREFIX: &str = "mcpc_test_";

/// The Postgres server: `DATABASE_URL` (any database on it) or the local default.
pub fn database_server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// An empty database of this test; dropped (`WITH (FORCE)`, ending the sessions still on
/// it) when this value is dropped, unless `MCP_CONNECT_TEST_KEEP_DB` is set, for looking
/// at it after a failure.
pub struct TestDatabase {
    pub url: String,
    pub name: String,
    server: String,
    /// Holds the advisory lock that tells sweeps this database is in use.
    _keeper: sqlx::PgConnection,
}

/// The lock's object id: the first four bytes of the name's uuid.
fn lock_key(name: &str) -> Option<i32> {
    let id = uuid::Uuid::parse_str(name.strip_prefix(PREFIX)?).ok()?;
    let b = id.as_bytes();
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn with_database(server: &str, name: &str) -> Result<String> {
    let mut url = url::Url::parse(server).context("DATABASE_URL is not a URL")?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

async fn connect(server: &str) -> Result<sqlx::PgConnection> {
    sqlx::PgConnection::connect(server)
        .await
        .with_context(|| "connect to Postgres (is it running on 127.0.0.1:5432 or at DATABASE_URL?)")
}

impl TestDatabase {
    /// Sweeps leftovers (once per process), then creates `mcpc_test_<uuid>`.
    pub async fn create() -> Result<TestDatabase> {
        let server = database_server_url();
        let mut keeper = connect(&server).await?;
        SWEPT.get_or_try_init(|| sweep(&server)).await?;
        let name = format!("{PREFIX}{}", uuid::Uuid::new_v4().simple());
        // Locked before it exists, so no sweep can take it for a leftover in between.
        let key = lock_key(&name).context("lock key of a fresh name")?;
        sqlx::query("SELECT pg_advisory_lock($1, $2)").bind(LOCK_CLASS).bind(key).execute(&mut keeper).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut keeper).await?;
        Ok(TestDatabase { url: with_database(&server, &name)?, name, server, _keeper: keeper })
    }
}

static SWEPT: tokio::sync::OnceCell<usize> = tokio::sync::OnceCell::const_new();

/// Drops every test database that no live test holds; returns how many it dropped.
pub async fn sweep(server: &str) -> Result<usize> {
    let mut conn = connect(server).await?;
    let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'mcpc\\_test\\_%'")
        .fetch_all(&mut conn)
        .await?;
    let mut dropped = 0;
    for name in names {
        let Some(key) = lock_key(&name) else { continue };
        let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
            .bind(LOCK_CLASS)
            .bind(key)
            .fetch_one(&mut conn)
            .await?;
        if free {
            // Another sweep may drop it at the same time: that one's error is no matter.
            if drop_database(&mut conn, &name).await.is_ok() {
                dropped += 1;
            }
            sqlx::query("SELECT pg_advisory_unlock($1, $2)").bind(LOCK_CLASS).bind(key).execute(&mut conn).await?;
        }
    }
    Ok(dropped)
}

async fn drop_database(conn: &mut sqlx::PgConnection, name: &str) -> Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))).execute(conn).await?;
    Ok(())
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if std::env::var_os("MCP_CONNECT_TEST_KEEP_DB").is_some() {
            eprintln!("kept the test database {} (on the DATABASE_URL server)", self.name);
            return;
        }
        // Drop runs inside the test's runtime, which cannot be blocked on from within: the
        // DROP gets a thread and a runtime of its own. The keeper, and with it the lock, goes
        // after the drop.
        let (server, name) = (self.server.clone(), self.name.clone());
        let done = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let mut conn = connect(&server).await?;
                drop_database(&mut conn, &name).await
            })
        })
        .join();
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop the test database {} (the next run sweeps it): {e:#}", self.name),
            Err(_) => eprintln!("dropping the test database {} panicked (the next run sweeps it)", self.name),
        }
    }
}
