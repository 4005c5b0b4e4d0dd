//! The vault against the real database: what a dump shows, rows moved, keys rotated.

use crate::helpers::{KEY_A, KEY_B, Options, spawn_app, spawn_on};
use serde_json::json;

#[tokio::test]
async fn a_dump_of_the_connections_table_holds_no_plaintext_token() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_PLAINTEXT_MARKER_123", &["read:user"], None).await;
    // Every column, as text and as raw bytes, the way pg_dump would see it.
    let rows: Vec<String> = sqlx::query_scalar("SELECT c::text FROM connections c").fetch_all(&app.pool).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(!rows[0].contains("gho_PLAINTEXT_MARKER_123"));
    assert!(!rows[0].contains(&hex("gho_PLAINTEXT_MARKER_123")));
    assert!(!rows[0].contains("refresh-gho_PLAINTEXT"));
    let blobs: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT access_token_ct FROM connections").fetch_all(&app.pool).await.unwrap();
    assert!(!blobs[0].windows(8).any(|w| w == b"gho_PLAI"));
    // ...and the real lookup still opens it.
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_PLAINTEXT_MARKER_123");
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_ciphertext_moved_to_another_row_is_never_handed_out() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], None).await;
    app.insert_connection("acme", "mallory", "github", "gho_mallory", &["read:user"], None).await;
    sqlx::query(
        "UPDATE connections SET access_token_ct = (SELECT access_token_ct FROM connections WHERE subject = 'alice')
         WHERE subject = 'mallory'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let r = app.token(&app.key, json!({"subject": "mallory", "provider": "github"})).await;
    let text = r.text().await.unwrap();
    assert!(!text.contains("gho_alice"), "{text}");
    assert!(text.contains("internal_error"));
    // Alice's own row is untouched and still opens.
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_alice");
}

#[tokio::test]
async fn a_tampered_ciphertext_is_never_handed_out() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], None).await;
    sqlx::query(
        "UPDATE connections SET access_token_ct = set_byte(access_token_ct, 30, get_byte(access_token_ct, 30) # 1)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r.status(), 500);
    assert!(!r.text().await.unwrap().contains("gho_alice"));
}

#[tokio::test]
async fn rows_sealed_under_an_old_key_open_after_a_new_key_is_added() {
    let app = spawn_app().await; // keyring: KEY_A only
    app.insert_connection("acme", "alice", "github", "gho_old_key", &["read:user"], None).await;
    let rotated = spawn_on(&app, &Options { vault_keys: format!("{KEY_B},{KEY_A}"), ..Options::default() }).await;
    let b = rotated.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_old_key");
    // New seals use the current key.
    rotated.insert_connection("acme", "bob", "github", "gho_new_key", &["read:user"], None).await;
    let key_id: String = sqlx::query_scalar("SELECT key_id FROM connections WHERE subject = 'bob'")
        .fetch_one(&rotated.pool)
        .await
        .unwrap();
    assert_eq!(key_id, "k-new");
}

#[tokio::test]
async fn a_row_under_a_key_no_longer_in_the_keyring_is_not_handed_out() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_old_key", &["read:user"], None).await;
    let only_new = spawn_on(&app, &Options { vault_keys: KEY_B.to_owned(), ..Options::default() }).await;
    let r = only_new.token(&only_new.key, json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r.status(), 500);
    assert!(!r.text().await.unwrap().contains("gho_old_key"));
}
