//! The API tests' harness is the workspace's one test harness, `mcp-connect-testkit`.

pub use mcp_connect_testkit::*;

/// A fresh database's URL for a test that starts a service of its own (the `dev` binary);
/// the database is dropped when the returned guard is.
pub async fn create_database() -> TestDatabase {
    TestDatabase::create().await.expect("a test database")
}
