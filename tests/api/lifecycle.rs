//! Refresh on lookup (invariant 7), fenced across two instances; the provider's failure
//! modes; key rotation; clean-up.

use crate::support::{KEY_A, KEY_B, Options, spawn_app, spawn_on};
use mcp_connect_devproviders::TokenFailure;
use serde_json::json;
use std::time::Duration;
use time::OffsetDateTime;

fn past() -> Option<OffsetDateTime> {
    Some(OffsetDateTime::now_utc() - time::Duration::seconds(10))
}

fn lookup() -> serde_json::Value {
    json!({"subject": "alice", "provider": "testp"})
}

async fn userinfo_login(app: &crate::support::TestApp, token: &str) -> reqwest::StatusCode {
    reqwest::Client::new()
        .get(format!("{}/userinfo", app.provider.base_url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn fifty_concurrent_lookups_over_two_instances_cause_exactly_one_refresh() {
    let a = spawn_app().await;
    let b = spawn_on(&a, &Options::default()).await;
    let (_, old_access, _) = a.insert_provider_grant("alice", "octo-alice", past()).await;
    let calls = (0..50).map(|i| {
        let (app, key) = if i % 2 == 0 { (&a, a.key.clone()) } else { (&b, b.key.clone()) };
        async move {
            let r = app.token(&key, lookup()).await;
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()
        }
    });
    let answers = futures_util::future::join_all(calls).await;
    let tokens: std::collections::HashSet<String> =
        answers.iter().map(|b| b["access_token"].as_str().unwrap_or_else(|| panic!("{b}")).to_owned()).collect();
    assert_eq!(a.provider.stats().refresh_calls, 1, "refresh calls the provider saw");
    assert_eq!(tokens.len(), 1, "every caller got the same new token");
    let new = tokens.into_iter().next().unwrap();
    assert_ne!(new, old_access);
    assert_eq!(userinfo_login(&a, &new).await, 200);
    let version: i64 = sqlx::query_scalar("SELECT version FROM connections").fetch_one(&a.pool).await.unwrap();
    assert_eq!(version, 1);
}

#[tokio::test]
async fn a_slow_refresh_still_happens_once_and_loses_no_refresh_token() {
    let a = spawn_app().await;
    let b = spawn_on(&a, &Options::default()).await;
    a.insert_provider_grant("alice", "octo-alice", past()).await;
    a.provider.switches().set_token_delay(Duration::from_millis(1500));
    let calls = (0..20).map(|i| {
        let app = if i % 2 == 0 { &a } else { &b };
        async move { app.token(&app.key, lookup()).await.status() }
    });
    for s in futures_util::future::join_all(calls).await {
        assert_eq!(s, 200);
    }
    assert_eq!(a.provider.stats().refresh_calls, 1);
    a.provider.switches().set_token_delay(Duration::ZERO);
    // The rotated refresh token was kept: the next refresh works (a lost one would be
    // a replay, and the provider would kill the grant).
    sqlx::query("UPDATE connections SET access_expires_at = now() - interval '1 second'")
        .execute(&a.pool)
        .await
        .unwrap();
    let r = a.token_ok(lookup()).await;
    assert_eq!(r["status"], "connected");
    assert_eq!(a.provider.stats().refresh_calls, 2);
    assert_eq!(userinfo_login(&a, r["access_token"].as_str().unwrap()).await, 200);
}

#[tokio::test]
async fn invalid_grant_marks_the_connection_needs_reauth_and_asks_for_a_new_connect() {
    let app = spawn_app().await;
    app.insert_provider_grant("alice", "octo-alice", past()).await;
    app.provider.switches().set_token_failure(Some(TokenFailure::InvalidGrant));
    let b = app.token_ok(lookup()).await;
    assert_eq!(b["status"], "connect_required");
    let (status, ct): (String, Option<Vec<u8>>) =
        sqlx::query_as("SELECT status, refresh_token_ct FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "needs_reauth");
    assert!(ct.is_none());
    let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM audit_events").fetch_all(&app.pool).await.unwrap();
    assert!(kinds.contains(&"refresh_failed".to_owned()) && kinds.contains(&"reauth_needed".to_owned()), "{kinds:?}");
}

#[tokio::test]
async fn a_provider_5xx_answers_503_and_keeps_the_grant_for_later() {
    let app = spawn_app().await;
    app.insert_provider_grant("alice", "octo-alice", past()).await;
    app.provider.switches().set_token_failure(Some(TokenFailure::ServerError));
    let r = app.token(&app.key, lookup()).await;
    assert_eq!(r.headers()["retry-after"], "5");
    crate::support::assert_error(r, 503, "provider_unavailable").await;
    let status: String = sqlx::query_scalar("SELECT status FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "active");
    app.provider.switches().set_token_failure(None);
    let b = app.token_ok(lookup()).await;
    assert_eq!(b["status"], "connected");
}

#[tokio::test]
async fn a_provider_timeout_answers_503_too() {
    let app = spawn_app().await; // outbound timeout is 3 s in the tests
    app.insert_provider_grant("alice", "octo-alice", past()).await;
    app.provider.switches().set_token_failure(Some(TokenFailure::Timeout));
    let r = app.token(&app.key, lookup()).await;
    crate::support::assert_error(r, 503, "provider_unavailable").await;
}

#[tokio::test]
async fn an_omitted_refresh_token_keeps_the_old_one_and_an_omitted_expiry_is_unknown() {
    let app = spawn_app().await;
    app.insert_provider_grant("alice", "octo-alice", past()).await;
    app.provider.switches().set_rotate_refresh_tokens(false);
    app.provider.switches().set_omit_expires_in(true);
    let b = app.token_ok(lookup()).await;
    assert_eq!(b["status"], "connected");
    assert_eq!(b["expires_at"], serde_json::Value::Null);
    let exp: Option<OffsetDateTime> =
        sqlx::query_scalar("SELECT access_expires_at FROM connections").fetch_one(&app.pool).await.unwrap();
    assert!(exp.is_none());
    // Unknown expiry is not "never": past the configured interval it is refreshed again.
    sqlx::query("UPDATE connections SET refreshed_at = now() - interval '2 hours'").execute(&app.pool).await.unwrap();
    assert_eq!(app.token_ok(lookup()).await["status"], "connected");
    assert_eq!(app.provider.stats().refresh_calls, 2);
}

#[tokio::test]
async fn a_response_without_a_refresh_token_keeps_the_stored_one() {
    let app = spawn_app().await;
    let (_, _, refresh) = app.insert_provider_grant("alice", "octo-alice", past()).await;
    app.provider.switches().set_omit_refresh_token(true);
    assert_eq!(app.token_ok(lookup()).await["status"], "connected");
    // Still the original refresh token in the vault.
    let id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM connections").fetch_one(&app.pool).await.unwrap();
    let (ct, generation, issuer, key_id): (Vec<u8>, Option<i64>, String, String) =
        sqlx::query_as("SELECT refresh_token_ct, seal_version, issuer, key_id FROM connections")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let (t, s, p) = (
        mcp_connect::domain::TenantId::parse("acme").unwrap(),
        mcp_connect::domain::Subject::parse("alice").unwrap(),
        mcp_connect::domain::ProviderId::parse("testp").unwrap(),
    );
    let row = mcp_connect::vault::RowBinding {
        tenant: &t,
        subject: &s,
        provider: &p,
        connection: mcp_connect::domain::ConnectionId::from_uuid(id),
        generation,
        issuer: Some(&issuer),
    };
    let key = app.state.keys.opening(&key_id, mcp_connect::keys::Scope::Tenant(&t)).await.unwrap();
    let opened = key.open(&row, mcp_connect::vault::Field::RefreshToken, &ct).unwrap();
    assert_eq!(secrecy::ExposeSecret::expose_secret(&opened), refresh.as_str());
}

#[tokio::test]
async fn an_expired_token_without_a_refresh_token_needs_reauth() {
    let app = spawn_app().await;
    app.insert_sealed("acme", "alice", "testp", "old-access", None, &["openid"], past()).await;
    let b = app.token_ok(lookup()).await;
    assert_eq!(b["status"], "connect_required");
    let status: String = sqlx::query_scalar("SELECT status FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "needs_reauth");
    assert_eq!(app.provider.stats().refresh_calls, 0);
}

#[tokio::test]
async fn a_token_inside_the_refresh_margin_is_refreshed_before_it_is_handed_out() {
    let app = spawn_app().await;
    let soon = Some(OffsetDateTime::now_utc() + time::Duration::seconds(30));
    let (_, old, _) = app.insert_provider_grant("alice", "octo-alice", soon).await;
    let b = app.token_ok(lookup()).await;
    assert_ne!(b["access_token"], old.as_str());
    assert_eq!(app.provider.stats().refresh_calls, 1);
}

#[tokio::test]
async fn after_rotate_key_every_row_opens_with_the_new_key_alone() {
    let app = spawn_app().await; // KEY_A
    for s in ["alice", "bob", "carol"] {
        app.insert_connection("acme", s, "github", &format!("gho_{s}"), &["read:user"], None).await;
    }
    let both = app.keys_of(&format!("{KEY_B},{KEY_A}"));
    let mut seen = Vec::new();
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &both, 2, |done, total| seen.push((done, total)))
        .await
        .unwrap();
    // The tenant's data key is wrapped anew; its rows are not re-sealed.
    assert_eq!((r.rewrapped, r.resealed, r.remaining), (1, 0, 0), "{r:?}");
    assert!(seen.is_empty(), "{seen:?}");
    // Rerun: nothing left to do.
    assert_eq!(mcp_connect::flows::rotate::rotate_keys(&app.pool, &both, 2, |_, _| {}).await.unwrap().resealed, 0);
    let new_only = spawn_on(&app, &Options { vault_keys: KEY_B.to_owned(), ..Options::default() }).await;
    for s in ["alice", "bob", "carol"] {
        let b = new_only.token_ok(json!({"subject": s, "provider": "github"})).await;
        assert_eq!(b["access_token"], format!("gho_{s}"));
    }
}

#[tokio::test]
async fn clean_up_removes_exactly_what_is_spent_and_nothing_pending() {
    let app = spawn_app().await;
    let live = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    let overdue = app.token_ok(json!({"subject": "bob", "provider": "testp"})).await;
    sqlx::query("UPDATE elicitations SET expires_at = now() - interval '1 minute' WHERE id = $1::uuid")
        .bind(overdue["elicitation"]["id"].as_str().unwrap())
        .execute(&app.pool)
        .await
        .unwrap();
    // A live login and a live session (Alice signs in), plus a state in flight.
    let browser = crate::support::browser::Browser::new();
    let page = browser.open(&app, live["elicitation"]["url"].as_str().unwrap(), "alice").await.text().await.unwrap();
    browser.consent(&app, "testp", &page, "connect").await;
    sqlx::query("INSERT INTO browser_sessions (id_hash, subject, issuer, expires_at) VALUES ('\\x01', 'x', 'y', now() - interval '1 second')")
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO audit_events (kind, at) VALUES ('old_event', now() - interval '400 days')")
        .execute(&app.pool)
        .await
        .unwrap();
    // Hand-out audit batch ids: a week old goes, a day-old one stays.
    sqlx::query(
        "INSERT INTO audit_handout_batches (id, written_at) VALUES (gen_random_uuid(), now() - interval '8 days'),
                                                                  (gen_random_uuid(), now() - interval '6 days')",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    // Alice's spent sign-in state is kept until it would have expired: past that, it goes.
    sqlx::query("UPDATE login_states_used SET expires_at = now() - interval '1 second'")
        .execute(&app.pool)
        .await
        .unwrap();
    let r =
        mcp_connect::flows::cleanup::run_once(&app.pool, OffsetDateTime::now_utc(), Duration::from_secs(365 * 86_400))
            .await
            .unwrap();
    assert_eq!(r.elicitations_expired, 1);
    assert_eq!(r.sessions_deleted, 1);
    let old: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE kind = 'old_event'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(old, 0, "an event past retention is gone");
    assert_eq!(r.login_states_deleted, 1, "the spent login state");
    assert_eq!(r.states_deleted, 0, "the state in flight stays");
    assert_eq!(r.handout_batches_deleted, 1, "the week-old batch id");
    let kept: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_handout_batches WHERE written_at < now() - interval '5 days'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(kept, 1, "the six-day-old batch id stays");
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM elicitations WHERE status = 'pending'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(pending, 1);
    let sessions: i64 = sqlx::query_scalar("SELECT count(*) FROM browser_sessions").fetch_one(&app.pool).await.unwrap();
    assert_eq!(sessions, 1);
    // Running it twice, or on two instances at once, changes nothing more.
    let again =
        mcp_connect::flows::cleanup::run_once(&app.pool, OffsetDateTime::now_utc(), Duration::from_secs(365 * 86_400))
            .await
            .unwrap();
    assert_eq!(again, mcp_connect::flows::cleanup::CleanupReport::default());
}

#[tokio::test]
async fn an_expiry_seen_before_a_reconnect_does_not_wipe_the_new_grant() {
    let app = spawn_app().await;
    let id = app.insert_sealed("acme", "alice", "testp", "old-access", None, &["openid"], past()).await;
    let observed = mcp_connect::store::connections::find_connection(&app.pool, &key("acme", "alice", "testp"))
        .await
        .unwrap()
        .unwrap();
    // A reconnect commits a fresh grant between the lookup and the expiry decision.
    sqlx::query(
        "UPDATE connections SET access_expires_at = now() + interval '1 hour', version = version + 1 WHERE id = $1",
    )
    .bind(id.as_uuid())
    .execute(&app.pool)
    .await
    .unwrap();
    mcp_connect::flows::refresh::expire_without_refresh(&app.state.pool, &app.state.connections, &observed)
        .await
        .unwrap();
    let (status, has_token): (String, bool) =
        sqlx::query_as("SELECT status, access_token_ct IS NOT NULL FROM connections WHERE id = $1")
            .bind(id.as_uuid())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), has_token), ("active", true), "the stale observation must not mark the row");
    // An observation that is still current marks it as before.
    let fresh = mcp_connect::store::connections::find_connection(&app.pool, &key("acme", "alice", "testp"))
        .await
        .unwrap()
        .unwrap();
    mcp_connect::flows::refresh::expire_without_refresh(&app.state.pool, &app.state.connections, &fresh).await.unwrap();
    let status: String = sqlx::query_scalar("SELECT status FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "needs_reauth");
}

#[tokio::test]
async fn a_refresh_whose_request_is_dropped_still_commits_the_rotated_refresh_token() {
    let app = spawn_app().await;
    let (_, old_access, _) = app.insert_provider_grant("alice", "octo-alice", past()).await;
    let row = mcp_connect::store::connections::find_connection(&app.pool, &key("acme", "alice", "testp"))
        .await
        .unwrap()
        .unwrap();
    // The provider rotates the refresh token, then takes 800 ms to answer.
    app.provider.switches().set_answer_delay(Duration::from_millis(800));
    let state = app.state.get_ref().clone();
    // As on an HTTP worker: the request's future is dropped after 300 ms (client reset,
    // proxy timeout), while the worker's task set goes on running.
    let worker = tokio::task::LocalSet::new();
    worker
        .run_until(async {
            let request = mcp_connect::flows::refresh::refresh(&state, &row, OffsetDateTime::now_utc());
            let dropped = tokio::time::timeout(Duration::from_millis(300), request).await;
            assert!(dropped.is_err(), "the request went away mid-refresh");
            // The worker goes on (the provider answers after 800 ms) until the refresh commits.
            let committed = || async {
                sqlx::query_scalar::<_, i64>("SELECT count(*) FROM audit_events WHERE kind = 'refresh_succeeded'")
                    .fetch_one(&app.pool)
                    .await
                    .unwrap()
                    == 1
            };
            crate::support::eventually(Duration::from_secs(5), "the detached refresh commits", committed).await;
        })
        .await;
    app.provider.switches().set_answer_delay(Duration::ZERO);
    let b = app.token_ok(lookup()).await;
    assert_eq!(b["status"], "connected", "{b}");
    let token = b["access_token"].as_str().unwrap();
    assert_ne!(token, old_access);
    assert_eq!(userinfo_login(&app, token).await, 200, "the grant was not killed by a replay");
    assert_eq!(app.provider.stats().refresh_calls, 1, "the old refresh token was never presented again");
}

fn key(tenant: &str, subject: &str, provider: &str) -> mcp_connect::domain::ConnectionKey {
    mcp_connect::domain::ConnectionKey {
        tenant: mcp_connect::domain::TenantId::parse(tenant).unwrap(),
        subject: mcp_connect::domain::Subject::parse(subject).unwrap(),
        provider: mcp_connect::domain::ProviderId::parse(provider).unwrap(),
    }
}
