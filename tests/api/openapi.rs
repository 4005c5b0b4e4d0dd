//! The OpenAPI contract: committed, served, and the one the handlers generate.

use crate::support::spawn_app;
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
            let scheme = match path.split('/').nth(1) {
                Some("admin") => "admin_key",
                Some("operator") => "operator_key",
                _ => "server_key",
            };
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
        (reqwest::Method::DELETE, "/operator/v1/tenants/acme", "GET, PATCH"),
    ] {
        let r = app.client.request(method.clone(), format!("{}{path}", app.base)).send().await.unwrap();
        assert_eq!(r.headers().get("allow").map(|v| v.to_str().unwrap()), Some(allow), "{method} {path}");
        crate::support::assert_error(r, 405, "method_not_allowed").await;
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
    crate::support::assert_error(send(big, "application/json").await.unwrap(), 413, "payload_too_large").await;
    let plain = send("{\"reason\": \"cancel\"}".to_owned(), "text/plain").await.unwrap();
    crate::support::assert_error(plain, 415, "unsupported_media_type").await;
    let quoted = send("{\"secret_looking\": \"gho_abc\"}".to_owned(), "application/json").await.unwrap();
    let body = crate::support::assert_error(quoted, 400, "invalid_json").await;
    assert!(!body.to_string().contains("gho_abc") && !body.to_string().contains("secret_looking"), "{body}");
    let null = send("null".to_owned(), "application/json").await.unwrap();
    assert_eq!(null.status(), 200, "null is no body");
    let r: serde_json::Value = null.json().await.unwrap();
    assert_eq!(r["status"], "cancelled");
}

/// utoipa names a schema after its type and keeps one of two types of the same name
/// without a word: the client's cancel body once stood in the contract as the admin's
/// (`{subject, provider}`, no other field), and generated clients sent the wrong body.
#[test]
fn no_two_schema_types_share_a_name_and_each_cancel_body_is_its_own() {
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut seen: std::collections::HashMap<String, std::path::PathBuf> = std::collections::HashMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut derives_schema = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[derive(") && line.contains("ToSchema") {
                derives_schema = true;
            } else if derives_schema && !line.starts_with("#[") && !line.starts_with("//") {
                let words: Vec<&str> = line.split(|c: char| !c.is_alphanumeric() && c != '_').collect();
                if let Some(i) = words.iter().position(|w| *w == "struct" || *w == "enum") {
                    let name = words[i + 1].to_owned();
                    if let Some(other) = seen.insert(name.clone(), f.clone()) {
                        panic!("two schema types named {name}: {} and {}", other.display(), f.display());
                    }
                }
                derives_schema = false;
            }
        }
    }
    let doc: serde_json::Value = serde_json::from_str(&document_json()).unwrap();
    let body = |path: &str| {
        let op = &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"];
        let name = serde_json::to_string(op).unwrap();
        let name = name.split("#/components/schemas/").nth(1).unwrap().split('"').next().unwrap().to_owned();
        doc["components"]["schemas"][name]["properties"].as_object().unwrap().keys().cloned().collect::<Vec<_>>()
    };
    assert_eq!(body("/v1/elicitations/{id}/cancel"), ["reason"]);
    assert_eq!(body("/admin/v1/elicitations/cancel"), ["provider", "subject"]);
}
