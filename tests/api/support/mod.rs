//! What the API tests share: the workspace's one harness, `mcp-connect-testkit`, whole;
//! and the helpers of this binary that more than one test module uses: a browser driven
//! over HTTP ([`browser`]), a real Chromium ([`chrome`]), a webhook receiver
//! ([`receiver`]), and the binary run as operators run it ([`binary`]).

pub mod binary;
pub mod browser;
pub mod chrome;
pub mod cluster;
pub mod hsm;
pub mod kms;
pub mod node;
pub mod pgbouncer;
pub mod receiver;

pub use mcp_connect_testkit::*;

/// A fresh database's URL for a test that starts a service of its own (the `dev` binary);
/// the database is dropped when the returned guard is.
pub async fn create_database() -> TestDatabase {
    TestDatabase::create().await.expect("a test database")
}

/// The reason code of the newest `connect_failed` audit event.
pub async fn last_connect_failure(app: &TestApp) -> serde_json::Value {
    sqlx::query_scalar("SELECT detail FROM audit_events WHERE kind = 'connect_failed' ORDER BY id DESC LIMIT 1")
        .fetch_optional(&app.pool)
        .await
        .unwrap()
        .unwrap_or(serde_json::Value::Null)
}
