//! Remote MCP servers whose authorization is built only from the official TypeScript SDK
//! (`@modelcontextprotocol/sdk`: `mcpAuthRouter`, `requireBearerAuth`), the most common way
//! an MCP server protects itself (issue 39). The peer, `tests/sdk/ts-client/auth_mcp_server.mjs`,
//! lists only `client_secret_post` and `none` for its token endpoint and answers HTTP Basic
//! with `invalid_request`; it checks the token's resource at `/mcp`. Its options play the
//! servers that answer the challenge only to a POST, keep their metadata at the root, or
//! name the scope they need in the challenge.

use crate::support::browser::{Browser, form_value, location};
use crate::support::chrome::{Chrome, Setup, open_and_sign_in};
use crate::support::{Options, TestApp, spawn_app_with};
use serde_json::{Value, json};
use std::path::PathBuf;

/// The SDK-built server, running until dropped.
pub struct SdkServer {
    _node: crate::support::node::NodePeer,
    pub origin: String,
    pub issuer: String,
    /// The resource its metadata names (the origin's `/` where it keeps it at the root).
    pub resource: String,
    http: reqwest::Client,
}

impl SdkServer {
    pub async fn start(config: Value) -> SdkServer {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/ts-client");
        let how = "run `npm ci --prefix tests/sdk/ts-client`";
        let node = crate::support::node::start(
            &dir,
            "auth_mcp_server.mjs",
            &config,
            "node_modules/@modelcontextprotocol/sdk",
            how,
        )
        .await;
        let s = |k: &str| node.ready[k].as_str().unwrap().to_owned();
        SdkServer {
            origin: s("origin"),
            issuer: s("issuer"),
            resource: s("resource"),
            _node: node,
            http: reqwest::Client::new(),
        }
    }

    /// The MCP endpoint (what mcp-connect is configured with).
    pub fn mcp_url(&self) -> String {
        format!("{}mcp", self.issuer)
    }

    pub async fn stats(&self) -> Value {
        self.http.get(format!("{}/__admin/stats", self.origin)).send().await.unwrap().json().await.unwrap()
    }

    /// A JSON-RPC call to `/mcp` with a bearer token, as an MCP client makes it.
    pub async fn call(&self, token: &str, id: u64, method: &str, params: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.mcp_url())
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Signs in at its authorization page as `username` and allows; the redirect back.
    pub async fn allow(&self, b: &Browser, authorize_url: &str, username: &str) -> String {
        let page = b.get(authorize_url).await;
        assert_eq!(page.status(), 200, "the SDK server's authorization page");
        let html = page.text().await.unwrap();
        let r = b
            .client
            .post(format!("{}/interaction/approve", self.issuer.trim_end_matches('/')))
            .form(&[("txn", form_value(&html, "txn").as_str()), ("username", username), ("decision", "allow")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 302, "approve");
        location(&r)
    }
}

fn options(resource: &str, scopes: Option<&str>) -> Options {
    let scopes = scopes.map(|s| format!("scopes = [\"{s}\"]\n")).unwrap_or_default();
    Options {
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"remote\"]".to_owned())],
        extra_toml: format!(
            "[providers.remote]\ntemplate = \"mcp\"\ndisplay_name = \"SDK Tools\"\nresource = \"{resource}\"\n{scopes}"
        ),
        ..Options::default()
    }
}

/// A connect through our pages and the SDK server's, without a real browser; the hand-out.
async fn connect(app: &TestApp, server: &SdkServer, username: &str) -> Value {
    let (id, url) = app.elicit("alice", "remote").await;
    let b = Browser::new();
    let page = b.open(app, &url, "alice").await;
    let html = page.text().await.unwrap();
    let r = b.consent(app, "remote", &html, "connect").await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    let back = server.allow(&b, &location(&r), username).await;
    let cb = b.get(&back).await;
    let status = cb.status();
    assert_eq!(status, 200, "callback: {} {}", cb.text().await.unwrap(), server.stats().await);
    app.token_ok(json!({"subject": "alice", "provider": "remote", "elicitation_id": id})).await
}

#[tokio::test]
async fn a_server_built_on_the_typescript_sdks_auth_router_is_connected_in_chromium_and_its_token_lists_tools() {
    // Access tokens of 30 s: within the refresh margin, so the second hand-out refreshes.
    let server = SdkServer::start(json!({"port": 0, "access_ttl": 30})).await;
    let app = spawn_app_with(options(&server.mcp_url(), None)).await;
    let (id, url) = app.elicit("alice", "remote").await;
    let chrome = Chrome::start("remote-mcp-sdk", Setup::default()).await;
    open_and_sign_in(&chrome, &app, &url, "alice").await;
    chrome.wait_for_url(&format!("{}/connect/remote?e={id}", app.base)).await;
    let consent = chrome.assert_our_page().await;
    assert!(consent.contains("Connect your SDK Tools account?"), "{consent}");
    chrome.click("button[name=decision][value=connect]").await;
    chrome.wait_for_url(&format!("{}/authorize?", server.origin)).await;
    chrome.type_into("input[name=username]", "alice-sdk").await;
    chrome.click("button[name=decision][value=allow]").await;
    chrome.wait_for_url(&format!("{}/connect/remote/callback?", app.base)).await;
    chrome.assert_our_page().await;
    assert_eq!(chrome.text("h1").await, "Connected", "{}", server.stats().await);
    chrome.close().await;

    let t = app.token_ok(json!({"subject": "alice", "provider": "remote", "elicitation_id": id})).await;
    assert_eq!(t["status"], "connected", "{t}");
    let token = t["access_token"].as_str().unwrap();
    let (status, init) = server
        .call(
            token,
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    assert_eq!(status, 200, "{init}");
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    let (status, tools) = server.call(token, 2, "tools/list", json!({})).await;
    assert_eq!(status, 200, "{tools}");
    assert_eq!(tools["result"]["tools"][0]["name"], "whoami", "{tools}");

    let stats = server.stats().await;
    // Registered for the method its metadata lists, and used it.
    let reg = &stats["registrations"][0]["body"];
    assert_eq!(reg["token_endpoint_auth_method"], "client_secret_post", "{stats}");
    assert_eq!(reg["application_type"], "native", "a loopback redirect URI: {stats}");
    let tokens = stats["token"].as_array().unwrap();
    assert_eq!(tokens[0]["grant_type"], "authorization_code", "{stats}");
    assert_eq!(tokens[0]["client_auth"], "post", "{stats}");
    assert_eq!(tokens[0]["resource"], server.mcp_url());

    // The next hand-out refreshes (same client authentication), and that token works too.
    let again = app.token_ok(json!({"subject": "alice", "provider": "remote"})).await;
    assert_eq!(again["status"], "connected", "{again} {}", server.stats().await);
    assert_ne!(again["access_token"], t["access_token"], "refreshed");
    let (status, who) = server
        .call(again["access_token"].as_str().unwrap(), 3, "tools/call", json!({"name": "whoami", "arguments": {}}))
        .await;
    assert_eq!(status, 200, "{who}");
    assert!(who.to_string().contains("alice-sdk"), "{who}");
    let stats = server.stats().await;
    let refresh = stats["token"].as_array().unwrap().iter().find(|t| t["grant_type"] == "refresh_token");
    assert_eq!(refresh.map(|r| &r["client_auth"]), Some(&json!("post")), "{stats}");
    // Revocation: with the same method, so the server takes it.
    let (conn,): (uuid::Uuid,) =
        sqlx::query_as("SELECT id FROM connections WHERE provider = 'remote'").fetch_one(&app.pool).await.unwrap();
    let r = app.admin(reqwest::Method::POST, &format!("/connections/{conn}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["provider_result"], "revoked", "{body} {}", server.stats().await);
}

#[tokio::test]
async fn a_server_that_answers_the_challenge_only_to_a_post_is_found_and_the_challenges_scope_asked_for() {
    let server =
        SdkServer::start(json!({"port": 0, "challenge_on_post_only": true, "challenge_scope": "mcp:tools mcp:write"}))
            .await;
    let app = spawn_app_with(options(&server.mcp_url(), None)).await;
    let t = connect(&app, &server, "bob-sdk").await;
    assert_eq!(t["status"], "connected", "{t}");
    let stats = server.stats().await;
    assert!(stats["probes"]["post"].as_u64().unwrap() >= 1, "discovery sends initialize: {stats}");
    assert_eq!(stats["authorize"][0]["scope"], "mcp:tools mcp:write", "the challenge's scope: {stats}");
    let (status, tools) = server.call(t["access_token"].as_str().unwrap(), 1, "tools/list", json!({})).await;
    assert_eq!(status, 200, "{tools}");
}

#[tokio::test]
async fn a_server_whose_metadata_is_only_at_the_root_is_found_and_named_by_its_origin() {
    let server = SdkServer::start(json!({"port": 0, "root_prm_only": true})).await;
    assert_eq!(server.resource, format!("{}/", server.origin));
    let app = spawn_app_with(options(&server.mcp_url(), Some("mcp:tools"))).await;
    let t = connect(&app, &server, "carol-sdk").await;
    assert_eq!(t["status"], "connected", "{t}");
    let stats = server.stats().await;
    let paths: Vec<&str> = stats["well_known"].as_array().unwrap().iter().filter_map(|w| w["path"].as_str()).collect();
    assert!(paths.contains(&"/.well-known/oauth-protected-resource/mcp"), "the path-based URL first: {stats}");
    assert!(paths.contains(&"/.well-known/oauth-protected-resource"), "then the root: {stats}");
    // The resource the server names itself by is the one the tokens are asked for.
    assert_eq!(stats["authorize"][0]["resource"], server.resource, "{stats}");
    let (status, tools) = server.call(t["access_token"].as_str().unwrap(), 1, "tools/list", json!({})).await;
    assert_eq!(status, 200, "{tools}");
}

#[tokio::test]
async fn an_mcp_session_of_the_official_sdk_client_passes_through_the_proxy_with_the_token_of_the_servers_audience() {
    let server = SdkServer::start(json!({"port": 0})).await;
    let mut opts = options(&server.mcp_url(), None);
    // A tenant that hands out nothing: the proxy is the only way to use the grant.
    opts.patch
        .push(("display_name = \"Acme Assistant\"", "display_name = \"Acme Assistant\"\nhand_out = \"none\"".into()));
    let app = spawn_app_with(opts).await;
    let t = connect(&app, &server, "dave-sdk").await;
    assert_eq!((&t["status"], &t["hand_out"]), (&json!("connected"), &json!("none")), "{t}");
    assert!(t.get("access_token").is_none(), "{t}");

    // The official SDK's client, holding only our server key, speaks Streamable HTTP to
    // /v1/proxy/remote/mcp: initialize, tools/list and a tool call.
    let config = json!({
        "url": format!("{}/v1/proxy/remote/mcp", app.base),
        "headers": {"Authorization": format!("Bearer {}", app.key), "MCP-Connect-Subject": "alice"},
        "tool": "whoami",
    });
    let out = tokio::process::Command::new("node")
        .arg(crate::sdks::node_script("tests/sdk/ts-client", "proxied_session.mjs"))
        .arg(config.to_string())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let session: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    assert!(out.status.success(), "{session} {stderr} {}", server.stats().await);
    assert_eq!(session["server"]["name"], "auth-mcp-server", "{session}");
    assert_eq!(session["tools"], json!(["whoami"]), "{session}");
    assert_eq!(session["result"]["content"][0]["text"], "dave-sdk", "the user's token reached the tool: {session}");

    // Each message reached the server with the token it issued for its own URL (RFC 8707):
    // its bearer check accepts no other audience.
    let stats = server.stats().await;
    let calls = stats["mcp_calls"].as_array().unwrap();
    let methods: Vec<&str> = calls.iter().filter_map(|c| c["method"].as_str()).collect();
    assert_eq!(methods, ["initialize", "notifications/initialized", "tools/list", "tools/call"], "{stats}");
    for c in calls {
        assert_eq!((&c["username"], &c["resource"]), (&json!("dave-sdk"), &json!(server.mcp_url())), "{stats}");
    }
    assert_eq!(stats["token"][0]["resource"], server.mcp_url(), "asked for its audience: {stats}");
}
