//! PostgreSQL slowed for a phase: one session runs a CPU-bound query that never ends by
//! itself, so that one of the two cores is taken while the service keeps serving. The
//! resilience target asks that the cache keeps answering (issue 26: an entry whose
//! confirmation falls behind expires, the lookup goes to the database, which makes the
//! database busier still).
//!
//! The query streams: `generate_series` in the select list yields row by row (in FROM it
//! would first be written out whole), and `md5` keeps each row busy. It is cancelled with
//! `pg_cancel_backend` when the phase ends; a `statement_timeout` ends it anyway should the
//! bench stop before that.

use anyhow::Context;
use sqlx::Connection;
use std::time::Duration;

const QUERY: &str = "SELECT count(*) FROM (SELECT md5(generate_series(1::bigint, 1000000000000)::text)) s";

pub struct Hog {
    /// The backend running the query (also its process id on this machine).
    pub pid: i32,
    running: tokio::task::JoinHandle<Result<(), sqlx::Error>>,
    cpu_ticks_at_start: u64,
}

/// What the hog took: CPU seconds of its backend while it ran.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HogResult {
    pub cpu_seconds: f64,
    pub seconds: f64,
}

impl Hog {
    /// Opens a session of its own and starts the query; returns once the backend runs it.
    pub async fn start(db_url: &str, pool: &mcp_connect::store::PgPool, backstop: Duration) -> anyhow::Result<Self> {
        let url = crate::db::with_application_name(db_url, "mcp-connect-bench-hog")?;
        let mut conn = sqlx::PgConnection::connect(&url).await.context("hog session")?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        let timeout = format!("SET statement_timeout = {}", backstop.as_millis());
        sqlx::raw_sql(sqlx::AssertSqlSafe(timeout)).execute(&mut conn).await?;
        let running = tokio::spawn(async move {
            let outcome = sqlx::raw_sql(QUERY).execute(&mut conn).await.map(|_| ());
            let _ = conn.close().await;
            outcome
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let active: bool = sqlx::query_scalar(
                "SELECT coalesce(bool_or(state = 'active'), false) FROM pg_stat_activity WHERE pid = $1",
            )
            .bind(pid)
            .fetch_one(pool)
            .await?;
            if active {
                break;
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "the hog query did not start within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self { pid, running, cpu_ticks_at_start: crate::cpu::process_ticks(pid as u32) })
    }

    /// Cancels the query and reports the CPU its backend used.
    pub async fn stop(
        self,
        pool: &mcp_connect::store::PgPool,
        started: std::time::Instant,
    ) -> anyhow::Result<HogResult> {
        let ticks = crate::cpu::process_ticks(self.pid as u32).saturating_sub(self.cpu_ticks_at_start);
        let seconds = started.elapsed().as_secs_f64();
        let _: bool = sqlx::query_scalar("SELECT pg_cancel_backend($1)").bind(self.pid).fetch_one(pool).await?;
        match tokio::time::timeout(Duration::from_secs(10), self.running).await {
            // Cancelled (57014), as asked; finishing on its own would mean the backstop fired.
            Ok(Ok(Err(sqlx::Error::Database(e)))) if e.code().as_deref() == Some("57014") => {}
            Ok(Ok(Err(e))) => return Err(e).context("the hog query failed"),
            Ok(Ok(Ok(()))) => anyhow::bail!("the hog query ended by itself"),
            Ok(Err(e)) => return Err(e).context("hog task"),
            Err(_) => anyhow::bail!("the hog query did not stop within 10 s of its cancel"),
        }
        Ok(HogResult { cpu_seconds: crate::cpu::ticks_to_seconds(ticks), seconds })
    }
}
