//! Tenant isolation: one MCP server never sees another's connections or elicitations.

use crate::support::{assert_error, spawn_app};
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

/// The configuration of an instance whose file lacks tenant `beta`.
fn without_beta() -> crate::support::Options {
    crate::support::Options {
        patch: vec![(
            "[[tenants]]\nid = \"beta\"\ndisplay_name = \"Beta Bot\"\nproviders = [\"github\"]\n",
            String::new(),
        )],
        ..Default::default()
    }
}

#[tokio::test]
async fn an_instance_whose_file_lacks_a_tenant_neither_deactivates_it_nor_refuses_to_serve_it() {
    let a = spawn_app().await;
    // Another instance starts on the same database from a file without `beta` (a rolling
    // deploy, or `mcp-connect dev` with DATABASE_URL).
    let b = crate::support::spawn_on(&a, &without_beta()).await;
    let active: bool =
        sqlx::query_scalar("SELECT active FROM tenants WHERE id = 'beta'").fetch_one(&a.pool).await.unwrap();
    assert!(active, "starting never deactivates a tenant");
    for app in [&a, &b] {
        let r = app.token(&a.beta_key, json!({"subject": "alice", "provider": "github"})).await;
        assert_eq!(r.status(), 200, "beta is served by an instance whatever its file says");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(body["mcp"]["message"].as_str().unwrap().contains("Beta Bot"), "{body}");
    }
}

#[tokio::test]
async fn tenant_deactivate_and_activate_are_audited_and_reach_every_instance() {
    let a = spawn_app().await;
    let b = crate::support::spawn_on(&a, &crate::support::Options::default()).await;
    let beta = mcp_connect::domain::TenantId::parse("beta").unwrap();
    let body = json!({"subject": "alice", "provider": "github"});
    assert_eq!(b.token(&a.beta_key, body.clone()).await.status(), 200);
    assert_eq!(mcp_connect::flows::tenants::set_tenant_active(&a.pool, &beta, false, "cli").await.unwrap(), Some(true));
    assert!(b.state.caches.barrier(&b.pool).await);
    // The holder of the right key is told why; a wrong secret of its id learns nothing.
    assert_error(b.token(&a.beta_key, body.clone()).await, 403, "tenant_disabled").await;
    let mut wrong = a.beta_key.clone();
    let last = if wrong.ends_with('A') { 'B' } else { 'A' };
    wrong.pop();
    wrong.push(last);
    assert_error(b.token(&wrong, body.clone()).await, 401, "invalid_api_key").await;
    // Restarting an instance whose file names beta does not bring it back.
    let c = crate::support::spawn_on(&a, &crate::support::Options::default()).await;
    assert_error(c.token(&a.beta_key, body.clone()).await, 403, "tenant_disabled").await;
    assert_eq!(
        mcp_connect::flows::tenants::set_tenant_active(&a.pool, &beta, false, "cli").await.unwrap(),
        Some(false)
    );
    assert_eq!(mcp_connect::flows::tenants::set_tenant_active(&a.pool, &beta, true, "cli").await.unwrap(), Some(true));
    assert!(b.state.caches.barrier(&b.pool).await);
    assert_eq!(b.token(&a.beta_key, body.clone()).await.status(), 200);
    let kinds: Vec<String> = sqlx::query_scalar(
        "SELECT kind FROM audit_events WHERE tenant_id = 'beta' AND kind LIKE 'tenant_%' ORDER BY id",
    )
    .fetch_all(&a.pool)
    .await
    .unwrap();
    assert_eq!(kinds, ["tenant_deactivated", "tenant_activated"]);
    let unknown = mcp_connect::domain::TenantId::parse("nobody").unwrap();
    assert_eq!(mcp_connect::flows::tenants::set_tenant_active(&a.pool, &unknown, false, "cli").await.unwrap(), None);
}
