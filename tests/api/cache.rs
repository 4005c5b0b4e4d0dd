//! The lookup cache may never serve what was revoked: notifications from the changing
//! transaction reach every instance; a cut listener empties and bypasses the cache.

use crate::support::{Options, TestApp, eventually, spawn_app, spawn_on};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

fn lookup() -> serde_json::Value {
    json!({"subject": "alice", "provider": "github"})
}

async fn serving(app: &TestApp) {
    eventually(Duration::from_secs(5), "the cache starts serving", || async { app.state.caches.is_serving() }).await;
}

#[tokio::test]
async fn a_revocation_on_instance_a_stops_instance_b_within_a_second() {
    let a = spawn_app().await;
    let b = spawn_on(&a, &Options::default()).await;
    serving(&b).await;
    let id = a.insert_connection("acme", "alice", "github", "gho_cached", &["read:user"], None).await;
    assert_eq!(b.token_ok(lookup()).await["status"], "connected");
    assert_eq!(b.state.caches.len(), 1, "B serves alice's row from its cache");
    let r = a.admin(Method::POST, &format!("/connections/{id}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    eventually(Duration::from_secs(1), "B stops handing out the revoked token", || async {
        b.token_ok(lookup()).await["status"] == "connect_required"
    })
    .await;
    // And on A, which made the change, at once.
    assert_eq!(a.token_ok(lookup()).await["status"], "connect_required");
}

#[tokio::test]
async fn a_cut_listener_empties_the_cache_and_nothing_stale_is_handed_out() {
    let app = spawn_app().await;
    serving(&app).await;
    app.insert_connection("acme", "alice", "github", "gho_cached", &["read:user"], None).await;
    assert_eq!(app.token_ok(lookup()).await["status"], "connected");
    assert_eq!(app.state.caches.len(), 1);
    // Cut every LISTEN connection to this database, as a network blip or a proxy would.
    let cut: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(!cut.is_empty(), "found the listener connection");
    let stopped = || async { !app.state.caches.is_serving() };
    crate::support::eventually(Duration::from_secs(5), "the cache stops serving when its listener is gone", stopped)
        .await;
    assert!(app.state.caches.is_empty());
    // A change made while nobody listens (its notification is lost)...
    sqlx::query("UPDATE connections SET status = 'revoked', access_token_ct = NULL, refresh_token_ct = NULL")
        .execute(&app.pool)
        .await
        .unwrap();
    // ...is seen at once, because lookups go to the database meanwhile.
    assert_eq!(app.token_ok(lookup()).await["status"], "connect_required");
    // The listener comes back by itself and the cache serves again.
    serving(&app).await;
}

#[tokio::test]
async fn a_kill_switch_set_elsewhere_reaches_a_cached_instance() {
    let a = spawn_app().await;
    let b = spawn_on(&a, &Options::default()).await;
    serving(&b).await;
    a.insert_connection("acme", "alice", "github", "gho_cached", &["read:user"], None).await;
    assert_eq!(b.token_ok(lookup()).await["status"], "connected");
    a.admin(Method::PUT, "/kill-switches/github", Some(json!({"mode": "no_token_handouts"}))).await;
    assert!(b.state.caches.barrier(&b.pool).await);
    assert_eq!(b.token(&b.key, lookup()).await.status(), 403);
}

#[tokio::test]
async fn with_the_cache_switched_off_every_lookup_reads_the_database() {
    let app = crate::support::spawn_app_with(Options {
        extra_toml: String::new(),
        cache_enabled: false,
        ..Options::default()
    })
    .await;
    app.insert_connection("acme", "alice", "github", "gho_db", &["read:user"], None).await;
    for _ in 0..3 {
        assert_eq!(app.token_ok(lookup()).await["status"], "connected");
    }
    assert!(app.state.caches.is_empty());
}

/// The maximum age is the backstop for a notification that never arrives. An entry in use
/// is confirmed by re-reading its row's version, so a change whose notification was lost
/// still ends the hand-outs within the maximum age, and a confirmer that ignored the
/// version would keep this one alive for ever.
#[tokio::test]
async fn a_revocation_whose_notification_is_lost_ends_hand_outs_within_the_maximum_age() {
    let app = crate::support::spawn_app_with(Options {
        extra_toml: "[cache]\nmax_age_seconds = 2\n".to_owned(),
        ..Options::default()
    })
    .await;
    serving(&app).await;
    app.insert_connection("acme", "alice", "github", "gho_cached", &["read:user"], None).await;
    // In use for longer than the maximum age: still cached, confirmed on the way.
    // Fixed sleep kept: the confirmer re-reads entries on a timer of real time (a tokio
    // interval, not the clock), so the use must span real time past the maximum age; the
    // pause only paces the lookups of that use.
    let used_since = Instant::now();
    while used_since.elapsed() < Duration::from_secs(3) {
        assert_eq!(app.token_ok(lookup()).await["status"], "connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.state.caches.len(), 1);
    // Revoke behind the listener's back: the trigger that would announce it is off.
    sqlx::query("ALTER TABLE connections DISABLE TRIGGER connections_notify").execute(&app.pool).await.unwrap();
    sqlx::query(
        "UPDATE connections SET status = 'revoked', access_token_ct = NULL, refresh_token_ct = NULL,
                id_token_ct = NULL",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    eventually(
        Duration::from_millis(2500),
        "the revoked token stops being handed out after a lost notification",
        || async { app.token_ok(lookup()).await["status"] == "connect_required" },
    )
    .await;
}

/// The uncached lookup keeps its own connections (no ping on release): one the database
/// ended while it sat idle is replaced on the spot, and the caller never notices.
#[tokio::test]
async fn a_lookup_connection_ended_while_idle_is_replaced_without_the_caller_noticing() {
    let app = crate::support::spawn_app_with(Options { cache_enabled: false, ..Options::default() }).await;
    app.insert_connection("acme", "alice", "github", "gho_db", &["read:user"], None).await;
    assert_eq!(app.token_ok(lookup()).await["status"], "connected");
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND query LIKE '%FROM connections WHERE tenant_id = $1 AND subject = $2%'
           AND query NOT LIKE '%pg_stat_activity%'",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(!ended.is_empty(), "found the lookup's connection");
    let gone = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND query LIKE '%FROM connections WHERE tenant_id = $1 AND subject = $2%'
               -- Not this query's own text, left as the last query of another pooled session.
               AND query NOT LIKE '%pg_stat_activity%'",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap()
            == 0
    };
    crate::support::eventually(Duration::from_secs(5), "the ended backend is gone", gone).await;
    for _ in 0..3 {
        assert_eq!(app.token_ok(lookup()).await["status"], "connected");
    }
}
