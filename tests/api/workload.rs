//! Workload identity (issue 44): MCP servers present a token their platform signed
//! instead of an API key. The issuer here is Kubernetes-style (`support::cluster`: its
//! discovery document and JWKS on loopback, tokens with a projected token's claims); each
//! refusal asserts its own code, next to a control token that passes.

use crate::support::cluster::{Cluster, forged};
use crate::support::{Options, TestApp, assert_error, spawn_app_with};
use serde_json::{Value, json};

const AUD: &str = "mcp-connect";
const GITHUB_SA: &str = "system:serviceaccount:tools:mcp-github";
const OPS_SA: &str = "system:serviceaccount:ops:mcp-admin";

/// Acme trusts the cluster: tools/mcp-github gets the server scope, ops/mcp-admin the
/// admin scope; `extra` lines go into the issuer's table.
async fn app_trusting(cluster: &Cluster, extra: &str) -> TestApp {
    let issuer = format!(
        "providers = [\"github\", \"gitlab\", \"testp\", \"plainp\", \"deadrev\"]
[[tenants.workload_issuers]]
name = \"cluster\"
issuer = \"{}\"
audience = \"{AUD}\"
{extra}
[[tenants.workload_issuers.rules]]
claims = {{ sub = \"{GITHUB_SA}\" }}
scope = \"server\"
[[tenants.workload_issuers.rules]]
claims = {{ sub = \"{OPS_SA}\" }}
scope = \"admin\"",
        cluster.issuer
    );
    spawn_app_with(Options {
        patch: vec![("providers = [\"github\", \"gitlab\", \"testp\", \"plainp\", \"deadrev\"]", issuer)],
        ..Options::default()
    })
    .await
}

fn token_of(cluster: &Cluster, ns: &str, name: &str) -> String {
    cluster.sign(&cluster.claims(ns, name, AUD, 600))
}

async fn token_call(app: &TestApp, bearer: &str) -> reqwest::Response {
    app.token(bearer, json!({"subject": "alice", "provider": "github"})).await
}

async fn audit_call(app: &TestApp, bearer: &str) -> reqwest::Response {
    app.client.get(format!("{}/admin/v1/audit", app.base)).bearer_auth(bearer).send().await.unwrap()
}

#[tokio::test]
async fn a_cluster_token_authenticates_as_its_rule_says_and_the_trail_names_the_workload() {
    let cluster = Cluster::start().await;
    let app = app_trusting(&cluster, "").await;
    let server = token_of(&cluster, "tools", "mcp-github");

    let exp = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], Some(exp)).await;
    let r = token_call(&app, &server).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["access_token"], "gho_alice");
    // The server scope only: an admin endpoint answers insufficient_scope.
    assert_error(audit_call(&app, &server).await, 403, "insufficient_scope").await;
    // The admin rule's workload reads the audit trail of acme, and it names the workload.
    let admin = token_of(&cluster, "ops", "mcp-admin");
    let r = audit_call(&app, &admin).await;
    assert_eq!(r.status(), 200);
    let caller = mcp_connect::workload::caller_id(&cluster.issuer, GITHUB_SA);
    assert!(app.state.handouts.drain(std::time::Duration::from_secs(5)).await);
    let handed: (Option<String>, String) = sqlx::query_as(
        "SELECT api_key_id, tenant_id FROM audit_events WHERE kind = 'token_handed_out' ORDER BY at DESC LIMIT 1",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(handed, (Some(caller.to_string()), "acme".to_owned()));
    let named: (String, String) = sqlx::query_as("SELECT issuer, subject FROM workload_callers WHERE id = $1")
        .bind(caller.as_str())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(named, (cluster.issuer.clone(), GITHUB_SA.to_owned()));
    // An API key still works beside it.
    assert_eq!(token_call(&app, &app.key).await.status(), 200);
    cluster.stop().await;
}

#[tokio::test]
async fn each_refusal_of_a_workload_token_answers_its_own_code() {
    let cluster = Cluster::start().await;
    let app = app_trusting(&cluster, "max_lifetime_seconds = 3600").await;
    let good = cluster.claims("tools", "mcp-github", AUD, 600);
    // The control: the honest token passes, so each case below is refused for what it changes.
    assert_eq!(token_call(&app, &cluster.sign(&good)).await.status(), 200);

    let with = |changes: Value| {
        let mut c = good.clone();
        for (k, v) in changes.as_object().unwrap() {
            c[k] = v.clone();
        }
        c["jti"] = json!(uuid::Uuid::new_v4().to_string());
        c
    };
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let kid = cluster.kid();
    let other = Cluster::start().await;
    let cases: Vec<(&str, u16, String)> = vec![
        ("workload_token_issuer", 401, other.sign(&other.claims("tools", "mcp-github", AUD, 600))),
        ("workload_token_audience", 401, cluster.sign(&with(json!({"aud": ["another-service"]})))),
        (
            "workload_token_expired",
            401,
            cluster.sign(&with(json!({"iat": now - 900, "nbf": now - 900, "exp": now - 300}))),
        ),
        (
            "workload_token_not_yet_valid",
            401,
            cluster.sign(&with(json!({"iat": now + 300, "nbf": now + 300, "exp": now + 900}))),
        ),
        ("workload_token_lifetime", 401, cluster.sign(&with(json!({"exp": now + 7200})))),
        ("workload_token_algorithm", 401, forged(&with(json!({})), None, &kid)),
        ("workload_token_algorithm", 401, forged(&with(json!({})), Some(b"a public secret"), &kid)),
        ("workload_token_unknown_key", 401, cluster.sign_unpublished(&with(json!({})))),
        ("workload_no_rule", 403, cluster.sign(&with(json!({"sub": "system:serviceaccount:tools:other"})))),
    ];
    for (code, status, token) in cases {
        let body = assert_error(token_call(&app, &token).await, status, code).await;
        assert!(!body.to_string().contains(&token), "{code}: the body holds the token");
    }
    // A replayed jti: another token carrying the jti of one seen before.
    let first = with(json!({}));
    assert_eq!(token_call(&app, &cluster.sign(&first)).await.status(), 200);
    let mut again = first.clone();
    again["kubernetes.io"]["pod"]["name"] = json!("another-pod");
    assert_error(token_call(&app, &cluster.sign(&again)).await, 401, "workload_token_replayed").await;
    // The same token again is no replay (a cached verification, or another instance).
    assert_eq!(token_call(&app, &cluster.sign(&first)).await.status(), 200);
    other.stop().await;
    cluster.stop().await;
}

#[tokio::test]
async fn a_key_rotation_at_the_issuer_is_followed() {
    let cluster = Cluster::start().await;
    let app = app_trusting(&cluster, "").await;
    assert_eq!(token_call(&app, &token_of(&cluster, "tools", "mcp-github")).await.status(), 200);
    let fetched = cluster.jwks_fetches();
    // The cluster signs with a new key and drops the old one: the new key is fetched.
    cluster.rotate(false);
    assert_eq!(token_call(&app, &token_of(&cluster, "tools", "mcp-github")).await.status(), 200);
    assert_eq!(cluster.jwks_fetches(), fetched + 1, "the keys were fetched once more");
    // A made-up key id right after cannot make it fetch again within the minute.
    let c = cluster.claims("tools", "mcp-github", AUD, 600);
    assert_error(token_call(&app, &cluster.sign_unpublished(&c)).await, 401, "workload_token_unknown_key").await;
    assert_eq!(cluster.jwks_fetches(), fetched + 1);
    cluster.stop().await;
}

#[tokio::test]
async fn the_default_audience_is_the_public_url_and_a_switched_off_tenant_takes_no_token() {
    let cluster = Cluster::start().await;
    let app = app_trusting(&cluster, "").await;
    // Without `audience`, the public base URL (with or without its `/`) is expected: set over
    // the operator's database as a file would (a tenant change every instance reads).
    let issuers = json!([{
        "name": "cluster", "issuer": cluster.issuer,
        "rules": [{"claims": {"sub": GITHUB_SA}, "scope": "server"}]
    }]);
    sqlx::query("UPDATE tenants SET workload_issuers = $1 WHERE id = 'acme'")
        .bind(&issuers)
        .execute(&app.pool)
        .await
        .unwrap();
    app.state.directory.tenants.reload(&app.pool).await.unwrap();
    let base = app.state.urls.base.as_str().trim_end_matches('/').to_owned();
    let for_base = cluster.sign(&cluster.claims("tools", "mcp-github", &base, 600));
    assert_eq!(token_call(&app, &for_base).await.status(), 200);
    let for_aud = token_of(&cluster, "tools", "mcp-github");
    assert_error(token_call(&app, &for_aud).await, 401, "workload_token_audience").await;

    // Switched off: its issuers are trusted by no one, even for a token verified before.
    sqlx::query("UPDATE tenants SET active = false WHERE id = 'acme'").execute(&app.pool).await.unwrap();
    app.state.directory.tenants.reload(&app.pool).await.unwrap();
    let r = token_call(&app, &for_base).await;
    assert_eq!(r.status(), 401);
    cluster.stop().await;
}
