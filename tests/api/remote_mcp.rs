//! Remote MCP servers as providers (issue 28, part 2), against a peer we did not write:
//! panva's `oidc-provider` (`tests/interop`) as the authorization server of a remote MCP
//! server at its `/mcp`, whose 401 names its protected resource metadata (RFC 9728). We
//! discover the server from that, register ourselves (RFC 7591: this peer offers no client
//! ID metadata documents), and send the RFC 8707 `resource` on authorize, token and refresh
//! requests: the peer issues a JWT for the resource only when a request names it.

use crate::interop::Peer;
use crate::support::chrome::{Chrome, Setup, open_and_sign_in};
use crate::support::{Options, TestApp, spawn_app_with, spawn_on};
use serde_json::{Value, json};

async fn remote(access_ttl: u64) -> (TestApp, Peer, String) {
    let peer = Peer::start(json!({"port": 0, "mcp_resource": true, "access_ttl": access_ttl})).await;
    let resource = format!("{}/mcp", peer.origin());
    let app = spawn_app_with(options(&resource)).await;
    (app, peer, resource)
}

fn options(resource: &str) -> Options {
    Options {
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"remote\"]".to_owned())],
        extra_toml: format!(
            "[providers.remote]\ntemplate = \"mcp\"\ndisplay_name = \"Remote Tools\"\nresource = \"{resource}\"\n\
             scopes = [\"mcp:tools\"]\n"
        ),
        ..Options::default()
    }
}

/// The claims of a JWT (its signature is the peer's business: this reads the audience).
fn claims(jwt: &str) -> Value {
    use base64::Engine;
    let payload = jwt.split('.').nth(1).unwrap_or_else(|| panic!("not a JWT: the token has no resource"));
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

#[tokio::test]
async fn a_remote_mcp_server_is_discovered_registered_at_and_connected_in_chromium_with_its_resource() {
    let (app, peer, resource) = remote(3600).await;
    let (id, url) = app.elicit("alice", "remote").await;
    let chrome = Chrome::start("remote-mcp", Setup::default()).await;
    open_and_sign_in(&chrome, &app, &url, "alice").await;
    chrome.wait_for_url(&format!("{}/connect/remote?e={id}", app.base)).await;
    let consent = chrome.assert_our_page().await;
    assert!(consent.contains("Connect your Remote Tools account?"), "{consent}");
    assert_eq!(chrome.text(".domain .host").await, format!("127.0.0.1:{}", peer.port));
    chrome.screenshot("consent").await;
    chrome.click("button[name=decision][value=connect]").await;
    chrome.wait_for_url(&format!("{}/interaction/", peer.origin())).await;
    chrome.type_into("input[name=username]", "alice-remote").await;
    chrome.click("button[name=decision][value=allow]").await;
    chrome.wait_for_url(&format!("{}/connect/remote/callback?", app.base)).await;
    chrome.assert_our_page().await;
    assert_eq!(chrome.text("h1").await, "Connected");
    chrome.screenshot("connected").await;
    chrome.close().await;

    let t = app.token_ok(json!({"subject": "alice", "provider": "remote", "elicitation_id": id})).await;
    assert_eq!(t["status"], "connected", "{t}");
    assert_eq!(t["credential_type"], "oauth2");
    let token = claims(t["access_token"].as_str().unwrap());
    assert_eq!(token["aud"], resource.as_str(), "the token is for the remote server: {token}");
    assert_eq!(token["sub"], "alice-remote");
    assert_eq!(token["scope"], "mcp:tools");

    let stats = peer.stats().await;
    let mcp = &stats["mcp"];
    assert!(mcp["probes"].as_u64().unwrap() >= 1, "its 401 was read: {mcp}");
    assert!(mcp["metadata_requests"].as_u64().unwrap() >= 1);
    assert_eq!(mcp["registrations"], 1, "{mcp}");
    assert_eq!(mcp["authorize_resources"], json!([resource]));
    assert_eq!(mcp["token_resources"], json!([{"grant_type": "authorization_code", "resource": resource}]));
    // The registration is kept, its secret sealed: another instance uses the same client.
    let rows: Vec<(String, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT client_id, secret_ct FROM remote_mcp_clients").fetch_all(&app.pool).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].1.as_ref().is_some_and(|ct| !ct.is_empty()));
}

#[tokio::test]
async fn a_refresh_names_the_resource_and_a_second_instance_uses_the_one_registration() {
    // Access tokens of 30 s: inside the refresh margin, so every hand-out refreshes first.
    let (app, peer, resource) = remote(30).await;
    let (id, url) = app.elicit("alice", "remote").await;
    let b = crate::support::browser::Browser::new();
    let page = b.open(&app, &url, "alice").await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    let r = b.consent(&app, "remote", &html, "connect").await;
    assert_eq!(r.status(), 303);
    let cb = crate::interop::sign_in_at(&b, &peer, &crate::support::browser::location(&r), "alice-remote").await;
    assert_eq!(b.get(&cb).await.status(), 200);
    let first = app.token_ok(json!({"subject": "alice", "provider": "remote", "elicitation_id": id})).await;
    assert_eq!(first["status"], "connected", "{first}");

    // Another instance behind the same public address (as instances behind one load
    // balancer are): the same redirect URI, so the same stored registration. (Its own
    // listening address stays its `base`; the rest of the line is made a comment.)
    let mut same_address = options(&resource);
    same_address.patch.push(("public_base_url = \"http://127.0.0.1:", format!("public_base_url = \"{}\" #", app.base)));
    let other = spawn_on(&app, &same_address).await;
    let again = other.token_ok(json!({"subject": "alice", "provider": "remote"})).await;
    assert_eq!(again["status"], "connected", "{again} {}", peer.stats().await);
    assert_ne!(again["access_token"], first["access_token"], "refreshed");
    assert_eq!(claims(again["access_token"].as_str().unwrap())["aud"], resource.as_str());
    let stats = peer.stats().await;
    let resources = stats["mcp"]["token_resources"].as_array().unwrap().clone();
    assert!(resources.iter().any(|r| r["grant_type"] == "refresh_token"), "{resources:?}");
    for r in &resources {
        assert_eq!(r["resource"], resource.as_str(), "every token request names it: {resources:?}");
    }
    assert_eq!(stats["mcp"]["registrations"], 1, "one client for every instance");
    assert_eq!(stats["token_requests"]["errors"], json!({}), "{stats}");
}

#[tokio::test]
async fn a_server_that_reads_client_id_metadata_documents_knows_us_by_the_one_we_serve() {
    let peer = Peer::start(json!({"port": 0, "mcp_resource": true, "cimd": true})).await;
    let resource = format!("{}/mcp", peer.origin());
    // No scopes configured: those the server's metadata lists are asked for.
    let mut opts = options(&resource);
    opts.extra_toml = opts.extra_toml.replace("scopes = [\"mcp:tools\"]\n", "");
    assert!(!opts.extra_toml.contains("scopes"));
    let app = spawn_app_with(opts).await;
    // The document: our client id is its URL, a public client with our callback.
    let doc: Value = reqwest::get(format!("{}/clients/remote", app.base)).await.unwrap().json().await.unwrap();
    assert_eq!(doc["client_id"], format!("{}/clients/remote", app.base));
    assert_eq!(doc["redirect_uris"], json!([format!("{}/connect/remote/callback", app.base)]));
    assert_eq!(doc["token_endpoint_auth_method"], "none");
    // Only for remote MCP server providers.
    assert_eq!(reqwest::get(format!("{}/clients/testp", app.base)).await.unwrap().status(), 404);

    let (id, url) = app.elicit("alice", "remote").await;
    let b = crate::support::browser::Browser::new();
    let page = b.open(&app, &url, "alice").await;
    let html = page.text().await.unwrap();
    assert!(html.contains("<li><code>mcp:tools</code></li>"), "the page shows what is asked for: {html}");
    let r = b.consent(&app, "remote", &html, "connect").await;
    assert_eq!(r.status(), 303);
    let to = crate::support::browser::location(&r);
    assert!(to.contains(&format!("client_id={}", enc(&format!("{}/clients/remote", app.base)))), "{to}");
    let cb = crate::interop::sign_in_at(&b, &peer, &to, "alice-remote").await;
    assert_eq!(b.get(&cb).await.status(), 200);
    let t = app.token_ok(json!({"subject": "alice", "provider": "remote", "elicitation_id": id})).await;
    let token = claims(t["access_token"].as_str().unwrap());
    assert_eq!(token["aud"], resource.as_str());
    assert_eq!(token["scope"], "mcp:tools", "the metadata's scopes_supported: {token}");
    assert_eq!(t["scopes"], json!(["mcp:tools"]));

    let stats = peer.stats().await;
    assert!(stats["mcp"]["cimd_fetches"].as_u64().unwrap() >= 1, "{stats}");
    assert_eq!(stats["mcp"]["registrations"], 0, "no registration where a document does");
    assert_eq!(stats["client_auth"]["token"], json!({"none": 1}), "a public client: PKCE, no secret");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM remote_mcp_clients").fetch_one(&app.pool).await.unwrap();
    assert_eq!(rows, 0);
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Status, `WWW-Authenticate` and JSON body, by path.
type Pages = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, (u16, Option<String>, Value)>>>;

/// A remote MCP server that misbehaves on purpose: a real HTTP server on loopback whose
/// answers (by path) the test sets.
struct Host {
    origin: String,
    pages: Pages,
}

impl Host {
    fn start() -> Host {
        let pages: Pages = Pages::default();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let p = pages.clone();
        let server = actix_web::HttpServer::new(move || {
            let p = p.clone();
            actix_web::App::new().default_service(actix_web::web::to(move |req: actix_web::HttpRequest| {
                let found = p.lock().unwrap().get(req.path()).cloned();
                async move {
                    let (status, challenge, body) = found.unwrap_or((404, None, json!({"error": "not_found"})));
                    let mut r = actix_web::HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap());
                    if let Some(c) = challenge {
                        r.insert_header(("www-authenticate", c));
                    }
                    r.json(body)
                }
            }))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        tokio::spawn(server);
        Host { origin, pages }
    }

    fn set(&self, path: &str, status: u16, challenge: Option<String>, body: Value) {
        self.pages.lock().unwrap().insert(path.to_owned(), (status, challenge, body));
    }

    /// A well-behaved server and authorization server on this origin.
    fn good(&self) {
        let o = &self.origin;
        self.set(
            "/mcp",
            401,
            Some(format!(r#"Bearer resource_metadata="{o}/.well-known/oauth-protected-resource/mcp""#)),
            json!({}),
        );
        self.set(
            "/.well-known/oauth-protected-resource/mcp",
            200,
            None,
            json!({"resource": format!("{o}/mcp"), "authorization_servers": [o]}),
        );
        self.set(
            "/.well-known/oauth-authorization-server",
            200,
            None,
            json!({"issuer": o, "authorization_endpoint": format!("{o}/authorize"), "token_endpoint": format!("{o}/token"),
                   "code_challenge_methods_supported": ["S256"], "registration_endpoint": format!("{o}/register")}),
        );
    }
}

#[tokio::test]
async fn discovery_refuses_metadata_of_another_resource_or_issuer_without_s256_or_on_another_origin() {
    use mcp_connect::oauth::mcp::discover;
    let host = Host::start();
    host.good();
    let http = mcp_connect::net::http::Outbound::new(std::time::Duration::from_secs(3), false, &[]).unwrap();
    let resource = url::Url::parse(&format!("{}/mcp", host.origin)).unwrap();
    let d = discover(&http, &resource, false).await.unwrap();
    assert_eq!(d.server.issuer, host.origin);
    assert_eq!(d.server.token_url.as_str(), format!("{}/token", host.origin));
    assert!(d.server.registration_url.is_some() && !d.server.client_id_metadata_documents);

    let refused = |e: Result<mcp_connect::oauth::mcp::Discovered, _>| -> String {
        e.map(|_| "discovered").map_err(|e: mcp_connect::oauth::resolve::ResolveError| e.to_string()).unwrap_err()
    };
    // Metadata about another resource (RFC 9728 §3.3).
    let o = host.origin.clone();
    host.set(
        "/.well-known/oauth-protected-resource/mcp",
        200,
        None,
        json!({"resource": format!("{o}/other"), "authorization_servers": [o]}),
    );
    let why = refused(discover(&http, &resource, false).await);
    assert!(why.contains("its metadata is for another resource"), "{why}");
    // An authorization server whose metadata names another issuer (RFC 8414 §3.3).
    host.good();
    host.set(
        "/.well-known/oauth-authorization-server",
        200,
        None,
        json!({"issuer": "https://evil.example", "authorization_endpoint": format!("{o}/authorize"),
               "token_endpoint": format!("{o}/token"), "code_challenge_methods_supported": ["S256"]}),
    );
    let why = refused(discover(&http, &resource, false).await);
    assert!(why.contains("authorization server issuer \"https://evil.example\""), "{why}");
    // No PKCE S256 advertised.
    host.good();
    host.set(
        "/.well-known/oauth-authorization-server",
        200,
        None,
        json!({"issuer": o, "authorization_endpoint": format!("{o}/authorize"), "token_endpoint": format!("{o}/token"),
               "code_challenge_methods_supported": ["plain"]}),
    );
    let why = refused(discover(&http, &resource, false).await);
    assert!(why.contains("does not advertise PKCE S256"), "{why}");
    // A token endpoint on another origin, a loopback address: never sent our secrets.
    host.good();
    host.set(
        "/.well-known/oauth-authorization-server",
        200,
        None,
        json!({"issuer": o, "authorization_endpoint": format!("{o}/authorize"),
               "token_endpoint": "http://127.0.0.1:9/token", "code_challenge_methods_supported": ["S256"]}),
    );
    let why = refused(discover(&http, &resource, false).await);
    assert!(why.contains("token_endpoint http://127.0.0.1:9/token is on another origin than the server"), "{why}");
    // Metadata named on another origin, a loopback address.
    host.good();
    host.set("/mcp", 401, Some(r#"Bearer resource_metadata="http://127.0.0.1:9/prm""#.to_owned()), json!({}));
    let why = refused(discover(&http, &resource, false).await);
    assert!(why.contains("resource_metadata http://127.0.0.1:9/prm is on another origin"), "{why}");
}

#[tokio::test]
async fn an_authorization_server_other_than_the_one_first_found_is_refused_on_every_instance() {
    let (a, b) = (Host::start(), Host::start());
    a.good();
    b.good();
    for h in [&a, &b] {
        h.set(
            "/register",
            201,
            None,
            json!({"client_id": format!("client-at-{}", h.origin), "client_secret": "s-123"}),
        );
    }
    // Two authorization servers on loopback: another origin than the resource's is allowed
    // by `allow_private_endpoints` only.
    let options = |resource: &str| {
        let mut o = options(resource);
        o.extra_toml.push_str("allow_private_endpoints = true\n");
        o
    };
    let app = spawn_app_with(options(&format!("{}/mcp", a.origin))).await;
    let id = mcp_connect::domain::ProviderId::parse("remote").unwrap();
    let provider = app.state.directory.providers.get(&id).unwrap();
    let server = mcp_connect::flows::remote::provider_server(&app.state, &provider).await.unwrap();
    assert_eq!(server.issuer.as_deref(), Some(a.origin.as_str()));
    assert_eq!(server.client_id, format!("client-at-{}", a.origin), "registered");
    assert_eq!(server.resource.as_deref(), Some(format!("{}/mcp", a.origin).as_str()));

    // The server's metadata now names B. A fresh instance (nothing cached) refuses it.
    let o = a.origin.clone();
    a.set(
        "/.well-known/oauth-protected-resource/mcp",
        200,
        None,
        json!({"resource": format!("{o}/mcp"), "authorization_servers": [b.origin]}),
    );
    let other = spawn_on(&app, &options(&format!("{}/mcp", a.origin))).await;
    let provider = other.state.directory.providers.get(&id).unwrap();
    let why = mcp_connect::flows::remote::provider_server(&other.state, &provider).await.unwrap_err().to_string();
    assert!(why.contains(&format!("its authorization server is now \"{}\"", b.origin)), "{why}");
    assert!(why.contains("pinned when it was first found"), "{why}");
    // Named in the configuration, the move is the operator's: accepted (and pinned).
    let mut named = options(&format!("{}/mcp", a.origin));
    named.extra_toml.push_str(&format!("issuer = \"{}\"\n", b.origin));
    let third = spawn_on(&app, &named).await;
    let provider = third.state.directory.providers.get(&id).unwrap();
    let server = mcp_connect::flows::remote::provider_server(&third.state, &provider).await.unwrap();
    assert_eq!(server.issuer.as_deref(), Some(b.origin.as_str()));
}

#[tokio::test]
async fn a_provider_whose_server_is_refused_gets_no_link_and_its_page_says_why_not_to_wait() {
    let host = Host::start();
    host.good();
    host.set("/register", 201, None, json!({"client_id": "c-1", "client_secret": "s-123"}));
    let resource = format!("{}/mcp", host.origin);
    let app = spawn_app_with(options(&resource)).await;
    let (_, url) = app.elicit("alice", "remote").await;

    // The server now says it is another issuer's: refused for as long as it says so.
    let o = host.origin.clone();
    host.set(
        "/.well-known/oauth-authorization-server",
        200,
        None,
        json!({"issuer": "https://evil.example", "authorization_endpoint": format!("{o}/authorize"),
               "token_endpoint": format!("{o}/token"), "code_challenge_methods_supported": ["S256"]}),
    );
    // An instance that has not resolved it yet (nothing cached): no link, a code that says
    // a retry will not help, and no Retry-After.
    let other = spawn_on(&app, &options(&resource)).await;
    let r = other.token(&other.key, json!({"subject": "bob", "provider": "remote"})).await;
    assert!(r.headers().get("retry-after").is_none(), "nothing to wait for");
    let e = crate::support::assert_error(r, 502, "provider_misconfigured").await;
    assert!(!e.to_string().contains("evil.example"), "the detail is the operator's, in the log: {e}");
    let links: i64 = sqlx::query_scalar("SELECT count(*) FROM elicitations WHERE subject = 'bob'")
        .fetch_one(&other.pool)
        .await
        .unwrap();
    assert_eq!(links, 0);
    // A link made before: its page names the reason class, not "try again in a minute".
    let b = crate::support::browser::Browser::new();
    let url = url.replace(&app.base, &other.base);
    let page = b.open(&other, &url, "alice").await;
    assert_eq!(page.status(), 502);
    let html = page.text().await.unwrap();
    assert!(html.contains("This provider&#39;s configuration is refused"), "{html}");
    assert!(html.contains("Trying again will not help"), "{html}");
    assert!(!html.contains("in a minute"), "{html}");

    // A server that is down is another matter: 503 with Retry-After (a retry may help).
    host.set("/.well-known/oauth-authorization-server", 503, None, json!({}));
    let third = spawn_on(&app, &options(&resource)).await;
    let r = third.token(&third.key, json!({"subject": "carol", "provider": "remote"})).await;
    assert!(r.headers().get("retry-after").is_some());
    crate::support::assert_error(r, 503, "provider_unavailable").await;
}
