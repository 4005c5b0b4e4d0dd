//! Expand/contract: a binary runs on a schema a newer release migrated further, as long as
//! that release only expanded it (`schema_compat`), so a rollback, or a pod of the release
//! before restarted in the middle of a rollout, keeps serving. This binary plays the
//! release before; the newer release's migration is written here as such a release would.
//! (Binaries before `schema_compat` existed do not do this: docs/operations.md says so.)

use crate::support::binary::{run, serve};
use crate::support::spawn_app;
use serde_json::json;

#[tokio::test]
async fn the_release_before_serves_on_a_schema_a_newer_release_expanded() {
    let app = spawn_app().await;
    // The newer release's migration: a column and a table this binary knows nothing of,
    // recorded as sqlx records a migration it applied.
    for statement in [
        "ALTER TABLE connections ADD COLUMN future_note text",
        "CREATE TABLE future_things (id bigint PRIMARY KEY)",
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99991231000000, 'a newer release expands', true, '\\x00', 0)",
    ] {
        sqlx::query(statement).execute(&app.pool).await.unwrap();
    }
    app.insert_connection("acme", "alice", "github", "gho_still_served", &["repo"], None).await;

    // Commands that check the schema, `migrate` (which has nothing to apply) and `serve`
    // (which migrates first) all run.
    for args in [&["apikey", "list"][..], &["migrate"]] {
        let db = app.db_url.clone();
        let o = tokio::task::spawn_blocking(move || run(&db, None, args)).await.unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let served = serve(&app, &[]).await;
    let r = app
        .client
        .post(format!("{}/v1/token", served.base))
        .bearer_auth(&app.key)
        .json(&json!({"subject": "alice", "provider": "github"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["access_token"], "gho_still_served");
    // A new link is written on the expanded tables as well.
    let r = app
        .client
        .post(format!("{}/v1/token", served.base))
        .bearer_auth(&app.key)
        .json(&json!({"subject": "bob", "provider": "github"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "connect_required");
    let ready = app.client.get(format!("{}/readyz", served.base)).send().await.unwrap();
    assert_eq!(ready.status(), 200, "ready: every migration it knows is applied");
    let version: i64 =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations").fetch_one(&app.pool).await.unwrap();
    assert_eq!(version, 99991231000000, "nothing was undone or redone");
}
