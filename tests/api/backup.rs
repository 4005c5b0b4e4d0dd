//! What a restore means for a token vault (docs/operations.md, "Backup and restore"): a
//! backup taken with `pg_dump`, a refresh that rotates the refresh token and a revocation
//! after it, then the backup restored: the rotated-out refresh token is dead at the
//! provider, so that connection ends in `needs_reauth` and asks for a new connect, once,
//! not in a loop; the connection revoked since is back and must be revoked again.

use crate::support::{Options, TestApp, TestDatabase};
use serde_json::json;
use std::process::Command;
use time::OffsetDateTime;

fn pg(tool: &str, args: &[&str]) {
    let o = Command::new(tool).args(args).output().unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(o.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

async fn status(app: &TestApp, id: mcp_connect::domain::ConnectionId) -> String {
    sqlx::query_scalar("SELECT status FROM connections WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_restored_backup_asks_again_for_grants_rotated_since_and_brings_back_revoked_ones() {
    let app = crate::support::spawn_app().await;
    // Alice's access token has expired: her next call refreshes it, which rotates the
    // refresh token. Bob's is valid.
    let expired = OffsetDateTime::now_utc() - time::Duration::minutes(5);
    let (alice, _, _) = app.insert_provider_grant("alice", "octo-alice", Some(expired)).await;
    let later = OffsetDateTime::now_utc() + time::Duration::hours(1);
    let (bob, bob_access, _) = app.insert_provider_grant("bob", "octo-bob", Some(later)).await;

    let dump = std::env::temp_dir().join(format!("mcpc-backup-{}.dump", uuid::Uuid::new_v4().simple()));
    pg("pg_dump", &["--format=custom", "--no-owner", "-f", dump.to_str().unwrap(), "-d", &app.db_url]);

    // After the backup: alice's refresh (the provider rotates her refresh token), bob's
    // revocation (at the provider, RFC 7009, and here).
    let ask = |subject: &'static str| json!({"subject": subject, "provider": "testp"});
    assert_eq!(app.token_ok(ask("alice")).await["status"], "connected");
    assert_eq!(app.provider.stats().refresh_calls, 1);
    let r = app.admin(reqwest::Method::POST, &format!("/connections/{bob}/revoke"), None).await;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(status(&app, bob).await, "revoked");

    // The restore, into a database of its own, served by an instance with the same keyring.
    let restored_db = TestDatabase::create().await.unwrap();
    pg("pg_restore", &["--no-owner", "-d", &restored_db.url, dump.to_str().unwrap()]);
    let _ = std::fs::remove_file(&dump);
    let restored =
        TestApp::start_on(&restored_db.url, None, app.idp.clone(), app.provider.clone(), &Options::default())
            .await
            .unwrap();

    // Alice's row holds the refresh token rotated out since: the provider refuses it
    // (`invalid_grant`), the connection needs re-authorisation, and she is asked to connect
    // again. Asked again, the answer is the same and the provider is not called again.
    let first = restored.token_ok(ask("alice")).await;
    assert_eq!(first["status"], "connect_required", "{first}");
    assert_eq!(status(&restored, alice).await, "needs_reauth");
    assert_eq!(app.provider.stats().refresh_calls, 2, "one refresh attempt with the dead token");
    let again = restored.token_ok(ask("alice")).await;
    assert_eq!(again["status"], "connect_required");
    assert_eq!(again["elicitation"]["id"], first["elicitation"]["id"], "the same link, no new grant attempt");
    assert_eq!(app.provider.stats().refresh_calls, 2, "not in a loop");

    // Bob's revocation is not in the backup: his connection is back, with an access token
    // the provider already revoked. The operator revokes it again (the runbook's step).
    assert_eq!(status(&restored, bob).await, "active");
    let b = restored.token_ok(ask("bob")).await;
    assert_eq!(b["access_token"], bob_access.as_str(), "handed out: the restore brought it back");
    let r = restored.admin(reqwest::Method::POST, &format!("/connections/{bob}/revoke"), None).await;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(restored.token_ok(ask("bob")).await["status"], "connect_required");
}
