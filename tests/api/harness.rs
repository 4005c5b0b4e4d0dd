//! The harness itself: test databases do not pile up.

use crate::support::{TestDatabase, database_server_url, sweep};
use sqlx::Connection;

async fn exists(name: &str) -> bool {
    let mut conn = sqlx::PgConnection::connect(&database_server_url()).await.unwrap();
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_test_database_is_dropped_when_its_test_ends() {
    let db = TestDatabase::create().await.unwrap();
    let name = db.name.clone();
    assert!(exists(&name).await);
    drop(db);
    assert!(!exists(&name).await, "{name} is dropped with its guard");
}

#[tokio::test]
async fn a_sweep_drops_a_crashed_runs_database_and_leaves_a_live_ones() {
    // A live test's database, held by its guard, with a session on it.
    let live = TestDatabase::create().await.unwrap();
    let mut on_live = sqlx::PgConnection::connect(&live.url).await.unwrap();
    // A crashed run's database: nobody holds its lock.
    let left = format!("mcpc_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&database_server_url()).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {left}"))).execute(&mut conn).await.unwrap();
    // Tests starting meanwhile sweep too: whichever sweep takes the leftover, it goes.
    sweep(&database_server_url()).await.unwrap();
    assert!(!exists(&left).await, "the leftover {left} is dropped");
    assert!(exists(&live.name).await, "a database in use is never swept");
    sqlx::query("SELECT 1").execute(&mut on_live).await.unwrap();
}
