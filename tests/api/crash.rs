//! Crashes at the worst moment: the real `mcp-connect` process SIGKILLed where a failpoint
//! (`domain::failpoint`, the `failpoints` cargo feature that `scripts/test` turns on) has
//! parked it, then started again on the same port and database.

use crate::support::binary::{Served, handouts, serve_on};
use crate::support::browser::Browser;
use crate::support::{BaseOnly, KEY_A, KEY_B, Options, TestApp, config_env, config_text, free_port, spawn_app};
use serde_json::json;
use std::time::Duration;
use time::OffsetDateTime;

/// Waits until the process says it parked at `point`, then SIGKILLs it.
async fn kill_at(served: &mut Served, point: &str) {
    let line = format!("failpoint reached: {point}");
    crate::support::eventually(Duration::from_secs(20), &line, || async { served.log().contains(&line) }).await;
    served.child.kill().unwrap();
    served.child.wait().unwrap();
}

async fn post_token(app: &TestApp, base: &str, body: serde_json::Value) -> reqwest::Response {
    app.client.post(format!("{base}/v1/token")).bearer_auth(&app.key).json(&body).send().await.unwrap()
}

#[tokio::test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature: scripts/test turns it on")]
async fn a_kill_between_the_code_exchange_and_its_commit_stores_no_grant_shows_a_clear_page_and_the_retry_connects() {
    let app = spawn_app().await;
    let port = free_port();
    let mut served = serve_on(&app, port, &[("FAILPOINTS", "callback.before_commit=return")]).await;
    let base = served.base.clone();
    let first = post_token(&app, &base, json!({"subject": "alice", "provider": "testp"})).await;
    let first: serde_json::Value = first.json().await.unwrap();
    assert_eq!(first["status"], "connect_required", "{first}");
    let id = first["elicitation"]["id"].as_str().unwrap().to_owned();
    let url = first["elicitation"]["url"].as_str().unwrap().to_owned();

    let browser = Browser::new();
    let callback = browser.connect_until_callback(&BaseOnly(base.clone()), &url, "alice", "octo-alice").await;
    // The same browser (its session cookie binds the state) visits the callback.
    let pending = tokio::spawn({
        let (client, callback) = (browser.client.clone(), callback.clone());
        async move { client.get(callback).send().await.map(|r| r.status()) }
    });
    kill_at(&mut served, "callback.before_commit").await;
    assert!(pending.await.unwrap().is_err(), "the killed process answered nothing");
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1, "the provider answered the exchange");
    assert_eq!(app.connection_count().await, 0, "nothing of the killed transaction was kept");

    let _served = serve_on(&app, port, &[]).await;
    // The person reloads the callback: a clear page (its state was spent before the
    // exchange), no second exchange, no grant.
    let reload = browser.get(&callback).await;
    let status = reload.status().as_u16();
    let page = reload.text().await.unwrap();
    assert!((400..500).contains(&status), "a clear 4xx page, not {status}");
    assert!(page.contains("The connection was refused") && page.contains("Nothing was connected."), "{page}");
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    assert_eq!(app.connection_count().await, 0);

    // The retried tool call is not stuck: the link is still open, and a reconnect through
    // it ends in `connected`, with exactly one grant stored.
    let retry: serde_json::Value =
        post_token(&app, &base, json!({"subject": "alice", "provider": "testp", "elicitation_id": id}))
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(retry["status"], "connect_required", "{retry}");
    let again = retry["elicitation"]["url"].as_str().unwrap();
    assert_eq!(browser.connect(&BaseOnly(base.clone()), again, "alice", "octo-alice").await.status(), 200);
    let done: serde_json::Value =
        post_token(&app, &base, json!({"subject": "alice", "provider": "testp", "elicitation_id": id}))
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(done["status"], "connected", "{done}");
    assert_eq!(app.connection_count().await, 1, "one grant");
}

/// Stores alice's grant with an expired access token, kills `serve` after the provider
/// answered the refresh and before the commit, restarts it, and asks again.
async fn kill_during_refresh(app: &TestApp) -> serde_json::Value {
    app.insert_provider_grant(
        "alice",
        "octo-alice",
        Some(time::OffsetDateTime::now_utc() - time::Duration::minutes(1)),
    )
    .await;
    let port = free_port();
    let mut served = serve_on(app, port, &[("FAILPOINTS", "refresh.before_commit=return")]).await;
    let base = served.base.clone();
    let pending = tokio::spawn({
        let (client, key, base) = (app.client.clone(), app.key.clone(), base.clone());
        async move {
            let body = json!({"subject": "alice", "provider": "testp"});
            client.post(format!("{base}/v1/token")).bearer_auth(key).json(&body).send().await.map(|r| r.status())
        }
    });
    kill_at(&mut served, "refresh.before_commit").await;
    assert!(pending.await.unwrap().is_err(), "the killed process answered nothing");
    assert_eq!(app.provider.stats().refresh_calls, 1, "the provider answered the refresh");
    let _served = serve_on(app, port, &[]).await;
    let r = post_token(app, &base, json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(r.status(), 200, "no 500 after the crash");
    let body: serde_json::Value = r.json().await.unwrap();
    // And no loop: the answer after that is the same kind.
    let r2: serde_json::Value =
        post_token(app, &base, json!({"subject": "alice", "provider": "testp"})).await.json().await.unwrap();
    assert_eq!(r2["status"], body["status"], "{r2}");
    body
}

#[tokio::test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature: scripts/test turns it on")]
async fn a_kill_after_a_rotating_refresh_answered_asks_for_a_reconnect_with_reauth_needed() {
    let app = spawn_app().await;
    let body = kill_during_refresh(&app).await;
    // The provider retired the refresh token we held when it answered; the new one died
    // with the process. Our next refresh replays the old one: invalid_grant.
    assert_eq!(body["status"], "connect_required", "{body}");
    assert!(app.audit_kinds().await.contains(&"reauth_needed".to_owned()));
    let status: String = sqlx::query_scalar("SELECT status FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "needs_reauth");
}

#[tokio::test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature: scripts/test turns it on")]
async fn a_kill_after_a_non_rotating_refresh_answered_refreshes_again_and_connects() {
    let app = spawn_app().await;
    app.provider.switches().set_rotate_refresh_tokens(false);
    let body = kill_during_refresh(&app).await;
    assert_eq!(body["status"], "connected", "{body}");
    assert_eq!(app.provider.stats().refresh_calls, 2, "refreshed again with the same refresh token");
    let token = body["access_token"].as_str().unwrap();
    let me = app.client.get(format!("{}/userinfo", app.provider.base_url())).bearer_auth(token).send().await.unwrap();
    assert_eq!(me.status(), 200, "the token handed out works at the provider");
}

#[tokio::test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature: scripts/test turns it on")]
async fn a_rotate_key_killed_mid_batch_leaves_every_row_openable_and_a_rerun_finishes() {
    let app = spawn_app().await;
    // Rows of the releases before data keys: each is re-sealed under its tenant's data key.
    app.seal_as_before_data_keys();
    for i in 0..6 {
        let subject = format!("user{i}");
        app.insert_connection("acme", &subject, "github", &format!("gho_{i}"), &["read:user"], None).await;
    }
    let opts = Options { vault_keys: format!("{KEY_B},{KEY_A}"), ..Options::default() };
    let config = std::env::temp_dir().join(format!("mcpc-rotate-{}.toml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&config, config_text(&app.base, &app.idp.issuer(), &app.provider.issuer(), &opts).unwrap()).unwrap();
    let log = config.with_extension("log");
    let rotate = |failpoints: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"));
        c.args(["rotate-key", "--batch", "2", "--config"])
            .arg(&config)
            .env_remove("DATABASE_URL")
            .envs(config_env(&app.db_url, &opts))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(f) = failpoints {
            c.env("FAILPOINTS", f);
        }
        c
    };
    let mut child = rotate(Some("rotate.before_second_commit=return")).spawn().unwrap();
    let line = "failpoint reached: rotate.before_second_commit";
    crate::support::eventually(Duration::from_secs(20), line, || async {
        std::fs::read_to_string(&log).unwrap_or_default().contains(line)
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let keys: Vec<String> =
        sqlx::query_scalar("SELECT key_id FROM connections ORDER BY key_id").fetch_all(&app.pool).await.unwrap();
    assert_eq!(keys.iter().filter(|k| k.starts_with("dk:")).count(), 2, "the first batch committed: {keys:?}");
    assert_eq!(keys.iter().filter(|k| *k == "k-old").count(), 4, "the killed batch was rolled back: {keys:?}");

    // Every row opens, old key or new, on an instance holding both.
    let both = crate::support::spawn_on(&app, &opts).await;
    for i in 0..6 {
        let b = both.token_ok(json!({"subject": format!("user{i}"), "provider": "github"})).await;
        assert_eq!(b["access_token"], format!("gho_{i}"), "{b}");
    }
    // The rerun finishes the job.
    let out = rotate(None).output().unwrap();
    assert!(out.status.success(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM connections WHERE key_id NOT LIKE 'dk:%'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_kill_with_handouts_queued_loses_at_most_their_audit_rows_and_never_a_grant() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_kept", &["read:user"], None).await;
    let port = free_port();
    let mut served = serve_on(&app, port, &[]).await;
    let base = served.base.clone();
    // Early in a minute, so that the minute is still open (nothing written) at the kill.
    crate::support::eventually(Duration::from_secs(25), "the first 40 seconds of a minute", || async {
        OffsetDateTime::now_utc().second() <= 40
    })
    .await;
    let mut answered = 0;
    for _ in 0..50 {
        let r = post_token(&app, &base, json!({"subject": "alice", "provider": "github"})).await;
        assert_eq!(r.status(), 200);
        answered += 1;
    }
    // The minute is still open: the tallies are in memory only.
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    let kept = handouts(&app).await;
    assert_eq!(kept, 0, "the open minute's {answered} hand-outs were only in memory");

    let _served = serve_on(&app, port, &[]).await;
    let b: serde_json::Value =
        post_token(&app, &base, json!({"subject": "alice", "provider": "github"})).await.json().await.unwrap();
    assert_eq!(b["status"], "connected");
    assert_eq!(b["access_token"], "gho_kept", "the grant outlived the crash");
    assert_eq!(app.connection_count().await, 1);
}

#[tokio::test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature: scripts/test turns it on")]
async fn a_kill_after_a_webhook_was_sent_and_before_it_was_recorded_sends_it_again_under_the_same_id() {
    use crate::support::receiver::{Receiver, assert_verified, register};
    // The in-process instance looks for deliveries once a minute: the served one sends.
    let slow = vec![("poll_interval_ms = 200", "poll_interval_ms = 60000".to_owned())];
    let app = crate::support::spawn_app_with(Options { patch: slow, ..Options::default() }).await;
    let receiver = Receiver::start().await;
    let (webhook, secret) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    let port = free_port();
    let mut served = serve_on(&app, port, &[("FAILPOINTS", "webhooks.before_record=return")]).await;
    let first: serde_json::Value =
        post_token(&app, &served.base.clone(), json!({"subject": "alice", "provider": "testp"}))
            .await
            .json()
            .await
            .unwrap();
    let id = first["elicitation"]["id"].as_str().unwrap();
    let r = app
        .client
        .post(format!("{}/v1/elicitations/{id}/cancel", served.base))
        .bearer_auth(&app.key)
        .json(&json!({"reason": "cancel"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    kill_at(&mut served, "webhooks.before_record").await;
    assert_eq!(receiver.all().len(), 1, "sent (and answered 204) before the kill");
    let (status, attempts): (String, i32) =
        sqlx::query_as("SELECT status, attempts FROM webhook_deliveries").fetch_one(&app.pool).await.unwrap();
    assert_eq!((status.as_str(), attempts), ("pending", 1), "the outcome was never recorded");

    // Restarted: once the dead process's claim has lapsed, the event is sent again under
    // the same id (receivers drop the duplicate by it), and recorded.
    let _served = serve_on(&app, port, &[]).await;
    crate::support::eventually(Duration::from_secs(30), "the event is sent again", || async {
        receiver.all().len() >= 2
    })
    .await;
    let all = receiver.all();
    assert_eq!(all[0].id, all[1].id);
    assert_eq!(all[0].body, all[1].body, "the same body");
    assert_eq!(receiver.accepted().len(), 1, "once after de-duplication");
    assert_verified(&secret, &all).await;
    crate::support::eventually(Duration::from_secs(10), "recorded as delivered", || async {
        let r = app.admin(reqwest::Method::GET, &format!("/webhooks/{webhook}/deliveries"), None).await;
        let b: serde_json::Value = r.json().await.unwrap();
        b["deliveries"][0]["status"] == "delivered" && b["deliveries"][0]["attempts"] == 2
    })
    .await;
}
