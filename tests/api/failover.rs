//! PostgreSQL going away under load, on a private cluster this test starts itself (never
//! the shared server on 5432, which other tests use at the same time): answers during the
//! outage are 503 with `Retry-After`, never a 500; the cache is bypassed until its change
//! listener is back; service resumes within 5 s of Postgres; nothing stored is lost.

use crate::support::{Options, TestApp, start_providers};
use mcp_connect::dev::PrivatePostgres;
use serde_json::json;
use sqlx::Connection;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

async fn database_on(pg: &PrivatePostgres) -> String {
    let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
    sqlx::query("CREATE DATABASE mcpc_failover").execute(&mut conn).await.unwrap();
    let mut url = url::Url::parse(&pg.url).unwrap();
    url.set_path("/mcpc_failover");
    url.to_string()
}

#[tokio::test]
async fn postgres_restarted_under_load_answers_503_never_500_and_service_resumes_within_5_s() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start(None)).await.unwrap().unwrap();
    let db_url = database_on(&pg).await;
    let (idp, provider) = start_providers(None).await.unwrap();
    let app = TestApp::start_on(&db_url, None, idp, provider, &Options::default()).await.unwrap();
    let id = app.insert_connection("acme", "alice", "github", "gho_kept", &["read:user"], None).await;
    crate::support::eventually(Duration::from_secs(5), "the cache serves", || async { app.state.caches.is_serving() })
        .await;

    // Steady load; every answer is recorded with its status (and Retry-After for 503s).
    let answers: Arc<Mutex<BTreeMap<u16, u64>>> = Arc::default();
    let last_ok = Arc::new(Mutex::new(Instant::now()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn({
        let (client, url, key) = (app.client.clone(), format!("{}/v1/token", app.base), app.key.clone());
        let (answers, last_ok, stop) = (answers.clone(), last_ok.clone(), stop.clone());
        async move {
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let r = client.post(&url).bearer_auth(&key).json(&json!({"subject": "alice", "provider": "github"}));
                let r = r.send().await.unwrap();
                let status = r.status().as_u16();
                if status == 503 {
                    assert!(r.headers().contains_key("retry-after"), "a 503 says when to retry");
                }
                if status == 200 {
                    let b: serde_json::Value = r.json().await.unwrap();
                    assert_eq!(b["access_token"], "gho_kept", "the stored token, nothing else");
                    *last_ok.lock().unwrap() = Instant::now();
                }
                *answers.lock().unwrap().entry(status).or_default() += 1;
                // Fixed sleep kept: it paces the load (one caller, a request every few ms,
                // not a busy loop of instant 503s during the outage); it waits for nothing.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    // The load is under way before the outage.
    crate::support::eventually(Duration::from_secs(5), "20 answers of the load", || async {
        answers.lock().unwrap().get(&200).is_some_and(|n| *n >= 20)
    })
    .await;

    // The outage: a fast shutdown ends every session, as a failover does.
    let pg = tokio::task::spawn_blocking(move || {
        let mut pg = pg;
        pg.stop_server().unwrap();
        pg
    })
    .await
    .unwrap();
    crate::support::eventually(Duration::from_secs(5), "the cache stops serving without its listener", || async {
        !app.state.caches.is_serving()
    })
    .await;
    // Callers see the outage as 503s (a lookup's connect fails at once; a pool waits up to
    // its 5 s acquire timeout first).
    crate::support::eventually(Duration::from_secs(15), "503s during the outage", || async {
        answers.lock().unwrap().contains_key(&503)
    })
    .await;
    let during = answers.lock().unwrap().clone();
    let pg = tokio::task::spawn_blocking(move || {
        let mut pg = pg;
        pg.start_server().unwrap();
        pg
    })
    .await
    .unwrap();
    let back_at = Instant::now();
    // Service resumes within 5 s of Postgres.
    crate::support::eventually(Duration::from_secs(5), "answers are 200 again", || async {
        *last_ok.lock().unwrap() > back_at
    })
    .await;
    crate::support::eventually(Duration::from_secs(5), "the cache serves again", || async {
        app.state.caches.is_serving()
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    load.await.unwrap();

    let all = answers.lock().unwrap().clone();
    assert!(during.get(&503).copied().unwrap_or(0) > 0, "the outage was seen: {during:?}");
    assert!(all.keys().all(|s| *s == 200 || *s == 503), "only 200 or 503, never a 500: {all:?}");
    // Nothing stored was lost.
    let login: String = sqlx::query_scalar("SELECT account_login FROM connections WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(login, "octo-alice");
    drop(app);
    drop(pg);
}

#[tokio::test]
async fn the_change_listener_can_use_its_own_database_url() {
    // Behind PgBouncer in transaction mode the pool's URL cannot LISTEN; the listener gets
    // a URL of its own (here: the same database, named so it can be found).
    let db = crate::support::TestDatabase::create().await.unwrap();
    let listen_url = format!("{}?application_name=mcpc-listener", db.url);
    let opts = Options { env: vec![("MCP_CONNECT_DATABASE_LISTEN_URL", listen_url)], ..Options::default() };
    let (idp, provider) = start_providers(None).await.unwrap();
    let db = Arc::new(db);
    let app = TestApp::start_on(&db.url.clone(), Some(db), idp, provider, &opts).await.unwrap();
    crate::support::eventually(Duration::from_secs(5), "the cache serves", || async { app.state.caches.is_serving() })
        .await;
    let listening: Vec<String> = sqlx::query_scalar(
        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(listening, vec!["mcpc-listener".to_owned()], "the listener is on its own URL");
}

#[tokio::test]
async fn the_private_postgres_asks_for_its_password_and_refuses_a_login_without_it() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start(None)).await.unwrap().unwrap();
    let with = url::Url::parse(&pg.url).unwrap();
    assert!(with.password().is_some_and(|p| p.len() >= 20), "a random password in the URL");
    sqlx::PgConnection::connect(&pg.url).await.expect("with the password");
    let mut without = with.clone();
    without.set_password(None).unwrap();
    let e = sqlx::PgConnection::connect(without.as_str()).await.expect_err("trust would let anyone on the host in");
    assert!(e.to_string().contains("password"), "{e}");
    let mut wrong = with.clone();
    wrong.set_password(Some("not-the-password")).unwrap();
    let e = sqlx::PgConnection::connect(wrong.as_str()).await.expect_err("a wrong password");
    assert!(e.to_string().contains("password authentication failed"), "{e}");
}
