//! Invariant 1: a whole connect flow, with every log line captured at debug level, leaves
//! no token, code, state, verifier, nonce, API key or session id in the logs.

use crate::support::browser::{Browser, location};
use crate::support::spawn_app;
use mcp_connect::crypto::lookup_hash;
use mcp_connect::domain::{ConnectionId, ProviderId, Subject, TenantId};
use mcp_connect::keys::Scope;
use mcp_connect::vault::{Field, RowBinding};
use secrecy::ExposeSecret;
use serde_json::json;
use std::io::Write;
use std::sync::{Arc, Mutex};

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn query_param(url: &str, name: &str) -> String {
    url::Url::parse(url).unwrap().query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned()).unwrap()
}

/// Every log line of this process from now on, at debug level (nextest runs each test in
/// a process of its own: the test calling this owns the process's subscriber).
pub(crate) fn capture_logs() -> Arc<Mutex<Vec<u8>>> {
    capture(false)
}

/// [`capture_logs`], each line twice: as text, and as the service writes it by default
/// (`log_format = "json"`: escaped, with the request's span on every line inside it).
fn capture_logs_in_both_formats() -> Arc<Mutex<Vec<u8>>> {
    capture(true)
}

fn capture(json_too: bool) -> Arc<Mutex<Vec<u8>>> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let buf = Arc::new(Mutex::new(Vec::new()));
    let (text, json) = (Capture(buf.clone()), Capture(buf.clone()));
    let debug = tracing_subscriber::filter::LevelFilter::DEBUG;
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(move || text.clone()).with_filter(debug))
        .with(json_too.then(|| mcp_connect::telemetry::json_lines(move || json.clone()).with_filter(debug)));
    tracing::subscriber::set_global_default(subscriber).expect("this test owns the process's subscriber");
    buf
}

#[tokio::test]
async fn a_whole_flow_logs_no_secret() {
    let buf = capture_logs_in_both_formats();

    let app = spawn_app().await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    let url = b["elicitation"]["url"].as_str().unwrap().to_owned();
    let id = b["elicitation"]["id"].as_str().unwrap().to_owned();

    let browser = Browser::new();
    // Login by hand, to see the IdP's code and state.
    let r = browser.get(&url).await;
    let r = browser.get(&crate::support::browser::absolute(&app, &location(&r))).await;
    let login_back = browser.answer_authorize(&location(&r), "alice", "allow").await;
    let r = browser.get(&login_back).await;
    let session_cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("mcpc_session="))
        .unwrap();
    let session_id = session_cookie.split(';').next().unwrap().split('=').nth(1).unwrap().to_owned();
    let page = browser.get(&url).await.text().await.unwrap();
    let r = browser.consent(&app, "testp", &page, "connect").await;
    let cb = browser.answer_authorize(&location(&r), "octo-alice", "allow").await;
    // The PKCE verifier and nonce, from the sealed state (the test holds the vault).
    let state = query_param(&cb, "state");
    let hash = lookup_hash("oauth_state", &state);
    let (key_id, sealed): (String, Vec<u8>) =
        sqlx::query_as("SELECT key_id, sealed FROM oauth_states WHERE state_hash = $1")
            .bind(&hash[..])
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let opened = app
        .state
        .keys
        .opening(&key_id, Scope::Tenant(&TenantId::parse("acme").unwrap()))
        .await
        .unwrap()
        .open_aux("oauth_state", &hash, &sealed)
        .unwrap();
    let sealed_json: serde_json::Value = serde_json::from_slice(&opened).unwrap();
    assert_eq!(browser.get(&cb).await.status(), 200);
    let t = app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": id})).await;
    assert_eq!(t["status"], "connected");
    // The refresh and ID tokens, opened from the vault.
    let (cid, rt_ct, id_ct, generation, issuer, key_id): (uuid::Uuid, Vec<u8>, Vec<u8>, Option<i64>, String, String) =
        sqlx::query_as("SELECT id, refresh_token_ct, id_token_ct, seal_version, issuer, key_id FROM connections")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let (tenant, subject, provider) =
        (TenantId::parse("acme").unwrap(), Subject::parse("alice").unwrap(), ProviderId::parse("testp").unwrap());
    let row = RowBinding {
        tenant: &tenant,
        subject: &subject,
        provider: &provider,
        connection: ConnectionId::from_uuid(cid),
        generation,
        issuer: Some(&issuer),
    };
    let key = app.state.keys.opening(&key_id, Scope::Tenant(&tenant)).await.unwrap();
    let refresh = key.open(&row, Field::RefreshToken, &rt_ct).unwrap();
    let id_token = key.open(&row, Field::IdToken, &id_ct).unwrap();

    let secrets = [
        ("access token", t["access_token"].as_str().unwrap().to_owned()),
        ("refresh token", refresh.expose_secret().to_owned()),
        ("id token", id_token.expose_secret().to_owned()),
        ("provider code", query_param(&cb, "code")),
        ("provider state", state),
        ("pkce verifier", sealed_json["verifier"].as_str().unwrap().to_owned()),
        ("nonce", sealed_json["nonce"].as_str().unwrap().to_owned()),
        ("idp code", query_param(&login_back, "code")),
        ("idp state", query_param(&login_back, "state")),
        ("session id", session_id),
        ("api key", app.key.clone()),
        ("api key secret", app.key[22..].to_owned()),
    ];
    // The request log line of the callback is written as its response goes out (the JSON
    // one after the text one).
    crate::support::eventually(std::time::Duration::from_secs(10), "the callback's log line", || async {
        String::from_utf8_lossy(&buf.lock().unwrap()).contains(r#""path":"/connect/testp/callback""#)
    })
    .await;
    let logs = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("/connect/testp/callback"), "the capture works: {} bytes", logs.len());
    assert!(logs.contains(r#"path="/connect/testp/callback""#), "the text lines are captured too");
    for (what, value) in &secrets {
        assert!(value.len() >= 16, "{what} is a real value");
        assert!(!logs.contains(value.as_str()), "{what} found in the logs");
    }
}

#[tokio::test]
async fn a_refused_code_exchange_logs_the_servers_error_answer_and_no_secret() {
    let buf = capture_logs_in_both_formats();
    let app = crate::support::spawn_app_with(crate::support::Options {
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"wrongp\"]".to_owned())],
        extra_toml: "[providers.wrongp]\ntemplate = \"oauth2\"\nauthorize_url = \"{PROVIDER}/authorize\"\n\
                     token_url = \"{PROVIDER}/token\"\nuserinfo_url = \"{PROVIDER}/userinfo\"\nclient_id = \"testp-client\"\n"
            .to_owned(),
        env: vec![("MCP_CONNECT_PROVIDER_WRONGP_CLIENT_SECRET", "not-the-secret-4711".to_owned())],
        ..crate::support::Options::default()
    })
    .await;
    app.provider.add_client(mcp_connect_devproviders::ClientRegistration {
        client_id: "testp-client".to_owned(),
        client_secret: "testp-secret".to_owned(),
        redirect_uris: vec![
            format!("{}/connect/testp/callback", app.base),
            format!("{}/connect/wrongp/callback", app.base),
        ],
    });
    let (_, url) = app.elicit("alice", "wrongp").await;
    let r = Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 502);
    let logs = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    let line = logs.lines().find(|l| l.contains("callback refused")).unwrap_or_else(|| panic!("{logs}"));
    assert!(line.contains("invalid_client") && line.contains("client authentication failed"), "{line}");
    assert!(!logs.contains("not-the-secret-4711"), "the secret reached a log");
    // The JSON line names the request it was written in, as the service writes it (no
    // span of its own for the request: `telemetry::in_request`): the id its answer carries.
    let json: serde_json::Value = logs
        .lines()
        .filter(|l| l.starts_with('{') && l.contains("callback refused"))
        .map(|l| serde_json::from_str(l).unwrap())
        .next()
        .unwrap_or_else(|| panic!("a JSON line: {logs}"));
    let request_id = r.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(
        json["span"],
        json!({"request_id": request_id, "method": "GET", "path": "/connect/wrongp/callback", "name": "request"}),
        "{json}"
    );
}
