//! Behind a connection pooler: the machine's PgBouncer (Debian 12's 1.18, which keeps no
//! prepared statement across transactions) in transaction mode, with `database.pooler =
//! "transaction"` and the change listener on its own direct URL. Two instances connect,
//! hand out, refresh once, and hear each other's revocations and kill switches; a PgBouncer
//! restarted under load costs 503s, never a 500; a listener sent through the pooler is
//! found out (`/readyz` 503) and costs no 500 either.

use crate::support::pgbouncer::PgBouncer;
use crate::support::{Options, TestApp, TestDatabase, browser::Browser, eventually, spawn_on, start_providers};
use reqwest::Method;
use serde_json::json;
use sqlx::Connection;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use time::OffsetDateTime;

struct Behind {
    bouncer: PgBouncer,
    a: TestApp,
    b: TestApp,
    /// The database itself (not through PgBouncer), for what the test writes by hand.
    direct: String,
}

/// A fresh database, PgBouncer before it with `pool_size` server sessions, and two
/// instances through it; the listener's URL is PostgreSQL itself, or (`listener_direct`
/// false, the mistake) PgBouncer too.
async fn behind_pgbouncer(pool_size: u32, listener_direct: bool, cache_enabled: bool) -> Behind {
    let db = Arc::new(TestDatabase::create().await.unwrap());
    let server = crate::support::database_server_url();
    let bouncer = tokio::task::spawn_blocking(move || PgBouncer::start(&server, pool_size)).await.unwrap();
    let via = bouncer.url(&db.url);
    let listen = if listener_direct { db.url.clone() } else { via.clone() };
    let opts = || Options {
        env: vec![
            ("MCP_CONNECT_DATABASE_LISTEN_URL", listen.clone()),
            ("MCP_CONNECT_DATABASE_POOLER", "transaction".to_owned()),
        ],
        cache_enabled,
        ..Options::default()
    };
    let (idp, provider) = start_providers(None).await.unwrap();
    let direct = db.url.clone();
    let a = TestApp::start_on(&via, Some(db), idp, provider, &opts()).await.unwrap_or_else(|e| {
        panic!("an instance starts behind PgBouncer: {e:#}\n{}", bouncer.log());
    });
    let b = spawn_on(&a, &opts()).await;
    Behind { bouncer, a, b, direct }
}

fn lookup() -> serde_json::Value {
    lookup_of("alice")
}

fn lookup_of(subject: &str) -> serde_json::Value {
    json!({"subject": subject, "provider": "testp"})
}

/// A grant of `subject` at the test provider, written directly, expired when `expired`.
async fn insert_grant(at: &Behind, subject: &str, expired: bool) -> String {
    let (access, refresh) = at.a.provider.issue_grant("testp-client", &format!("octo-{subject}"), "openid profile");
    let expires = expired.then(|| OffsetDateTime::now_utc() - time::Duration::seconds(10));
    let mut direct = sqlx::PgConnection::connect(&at.direct).await.unwrap();
    at.a.insert_sealed_on(
        &mut direct,
        "acme",
        subject,
        "testp",
        &access,
        Some(&refresh),
        &["openid", "profile"],
        expires,
    )
    .await;
    access
}

/// The errors a transaction pooler causes a client that does not expect it are said with
/// what to change: PostgreSQL's own "already exists" of a prepared statement (SQLSTATE
/// 42P05, what `serve` stopped at behind PgBouncer 1.18), and a notification on a
/// connection that did not listen.
#[tokio::test]
async fn the_errors_of_an_unexpected_transaction_pooler_name_the_setting_that_fixes_them() {
    let db = TestDatabase::create().await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("PREPARE sqlx_s_1 AS SELECT 1").execute(&mut conn).await.unwrap();
    let e = sqlx::raw_sql("PREPARE sqlx_s_1 AS SELECT 1").execute(&mut conn).await.unwrap_err();
    let e = anyhow::Error::from(mcp_connect::store::SchemaMismatch::from(e)).context("migrations failed");
    let hint = mcp_connect::store::pooler_hint(e.as_ref());
    assert!(hint.contains("database.pooler = \"transaction\"") && hint.contains("max_prepared_statements"), "{hint}");
    let stray = sqlx::Error::Protocol("execute: unexpected message: NotificationResponse".into());
    assert!(mcp_connect::store::pooler_hint(&stray).contains("database.listen_url"));
    let other = sqlx::Error::Protocol("something else".into());
    assert_eq!(mcp_connect::store::pooler_hint(&other), "");
}

#[tokio::test]
async fn two_instances_behind_debians_pgbouncer_connect_hand_out_refresh_once_and_hear_each_others_changes() {
    let at = behind_pgbouncer(4, true, true).await;
    let (a, b) = (&at.a, &at.b);
    for app in [a, b] {
        eventually(Duration::from_secs(10), "the listener hears on its direct URL", || async {
            app.state.caches.is_serving()
        })
        .await;
    }

    // A connect through B (every page, the callback, the vault write: through PgBouncer;
    // the test IdP and provider know the redirect URIs of the instance started last)...
    let (_, url) = b.elicit("alice", "testp").await;
    let cb = Browser::new().connect(b, &url, "alice", "octo-alice").await;
    assert!(cb.status().is_success() || cb.status().is_redirection(), "the callback: {}", cb.status());
    // ...is handed out by A.
    let got = a.token_ok(lookup()).await;
    assert_eq!(got["status"], "connected", "{got}");

    // 200 concurrent hand-outs over both instances on 4 server sessions: no error.
    let calls = (0..200).map(|i| {
        let app = if i % 2 == 0 { a } else { b };
        async move { app.token(&app.key, lookup()).await.status().as_u16() }
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 200), "every hand-out answered: {statuses:?}");

    // A refresh storm over both instances: one refresh at the provider.
    let old = insert_grant(&at, "carol", true).await;
    let before = a.provider.stats().refresh_calls;
    let calls = (0..100).map(|i| {
        let app = if i % 2 == 0 { a } else { b };
        async move {
            let r = app.token(&app.key, lookup_of("carol")).await;
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()["access_token"].as_str().unwrap_or_default().to_owned()
        }
    });
    let tokens: std::collections::HashSet<String> = futures_util::future::join_all(calls).await.into_iter().collect();
    assert_eq!(a.provider.stats().refresh_calls - before, 1, "one refresh at the provider");
    assert_eq!(tokens.len(), 1, "every caller got the same new token: {tokens:?}");
    assert!(!tokens.contains(&old));

    // A revocation on A reaches B within a second.
    eventually(Duration::from_secs(3), "B serves alice's row", || async {
        b.token_ok(lookup()).await["status"] == "connected"
    })
    .await;
    let id: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM connections WHERE subject = 'alice'").fetch_one(&a.pool).await.unwrap();
    assert_eq!(a.admin(Method::POST, &format!("/connections/{id}/revoke"), None).await.status(), 200);
    let revoked_at = Instant::now();
    eventually(Duration::from_secs(1), "B stops handing out the revoked token", || async {
        b.token_ok(lookup()).await["status"] == "connect_required"
    })
    .await;
    eprintln!("revocation heard by B after {:?}", revoked_at.elapsed());

    // A kill switch set on A is obeyed by B within a second.
    eventually(Duration::from_secs(3), "B hands out carol's grant", || async {
        b.token_ok(lookup_of("carol")).await["status"] == "connected"
    })
    .await;
    let r = a.admin(Method::PUT, "/kill-switches/testp", Some(json!({"mode": "no_token_handouts"}))).await;
    assert!(r.status().is_success(), "{}", r.status());
    eventually(Duration::from_secs(1), "B obeys the kill switch", || async {
        b.token(&b.key, lookup_of("carol")).await.status() == 403
    })
    .await;
    drop(at.bouncer);
}

/// Statuses of a steady load on `app`'s `/v1/token` until `stop`, every 503 checked for
/// `Retry-After`.
fn load(app: &TestApp, stop: Arc<AtomicBool>) -> (tokio::task::JoinHandle<()>, Arc<Mutex<BTreeMap<u16, u64>>>) {
    let answers: Arc<Mutex<BTreeMap<u16, u64>>> = Arc::default();
    let (client, url, key) = (app.client.clone(), format!("{}/v1/token", app.base), app.key.clone());
    let seen = answers.clone();
    let task = tokio::spawn(async move {
        while !stop.load(Ordering::Acquire) {
            let r = client.post(&url).bearer_auth(&key).json(&lookup()).send().await.unwrap();
            let status = r.status().as_u16();
            if status == 503 {
                assert!(r.headers().contains_key("retry-after"), "a 503 says when to retry");
            }
            *seen.lock().unwrap().entry(status).or_default() += 1;
            // Fixed sleep kept: it paces the load (a request every few ms, not a busy loop
            // of instant 503s while PgBouncer is down); it waits for nothing.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (task, answers)
}

#[tokio::test]
async fn pgbouncer_restarted_under_load_answers_503_never_500_and_service_resumes() {
    // The cache off: every hand-out reads the database through PgBouncer.
    let mut at = behind_pgbouncer(4, true, false).await;
    insert_grant(&at, "alice", false).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (task_a, answers_a) = load(&at.a, stop.clone());
    let (task_b, answers_b) = load(&at.b, stop.clone());
    eventually(Duration::from_secs(5), "the load is under way", || async {
        answers_a.lock().unwrap().get(&200).is_some_and(|n| *n >= 20)
    })
    .await;

    at.bouncer.kill();
    eventually(Duration::from_secs(10), "503s while PgBouncer is down", || async {
        answers_a.lock().unwrap().contains_key(&503) && answers_b.lock().unwrap().contains_key(&503)
    })
    .await;
    let bouncer = tokio::task::spawn_blocking(move || {
        let mut bouncer = at.bouncer;
        bouncer.restart();
        bouncer
    })
    .await
    .unwrap();
    let ok_before = |answers: &Arc<Mutex<BTreeMap<u16, u64>>>| answers.lock().unwrap().get(&200).copied().unwrap_or(0);
    let (ok_a, ok_b) = (ok_before(&answers_a), ok_before(&answers_b));
    eventually(Duration::from_secs(5), "both instances answer 200 again", || async {
        ok_before(&answers_a) > ok_a && ok_before(&answers_b) > ok_b
    })
    .await;
    stop.store(true, Ordering::Release);
    task_a.await.unwrap();
    task_b.await.unwrap();
    for answers in [answers_a, answers_b] {
        let all = answers.lock().unwrap().clone();
        assert!(all.keys().all(|s| *s == 200 || *s == 503), "only 200 or 503, never a 500: {all:?}");
    }
    drop(bouncer);
}

#[tokio::test]
async fn a_listener_sent_through_the_transaction_pooler_is_not_ready_and_costs_no_500() {
    let db = Arc::new(TestDatabase::create().await.unwrap());
    // Migrated beforehand over PostgreSQL itself: the mistake under test is the listener's.
    let migrator = sqlx::PgPool::connect(&db.url).await.unwrap();
    mcp_connect::store::migrate(&migrator).await.unwrap();
    migrator.close().await;
    let server = crate::support::database_server_url();
    // Two server sessions: the listener's LISTEN lands on one the statements use too.
    let bouncer = tokio::task::spawn_blocking(move || PgBouncer::start(&server, 2)).await.unwrap();
    let via = bouncer.url(&db.url);
    let opts = Options {
        env: vec![
            ("MCP_CONNECT_DATABASE_LISTEN_URL", via.clone()),
            ("MCP_CONNECT_DATABASE_POOLER", "transaction".to_owned()),
        ],
        ..Options::default()
    };
    let (idp, provider) = start_providers(None).await.unwrap();
    let direct = db.url.clone();
    let app = TestApp::start_on(&via, Some(db), idp, provider, &opts).await.unwrap();
    let (access, refresh) = app.provider.issue_grant("testp-client", "octo-alice", "openid profile");
    let mut conn = sqlx::PgConnection::connect(&direct).await.unwrap();
    app.insert_sealed_on(&mut conn, "acme", "alice", "testp", &access, Some(&refresh), &["openid", "profile"], None)
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let (task, answers) = load(&app, stop.clone());
    // Changes whose notifications go to whichever session listens: links made for bob.
    let changes = tokio::spawn({
        let (client, stop) = (app.client.clone(), stop.clone());
        let (url, key) = (format!("{}/v1/token", app.base), app.key.clone());
        async move {
            while !stop.load(Ordering::Acquire) {
                let _ = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"subject": "bob", "provider": "testp"}))
                    .send()
                    .await;
                // Fixed sleep kept: it paces the changes; it waits for nothing.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    eventually(Duration::from_secs(25), "/readyz says the listener does not hear", || async {
        let r = app.client.get(format!("{}/readyz", app.base)).send().await.unwrap();
        r.status() == 503 && r.json::<serde_json::Value>().await.unwrap()["status"] == "listener_not_hearing"
    })
    .await;
    assert!(!app.state.caches.is_serving(), "the cache is bypassed");
    stop.store(true, Ordering::Release);
    task.await.unwrap();
    changes.await.unwrap();
    let all = answers.lock().unwrap().clone();
    assert!(all.get(&200).copied().unwrap_or(0) > 0, "hand-outs went on: {all:?}");
    assert!(all.keys().all(|s| *s == 200 || *s == 503), "only 200 or 503, never a 500: {all:?}");
    drop(bouncer);
}
