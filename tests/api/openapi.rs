//! The OpenAPI contract: committed, served, and the one the handlers generate.

use crate::helpers::spawn_app;
use mcp_connect::http::error::ErrorCode;
use mcp_connect::http::openapi::document_json;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[test]
fn the_committed_openapi_json_is_the_one_the_handlers_generate() {
    let generated = document_json();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        assert!(std::env::var_os("CI").is_none(), "UPDATE_OPENAPI in CI would pass any drift");
        std::fs::write(COMMITTED, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi.json differs from what the handlers generate; write it anew with \
         UPDATE_OPENAPI=1 cargo nextest run -E 'test(openapi::)' and review the diff"
    );
}

#[tokio::test]
async fn openapi_json_is_served_without_a_key_and_lists_every_error_code() {
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/openapi.json", app.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let served: serde_json::Value = r.json().await.unwrap();
    let generated: serde_json::Value = serde_json::from_str(&document_json()).unwrap();
    assert_eq!(served, generated);
    assert_eq!(served["openapi"], "3.1.0");
    let codes: Vec<&str> = served["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let all: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(codes, all);
    // Every operation names its key, and answers a refused key with the challenge header.
    for (path, item) in served["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let scheme = if path.starts_with("/admin/") { "admin_key" } else { "server_key" };
            assert!(op["security"][0].get(scheme).is_some(), "{method} {path} names {scheme}");
            assert!(op["responses"]["401"]["headers"].get("WWW-Authenticate").is_some(), "{method} {path} 401");
            assert!(op["responses"]["503"]["headers"].get("Retry-After").is_some(), "{method} {path} 503");
        }
    }
}

#[tokio::test]
async fn a_wrong_method_gets_405_with_allow_and_the_error_body() {
    let app = spawn_app().await;
    for (method, path, allow) in [
        (reqwest::Method::GET, "/v1/token", "POST"),
        (reqwest::Method::DELETE, "/v1/elicitations/00000000-0000-0000-0000-000000000000", "GET"),
        (reqwest::Method::POST, "/admin/v1/kill-switches", "GET"),
        (reqwest::Method::POST, "/admin/v1/kill-switches/testp", "PUT, DELETE"),
    ] {
        let r = app.client.request(method.clone(), format!("{}{path}", app.base)).send().await.unwrap();
        assert_eq!(r.headers().get("allow").map(|v| v.to_str().unwrap()), Some(allow), "{method} {path}");
        crate::helpers::assert_error(r, 405, "method_not_allowed").await;
    }
}

#[tokio::test]
async fn the_cancel_body_is_json_of_at_most_16_kib_or_nothing() {
    let app = spawn_app().await;
    let (id, _) = app.elicit("alice", "testp").await;
    let url = format!("{}/v1/elicitations/{id}/cancel", app.base);
    let send = |body: String, ct: &'static str| {
        app.client.post(&url).bearer_auth(&app.key).header("content-type", ct).body(body).send()
    };
    let big = format!("{{\"reason\": \"cancel\", \"x\": \"{}\"}}", "a".repeat(16 * 1024));
    crate::helpers::assert_error(send(big, "application/json").await.unwrap(), 413, "payload_too_large").await;
    let plain = send("{\"reason\": \"cancel\"}".to_owned(), "text/plain").await.unwrap();
    crate::helpers::assert_error(plain, 415, "unsupported_media_type").await;
    let quoted = send("{\"secret_looking\": \"gho_abc\"}".to_owned(), "application/json").await.unwrap();
    let body = crate::helpers::assert_error(quoted, 400, "invalid_json").await;
    assert!(!body.to_string().contains("gho_abc") && !body.to_string().contains("secret_looking"), "{body}");
    let null = send("null".to_owned(), "application/json").await.unwrap();
    assert_eq!(null.status(), 200, "null is no body");
    let r: serde_json::Value = null.json().await.unwrap();
    assert_eq!(r["status"], "cancelled");
}
