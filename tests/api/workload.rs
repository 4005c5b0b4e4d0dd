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
    spawn_app_with(trusting(cluster, extra)).await
}

/// The options of [`app_trusting`] (another instance's file must say the same: a file is
/// the whole truth for its tenants' issuers).
fn trusting(cluster: &Cluster, extra: &str) -> Options {
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
    Options {
        patch: vec![("providers = [\"github\", \"gitlab\", \"testp\", \"plainp\", \"deadrev\"]", issuer)],
        ..Options::default()
    }
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
    let caller = mcp_connect::workload::caller_id(&cluster.issuer, "discovery", GITHUB_SA);
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
    // The admin API's trail names the workload beside its caller id.
    let url = format!("{}/admin/v1/audit?kind=token_handed_out", app.base);
    let page: Value = app.client.get(url).bearer_auth(&admin).send().await.unwrap().json().await.unwrap();
    let event = &page["events"][0];
    assert_eq!(event["api_key_id"], caller.to_string(), "{page}");
    assert_eq!(
        (&event["workload"]["issuer"], &event["workload"]["subject"], &event["workload"]["key_source"]),
        (&json!(cluster.issuer), &json!(GITHUB_SA), &json!("discovery"))
    );
    // An API key still works beside it.
    assert_eq!(token_call(&app, &app.key).await.status(), 200);
    // The admin workload revokes alice's connection: the trail names it as a workload.
    let id = body["connection_id"].as_str().unwrap();
    let url = format!("{}/admin/v1/connections/{id}/revoke", app.base);
    assert_eq!(app.client.post(url).bearer_auth(&admin).send().await.unwrap().status(), 200);
    let admin_caller = mcp_connect::workload::caller_id(&cluster.issuer, "discovery", OPS_SA);
    let by: String = sqlx::query_scalar("SELECT detail->>'by' FROM audit_events WHERE kind = 'connection_revoked'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(by, format!("workload:{admin_caller}"));
    cluster.stop().await;
}

#[tokio::test]
async fn each_refusal_of_a_workload_token_answers_its_own_code() {
    let cluster = Cluster::start().await;
    let options = || trusting(&cluster, "max_lifetime_seconds = 3600");
    let app = spawn_app_with(options()).await;
    let good = cluster.claims("tools", "mcp-github", AUD, 600);
    // The control: the honest token passes, so each case below is refused for what it changes.
    assert_eq!(token_call(&app, &cluster.sign(&good)).await.status(), 200);

    // `null` removes the claim.
    let with = |changes: Value| {
        let mut c = good.clone();
        for (k, v) in changes.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c["jti"] = json!(uuid::Uuid::new_v4().to_string());
        c
    };
    // A genuine signature over other claims.
    let tampered = {
        use base64::Engine as _;
        let t = cluster.sign(&with(json!({})));
        let parts: Vec<&str> = t.split('.').collect();
        let other = with(json!({"sub": OPS_SA}));
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(other.to_string());
        format!("{}.{payload}.{}", parts[0], parts[2])
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
        // `iat` ahead without `nbf`.
        ("workload_token_not_yet_valid", 401, cluster.sign(&with(json!({"iat": now + 300, "nbf": null})))),
        ("workload_token_lifetime", 401, cluster.sign(&with(json!({"exp": now + 7200})))),
        // Without `iat`: measured from `nbf`; without either: from now.
        (
            "workload_token_lifetime",
            401,
            cluster.sign(&with(json!({"iat": null, "nbf": now - 3000, "exp": now + 1000}))),
        ),
        ("workload_token_lifetime", 401, cluster.sign(&with(json!({"iat": null, "nbf": null, "exp": now + 7200})))),
        ("workload_token_invalid", 401, tampered),
        ("workload_token_invalid", 401, cluster.sign(&with(json!({"sub": null})))),
        ("workload_token_invalid", 401, cluster.sign(&with(json!({"sub": [GITHUB_SA]})))),
        ("workload_token_invalid", 401, cluster.sign(&with(json!({"sub": format!("{GITHUB_SA}\n")})))),
        ("workload_token_algorithm", 401, forged(&with(json!({})), None, &kid)),
        ("workload_token_algorithm", 401, forged(&with(json!({})), Some(b"a public secret"), &kid)),
        ("workload_token_unknown_key", 401, cluster.sign_unpublished(&with(json!({})))),
        ("workload_no_rule", 403, cluster.sign(&with(json!({"sub": "system:serviceaccount:tools:other"})))),
    ];
    for (code, status, token) in cases {
        let body = assert_error(token_call(&app, &token).await, status, code).await;
        assert!(!body.to_string().contains(&token), "{code}: the body holds the token");
    }
    // Nothing of a token no rule takes is kept: no workload, no jti.
    let strangers: i64 = sqlx::query_scalar("SELECT count(*) FROM workload_callers WHERE subject <> $1")
        .bind(GITHUB_SA)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(strangers, 0);
    // A replayed jti: another token carrying the jti of one seen before, also at another
    // instance (which has not seen either).
    let b = crate::support::spawn_on(&app, &options()).await;
    let first = cluster.sign(&with(json!({})));
    assert_eq!(token_call(&app, &first).await.status(), 200);
    let mut again: Value = {
        use base64::Engine as _;
        let payload = first.split('.').nth(1).unwrap();
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
    };
    again["kubernetes.io"]["pod"]["name"] = json!("another-pod");
    let again = cluster.sign(&again);
    assert_error(token_call(&app, &again).await, 401, "workload_token_replayed").await;
    assert_error(token_call(&b, &again).await, 401, "workload_token_replayed").await;
    // The same token again is no replay: from the cache, and at the other instance from
    // the database.
    assert_eq!(token_call(&app, &first).await.status(), 200);
    assert_eq!(token_call(&b, &first).await.status(), 200);
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
    assert_error(token_call(&app, &for_base).await, 401, "invalid_api_key").await;
    cluster.stop().await;
}

/// An OAuth server's client-credentials tokens as workload tokens: panva's `oidc-provider`
/// issues RFC 9068 JWT access tokens (`typ` `at+jwt`, `sub` the client id) for a resource
/// naming mcp-connect; acme trusts it, and its rule names one client.
#[tokio::test]
async fn client_credentials_tokens_of_oidc_provider_authenticate_per_rule() {
    const RESOURCE: &str = "https://connect.example/";
    let machine = |id: &str| json!({"client_id": id, "client_secret": format!("{id}-secret"), "grant_types": ["client_credentials"]});
    let peer = crate::interop::Peer::start(json!({
        "workload_resource": RESOURCE,
        "clients": [machine("mcp-github"), machine("another-job")],
    }))
    .await;
    let rules = format!(
        "providers = [\"github\", \"gitlab\", \"testp\", \"plainp\", \"deadrev\"]
[[tenants.workload_issuers]]
name = \"oauth\"
issuer = \"{}\"
audience = \"{RESOURCE}\"
typ = \"at+jwt\"
[[tenants.workload_issuers.rules]]
claims = {{ sub = \"mcp-github\", client_id = \"mcp-github\" }}
scope = \"server\"",
        peer.issuer
    );
    let app = spawn_app_with(Options {
        patch: vec![("providers = [\"github\", \"gitlab\", \"testp\", \"plainp\", \"deadrev\"]", rules)],
        ..Options::default()
    })
    .await;
    let token_endpoint = peer.discovery().await["token_endpoint"].as_str().unwrap().to_owned();
    let grant = |id: &'static str| {
        let (c, url) = (app.client.clone(), token_endpoint.clone());
        async move {
            let r = c
                .post(url)
                .basic_auth(id, Some(format!("{id}-secret")))
                .form(&[("grant_type", "client_credentials"), ("resource", RESOURCE), ("scope", "mcp-connect")])
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "oidc-provider's token endpoint");
            let body: Value = r.json().await.unwrap();
            body["access_token"].as_str().unwrap().to_owned()
        }
    };
    let ours = grant("mcp-github").await;
    assert_eq!(token_call(&app, &ours).await.status(), 200);
    let theirs = grant("another-job").await;
    assert_error(token_call(&app, &theirs).await, 403, "workload_no_rule").await;
}

/// Over the operator API: a tenant made with a trusted issuer takes its workloads' tokens on
/// another instance; a change of its rules holds there at once (also for a token verified
/// before); a malformed issuer is refused naming the field.
#[tokio::test]
async fn issuers_set_over_the_operator_api_hold_on_every_instance_at_once() {
    use reqwest::Method;
    let cluster = Cluster::start().await;
    let a = spawn_app_with(Options::default()).await;
    let b = crate::support::spawn_on(&a, &Options::default()).await;
    assert!(b.state.caches.barrier(&b.pool).await, "B's listener is up");
    let op = a.operator_key().await;
    let issuer = |sub: &str| {
        json!([{"name": "cluster", "issuer": cluster.issuer, "audience": AUD,
                "rules": [{"claims": {"sub": sub}, "scope": "server"}]}])
    };
    let body = json!({"id": "gamma", "display_name": "Gamma", "providers": ["testp"],
                      "workload_issuers": issuer(GITHUB_SA)});
    let r = a.operator(&op, Method::POST, "/tenants", Some(body)).await;
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.unwrap();
    assert_eq!(made["workload_issuers"][0]["max_lifetime_seconds"], 3600, "{made}");
    assert!(b.state.caches.barrier(&b.pool).await, "the creation's notification arrived");
    let token = token_of(&cluster, "tools", "mcp-github");
    let body = || json!({"subject": "alice", "provider": "testp"});
    assert_eq!(b.token(&token, body()).await.status(), 200);

    // Another rule: the token verified on B a moment ago no longer gets in there.
    let r = a.operator(&op, Method::PATCH, "/tenants/gamma", Some(json!({"workload_issuers": issuer(OPS_SA)}))).await;
    assert_eq!(r.status(), 200);
    assert!(b.state.caches.barrier(&b.pool).await, "the change's notification arrived");
    assert_error(b.token(&token, body()).await, 403, "workload_no_rule").await;

    let bad = json!({"workload_issuers": [{"name": "cluster", "issuer": "http://k8s.example", "rules": []}]});
    let body =
        assert_error(a.operator(&op, Method::PATCH, "/tenants/gamma", Some(bad)).await, 400, "invalid_request").await;
    assert!(body["error_description"].as_str().unwrap().contains("workload_issuers[0].issuer"), "{body}");
    // A tenant's rule never grants the operator scope.
    let mut op_rule = issuer(OPS_SA);
    op_rule[0]["rules"][0]["scope"] = json!("operator");
    let body = assert_error(
        a.operator(&op, Method::PATCH, "/tenants/gamma", Some(json!({"workload_issuers": op_rule}))).await,
        400,
        "invalid_request",
    )
    .await;
    assert!(body["error_description"].as_str().unwrap().contains("workload_issuers[0].rules[0].scope"), "{body}");
    cluster.stop().await;
}

/// Neither a taken nor a refused workload token reaches a log line (at debug) or the audit
/// trail (metrics carry only the tenant and the result).
#[tokio::test]
async fn no_workload_token_reaches_a_log_or_the_trail() {
    let logs = crate::logs::capture_logs();
    let cluster = Cluster::start().await;
    let app = app_trusting(&cluster, "").await;
    let good = token_of(&cluster, "tools", "mcp-github");
    let exp = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], Some(exp)).await;
    assert_eq!(token_call(&app, &good).await.status(), 200);
    let wrong_aud = cluster.sign(&cluster.claims("tools", "mcp-github", "elsewhere", 600));
    assert_eq!(token_call(&app, &wrong_aud).await.status(), 401);
    let no_rule = token_of(&cluster, "tools", "someone-else");
    assert_eq!(token_call(&app, &no_rule).await.status(), 403);
    assert!(app.state.handouts.drain(std::time::Duration::from_secs(5)).await);
    let trail: Vec<String> =
        sqlx::query_scalar("SELECT row_to_json(a)::text FROM audit_events a").fetch_all(&app.pool).await.unwrap();
    let logged = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("workload token refused"), "the refusals were logged");
    for token in [&good, &wrong_aud, &no_rule] {
        // Each part of the JWS on its own, too (a header or payload logged alone).
        let signature = token.rsplit('.').next().unwrap();
        let payload = token.split('.').nth(1).unwrap();
        for part in [token.as_str(), signature, payload] {
            assert!(!logged.contains(part), "a log line holds a token part");
            assert!(!trail.iter().any(|row| row.contains(part)), "the trail holds a token part");
        }
    }
    cluster.stop().await;
}

#[tokio::test]
async fn a_typ_rules_of_two_tenants_and_an_unreachable_issuer_are_refused() {
    let cluster = Cluster::start().await;
    // The issuer's tokens must carry `at+jwt`; the cluster's carry none.
    let app = app_trusting(&cluster, "typ = \"at+jwt\"").await;
    let token = token_of(&cluster, "tools", "mcp-github");
    assert_error(token_call(&app, &token).await, 401, "workload_token_type").await;

    // Beta trusts the same issuer with the same rule as acme: which tenant is meant cannot
    // be told.
    let both = json!([{"name": "cluster", "issuer": cluster.issuer, "audience": AUD,
                       "rules": [{"claims": {"sub": GITHUB_SA}, "scope": "server"}]}]);
    sqlx::query("UPDATE tenants SET workload_issuers = $1 WHERE id IN ('acme', 'beta')")
        .bind(&both)
        .execute(&app.pool)
        .await
        .unwrap();
    app.state.directory.tenants.reload(&app.pool).await.unwrap();
    assert_error(token_call(&app, &token).await, 403, "workload_rule_ambiguous").await;

    // An issuer that cannot be reached: 503 with Retry-After.
    let gone = format!("http://127.0.0.1:{}", crate::support::free_port());
    let down = json!([{"name": "gone", "issuer": gone, "audience": AUD,
                       "rules": [{"claims": {"sub": GITHUB_SA}, "scope": "server"}]}]);
    sqlx::query("UPDATE tenants SET workload_issuers = $1 WHERE id = 'acme'")
        .bind(&down)
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE tenants SET workload_issuers = NULL WHERE id = 'beta'").execute(&app.pool).await.unwrap();
    app.state.directory.tenants.reload(&app.pool).await.unwrap();
    let mut claims = cluster.claims("tools", "mcp-github", AUD, 600);
    claims["iss"] = json!(gone);
    let r = token_call(&app, &cluster.sign(&claims)).await;
    assert_eq!(r.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("5"));
    assert_error(r, 503, "temporarily_unavailable").await;
    cluster.stop().await;
}

const PLATFORM_SA: &str = "system:serviceaccount:platform:tenant-admin";

/// The operator trusts the cluster too (`[[operator.workload_issuers]]`): its rule gives
/// platform/tenant-admin the operator scope, on `/operator/v1` only; a tenant's workload
/// gets no operator scope, and an operator's workload no tenant's.
#[tokio::test]
async fn an_operator_issuer_grants_the_operator_scope_and_nothing_else() {
    let cluster = Cluster::start().await;
    let mut opts = trusting(&cluster, "");
    opts.extra_toml = format!(
        "[[operator.workload_issuers]]
name = \"cluster\"
issuer = \"{}\"
audience = \"{AUD}\"
[[operator.workload_issuers.rules]]
claims = {{ sub = \"{PLATFORM_SA}\" }}
scope = \"operator\"
",
        cluster.issuer
    );
    let app = spawn_app_with(opts).await;
    let operator = token_of(&cluster, "platform", "tenant-admin");
    let tenants = |bearer: &str| {
        app.client.get(format!("{}/operator/v1/tenants", app.base)).bearer_auth(bearer.to_owned()).send()
    };
    assert_eq!(tenants(&operator).await.unwrap().status(), 200);
    // What it does is audited under its caller id, which names the workload.
    let r = app
        .client
        .post(format!("{}/operator/v1/tenants", app.base))
        .bearer_auth(&operator)
        .json(&json!({"id": "delta", "display_name": "Delta", "providers": ["github"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let caller = mcp_connect::workload::caller_id(&cluster.issuer, "discovery", PLATFORM_SA);
    let by: (Option<String>, String) = sqlx::query_as(
        "SELECT api_key_id, detail->>'by' FROM audit_events WHERE kind = 'tenant_created' AND tenant_id = 'delta'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    // Its `by` says a workload made it, not a key that is not there.
    assert_eq!(by, (Some(caller.to_string()), format!("operator workload {caller}")));
    let named: String = sqlx::query_scalar("SELECT subject FROM workload_callers WHERE id = $1")
        .bind(caller.as_str())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(named, PLATFORM_SA);

    // The operator's workload is no tenant's server or admin.
    assert_error(token_call(&app, &operator).await, 403, "insufficient_scope").await;
    assert_error(audit_call(&app, &operator).await, 403, "insufficient_scope").await;
    // A tenant's workloads (server and admin) are no operator.
    for (ns, name) in [("tools", "mcp-github"), ("ops", "mcp-admin")] {
        assert_error(tenants(&token_of(&cluster, ns, name)).await.unwrap(), 403, "insufficient_scope").await;
    }
    // Another service account of the cluster gets nothing anywhere.
    let other = token_of(&cluster, "platform", "someone-else");
    assert_error(tenants(&other).await.unwrap(), 403, "workload_no_rule").await;
    // The operator scope is checked as every other: a token for another audience is refused.
    let elsewhere = cluster.sign(&cluster.claims("platform", "tenant-admin", "another-audience", 600));
    assert_error(tenants(&elsewhere).await.unwrap(), 401, "workload_token_audience").await;
    // An operator key still works beside it.
    let key = app.operator_key().await;
    assert_eq!(tenants(&key).await.unwrap().status(), 200);
    cluster.stop().await;
}

/// A retry that waits (`wait_seconds`) with a workload token gets the token when the
/// connect commits: after the wait the token is admitted again, as a key is looked up again.
#[tokio::test]
async fn a_waiting_retry_with_a_workload_token_gets_the_token_when_the_connect_commits() {
    let cluster = Cluster::start().await;
    let options = Options { extra_toml: "[metrics]\nlisten = \"127.0.0.1:0\"\n".to_owned(), ..trusting(&cluster, "") };
    let app = spawn_app_with(options).await;
    let token = token_of(&cluster, "tools", "mcp-github");
    let (id, url) = app.elicit("alice", "testp").await;
    let waiting = crate::wait::waiting_retry(&app.base, &token, &id, 30);
    crate::wait::held(&app, 1).await;
    let r = crate::support::browser::Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 200);
    let (answer, _) = waiting.await.unwrap();
    assert_eq!(answer["status"], "connected", "{answer}");
    cluster.stop().await;
}
