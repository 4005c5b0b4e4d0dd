//! Provider and identity-provider faults: a token endpoint that is down, slow, or answers
//! HTML, broken JSON or a token response without a token; an IdP whose discovery or JWKS is
//! down. Each ends in a clear page or a 503 with Retry-After, a reason code in the audit
//! trail, never a 500, and nothing stored lost or changed.

use crate::support::browser::Browser;
use crate::support::last_connect_failure;
use crate::support::{Options, TestApp, spawn_app, spawn_app_with};
use mcp_connect_devproviders::TokenFailure;
use serde_json::json;
use time::OffsetDateTime;

/// `deadtok`: a provider whose token endpoint nobody listens on.
fn with_dead_token_endpoint() -> Options {
    Options {
        extra_toml: r#"
[providers.deadtok]
template = "oauth2"
display_name = "Provider whose token endpoint is down"
authorize_url = "http://127.0.0.1:9/authorize"
token_url = "http://127.0.0.1:9/token"
client_id = "deadtok-client"
"#
        .to_owned(),
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"deadtok\"]".to_owned())],
        env: vec![("MCP_CONNECT_PROVIDER_DEADTOK_CLIENT_SECRET", "deadtok-secret".to_owned())],
        ..Options::default()
    }
}

type Row = (String, i64, Option<Vec<u8>>, Option<Vec<u8>>, Option<String>);

async fn stored(app: &TestApp) -> Row {
    sqlx::query_as("SELECT status, version, access_token_ct, refresh_token_ct, key_id FROM connections")
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

async fn last_refresh_failure(app: &TestApp) -> serde_json::Value {
    sqlx::query_scalar("SELECT detail FROM audit_events WHERE kind = 'refresh_failed' ORDER BY id DESC LIMIT 1")
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// A token call that has to refresh while the provider misbehaves: 503 with Retry-After,
/// the reason in the audit trail, the stored grant untouched.
async fn refresh_fails_softly(app: &TestApp, provider: &str, reason: &str) {
    let before = stored(app).await;
    let r = app.token(&app.key, json!({"subject": "alice", "provider": provider})).await;
    assert!(r.headers().get("retry-after").is_some(), "Retry-After on the 503");
    crate::support::assert_error(r, 503, "provider_unavailable").await;
    assert_eq!(last_refresh_failure(app).await["reason"], reason);
    assert_eq!(stored(app).await, before, "the stored grant is unchanged");
}

async fn expired_grant(app: &TestApp) {
    app.insert_provider_grant("alice", "octo-alice", Some(OffsetDateTime::now_utc() - time::Duration::minutes(1)))
        .await;
}

async fn refresh_recovers(app: &TestApp) {
    app.provider.switches().set_token_failure(None);
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "testp"})).await["status"], "connected");
}

#[tokio::test]
async fn a_refresh_against_a_token_endpoint_that_is_down_answers_503_and_keeps_the_grant() {
    let app = spawn_app_with(with_dead_token_endpoint()).await;
    app.insert_sealed("acme", "alice", "deadtok", "at_old", Some("rt_old"), &["read"], Some(OffsetDateTime::now_utc()))
        .await;
    refresh_fails_softly(&app, "deadtok", "provider_unavailable").await;
}

#[tokio::test]
async fn a_refresh_answered_with_an_html_page_answers_503_and_keeps_the_grant() {
    let app = spawn_app().await;
    expired_grant(&app).await;
    app.provider.switches().set_token_failure(Some(TokenFailure::Html));
    refresh_fails_softly(&app, "testp", "provider_protocol_error").await;
    refresh_recovers(&app).await;
}

#[tokio::test]
async fn a_refresh_answered_with_broken_json_answers_503_and_keeps_the_grant() {
    let app = spawn_app().await;
    expired_grant(&app).await;
    app.provider.switches().set_token_failure(Some(TokenFailure::GarbageJson));
    // A body that is not a token response is taken for a passing fault (a proxy's page).
    refresh_fails_softly(&app, "testp", "provider_unavailable").await;
    refresh_recovers(&app).await;
}

#[tokio::test]
async fn a_refresh_answered_200_without_an_access_token_answers_503_and_keeps_the_grant() {
    let app = spawn_app().await;
    expired_grant(&app).await;
    app.provider.switches().set_token_failure(Some(TokenFailure::NoAccessToken));
    refresh_fails_softly(&app, "testp", "provider_unavailable").await;
    refresh_recovers(&app).await;
}

#[tokio::test]
async fn a_refresh_slower_than_the_outbound_timeout_answers_503_and_keeps_the_grant() {
    let app = spawn_app().await; // outbound timeout is 3 s in the tests
    expired_grant(&app).await;
    app.provider.switches().set_token_failure(Some(TokenFailure::Timeout));
    refresh_fails_softly(&app, "testp", "provider_unavailable").await;
}

/// A code exchange against a token endpoint nobody listens on.
#[tokio::test]
async fn a_code_exchange_against_a_token_endpoint_that_is_down_shows_a_clear_page_and_stores_nothing() {
    let app = spawn_app_with(with_dead_token_endpoint()).await;
    let (id, url) = app.elicit("alice", "deadtok").await;
    let browser = Browser::new();
    // Its authorize endpoint is down too, so the callback is visited as a provider would
    // send the person back: with a state from our Connect click and a made-up code.
    let page = browser.open(&app, &url, "alice").await;
    let html = page.text().await.unwrap();
    let r = browser.consent(&app, "deadtok", &html, "connect").await;
    assert_eq!(r.status(), 303);
    let authorize = url::Url::parse(&crate::support::browser::location(&r)).unwrap();
    let state = authorize.query_pairs().find(|(k, _)| k == "state").unwrap().1.into_owned();
    let cb = format!("{}/connect/deadtok/callback?code=made-up&state={state}", app.base);
    let r = browser.get(&cb).await;
    assert_eq!(r.status(), 503, "the provider's outage, on a page");
    assert!(r.headers().get("retry-after").is_some(), "Retry-After on the 503 page");
    let page = r.text().await.unwrap();
    assert!(page.contains("The provider is unavailable") && page.contains("Nothing was connected"), "{page}");
    assert_eq!(page.matches("Nothing was connected").count(), 1, "said once: {page}");
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    assert_eq!(last_connect_failure(&app).await["reason"], "provider_unavailable");
}

/// The callback after a code exchange the provider botched: a page (never our 500),
/// nothing stored, the link still pending, the reason in the audit trail.
async fn exchange_fails_softly(failure: TokenFailure, reason: &str) {
    let app = spawn_app().await;
    app.provider.switches().set_token_failure(Some(failure));
    let (id, url) = app.elicit("alice", "testp").await;
    let r = Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    let status = r.status().as_u16();
    let page = r.text().await.unwrap();
    // An outage (503, "unavailable") or an answer outside the protocol (502): never a 500.
    let expected = if reason == "provider_unavailable" { 503 } else { 502 };
    assert_eq!(status, expected, "a clear page");
    assert!(page.contains("<h1") && page.contains("Nothing was connected"), "{page}");
    assert_eq!(page.matches("Nothing was connected").count(), 1, "said once: {page}");
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    assert_eq!(last_connect_failure(&app).await["reason"], reason);
}

#[tokio::test]
async fn a_code_exchange_answered_with_an_html_page_shows_a_clear_page_and_stores_nothing() {
    exchange_fails_softly(TokenFailure::Html, "provider_protocol_error").await;
}

#[tokio::test]
async fn a_code_exchange_answered_with_broken_json_shows_a_clear_page_and_stores_nothing() {
    exchange_fails_softly(TokenFailure::GarbageJson, "provider_unavailable").await;
}

#[tokio::test]
async fn a_code_exchange_answered_200_without_an_access_token_shows_a_clear_page_and_stores_nothing() {
    exchange_fails_softly(TokenFailure::NoAccessToken, "provider_unavailable").await;
}

#[tokio::test]
async fn a_code_exchange_slower_than_the_outbound_timeout_shows_a_clear_page_and_stores_nothing() {
    exchange_fails_softly(TokenFailure::Timeout, "provider_unavailable").await;
}

/// Opening a connect link when the IdP cannot be used: the sign-in page says so with a
/// 503 and Retry-After, and the audit trail has the reason.
async fn sign_in_is_unavailable(app: &TestApp) {
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let r = browser.get(&url).await;
    assert_eq!(r.status(), 303, "to sign-in");
    let login = crate::support::browser::absolute(app, &crate::support::browser::location(&r));
    let r = browser.get(&login).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().get("retry-after").is_some(), "Retry-After on the 503 page");
    let page = r.text().await.unwrap();
    assert!(page.contains("Sign-in is unavailable"), "{page}");
    let detail: serde_json::Value =
        sqlx::query_scalar("SELECT detail FROM audit_events WHERE kind = 'login_failed' ORDER BY id DESC LIMIT 1")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(detail["reason"], "idp_unavailable");
    assert_eq!(app.elicitation_status(&id).await, "pending", "the link stays usable");
}

#[tokio::test]
async fn an_idp_whose_discovery_is_down_gets_a_sign_in_unavailable_page_and_an_audit_reason() {
    let app = spawn_app_with(Options { idp_issuer: Some("http://127.0.0.1:9".to_owned()), ..Options::default() }).await;
    sign_in_is_unavailable(&app).await;
}

#[tokio::test]
async fn an_idp_whose_jwks_is_down_gets_a_sign_in_unavailable_page_and_an_audit_reason() {
    let clock = std::sync::Arc::new(mcp_connect::domain::ManualClock::default());
    let app = spawn_app_with(Options { clock: Some(clock.clone()), ..Options::default() }).await;
    app.idp.switches().set_jwks_unavailable(true);
    sign_in_is_unavailable(&app).await;
    // Back up, and the failure no longer remembered (a few seconds), the same link signs in
    // and connects.
    app.idp.switches().set_jwks_unavailable(false);
    clock.advance(std::time::Duration::from_secs(5));
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
}

/// A TCP proxy in front of `upstream` that plays a peer whose keep-alive runs out as a
/// connection is used again: a connection left idle for `idle` is closed the moment its next
/// request arrives, which is passed on to nothing and answered with nothing. (A server that
/// closes idle connections on a timer does this whenever its timer and the next request
/// cross; here it happens every time, so the test does not hang on a race.)
async fn closing_proxy(front: tokio::net::TcpListener, upstream: u16, idle: std::time::Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut client, _)) = front.accept().await else { return };
        tokio::spawn(async move {
            let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else { return };
            let (mut a, mut b) = ([0u8; 16384], [0u8; 16384]);
            let mut last = std::time::Instant::now();
            loop {
                tokio::select! {
                    n = client.read(&mut a) => {
                        let Ok(n @ 1..) = n else { return };
                        if last.elapsed() >= idle {
                            return; // both sockets close, the request unread
                        }
                        if server.write_all(&a[..n]).await.is_err() { return }
                    }
                    n = server.read(&mut b) => {
                        let Ok(n @ 1..) = n else { return };
                        if client.write_all(&b[..n]).await.is_err() { return }
                    }
                }
                last = std::time::Instant::now();
            }
        });
    }
}

#[tokio::test]
async fn fifty_sign_ins_spaced_past_the_idps_keep_alive_all_succeed() {
    use mcp_connect_devproviders::{DevProvider, DevProviderConfig, Role};
    use std::sync::Arc;
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://127.0.0.1:{}", front.local_addr().unwrap().port());
    let idp = DevProvider::start(DevProviderConfig {
        display_name: "IdP that closes idle connections after 1 s".to_owned(),
        role: Role::IdentityProvider,
        public_url: Some(url),
        ..DevProviderConfig::default()
    })
    .await
    .unwrap();
    tokio::spawn(closing_proxy(front, idp.port(), std::time::Duration::from_secs(1)));
    let provider =
        DevProvider::start(DevProviderConfig { role: Role::Downstream, ..DevProviderConfig::default() }).await.unwrap();
    let db = Arc::new(crate::support::create_database().await);
    let app = TestApp::start_on(&db.url.clone(), Some(db), Arc::new(idp), Arc::new(provider), &Options::default())
        .await
        .unwrap();
    for i in 0..50 {
        // A new browser each time: its own connections are fresh (it is our client that
        // keeps one to the IdP across sign-ins).
        let browser = Browser::new();
        let r = browser.get(&format!("{}/login?return_to=/", app.base)).await;
        assert_eq!(r.status(), 303);
        let back = browser.answer_authorize(&crate::support::browser::location(&r), "alice", "allow").await;
        let r = browser.get(&back).await;
        assert_eq!(r.status(), 303, "sign-in {i}: {}", r.text().await.unwrap());
        // Fixed sleep kept: the connection must sit idle past the IdP's keep-alive, which
        // is what this test is about.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
}

/// A stand-in for an IdP whose discovery is down: answers every request 503, and counts them.
async fn down_idp() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let c = c.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if matches!(s.read(&mut buf).await, Ok(1..)) {
                    c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                }
            });
        }
    });
    (url, count)
}

#[tokio::test]
async fn a_hundred_concurrent_sign_ins_while_discovery_is_down_cause_one_fetch() {
    let (issuer, fetches) = down_idp().await;
    let app = spawn_app_with(Options { idp_issuer: Some(issuer), ..Options::default() }).await;
    let app = &app;
    let calls = (0..100).map(|_| async move {
        let r = app.client.get(format!("{}/login?return_to=/", app.base)).send().await.unwrap();
        r.status().as_u16()
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 503), "{statuses:?}");
    let n = fetches.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("100 concurrent sign-ins with discovery down: {n} outbound fetch(es)");
    assert_eq!(n, 1, "one fetch for all of them, its failure remembered briefly");
}

#[tokio::test]
async fn a_thousand_sign_in_starts_write_no_rows() {
    use futures_util::StreamExt;
    let app = spawn_app().await;
    let rows = || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM login_states").fetch_one(&app.pool).await.unwrap();
        let m: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_user_tables WHERE relname = 'login_states_used'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
        let used: i64 = if m > 0 {
            sqlx::query_scalar("SELECT count(*) FROM login_states_used").fetch_one(&app.pool).await.unwrap()
        } else {
            0
        };
        n + used
    };
    let before = rows().await;
    let app = &app;
    let statuses: Vec<u16> = futures_util::stream::iter(0..1000)
        .map(|_| async move {
            app.client.get(format!("{}/login?return_to=/", app.base)).send().await.unwrap().status().as_u16()
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 303));
    let added = rows().await - before;
    eprintln!("1000 sign-in starts added {added} rows");
    assert!(added <= 100, "{added} rows for 1000 unauthenticated requests");
}

/// A token endpoint that reads each request whole and closes the connection without a word,
/// counting the requests it read.
async fn mute_token_endpoint() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncReadExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let c = c.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                // Head, then as much body as it says.
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                            .unwrap_or(0usize);
                        if got.len() >= end + 4 + len {
                            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            return; // closes, unanswered
                        }
                    }
                }
            });
        }
    });
    (port, count)
}

#[tokio::test]
async fn a_token_endpoint_that_reads_a_refresh_request_and_closes_without_answering_sees_it_once() {
    let (p, requests) = mute_token_endpoint().await;
    let app = spawn_app_with(Options {
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"mute\"]".to_owned())],
        extra_toml: format!(
            "[providers.mute]\ntemplate = \"oauth2\"\nauthorize_url = \"http://127.0.0.1:{p}/authorize\"\n\
             token_url = \"http://127.0.0.1:{p}/token\"\nclient_id = \"mute\"\n"
        ),
        env: vec![("MCP_CONNECT_PROVIDER_MUTE_CLIENT_SECRET", "mute-secret".to_owned())],
        ..Options::default()
    })
    .await;
    // An expired access token: the hand-out refreshes first.
    let expired = OffsetDateTime::now_utc() - time::Duration::minutes(5);
    app.insert_connection("acme", "alice", "mute", "old-access", &[], Some(expired)).await;
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "mute"})).await;
    assert_eq!(r.status(), 503, "a transient failure: the grant is kept");
    assert!(r.headers().get("retry-after").is_some());
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "a refresh request the peer may have read is never sent again (a rotated refresh token used twice ends the grant)"
    );
    let status: String = sqlx::query_scalar("SELECT status FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "active");
}
