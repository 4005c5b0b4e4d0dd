//! A retry that waits: `wait_seconds` on `POST /v1/token` and `GET /v1/elicitations/{id}`
//! holds the answer while the named elicitation is pending and answers the moment its
//! change commits, on this instance or another, woken by the change notification.

use crate::support::browser::Browser;
use crate::support::{Options, TestApp, assert_error, eventually, spawn_app_with, spawn_on};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

fn with_metrics() -> Options {
    Options { extra_toml: METRICS.to_owned(), ..Options::default() }
}

const METRICS: &str = "[metrics]\nlisten = \"127.0.0.1:0\"\n";

/// The retry of alice's tool call for elicitation `id`, waiting up to `wait` seconds, sent
/// to `base`: its answer and how long it took.
pub(crate) fn waiting_retry(base: &str, key: &str, id: &str, wait: u64) -> JoinHandle<(Value, Duration)> {
    let (url, key) = (format!("{base}/v1/token"), key.to_owned());
    let body = json!({"subject": "alice", "provider": "testp", "elicitation_id": id, "wait_seconds": wait});
    tokio::spawn(async move {
        let began = Instant::now();
        let r = reqwest::Client::new().post(url).bearer_auth(key).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        (r.json().await.unwrap(), began.elapsed())
    })
}

/// Until `app` holds `n` waiting requests (its `mcp_connect_waiting_requests` gauge).
pub(crate) async fn held(app: &TestApp, n: usize) {
    let url = format!("http://127.0.0.1:{}/metrics", app.metrics_port.expect("metrics are on"));
    eventually(Duration::from_secs(10), &format!("{n} requests held"), || async {
        let text = app.client.get(&url).send().await.unwrap().text().await.unwrap();
        text.lines().any(|l| l == format!("mcp_connect_waiting_requests {n}"))
    })
    .await;
}

#[tokio::test]
async fn a_retry_that_waits_gets_the_token_as_soon_as_the_connect_commits() {
    let app = spawn_app_with(with_metrics()).await;
    let (id, url) = app.elicit("alice", "testp").await;
    let waiting = waiting_retry(&app.base, &app.key, &id, 30);
    // The retry is held while the person is still on the page...
    held(&app, 1).await;
    assert!(!waiting.is_finished());
    let r = Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 200);
    let (answer, took) = waiting.await.unwrap();
    // ...and answered with the token the connect stored, long before the 30 s ran out.
    assert_eq!(answer["status"], "connected", "{answer}");
    assert_eq!(answer["account"]["login"], "octo-alice");
    assert!(took < Duration::from_secs(20), "woken by the commit, not by the end of the wait: {took:?}");
    held(&app, 0).await;
    assert_eq!(app.connection_count().await, 1, "one grant");
}

#[tokio::test]
async fn a_waiter_on_one_instance_wakes_when_the_connect_commits_on_another() {
    let a = spawn_app_with(with_metrics()).await;
    // The providers know the last instance's redirect URIs: the person connects there.
    let b = spawn_on(&a, &with_metrics()).await;
    let (id, url) = b.elicit("alice", "testp").await;
    let waiting = waiting_retry(&a.base, &a.key, &id, 30);
    held(&a, 1).await;
    let r = Browser::new().connect(&b, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 200);
    let (answer, took) = waiting.await.unwrap();
    assert_eq!(answer["status"], "connected", "{answer}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_the_same_pending_link() {
    let app = spawn_app_with(with_metrics()).await;
    let (id, _) = app.elicit("alice", "testp").await;
    let (answer, took) = waiting_retry(&app.base, &app.key, &id, 1).await.unwrap();
    assert_eq!(answer["status"], "connect_required", "{answer}");
    assert_eq!(answer["elicitation"]["id"], id.as_str(), "the same link, not a new one");
    assert!(took >= Duration::from_secs(1), "held for the wait: {took:?}");
}

#[tokio::test]
async fn a_cancel_in_the_client_wakes_a_waiting_status_read_and_a_waiting_retry() {
    let app = spawn_app_with(with_metrics()).await;
    let (id, _) = app.elicit("alice", "testp").await;
    let status = tokio::spawn({
        let url = format!("{}/v1/elicitations/{id}?wait_seconds=30", app.base);
        let key = app.key.clone();
        async move {
            let began = Instant::now();
            let r = reqwest::Client::new().get(url).bearer_auth(key).send().await.unwrap();
            assert_eq!(r.status(), 200);
            (r.json::<Value>().await.unwrap(), began.elapsed())
        }
    });
    let retry = waiting_retry(&app.base, &app.key, &id, 30);
    held(&app, 2).await;
    let r = app
        .client
        .post(format!("{}/v1/elicitations/{id}/cancel", app.base))
        .bearer_auth(&app.key)
        .json(&json!({"reason": "decline"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (e, took) = status.await.unwrap();
    assert_eq!(e["status"], "cancelled", "{e}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    // The retry is answered afresh: that link is closed, so a new one (never the closed one).
    let (answer, took) = retry.await.unwrap();
    assert_eq!(answer["status"], "connect_required", "{answer}");
    assert_ne!(answer["elicitation"]["id"], id.as_str());
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[tokio::test]
async fn nothing_waits_for_an_elicitation_that_is_no_longer_pending() {
    let app = spawn_app_with(with_metrics()).await;
    let (id, url) = app.elicit("alice", "testp").await;
    Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    let (answer, took) = waiting_retry(&app.base, &app.key, &id, 30).await.unwrap();
    assert_eq!(answer["status"], "connected");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let r = app
        .client
        .get(format!("{}/v1/elicitations/{id}?wait_seconds=30", app.base))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "completed");
}

#[tokio::test]
async fn wait_seconds_over_thirty_or_without_an_elicitation_id_is_refused() {
    let app = spawn_app_with(Options::default()).await;
    let (id, _) = app.elicit("alice", "testp").await;
    let over = app
        .token(&app.key, json!({"subject": "alice", "provider": "testp", "elicitation_id": id, "wait_seconds": 31}))
        .await;
    let b = assert_error(over, 400, "invalid_request").await;
    assert!(b["error_description"].as_str().unwrap().contains("at most 30"), "{b}");
    let first = app.token(&app.key, json!({"subject": "alice", "provider": "testp", "wait_seconds": 5})).await;
    let b = assert_error(first, 400, "invalid_request").await;
    assert!(b["error_description"].as_str().unwrap().contains("elicitation_id"), "{b}");
    let negative = app
        .token(&app.key, json!({"subject": "alice", "provider": "testp", "elicitation_id": id, "wait_seconds": -1}))
        .await;
    assert_error(negative, 400, "invalid_json").await;
    for q in ["wait_seconds=31", "wait_seconds=x", "wait=5"] {
        let r = app
            .client
            .get(format!("{}/v1/elicitations/{id}?{q}", app.base))
            .bearer_auth(&app.key)
            .send()
            .await
            .unwrap();
        let code = if q == "wait_seconds=31" { "invalid_request" } else { "invalid_query" };
        assert_error(r, 400, code).await;
    }
    // 0 is "answer at once", with or without an id.
    let zero = app.token(&app.key, json!({"subject": "alice", "provider": "testp", "wait_seconds": 0})).await;
    assert_eq!(zero.status(), 200);
}

#[tokio::test]
async fn an_operator_can_hold_requests_for_less_than_thirty_seconds() {
    let app = spawn_app_with(Options {
        extra_toml: format!("{METRICS}[elicitations]\nmax_wait_seconds = 1\n"),
        ..Options::default()
    })
    .await;
    let (id, _) = app.elicit("alice", "testp").await;
    let (answer, took) = waiting_retry(&app.base, &app.key, &id, 30).await.unwrap();
    assert_eq!(answer["status"], "connect_required");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "held for the operator's maximum: {took:?}"
    );
}

#[tokio::test]
async fn a_key_revoked_while_its_retry_waits_gets_no_token() {
    let app = spawn_app_with(with_metrics()).await;
    let (id, url) = app.elicit("alice", "testp").await;
    let waiting = waiting_retry(&app.base, &app.key, &id, 30);
    held(&app, 1).await;
    let key_id = mcp_connect::api_keys::parse_key(&app.key).unwrap();
    sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1")
        .bind(key_id.as_str())
        .execute(&app.pool)
        .await
        .unwrap();
    Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    let (answer, _) = waiting.await.unwrap();
    assert_eq!(answer["status"], "connect_required", "the answer it had before the wait, no token: {answer}");
    assert!(answer.get("access_token").is_none());
}
