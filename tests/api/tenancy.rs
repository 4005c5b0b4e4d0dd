//! Tenant isolation: one MCP server never sees another's connections or elicitations.

use crate::helpers::{assert_error, spawn_app};
use serde_json::json;

#[tokio::test]
async fn tenant_b_never_gets_tenant_a_connection() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_acme_only", &["read:user"], None).await;
    let r = app.token(&app.beta_key, json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r.status(), 200);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["status"], "connect_required");
    assert!(!b.to_string().contains("gho_acme_only"));
}

#[tokio::test]
async fn tenant_b_cannot_read_or_reconcile_tenant_a_elicitation() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let id = a["elicitation"]["id"].as_str().unwrap();
    let r =
        app.client.get(format!("{}/v1/elicitations/{id}", app.base)).bearer_auth(&app.beta_key).send().await.unwrap();
    assert_error(r, 404, "elicitation_not_found").await;
    let r = app.token(&app.beta_key, json!({"subject": "alice", "provider": "github", "elicitation_id": id})).await;
    assert_error(r, 404, "elicitation_not_found").await;
}

#[tokio::test]
async fn the_same_subject_under_two_tenants_gets_two_elicitations() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let r = app.token(&app.beta_key, json!({"subject": "alice", "provider": "github"})).await;
    let b: serde_json::Value = r.json().await.unwrap();
    assert_ne!(a["elicitation"]["id"], b["elicitation"]["id"]);
    assert!(b["mcp"]["message"].as_str().unwrap().contains("Beta Bot"));
}
