//! The `mcp-connect` binary as operators run it: `serve` draining on SIGTERM, and
//! `healthcheck`.

use crate::support::binary::{Served, handouts, serve, wait_exit};
use crate::support::{TestApp, eventually, eventually_ok};
use serde_json::json;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

fn sigterm(child: &Child) {
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn sigterm_under_load_flips_readyz_first_fails_no_request_and_writes_every_handout() {
    let app = crate::support::spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_drain", &["read:user"], None).await;
    let mut served = serve(&app, &[("MCP_CONNECT_SHUTDOWN_DRAIN_SECONDS", "2")]).await;

    // Steady load from four clients that stop once readyz flips, as a load balancer would.
    let flipped = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (url, key, flipped, ok, failed) =
                (format!("{}/v1/token", served.base), app.key.clone(), flipped.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                while !flipped.load(Ordering::Acquire) {
                    let r =
                        client.post(&url).bearer_auth(&key).json(&json!({"subject": "alice", "provider": "github"}));
                    match r.send().await {
                        Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::AcqRel),
                        _ => failed.fetch_add(1, Ordering::AcqRel),
                    };
                }
            })
        })
        .collect();
    // The load is under way before the signal: the 50 answers that count as load below.
    eventually(Duration::from_secs(10), "50 answers of the load", || async { ok.load(Ordering::Acquire) > 50 }).await;
    sigterm(&served.child);
    let signalled = std::time::Instant::now();
    let readyz = format!("{}/readyz", served.base);
    let watcher = reqwest::Client::new();
    let flipped_to = eventually_ok(Duration::from_secs(1), "readyz flips at once", || async {
        let r = watcher.get(&readyz).send().await.unwrap();
        if r.status() == 503 { Ok(r.json::<serde_json::Value>().await.unwrap()) } else { Err(r.status()) }
    })
    .await;
    assert_eq!(flipped_to["status"], "draining");
    let flipped_after = signalled.elapsed();
    flipped.store(true, Ordering::Release);
    for c in clients {
        c.await.unwrap();
    }
    // Still served while draining.
    let r = watcher
        .post(format!("{}/v1/token", served.base))
        .bearer_auth(&app.key)
        .json(&json!({"subject": "alice", "provider": "github"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "requests are served during the drain");
    assert_eq!(r.headers()["connection"], "close", "and told to come back on a new connection");
    ok.fetch_add(1, Ordering::AcqRel);

    let status = wait_exit(&mut served.child, Duration::from_secs(20)).await;
    assert!(status.success(), "serve exits 0 after draining: {status}");
    assert!(signalled.elapsed() >= Duration::from_secs(2), "it served for the drain period first");
    let answered = ok.load(Ordering::Acquire);
    assert!(answered > 50, "there was load: {answered} answered");
    assert_eq!(failed.load(Ordering::Acquire), 0, "no request failed (readyz flipped after {flipped_after:?})");
    let rows: Vec<(time::OffsetDateTime, i32, Option<String>, String)> = sqlx::query_as(
        "SELECT at, count, instance, recorded::text FROM audit_events WHERE kind = 'token_handed_out' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(handouts(&app).await, answered as i64, "every hand-out answered is in the audit table: {rows:?}");
    // And the port is closed.
    assert!(watcher.get(&readyz).send().await.is_err(), "new connections are refused once it stopped");
}

#[tokio::test]
async fn a_refresh_detached_from_its_dropped_request_finishes_before_serve_exits() {
    let app = crate::support::spawn_app().await;
    let past = Some(time::OffsetDateTime::now_utc() - time::Duration::minutes(5));
    app.insert_provider_grant("alice", "octo-alice", past).await;
    let mut served = serve(&app, &[("MCP_CONNECT_SHUTDOWN_DRAIN_SECONDS", "0")]).await;
    // The provider rotates the refresh token and takes 1.5 s to answer; the caller gives
    // up after 300 ms, and SIGTERM comes while the refresh is still at the provider.
    app.provider.switches().set_answer_delay(Duration::from_millis(1_500));
    let r = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap()
        .post(format!("{}/v1/token", served.base))
        .bearer_auth(&app.key)
        .json(&json!({"subject": "alice", "provider": "testp"}))
        .send()
        .await;
    assert!(r.is_err(), "the caller went away mid-refresh");
    sigterm(&served.child);
    let status = wait_exit(&mut served.child, Duration::from_secs(20)).await;
    assert!(status.success(), "{status}");
    let refreshed: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE kind = 'refresh_succeeded'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(refreshed, 1, "the rotated refresh token was committed before exit");
    app.provider.switches().set_answer_delay(Duration::ZERO);
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(b["status"], "connected", "the grant lives on: {b}");
}

#[tokio::test]
async fn healthcheck_exits_0_when_ready_and_1_when_draining_or_down() {
    let app = crate::support::spawn_app().await;
    let mut served = serve(&app, &[("MCP_CONNECT_SHUTDOWN_DRAIN_SECONDS", "3")]).await;
    let healthcheck = |listen: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mcp-connect"));
        c.args(["healthcheck", "--config"]).arg(&served.config);
        c.envs(served.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        c.env("MCP_CONNECT_LISTEN", listen);
        c.output().unwrap()
    };
    let port = served.base.rsplit(':').next().unwrap().to_owned();
    let out = healthcheck(&format!("0.0.0.0:{port}"));
    assert_eq!(out.status.code(), Some(0), "ready, asked on 127.0.0.1: {}", String::from_utf8_lossy(&out.stderr));
    sigterm(&served.child);
    // Once the signal is handled the drain begins (3 s), and the check says not ready.
    crate::support::eventually(Duration::from_secs(3), "the healthcheck failing while draining", || async {
        healthcheck(&format!("127.0.0.1:{port}")).status.code() != Some(0)
    })
    .await;
    let out = healthcheck(&format!("127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(1), "draining is not ready");
    assert!(String::from_utf8_lossy(&out.stderr).contains("503"), "{}", String::from_utf8_lossy(&out.stderr));
    wait_exit(&mut served.child, Duration::from_secs(20)).await;
    let out = healthcheck(&format!("127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(1), "down is not ready");
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// `/v1/token` for alice's testp grant, inside the caller's trace (`flags`: `01` sampled).
async fn traced_lookup(app: &TestApp, served: &Served, flags: &str) -> serde_json::Value {
    let r = app
        .client
        .post(format!("{}/v1/token", served.base))
        .bearer_auth(&app.key)
        .header("traceparent", format!("00-{TRACE}-{CALLER_SPAN}-{flags}"))
        .json(&json!({"subject": "alice", "provider": "testp"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_token_call_that_refreshes_is_one_trace_in_the_callers_with_the_refresh_call_as_a_child() {
    let receiver = mcp_connect_testkit::otlp::OtlpReceiver::start().await.unwrap();
    let app = crate::support::spawn_app().await;
    let soon = Some(time::OffsetDateTime::now_utc() + time::Duration::seconds(30));
    let (_, old_access, old_refresh) = app.insert_provider_grant("alice", "octo-alice", soon).await;
    let env = [
        ("MCP_CONNECT_TRACING_OTLP_ENDPOINT", receiver.url.as_str()),
        ("MCP_CONNECT_LOG", "info"),
        ("MCP_CONNECT_LOG_FORMAT", "json"),
    ];
    let mut served = serve(&app, &env).await;
    let answer = traced_lookup(&app, &served, "01").await;
    assert_eq!(answer["status"], "connected");
    let new_access = answer["access_token"].as_str().unwrap().to_owned();
    assert_ne!(new_access, old_access, "refreshed");
    // Spans go out in batches; the exit flushes them.
    sigterm(&served.child);
    assert!(wait_exit(&mut served.child, Duration::from_secs(30)).await.success());

    let spans = receiver.spans();
    let ours: Vec<_> = spans.iter().filter(|s| s.trace_id == TRACE).collect();
    let names: Vec<&str> = ours.iter().map(|s| s.name.as_str()).collect();
    let server =
        ours.iter().find(|s| s.name == "POST /v1/token").unwrap_or_else(|| panic!("no request span: {spans:#?}"));
    assert_eq!(server.parent_span_id, CALLER_SPAN, "the caller's trace is continued");
    assert_eq!(server.service, "mcp-connect");
    assert_eq!(server.attribute("http.response.status_code"), Some("200"));
    let refresh = ours.iter().find(|s| s.name == "refresh").unwrap_or_else(|| panic!("no refresh span: {names:?}"));
    assert_eq!(refresh.parent_span_id, server.span_id, "the refresh is the request's child");
    let call = ours
        .iter()
        .find(|s| s.attribute("server.address") == Some("127.0.0.1") && s.name.starts_with("POST"))
        .unwrap_or_else(|| panic!("no provider call span: {names:?}"));
    let mut up = call.parent_span_id.clone();
    while up != refresh.span_id {
        up = ours
            .iter()
            .find(|s| s.span_id == up)
            .map(|s| s.parent_span_id.clone())
            .unwrap_or_else(|| panic!("the token call is not inside the refresh: {names:?}"));
    }
    assert!(ours.iter().any(|s| s.name == "db.transaction"), "the refresh's transaction: {names:?}");
    // Off by default: the provider never sees our trace.
    assert_eq!(app.provider.stats().token_traceparents, vec![None]);
    // No span holds a secret: not the tokens, old or new, nor the API key.
    let text = format!("{spans:?}");
    for secret in [old_access.as_str(), old_refresh.as_str(), new_access.as_str(), app.key.as_str()] {
        assert!(!text.contains(secret), "a span holds a secret");
    }
    // The log lines carry the trace id.
    let log = served.log();
    let line = log
        .lines()
        .find(|l| l.contains("\"path\":\"/v1/token\"") && l.contains("\"status\":200"))
        .unwrap_or_else(|| panic!("no access line: {log}"));
    assert!(line.contains(&format!("\"trace_id\":\"{TRACE}\"")), "{line}");
}

#[tokio::test]
async fn traceparent_reaches_providers_only_when_propagate_to_providers_is_set() {
    let receiver = mcp_connect_testkit::otlp::OtlpReceiver::start().await.unwrap();
    let app = crate::support::spawn_app().await;
    let soon = Some(time::OffsetDateTime::now_utc() + time::Duration::seconds(30));
    app.insert_provider_grant("alice", "octo-alice", soon).await;
    let env = [
        ("MCP_CONNECT_TRACING_OTLP_ENDPOINT", receiver.url.as_str()),
        ("MCP_CONNECT_TRACING_PROPAGATE_TO_PROVIDERS", "true"),
    ];
    let mut served = serve(&app, &env).await;
    // A caller cannot take its request out of our traces by sending "not sampled".
    assert_eq!(traced_lookup(&app, &served, "00").await["status"], "connected");
    sigterm(&served.child);
    assert!(wait_exit(&mut served.child, Duration::from_secs(30)).await.success());
    let call = receiver
        .spans()
        .into_iter()
        .find(|s| {
            s.trace_id == TRACE && s.attribute("server.address") == Some("127.0.0.1") && s.name.starts_with("POST")
        })
        .expect("the provider call's span");
    assert_eq!(
        app.provider.stats().token_traceparents,
        vec![Some(format!("00-{TRACE}-{}-01", call.span_id))],
        "the provider sees our trace, with the call's own span as parent"
    );
}
