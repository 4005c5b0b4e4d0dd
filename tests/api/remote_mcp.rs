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
