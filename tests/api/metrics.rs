//! Prometheus metrics: their own listener, parsed by a real text-format parser, moving
//! with a flow, and never an id, subject or secret in a label.

use crate::support::browser::Browser;
use crate::support::{Options, TestApp, spawn_app_with};
use serde_json::json;

pub(crate) fn with_metrics() -> Options {
    Options { extra_toml: "[metrics]\nlisten = \"127.0.0.1:0\"\n".to_owned(), ..Options::default() }
}

/// One sample as the official Prometheus client's parser reads it.
#[derive(Debug, serde::Deserialize)]
struct Sample {
    name: String,
    labels: std::collections::HashMap<String, String>,
    value: f64,
}

pub(crate) struct Scrape {
    samples: Vec<Sample>,
}

/// The text format, parsed by `prometheus_client.parser` (PyPI `prometheus-client`, the
/// Prometheus project's own Python client) in the tests' virtualenv.
fn parse(text: &str) -> Scrape {
    use std::io::Write;
    let python = std::env::var_os("MCP_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-mcp/bin/python"));
    let script = "import sys, json\n\
        from prometheus_client.parser import text_string_to_metric_families as parse\n\
        out = [dict(name=s.name, labels=s.labels, value=s.value) for f in parse(sys.stdin.read()) for s in f.samples]\n\
        print(json.dumps(out))";
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/test installs tests/python-requirements.txt)", python.display()));
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the parser refused the text: {}", String::from_utf8_lossy(&out.stderr));
    Scrape { samples: serde_json::from_slice(&out.stdout).unwrap() }
}

pub(crate) async fn scrape(app: &TestApp) -> (String, Scrape) {
    let url = format!("http://127.0.0.1:{}/metrics", app.metrics_port.expect("metrics are on"));
    let r = app.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = r.text().await.unwrap();
    let parsed = parse(&text);
    (text, parsed)
}

/// The value of the series `name` with (at least) `labels`, summed over the rest; 0 when
/// the series does not exist yet. A histogram's count is its `<name>_count`.
pub(crate) fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.name == name && labels.iter().all(|(k, v)| x.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|x| x.value)
        .sum()
}

#[tokio::test]
async fn metrics_are_served_on_their_own_listener_and_never_on_the_public_one() {
    let app = spawn_app_with(with_metrics()).await;
    let r = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap();
    assert_eq!(r.status(), 404, "the public listener has no /metrics");
    // The listener connects in the background after start: up within moments, even on a
    // loaded machine (it failed once in CI when scraped right away).
    crate::support::eventually(std::time::Duration::from_secs(10), "the change listener is up", || async {
        value(&scrape(&app).await.1, "mcp_connect_cache_listener_up", &[]) == 1.0
    })
    .await;
    let build = [("version", env!("CARGO_PKG_VERSION")), ("commit", mcp_connect::COMMIT)];
    assert_eq!(value(&scrape(&app).await.1, "mcp_connect_build_info", &build), 1.0, "the build-info metric");
    assert_ne!(mcp_connect::COMMIT, "unknown", "the tests are built in a git checkout");
    // Off unless configured.
    let off = crate::support::spawn_app().await;
    assert_eq!(off.metrics_port, None);
}

#[tokio::test]
async fn the_listener_gauge_is_0_from_the_start_on_an_instance_whose_listener_never_comes_up() {
    // A listener URL where no PostgreSQL answers: the listener never proves itself.
    let port = crate::support::free_port();
    let mut opts = with_metrics();
    opts.env.push(("MCP_CONNECT_DATABASE_LISTEN_URL", format!("postgres://postgres@127.0.0.1:{port}/none")));
    let app = spawn_app_with(opts).await;
    let (_, scrape) = scrape(&app).await;
    let up: Vec<f64> =
        scrape.samples.iter().filter(|s| s.name == "mcp_connect_cache_listener_up").map(|s| s.value).collect();
    assert_eq!(up, [0.0], "present and 0, so McpConnectListenerDown can fire");
}

#[tokio::test]
async fn a_connect_flow_moves_the_token_elicitation_cache_and_http_series() {
    let app = spawn_app_with(with_metrics()).await;
    // Keys as the previous release made them (no fast verifier): argon2 checks them once.
    sqlx::query("UPDATE api_keys SET verifier = NULL").execute(&app.pool).await.unwrap();
    let (_, before) = scrape(&app).await;
    let d =
        |after: &Scrape, name: &str, labels: &[(&str, &str)]| value(after, name, labels) - value(&before, name, labels);

    let (id, url) = app.elicit("alice", "testp").await;
    // Bob opens alice's link: refused, and counted.
    let page = Browser::new().open(&app, &url, "bob").await;
    assert_eq!(page.status(), 403);
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    let connected = app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": id})).await;
    assert_eq!(connected["status"], "connected");
    app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    // A provider nobody configured is one label, whatever its name.
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "made-up-by-caller"})).await;
    assert_eq!(r.status(), 400);
    // A callback opened in another browser session is refused, with its reason.
    let cb = Browser::new().connect_until_callback(&app, &app.elicit("carol", "testp").await.1, "carol", "c").await;
    let other = Browser::new();
    other.login(&app, "carol").await;
    assert_eq!(other.get(&cb).await.status(), 403, "another session's callback");

    let (text, after) = scrape(&app).await;
    let token = "mcp_connect_token_requests_total";
    assert_eq!(d(&after, token, &[("provider", "testp"), ("outcome", "connect_required")]), 2.0);
    assert_eq!(d(&after, token, &[("provider", "testp"), ("outcome", "connected")]), 2.0);
    assert_eq!(d(&after, token, &[("provider", "other"), ("outcome", "unknown_provider")]), 1.0);
    assert_eq!(d(&after, "mcp_connect_elicitations_created_total", &[("provider", "testp")]), 2.0);
    assert_eq!(d(&after, "mcp_connect_elicitations_finished_total", &[("status", "completed")]), 1.0);
    assert_eq!(d(&after, "mcp_connect_identity_mismatches_total", &[]), 1.0);
    assert_eq!(d(&after, "mcp_connect_connect_failures_total", &[("reason", "session_mismatch")]), 1.0);
    // The first lookup after connecting reads the database.
    assert!(d(&after, "mcp_connect_cache_lookups_total", &[("result", "miss")]) >= 1.0);
    let http = "mcp_connect_http_request_duration_seconds_count";
    assert_eq!(d(&after, http, &[("route", "/v1/token"), ("method", "POST"), ("status", "200")]), 4.0);
    assert_eq!(d(&after, http, &[("route", "/connect/{provider}/callback"), ("status", "200")]), 1.0);
    assert_eq!(d(&after, http, &[("route", "/connect/{provider}/callback"), ("status", "403")]), 1.0);
    assert!(text.contains("# TYPE mcp_connect_http_request_duration_seconds histogram"), "a histogram");
    assert!(d(&after, "mcp_connect_db_pool_wait_seconds_count", &[("pool", "main")]) >= 1.0);
    assert!(d(&after, "mcp_connect_db_pool_wait_seconds_count", &[("pool", "lookup")]) >= 1.0);
    assert!(value(&after, "mcp_connect_api_key_hash_wait_seconds_count", &[]) >= 1.0, "key checks hashed");

    // A later lookup is served cached. Not necessarily the second: the connect's own change
    // notification may arrive after the first lookup's read began, and then that read is
    // (rightly) not kept, so a busy machine can need a third.
    let mut after = after;
    for _ in 0..20 {
        if d(&after, "mcp_connect_cache_lookups_total", &[("result", "hit")]) >= 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
        after = scrape(&app).await.1;
    }
    assert!(d(&after, "mcp_connect_cache_lookups_total", &[("result", "hit")]) >= 1.0, "a lookup served cached");

    // No label holds an id, a subject, a key or a raw path.
    let uuid = regex_lite::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-").unwrap();
    for sample in &after.samples {
        for (k, v) in sample.labels.iter() {
            assert!(!uuid.is_match(v), "{}: {k}={v}", sample.name);
            for secret in ["alice", "carol", "bob", "made-up-by-caller", &app.key[5..21], &id] {
                assert!(!v.contains(secret), "{}: {k}={v}", sample.name);
            }
        }
    }
}

#[tokio::test]
async fn refreshes_are_counted_by_outcome() {
    let app = spawn_app_with(with_metrics()).await;
    let past = Some(time::OffsetDateTime::now_utc() - time::Duration::minutes(5));
    app.insert_provider_grant("alice", "octo-alice", past).await;
    let (_, before) = scrape(&app).await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(b["status"], "connected", "{b}");
    let (_, after) = scrape(&app).await;
    let d = value(&after, "mcp_connect_refreshes_total", &[("outcome", "succeeded")])
        - value(&before, "mcp_connect_refreshes_total", &[("outcome", "succeeded")]);
    assert_eq!(d, 1.0);
}

#[tokio::test]
async fn key_store_calls_are_timed_by_store_op_and_result_and_a_cached_hand_out_makes_none() {
    let app = spawn_app_with(with_metrics()).await;
    // The tenant's first sealed value makes its data key: one wrap.
    app.insert_connection("acme", "alice", "github", "gho_a", &["read:user"], None).await;
    let labels = |op| [("store", "local"), ("op", op), ("result", "ok")];
    let (_, s) = scrape(&app).await;
    let wraps = value(&s, "mcp_connect_key_store_seconds_count", &labels("wrap"));
    assert_eq!(wraps, 1.0);
    // A second instance unwraps it once, then hands out from its cache.
    let second = crate::support::spawn_on(&app, &with_metrics()).await;
    for _ in 0..5 {
        assert_eq!(second.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_a");
    }
    let (_, s) = scrape(&second).await;
    assert_eq!(value(&s, "mcp_connect_key_store_seconds_count", &labels("unwrap")), 1.0);
    assert_eq!(value(&s, "mcp_connect_key_store_seconds_count", &[("result", "unavailable")]), 0.0);
}
