//! `/v1/proxy/{provider}/…` (issue 42): a caller's request reaches the provider's API with
//! the user's credential attached, and the caller never holds it. Against real peers: the
//! dev provider (its user endpoint, its API-key check) and a recording HTTP server of the
//! test's own (`Peer`) that says what it received and on how many connections, so a refusal
//! is shown to send nothing.

use crate::support::browser::Browser;
use crate::support::{Options, TestApp, assert_error, spawn_app_with};
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the peer received: method, path and query as sent, headers, body.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
    connections: AtomicUsize,
    /// The event stream's second event waits for this.
    go_on: tokio::sync::Notify,
}

/// A real HTTP server on loopback standing for a provider's API.
struct Peer {
    origin: String,
    shared: Arc<Shared>,
}

impl Peer {
    async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (s, counted) = (shared.clone(), shared.clone());
        let server = actix_web::HttpServer::new(move || {
            let s = s.clone();
            actix_web::App::new().app_data(web::Data::from(s)).default_service(web::to(answer))
        })
        .on_connect(move |_, _| {
            counted.connections.fetch_add(1, Ordering::SeqCst);
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        tokio::spawn(server);
        Peer { origin, shared }
    }

    fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

/// `/redirect`: 302 elsewhere; `/events`: an event stream whose second event waits for the
/// test; `/cookie`: headers the proxy must drop; anything else: 200 with what it saw.
async fn answer(req: HttpRequest, body: web::Bytes, s: web::Data<Shared>) -> HttpResponse {
    let seen = Seen {
        method: req.method().to_string(),
        target: req.uri().to_string(),
        headers: req.headers().iter().map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("?").to_owned())).collect(),
        body: body.to_vec(),
    };
    s.seen.lock().unwrap().push(seen.clone());
    match req.path() {
        "/redirect" => HttpResponse::Found().insert_header(("location", "http://127.0.0.1:9/steal")).finish(),
        "/leak" => HttpResponse::Ok()
            .insert_header(("link", format!("<https://api.example/next?{}>; rel=\"next\"", req.query_string())))
            .insert_header(("x-echo", req.headers().get("authorization").map_or("", |v| v.to_str().unwrap_or(""))))
            .insert_header(("x-kept", "yes"))
            .body("ok"),
        "/cookie" => HttpResponse::Ok()
            .insert_header(("set-cookie", "session=upstream; Path=/"))
            .insert_header(("mcp-connect-error", "connect_required"))
            .insert_header(("x-upstream", "yes"))
            .body("ok"),
        "/events" => {
            let s = s.into_inner();
            let events = futures_util::stream::unfold(0, move |n| {
                let s = s.clone();
                async move {
                    match n {
                        0 => Some((Ok::<_, std::io::Error>(web::Bytes::from_static(b"data: one\n\n")), 1)),
                        1 => {
                            s.go_on.notified().await;
                            Some((Ok(web::Bytes::from_static(b"data: two\n\n")), 2))
                        }
                        _ => None,
                    }
                }
            });
            HttpResponse::Ok().content_type("text/event-stream").streaming(events)
        }
        _ => HttpResponse::Ok().json(json!({
            "method": seen.method,
            "target": seen.target,
            "body_length": seen.body.len(),
        })),
    }
}

/// `upp`: an OAuth provider whose API is the peer (paths `/echo`, `/redirect`, `/cookie`,
/// `/events`; methods GET and POST); `testp` proxied to the dev provider; `keyp`, `queryp`
/// and `basicp`: typed credentials checked at the dev provider's `/api/me`.
fn options(peer: &Peer) -> Options {
    Options {
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"upp\", \"glp\", \"keyp\", \"queryp\", \"basicp\"]".to_owned())],
        extra_toml: format!(
            "[providers.testp.proxy]\norigins = [\"{{PROVIDER}}\"]\n\
             [providers.upp]\ntemplate = \"oauth2\"\ndisplay_name = \"Upstream API\"\nclient_id = \"upp\"\n\
             authorize_url = \"{{PROVIDER}}/authorize\"\ntoken_url = \"{{PROVIDER}}/token\"\n\
             token_endpoint_auth_method = \"none\"\n\
             [providers.upp.proxy]\norigins = [\"{origin}\"]\npaths = [\"/echo\", \"/redirect\", \"/cookie\", \
             \"/events\", \"/leak\"]\nmethods = [\"GET\", \"POST\"]\n\
             [providers.glp]\ntemplate = \"oauth2\"\nclient_id = \"glp\"\n\
             authorize_url = \"{{PROVIDER}}/authorize\"\ntoken_url = \"{{PROVIDER}}/token\"\n\
             token_endpoint_auth_method = \"none\"\n\
             [providers.glp.proxy]\norigins = [\"{origin}\"]\npaths = [\"/api/v4/\"]\nencoded_slashes = true\n\
             [providers.keyp]\ntemplate = \"api_key\"\n[providers.keyp.check]\nurl = \"{{PROVIDER}}/api/me\"\n\
             header = \"X-Api-Key\"\n\
             [providers.queryp]\ntemplate = \"api_key\"\n[providers.queryp.check]\n\
             url = \"{{PROVIDER}}/api/me\"\nquery = \"api_key\"\n\
             [providers.basicp]\ntemplate = \"basic\"\n[providers.basicp.check]\nurl = \"{{PROVIDER}}/api/me\"\n",
            origin = peer.origin
        ),
        ..Options::default()
    }
}

async fn spawn(peer: &Peer) -> TestApp {
    spawn_app_with(options(peer)).await
}

/// A proxied request as `subject`, with more headers.
async fn proxied(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    subject: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut r = app
        .client
        .request(method, format!("{}/v1/proxy/{path}", app.base))
        .bearer_auth(&app.key)
        .header("mcp-connect-subject", subject);
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    r.send().await.unwrap()
}

/// One request written byte for byte (reqwest would resolve dot segments before sending):
/// the status and the body.
async fn raw(app: &TestApp, request_line: &str, extra: &str) -> (u16, String) {
    let authority = app.base.trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let request = format!(
        "{request_line}\r\nHost: {authority}\r\nAuthorization: Bearer {}\r\nMCP-Connect-Subject: alice\r\n{extra}\
         Connection: close\r\n\r\n",
        app.key
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

fn code_of(body: &str) -> Value {
    // A chunked body starts with its length line.
    let json = body.find('{').map(|i| &body[i..body.rfind('}').map_or(body.len(), |j| j + 1)]).unwrap_or("null");
    serde_json::from_str::<Value>(json).map(|v| v["error"].clone()).unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_proxied_call_reaches_the_provider_with_the_users_token_which_the_caller_never_sees() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let (_, access, refresh) = app.insert_provider_grant("alice", "octo-alice", None).await;
    let r = proxied(&app, reqwest::Method::GET, "testp/userinfo", "alice", &[]).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("mcp-connect-error").is_none(), "the provider's answer, not ours");
    let headers = format!("{:?}", r.headers());
    let body = r.text().await.unwrap();
    let me: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(me["login"], "octo-alice", "the dev provider took the user's token");
    for secret in [&access, &refresh] {
        assert!(!body.contains(secret.as_str()) && !headers.contains(secret.as_str()), "{headers} {body}");
    }
    // Counted as a proxied call in the minute's audit row, not as a hand-out.
    assert_eq!(proxied_rows(&app).await, [("read".into(), "2xx".into(), 1)]);
}

/// The minute's audit rows of proxied calls (drained first): method class, status class,
/// count; and that no token was counted as handed out.
async fn proxied_rows(app: &TestApp) -> Vec<(String, String, i32)> {
    assert!(app.state.handouts.drain(Duration::from_secs(5)).await);
    let handed: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE kind = 'token_handed_out'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(handed, 0, "a proxied call hands nothing out");
    sqlx::query_as(
        "SELECT detail->>'method', detail->>'status', count FROM audit_events WHERE kind = 'proxied_calls' \
         ORDER BY 1, 2",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn proxied_calls_are_counted_per_connection_and_minute_by_method_and_answer_class() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let conn = app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    for (method, path, status) in [
        (reqwest::Method::GET, "upp/echo", 200),
        (reqwest::Method::GET, "upp/echo?x=1", 200),
        (reqwest::Method::POST, "upp/echo", 200),
        (reqwest::Method::GET, "upp/redirect", 302),
        // Refused before anything leaves: not a call.
        (reqwest::Method::GET, "upp/elsewhere", 403),
        (reqwest::Method::DELETE, "upp/echo", 405),
    ] {
        let r = proxied(&app, method, path, "alice", &[]).await;
        assert_eq!(r.status(), status, "{path}");
    }
    let rows = proxied_rows(&app).await;
    let want: Vec<(String, String, i32)> =
        vec![("read".into(), "2xx".into(), 2), ("read".into(), "3xx".into(), 1), ("write".into(), "2xx".into(), 1)];
    assert_eq!(rows, want);
    // Each row names the connection, its subject and provider, and the key (never a path).
    let (connection, subject, provider, key, detail): (uuid::Uuid, String, String, String, Value) = sqlx::query_as(
        "SELECT connection_id, subject, provider, api_key_id, detail FROM audit_events \
         WHERE kind = 'proxied_calls' LIMIT 1",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((connection, subject.as_str(), provider.as_str()), (conn.as_uuid(), "alice", "upp"));
    assert!(app.key.contains(&key), "the caller's key id");
    assert_eq!(detail.as_object().unwrap().len(), 2, "method and status only: {detail}");
    // The operator's trail lists them under their kind.
    let r = app.admin(reqwest::Method::GET, "/audit?kind=proxied_calls", None).await;
    assert_eq!(r.status(), 200);
    let page: Value = r.json().await.unwrap();
    assert_eq!(page["events"].as_array().map(Vec::len), Some(3), "{page}");
}

#[tokio::test]
async fn the_credential_headers_and_where_the_caller_is_are_dropped_both_ways() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    let caller = [
        ("cookie", "caller=1"),
        ("x-api-key", "the-callers-own"),
        ("x-auth-token", "t"),
        ("private-token", "gitlab-style"),
        ("x-forwarded-for", "10.1.2.3"),
        ("forwarded", "for=10.1.2.3"),
        ("connection", "x-hop"),
        ("x-hop", "1"),
        ("accept", "application/json"),
        ("x-keep", "yes"),
        ("idempotency-key", "k-1"),
        ("mcp-session-id", "session-of-the-mcp-host"),
        ("last-event-id", "42"),
        ("x-http-method-override", "DELETE"),
        ("x-original-url", "/admin"),
        ("true-client-ip", "10.1.2.3"),
        ("content-type", "application/octet-stream"),
    ];
    let r = app
        .client
        .post(format!("{}/v1/proxy/upp/echo?a=1&b=%20", app.base))
        .bearer_auth(&app.key)
        .header("mcp-connect-subject", "alice")
        .headers(caller.iter().map(|(n, v)| (n.parse().unwrap(), v.parse().unwrap())).collect())
        .body(vec![7u8; 100_000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let echoed: Value = r.json().await.unwrap();
    assert_eq!(echoed, json!({"method": "POST", "target": "/echo?a=1&b=%20", "body_length": 100_000}));
    let seen = peer.seen().pop().unwrap();
    assert_eq!(seen.header("authorization"), Some("Bearer upp-access-token"), "ours, not the caller's key");
    for dropped in [
        "cookie",
        "x-api-key",
        "x-auth-token",
        "private-token",
        "x-forwarded-for",
        "forwarded",
        "x-hop",
        "x-http-method-override",
        "x-original-url",
        "true-client-ip",
    ] {
        assert_eq!(seen.header(dropped), None, "{dropped} must not reach the provider: {seen:?}");
    }
    assert!(seen.headers.iter().all(|(n, _)| !n.starts_with("mcp-connect-")), "{seen:?}");
    assert_eq!((seen.header("accept"), seen.header("x-keep")), (Some("application/json"), Some("yes")));
    assert_eq!(seen.header("idempotency-key"), Some("k-1"), "a key that is no credential passes");
    // A Streamable HTTP MCP session goes on: its id, and where an event stream resumes.
    assert_eq!(
        (seen.header("mcp-session-id"), seen.header("last-event-id")),
        (Some("session-of-the-mcp-host"), Some("42"))
    );
    assert!(seen.header("x-request-id").is_some_and(|id| id.len() == 16), "the request id goes along");

    // Back: the provider's own cookie and a header posing as ours are dropped.
    let r = proxied(&app, reqwest::Method::GET, "upp/cookie", "alice", &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers().get("x-upstream").map(|v| v.to_str().unwrap()), Some("yes"));
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.headers().get("mcp-connect-error").is_none(), "only the proxy's own answers carry it");

    // A provider repeating the credential in a header does not hand it to the caller.
    let r = proxied(&app, reqwest::Method::GET, "upp/leak?page=2", "alice", &[]).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-echo").is_none(), "{:?}", r.headers());
    assert_eq!(r.headers()["x-kept"], "yes");
    assert!(r.headers().get("link").is_some(), "no credential in it: kept");
}

#[tokio::test]
async fn traversal_another_origin_a_method_and_an_absolute_form_are_refused_before_anything_leaves() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    let refused = [
        "GET /v1/proxy/upp/echo/../admin HTTP/1.1",
        "GET /v1/proxy/upp/echo/./x HTTP/1.1",
        "GET /v1/proxy/upp/echo/%2e%2e/admin HTTP/1.1",
        "GET /v1/proxy/upp/echo/%2E./admin HTTP/1.1",
        "GET /v1/proxy/upp/echo%2f..%2fadmin HTTP/1.1",
        "GET /v1/proxy/upp/echo%5c..%5cadmin HTTP/1.1",
        "GET /v1/proxy/upp/echo/..;/admin HTTP/1.1",
        "GET /v1/proxy/upp/echo/%252e%252e/admin HTTP/1.1",
        "GET /v1/proxy/upp//127.0.0.1:9/echo HTTP/1.1",
        "GET /v1/proxy/upp/echo?x=%2e%2e%2f HTTP/1.1",
        "GET /v1/proxy/%75pp/echo HTTP/1.1",
    ];
    for line in refused {
        let (status, body) = raw(&app, line, "").await;
        assert_eq!((status, code_of(&body)), (400, json!("proxy_path_refused")), "{line}: {body}");
    }
    // A proxy's request form: naming the peer it is no path of ours; naming our proxy, refused.
    let (status, body) = raw(&app, &format!("GET {}/echo HTTP/1.1", peer.origin), "").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = raw(&app, &format!("GET {}/v1/proxy/upp/echo HTTP/1.1", app.base), "").await;
    assert_eq!((status, code_of(&body)), (400, json!("proxy_path_refused")), "{body}");
    // Outside the allowed paths, another origin, a method the rules leave out.
    let (status, body) = raw(&app, "GET /v1/proxy/upp/admin HTTP/1.1", "").await;
    assert_eq!((status, code_of(&body)), (403, json!("proxy_path_not_allowed")), "{body}");
    let (status, body) =
        raw(&app, "GET /v1/proxy/upp/echo HTTP/1.1", "MCP-Connect-Origin: http://127.0.0.1:9\r\n").await;
    assert_eq!((status, code_of(&body)), (400, json!("proxy_origin_not_allowed")), "{body}");
    let r = proxied(&app, reqwest::Method::DELETE, "upp/echo", "alice", &[]).await;
    assert_eq!(r.headers().get("allow").map(|v| v.to_str().unwrap().to_owned()).as_deref(), Some("GET, POST"));
    assert_eq!(r.headers().get("mcp-connect-error").map(|v| v.to_str().unwrap()), Some("proxy_method_not_allowed"));
    assert_error(r, 405, "proxy_method_not_allowed").await;
    for method in ["TRACE", "CONNECT", "OPTIONS"] {
        let (status, body) = raw(&app, &format!("{method} /v1/proxy/upp/echo HTTP/1.1"), "").await;
        assert!(matches!(status, 400 | 405), "{method}: {status} {body}");
    }
    // A provider with no API to proxy to; another tenant's provider, whose rules this
    // caller does not learn (beta may use github only).
    let r = proxied(&app, reqwest::Method::GET, "plainp/x", "alice", &[]).await;
    assert_error(r, 403, "proxy_not_configured").await;
    let r = app
        .client
        .delete(format!("{}/v1/proxy/upp/echo", app.base))
        .bearer_auth(&app.beta_key)
        .header("mcp-connect-subject", "alice")
        .send()
        .await
        .unwrap();
    assert_error(r, 403, "provider_not_allowed").await;
    assert_eq!(peer.connections(), 0, "nothing reached the provider: {:?}", peer.seen());

    // The same request, allowed, does.
    let (status, _) = raw(&app, "GET /v1/proxy/upp/echo HTTP/1.1", "").await;
    assert_eq!(status, 200);
    assert_eq!(peer.seen().len(), 1);
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_before_anything_leaves() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    let length = format!("Content-Length: {}\r\n", 10 * 1024 * 1024 + 1);
    let (status, body) = raw(&app, "POST /v1/proxy/upp/echo HTTP/1.1", &length).await;
    assert_eq!((status, code_of(&body)), (413, json!("payload_too_large")), "{body}");
    assert_eq!(peer.connections(), 0);
}

#[tokio::test]
async fn a_redirect_is_returned_and_not_followed() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    let r = proxied(&app, reqwest::Method::GET, "upp/redirect", "alice", &[]).await;
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "http://127.0.0.1:9/steal");
    assert_eq!(peer.seen().len(), 1);
}

#[tokio::test]
async fn an_event_stream_passes_through_as_the_provider_sends_it() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    let mut r = proxied(&app, reqwest::Method::GET, "upp/events", "alice", &[("accept", "text/event-stream")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    // The first event arrives while the provider still holds the second: nothing is
    // buffered whole.
    let first = tokio::time::timeout(Duration::from_secs(10), r.chunk()).await.expect("the first event in time");
    assert_eq!(first.unwrap().unwrap(), "data: one\n\n");
    peer.shared.go_on.notify_one();
    let mut rest = Vec::new();
    while let Some(c) = tokio::time::timeout(Duration::from_secs(10), r.chunk()).await.unwrap().unwrap() {
        rest.extend_from_slice(&c);
    }
    assert_eq!(rest, b"data: two\n\n");
}

#[tokio::test]
async fn without_a_connection_the_answer_is_connect_required_and_a_decline_is_said() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let headers = [("mcp-connect-server-name", "Whoami%20Tools")];
    let r = proxied(&app, reqwest::Method::GET, "upp/echo", "alice", &headers).await;
    assert_eq!(r.status(), 428);
    assert_eq!(r.headers()["mcp-connect-error"], "connect_required");
    let b: Value = r.json().await.unwrap();
    assert_eq!((&b["error"], &b["status"]), (&json!("connect_required"), &json!("connect_required")), "{b}");
    let id = b["elicitation"]["id"].as_str().unwrap().to_owned();
    assert_eq!(b["mcp"]["elicitationId"], id.as_str());
    assert!(b["mcp"]["message"].as_str().unwrap().starts_with("Whoami Tools needs access to your Upstream API"));
    assert_eq!(b["provider_name"], "Upstream API");
    // The same link on the retry; a decline is said as such.
    let retry = [("mcp-connect-elicitation-id", id.as_str())];
    let again: Value = proxied(&app, reqwest::Method::GET, "upp/echo", "alice", &retry).await.json().await.unwrap();
    assert_eq!(again["elicitation"]["id"], id.as_str());
    sqlx::query("UPDATE elicitations SET status = 'declined'").execute(&app.pool).await.unwrap();
    let r = proxied(&app, reqwest::Method::GET, "upp/echo", "alice", &retry).await;
    assert_error(r, 403, "connect_declined").await;
    // Bad ask headers: their own codes.
    let r = proxied(&app, reqwest::Method::GET, "upp/echo", "ali%0Ace", &[]).await;
    assert_error(r, 400, "invalid_subject").await;
    let r = proxied(&app, reqwest::Method::GET, "upp/echo", "alice", &[("mcp-connect-elicitation-id", "x")]).await;
    assert_error(r, 400, "invalid_elicitation_id").await;
    let r =
        proxied(&app, reqwest::Method::GET, "upp/echo", "alice", &[("mcp-connect-server-name", "a%E2%80%AEb")]).await;
    assert_error(r, 400, "invalid_request").await;
    let r = app.client.get(format!("{}/v1/proxy/upp/echo", app.base)).bearer_auth(&app.key).send().await.unwrap();
    assert_error(r, 400, "invalid_subject").await;
    let r = app.client.get(format!("{}/v1/proxy/upp/echo", app.base)).send().await.unwrap();
    assert_error(r, 401, "invalid_api_key").await;
    assert_eq!(peer.connections(), 0);
}

#[tokio::test]
async fn a_typed_credential_goes_where_its_check_puts_it() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let browser = Browser::new();
    for (provider, fields, login) in [
        ("keyp", vec![("api_key", "devkey-alice-upstream")], "alice-upstream"),
        ("queryp", vec![("api_key", "devkey-alice-upstream")], "alice-upstream"),
        ("basicp", vec![("username", "ann"), ("password", "devpass-ann")], "ann"),
    ] {
        let (_, url) = app.elicit("alice", provider).await;
        let page = crate::credentials::form_page(&app, &browser, &url, "alice").await;
        let r = crate::credentials::submit(&app, &browser, provider, &page, &fields).await;
        assert_eq!(r.status(), 200, "{provider}: {}", r.text().await.unwrap());
        // The caller's own key, header or parameter, is not the one that goes.
        let r = app
            .client
            .get(format!("{}/v1/proxy/{provider}/api/me?api_key=the-callers", app.base))
            .bearer_auth(&app.key)
            .header("mcp-connect-subject", "alice")
            .header("x-api-key", "the-callers")
            .send()
            .await
            .unwrap();
        let status = r.status();
        let me: Value = r.json().await.unwrap();
        assert_eq!((status.as_u16(), &me["login"]), (200, &json!(login)), "{provider}: {me}");
    }
}

#[tokio::test]
async fn a_tenant_that_hands_out_nothing_says_connected_without_the_credential_and_the_proxy_still_works() {
    let peer = Peer::start().await;
    let mut opts = options(&peer);
    opts.patch.push((
        "display_name = \"Acme Assistant\"",
        "display_name = \"Acme Assistant\"\nhand_out = \"none\"\nhand_out_providers = { keyp = \"credentials\" }"
            .to_owned(),
    ));
    let app = spawn_app_with(opts).await;
    let (_, access, _) = app.insert_provider_grant("alice", "octo-alice", None).await;
    for _ in 0..2 {
        // Read from the row, then from the cache: neither hands the token out.
        let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
        assert_eq!((&b["status"], &b["hand_out"]), (&json!("connected"), &json!("none")), "{b}");
        assert_eq!(b.get("access_token"), None, "{b}");
        assert_eq!(b.get("fields"), None, "{b}");
        assert_eq!(b["account"]["login"], "octo-alice");
        assert!(!b.to_string().contains(&access));
    }
    let r = proxied(&app, reqwest::Method::GET, "testp/userinfo", "alice", &[]).await;
    assert_eq!(r.status(), 200, "the grant is used through the proxy");
    // The override: this provider's credential is handed out.
    let (_, url) = app.elicit("alice", "keyp").await;
    let browser = Browser::new();
    let page = crate::credentials::form_page(&app, &browser, &url, "alice").await;
    let r = crate::credentials::submit(&app, &browser, "keyp", &page, &[("api_key", "devkey-alice-upstream")]).await;
    assert_eq!(r.status(), 200);
    let b = app.token_ok(json!({"subject": "alice", "provider": "keyp"})).await;
    assert_eq!((&b["access_token"], &b["hand_out"]), (&json!("devkey-alice-upstream"), &json!("credentials")));
}

#[tokio::test]
async fn a_token_the_provider_refuses_is_refreshed_once_for_concurrent_calls_and_the_request_sent_again() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    // An access token the provider holds expired, though the row says it is good for an
    // hour (and a refresh token the provider still takes).
    let now = time::OffsetDateTime::now_utc();
    let (access, _) =
        app.provider.issue_grant_at("testp-client", "octo-alice", "openid profile", now - time::Duration::hours(2));
    let (_, refresh) = app.provider.issue_grant("testp-client", "octo-alice", "openid profile");
    let good_for_an_hour = Some(now + time::Duration::hours(1));
    app.insert_sealed("acme", "alice", "testp", &access, Some(&refresh), &["openid", "profile"], good_for_an_hour)
        .await;
    let call = || proxied(&app, reqwest::Method::GET, "testp/userinfo", "alice", &[]);
    let (a, b) = tokio::join!(call(), call());
    for r in [a, b] {
        assert_eq!(r.status(), 200, "sent again with the refreshed token: {:?}", r.headers());
        assert!(r.headers().get("mcp-connect-refreshed").is_none());
        assert_eq!(r.json::<Value>().await.unwrap()["login"], "octo-alice");
    }
    assert_eq!(app.provider.stats().refresh_calls, 1, "two refused calls, one refresh");

    // A body too long to keep is not sent again: the 401 comes back, saying the grant was
    // refreshed and the request may be repeated.
    app.provider.revoke_all_for("octo-alice");
    let r = app
        .client
        .post(format!("{}/v1/proxy/testp/userinfo", app.base))
        .bearer_auth(&app.key)
        .header("mcp-connect-subject", "alice")
        .body(vec![b'x'; 100 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("mcp-connect-error").is_none(), "the provider's 401");
    // Refreshed for a refusal a moment ago: a token refused again is not refreshed again
    // within the minute, however often the provider (or a caller provoking it) says 401.
    assert_eq!(r.headers()["mcp-connect-refreshed"], "failed");
    for _ in 0..3 {
        let r = proxied(&app, reqwest::Method::GET, "testp/userinfo", "alice", &[]).await;
        assert_eq!((r.status().as_u16(), r.headers()["mcp-connect-refreshed"].to_str().unwrap()), (401, "failed"));
    }
    assert_eq!(app.provider.stats().refresh_calls, 1);
    // Our own refusals say they are ours, also the key check's.
    let r = app.client.get(format!("{}/v1/proxy/testp/userinfo", app.base)).send().await.unwrap();
    assert_eq!(r.headers()["mcp-connect-error"], "invalid_api_key");
}

/// The SDKs' proxy clients against the real service: Python's `ConnectClient.proxied` and
/// TypeScript's `proxyFetch` reach the dev provider as the user, never holding the token,
/// and a user without a connection gets each one's `ConnectRequiredError`.
#[tokio::test]
async fn the_python_and_typescript_proxy_clients_call_the_provider_as_the_user() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let (_, access, _) = app.insert_provider_grant("alice", "octo-alice", None).await;
    let python = r#"
import asyncio, os, sys
from mcp_connect import ConnectClient, ConnectRequiredError
async def main():
    async with ConnectClient(os.environ["URL"], os.environ["KEY"]) as c:
        async with c.proxied("testp", subject="alice") as http:
            print((await http.get("/userinfo")).json()["login"])
        try:
            async with c.proxied("testp", subject="bob") as http:
                await http.get("/userinfo")
        except ConnectRequiredError as e:
            print("connect_required", e.outcome.elicitation.url.startswith(os.environ["URL"]))
asyncio.run(main())
"#;
    let node = r#"
const { ConnectClient, ConnectRequiredError } = await import(process.env.SDK);
const client = new ConnectClient({ baseUrl: process.env.URL, apiKey: process.env.KEY });
const alice = client.proxyFetch({ provider: 'testp', subject: 'alice' });
console.log((await (await alice('/userinfo')).json()).login);
try {
  await client.proxyFetch({ provider: 'testp', subject: 'bob' })('/userinfo');
} catch (e) {
  console.log('connect_required', e instanceof ConnectRequiredError && e.outcome.elicitation.url.startsWith(process.env.URL));
}
"#;
    let sdk = crate::sdks::repo().join("clients/typescript/dist/index.js");
    let mut py = tokio::process::Command::new(crate::sdks::python());
    py.args(["-c", python]);
    let mut js = tokio::process::Command::new("node");
    js.args(["--input-type=module", "-e", node]).env("SDK", format!("file://{}", sdk.display()));
    for mut run in [py, js] {
        let out = run.env("URL", &app.base).env("KEY", &app.key).output().await.unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stdout}\n{stderr}");
        // Python says True, JavaScript true.
        assert_eq!(stdout.to_lowercase(), "octo-alice\nconnect_required true\n", "{stderr}");
        assert!(!stdout.contains(&access) && !stderr.contains(&access));
    }
}

#[tokio::test]
async fn a_connection_or_a_tenant_over_its_rate_gets_429_with_retry_after_and_nothing_is_sent() {
    let peer = Peer::start().await;
    let mut opts = options(&peer);
    opts.extra_toml.push_str(
        "[proxy]\nper_connection_per_second = 1\nper_connection_burst = 2\nper_tenant_per_second = 1\n\
         per_tenant_burst = 4\n",
    );
    let app = spawn_app_with(opts).await;
    for subject in ["alice", "bob"] {
        app.insert_connection("acme", subject, "upp", &format!("{subject}-token"), &["read"], None).await;
    }
    let started = std::time::Instant::now();
    let mut passed = 0;
    let mut limited = Vec::new();
    for subject in ["alice", "alice", "alice", "bob", "bob"] {
        let r = proxied(&app, reqwest::Method::GET, "upp/echo", subject, &[]).await;
        match r.status().as_u16() {
            200 => passed += 1,
            429 => {
                let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                assert!((1..=2).contains(&retry), "{retry}");
                let body = assert_error(r, 429, "rate_limited").await;
                limited.push((subject, body["error_description"].as_str().unwrap().to_owned()));
            }
            s => panic!("{s}"),
        }
    }
    // A bucket refills one request a second: allow for a slow machine.
    let elapsed = started.elapsed().as_secs() + 1;
    // The tenant's bucket counts every request it checks (alice's refused third too).
    assert!(passed <= 3 + elapsed as usize, "{passed} passed in about {elapsed} s");
    assert_eq!(peer.seen().len(), passed, "a refused request is not sent");
    if elapsed <= 2 {
        assert_eq!(passed, 3, "{limited:?}");
        assert!(limited[0].1.starts_with("this connection"), "alice's third: {limited:?}");
        assert!(limited.last().unwrap().1.starts_with("this tenant"), "bob's second: {limited:?}");
    }
}

/// The whole way: a proxied call without a connection answers the elicitation, the person
/// connects in Chromium, and the retry reaches the provider with a token the caller never
/// sees.
#[tokio::test]
async fn a_person_connects_in_chromium_and_the_retried_proxied_call_reaches_the_provider() {
    use crate::support::chrome::{Chrome, Setup};
    use crate::support::chrome::{answer_at_the_provider, callback_heading, on_the_consent_page, open_and_sign_in};
    // Every log line of the process, at debug level.
    let logs = crate::logs::capture_logs();
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let first = proxied(&app, reqwest::Method::GET, "testp/userinfo", "alice", &[]).await;
    assert_eq!(first.status(), 428);
    let b: Value = first.json().await.unwrap();
    let (id, url) = (b["elicitation"]["id"].as_str().unwrap(), b["mcp"]["url"].as_str().unwrap());

    let chrome = Chrome::start("proxy", Setup::default()).await;
    open_and_sign_in(&chrome, &app, url, "alice").await;
    on_the_consent_page(&chrome, &app, id).await;
    chrome.click("button[name=decision][value=connect]").await;
    answer_at_the_provider(&chrome, &app, "octo-alice", "allow").await;
    assert_eq!(callback_heading(&chrome, &app).await, "Connected");
    chrome.close().await;

    let r = proxied(&app, reqwest::Method::GET, "testp/userinfo", "alice", &[("mcp-connect-elicitation-id", id)]).await;
    assert_eq!(r.status(), 200);
    let headers = format!("{:?}", r.headers());
    let body = r.text().await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["login"], "octo-alice");
    // The token the grant holds (this tenant hands it out) appears in neither, nor in any
    // log line.
    let token = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    let token = token["access_token"].as_str().unwrap();
    assert!(token.len() >= 16 && !body.contains(token) && !headers.contains(token), "{headers}");
    crate::support::eventually(Duration::from_secs(10), "the proxied call's log line", || async {
        String::from_utf8_lossy(&logs.lock().unwrap()).contains("/v1/proxy/testp/userinfo")
    })
    .await;
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!logs.contains(token), "the token is in the logs");
}

#[tokio::test]
async fn a_stream_in_flight_is_cut_when_its_connection_is_revoked() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let id = app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    let mut r = proxied(&app, reqwest::Method::GET, "upp/events", "alice", &[]).await;
    assert_eq!(r.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(10), r.chunk()).await.unwrap().unwrap();
    assert_eq!(first.unwrap(), "data: one\n\n");
    let revoked = app.admin(reqwest::Method::POST, &format!("/connections/{id}/revoke"), None).await;
    assert!(revoked.status().is_success(), "{}", revoked.status());
    // The provider would go on (it never sends the second event): the proxy breaks it off,
    // with an error, not an end that reads as complete.
    let next = tokio::time::timeout(Duration::from_secs(15), r.chunk()).await.expect("cut within the bound");
    assert!(next.is_err(), "broken off: {next:?}");
}

#[tokio::test]
async fn an_encoded_slash_reaches_a_provider_that_takes_it_as_sent_and_never_carries_a_traversal() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    app.insert_connection("acme", "alice", "glp", "glp-access-token", &["read"], None).await;
    let r = proxied(&app, reqwest::Method::GET, "glp/api/v4/projects/group%2Fproject/issues", "alice", &[]).await;
    assert_eq!(r.status(), 200);
    let echoed: Value = r.json().await.unwrap();
    assert_eq!(echoed["target"], "/api/v4/projects/group%2Fproject/issues", "sent encoded, as received");
    let before = peer.seen().len();
    for path in [
        "glp/api/v4/projects/group%2F..%2F..%2Fadmin",
        "glp/api/v4/projects/..%2Fadmin",
        "glp/api/v4/projects/group%2F%2Fx",
    ] {
        let r = proxied(&app, reqwest::Method::GET, path, "alice", &[]).await;
        assert_error(r, 400, "proxy_path_refused").await;
    }
    // The same encoded slash to a provider that does not take it.
    let r = proxied(&app, reqwest::Method::GET, "upp/echo%2Fx", "alice", &[]).await;
    assert_error(r, 400, "proxy_path_refused").await;
    assert_eq!(peer.seen().len(), before, "nothing refused reached the provider");
}

#[tokio::test]
async fn a_kill_switch_a_switched_off_tenant_a_revoked_connection_and_a_revoked_key_stop_proxied_calls() {
    let peer = Peer::start().await;
    let app = spawn(&peer).await;
    let conn = app.insert_connection("acme", "alice", "upp", "upp-access-token", &["read"], None).await;
    // The change listener hears before anything changes (each change below waits for its
    // notification, as another instance would hear it).
    assert!(app.state.caches.barrier(&app.pool).await, "listener up");
    let call = || proxied(&app, reqwest::Method::GET, "upp/echo", "alice", &[]);
    assert_eq!(call().await.status(), 200);
    let sent = peer.seen().len();
    // Each refusal answers what `/v1/token` answers in the same state, with nothing sent.
    async fn same_as_token(app: &TestApp, what: &str, status: u16, code: &str) {
        let r = proxied(app, reqwest::Method::GET, "upp/echo", "alice", &[]).await;
        assert_eq!(r.headers().get("mcp-connect-error").and_then(|v| v.to_str().ok()), Some(code), "{what}");
        assert_error(r, status, code).await;
        let t = app.token(&app.key, json!({"subject": "alice", "provider": "upp"})).await;
        let body: Value = t.json().await.unwrap();
        assert!(body["error"] == code || body["status"] == code, "{what}: /v1/token says {body}");
    }

    app.admin(reqwest::Method::PUT, "/kill-switches/upp", Some(json!({"mode": "no_token_handouts"}))).await;
    assert!(app.state.caches.barrier(&app.pool).await, "the switch's notification arrived");
    same_as_token(&app, "kill switch", 403, "provider_disabled").await;
    assert_eq!(app.admin(reqwest::Method::DELETE, "/kill-switches/upp", None).await.status(), 200);
    assert!(app.state.caches.barrier(&app.pool).await, "the change's notification arrived");
    assert_eq!(call().await.status(), 200, "the switch lifted");

    let op = app.operator_key().await;
    let off = app.operator(&op, reqwest::Method::PATCH, "/tenants/acme", Some(json!({"active": false}))).await;
    assert_eq!(off.status(), 200);
    assert!(app.state.caches.barrier(&app.pool).await, "the switch-off's notification arrived");
    same_as_token(&app, "switched-off tenant", 403, "tenant_disabled").await;
    let on = app.operator(&op, reqwest::Method::PATCH, "/tenants/acme", Some(json!({"active": true}))).await;
    assert_eq!(on.status(), 200);
    // Heard as every instance hears it: the change's notification.
    assert!(app.state.caches.barrier(&app.pool).await, "the change's notification arrived");
    assert_eq!(call().await.status(), 200, "switched on again");

    let revoked = app.admin(reqwest::Method::POST, &format!("/connections/{conn}/revoke"), None).await;
    assert!(revoked.status().is_success());
    assert!(app.state.caches.barrier(&app.pool).await, "the revocation's notification arrived");
    same_as_token(&app, "revoked connection", 428, "connect_required").await;

    let id = mcp_connect::domain::ApiKeyId::parse(&app.key[5..21]).unwrap();
    mcp_connect::store::api_keys::revoke_api_key(&app.pool, &id).await.unwrap().unwrap();
    assert!(app.state.caches.barrier(&app.pool).await, "the key's notification arrived");
    assert_error(call().await, 401, "invalid_api_key").await;
    assert_eq!(peer.seen().len(), sent + 2, "only the two allowed calls reached the provider");
}
