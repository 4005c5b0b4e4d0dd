//! Server-side request forgery through a provider's discovery document: the endpoints we
//! call ourselves (token, userinfo, revocation, JWKS) may sit on the configured issuer's
//! origin, or on another only over https at a public address, unless the operator allowed
//! private endpoints for that provider. A listener on loopback stands for the internal
//! service a hostile discovery host points at; it counts what reaches it.

use crate::support::browser::{Browser, location};
use crate::support::{Options, TestApp, spawn_app, spawn_app_with, spawn_on};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A listener that counts the connections made to it and closes each at once.
struct Catcher {
    port: u16,
    count: Arc<AtomicUsize>,
}

async fn catcher() -> Catcher {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    Catcher { port, count }
}

/// The connect flow at `testp` as far as it goes: the last status and page.
async fn attempt(app: &TestApp) -> (u16, String) {
    // A refused discovery makes no link (502 provider_misconfigured): refused before a page.
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "testp"})).await;
    if r.status() != 200 {
        return (r.status().as_u16(), r.text().await.unwrap());
    }
    let body: serde_json::Value = r.json().await.unwrap();
    let url = body["elicitation"]["url"].as_str().unwrap().to_owned();
    let browser = Browser::new();
    let page = browser.open(app, &url, "alice").await;
    if page.status() != 200 {
        return (page.status().as_u16(), page.text().await.unwrap());
    }
    let html = page.text().await.unwrap();
    let r = browser.consent(app, "testp", &html, "connect").await;
    if r.status() != 303 {
        return (r.status().as_u16(), r.text().await.unwrap());
    }
    let back = browser.answer_authorize(&location(&r), "octo-alice", "allow").await;
    let r = browser.get(&back).await;
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_discovered_endpoint_on_another_origin_at_a_loopback_address_is_never_reached() {
    let app = spawn_app().await;
    let c = catcher().await;
    let p = c.port;
    for (field, url) in [
        ("token_endpoint", format!("http://127.0.0.1:{p}/token")),
        ("token_endpoint", format!("https://127.0.0.1:{p}/token")),
        ("jwks_uri", format!("https://127.0.0.1:{p}/jwks")),
        ("revocation_endpoint", format!("http://[::ffff:127.0.0.1]:{p}/revoke")),
        // A name is judged on the address it resolves to, when we connect.
        ("userinfo_endpoint", format!("https://localhost:{p}/userinfo")),
    ] {
        app.provider.switches().set_metadata_override(json!({ field: url }).as_object().unwrap().clone());
        // A new instance: discovery is cached for an hour per instance.
        let fresh = spawn_on(&app, &Options::default()).await;
        let (status, page) = attempt(&fresh).await;
        assert_ne!(status, 200, "{field} = {url}: {page}");
        assert_ne!(status, 500, "{field} = {url}: a clear page, never a 500");
        assert_eq!(c.count.load(Ordering::SeqCst), 0, "{field} = {url} was reached");
        let held: i64 = sqlx::query_scalar("SELECT count(*) FROM connections").fetch_one(&app.pool).await.unwrap();
        assert_eq!(held, 0, "{field} = {url}: nothing connected");
    }
}

#[tokio::test]
async fn a_provider_that_allows_private_endpoints_reaches_them() {
    let app = spawn_app_with(Options {
        patch: vec![(
            "account_login_field = \"login\"",
            "account_login_field = \"login\"\nallow_private_endpoints = true".to_owned(),
        )],
        ..Options::default()
    })
    .await;
    let c = catcher().await;
    app.provider.switches().set_metadata_override(
        json!({"token_endpoint": format!("http://127.0.0.1:{}/token", c.port)}).as_object().unwrap().clone(),
    );
    let (status, _) = attempt(&app).await;
    assert_ne!(status, 200, "the stand-in token endpoint answers nothing");
    assert!(c.count.load(Ordering::SeqCst) >= 1, "the operator's choice: the private endpoint was used");
}

#[tokio::test]
async fn the_outbound_client_ignores_a_proxy_from_the_environment() {
    const INNER: &str = "MCPC_TEST_PROXY_INNER";
    let Ok(port) = std::env::var(INNER) else {
        // The proxy variables must be set before the client is built, and setting them in
        // this process would be `unsafe`: the test runs again in a child process that has
        // them, pointing at a listener here.
        let c = catcher().await;
        let proxy = format!("http://127.0.0.1:{}", c.port);
        let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "discovery::the_outbound_client_ignores_a_proxy_from_the_environment", "--nocapture"])
            .env(INNER, c.port.to_string());
        for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
            cmd.env(var, &proxy);
        }
        let out = cmd.output().await.unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
        assert_eq!(c.count.load(Ordering::SeqCst), 0, "nothing went through the environment's proxy");
        return;
    };
    assert!(std::env::var("HTTPS_PROXY").is_ok_and(|p| p.ends_with(&port)));
    // A JSON document on loopback, fetched by the service's outbound client (this process's
    // own test clients would go through the proxy too, so none is used).
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = url::Url::parse(&format!("http://127.0.0.1:{}/doc", l.local_addr().unwrap().port())).unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\nconnection: close\r\n\r\n{\"ok\": true}")
                .await;
        }
    });
    let outbound = mcp_connect::net::http::Outbound::new(std::time::Duration::from_secs(3), false, &[]).unwrap();
    let doc = outbound.get_json(&url, None).await.expect("fetched directly, not through the proxy");
    assert_eq!(doc, json!({"ok": true}));
}

#[tokio::test]
async fn an_origin_configured_for_another_provider_is_not_trusted_for_a_discovered_endpoint() {
    let c = catcher().await;
    let p = c.port;
    // An internal provider the operator configured on a loopback origin.
    let app = spawn_app_with(Options {
        extra_toml: format!(
            "[providers.internal]\ntemplate = \"oauth2\"\nauthorize_url = \"http://127.0.0.1:{p}/authorize\"\n\
             token_url = \"http://127.0.0.1:{p}/token\"\nclient_id = \"internal\"\n"
        ),
        env: vec![("MCP_CONNECT_PROVIDER_INTERNAL_CLIENT_SECRET", "internal-secret".to_owned())],
        ..Options::default()
    })
    .await;
    // Another provider's discovery names it: testp's secret and the user's code must not go there.
    let url = format!("http://127.0.0.1:{p}/token");
    app.provider.switches().set_metadata_override(json!({ "token_endpoint": url }).as_object().unwrap().clone());
    let (status, page) = attempt(&app).await;
    assert_ne!(status, 200, "{page}");
    assert_ne!(status, 500, "{page}");
    assert_eq!(c.count.load(Ordering::SeqCst), 0, "another provider's origin was reached for testp");
}

#[tokio::test]
async fn the_client_authenticates_as_the_servers_discovery_lists_or_as_configured() {
    let app = spawn_app().await;
    // The dev provider lists basic and post: basic, RFC 8414's default.
    let (status, page) = attempt(&app).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(app.provider.stats().token_client_auth, ["client_secret_basic"]);
    // A server whose discovery lists only the form body gets the secret there (a fresh
    // instance: discovery is cached per instance).
    app.provider.switches().set_metadata_override(
        json!({"token_endpoint_auth_methods_supported": ["client_secret_post"]}).as_object().unwrap().clone(),
    );
    let fresh = spawn_on(&app, &Options::default()).await;
    sqlx::query("UPDATE connections SET status = 'needs_reauth'").execute(&app.pool).await.unwrap();
    let (status, page) = attempt(&fresh).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(app.provider.stats().token_client_auth, ["client_secret_basic", "client_secret_post"]);
    // One that lists only a method we cannot use is refused, with its reason, before a link.
    app.provider.switches().set_metadata_override(
        json!({"token_endpoint_auth_methods_supported": ["private_key_jwt"]}).as_object().unwrap().clone(),
    );
    let third = spawn_on(&app, &Options::default()).await;
    let r = third.token(&third.key, json!({"subject": "bob", "provider": "testp"})).await;
    crate::support::assert_error(r, 502, "provider_misconfigured").await;
}

#[tokio::test]
async fn a_configured_token_endpoint_auth_method_wins() {
    let app = spawn_app_with(Options {
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"postp\"]".to_owned())],
        extra_toml: "[providers.postp]\ntemplate = \"oauth2\"\nauthorize_url = \"{PROVIDER}/authorize\"\n\
                     token_url = \"{PROVIDER}/token\"\nuserinfo_url = \"{PROVIDER}/userinfo\"\nclient_id = \"postp-client\"\n\
                     token_endpoint_auth_method = \"client_secret_post\"\n"
            .to_owned(),
        env: vec![("MCP_CONNECT_PROVIDER_POSTP_CLIENT_SECRET", "postp-secret".to_owned())],
        ..Options::default()
    })
    .await;
    app.provider.add_client(mcp_connect_devproviders::ClientRegistration {
        client_id: "postp-client".to_owned(),
        client_secret: "postp-secret".to_owned(),
        redirect_uris: vec![format!("{}/connect/postp/callback", app.base)],
    });
    let (_, url) = app.elicit("alice", "postp").await;
    let r = Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.provider.stats().token_client_auth, ["client_secret_post"]);
}
