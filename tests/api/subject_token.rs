//! `subject_token` on `POST /v1/token`: the subject proven by the user's MCP access token
//! (an RFC 9068 JWT of the dev IdP, a real HTTP peer whose keys are fetched), and
//! `require_subject_token`. Every refusal asserts its own code.

use crate::support::{MCP_CLIENT_ID, Options, TestApp};
use crate::support::{assert_error, spawn_app_with};
use mcp_connect_devproviders::{DevProvider, DevProviderConfig, Forgery, Role};
use serde_json::json;

/// Acme's MCP server: the audience the dev IdP's access tokens name.
const ACME_MCP: &str = "http://127.0.0.1:9/acme/mcp";
/// Beta's MCP server, which requires the token.
const BETA_MCP: &str = "http://127.0.0.1:9/beta/mcp";

async fn app() -> TestApp {
    spawn_app_with(Options {
        mcp_audience: Some(ACME_MCP.to_owned()),
        // Acme takes the IdP's tokens (testkit: `subject_token_audience` = `mcp_audience`).
        patch: vec![(
            "display_name = \"Beta Bot\"",
            format!(
                "display_name = \"Beta Bot\"\nsubject_token_audience = \"{BETA_MCP}\"\nrequire_subject_token = true"
            ),
        )],
        ..Options::default()
    })
    .await
}

/// An access token of the app's IdP for `user`, meant for acme's MCP server.
fn token_of(app: &TestApp, user: &str) -> String {
    app.idp.issue_grant(MCP_CLIENT_ID, user, "openid").0
}

async fn elicited_subject(app: &TestApp, body: &serde_json::Value) -> String {
    let id = body["elicitation"]["id"].as_str().expect("connect_required");
    sqlx::query_scalar("SELECT subject FROM elicitations WHERE id = $1::uuid")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_subject_is_taken_from_a_valid_token_and_must_match_a_subject_named() {
    let app = app().await;
    let alice = token_of(&app, "alice");

    let b = app.token_ok(json!({"subject_token": alice, "provider": "github"})).await;
    assert_eq!(b["status"], "connect_required");
    assert_eq!(elicited_subject(&app, &b).await, "alice");

    // Naming the same subject as well is fine; another subject is refused.
    let b = app.token_ok(json!({"subject": "alice", "subject_token": alice, "provider": "github"})).await;
    assert_eq!(elicited_subject(&app, &b).await, "alice");
    let r = app.token(&app.key, json!({"subject": "bob", "subject_token": alice, "provider": "github"})).await;
    assert_error(r, 403, "subject_token_subject").await;

    // A stored connection is handed out to the token's subject.
    let exp = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], Some(exp)).await;
    let b = app.token_ok(json!({"subject_token": alice, "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_alice");
}

#[tokio::test]
async fn a_token_for_another_audience_is_refused() {
    let app = app().await;
    // The IdP's tokens name acme's MCP server; beta's key expects its own.
    let r = app.token(&app.beta_key, json!({"subject_token": token_of(&app, "alice"), "provider": "github"})).await;
    assert_error(r, 403, "subject_token_audience").await;
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let app = app().await;
    // Issued two hours ago with the IdP's one-hour lifetime: an hour past, beyond any skew.
    let then = time::OffsetDateTime::now_utc() - time::Duration::hours(2);
    let old = app.idp.issue_grant_at(MCP_CLIENT_ID, "alice", "openid", then).0;
    let r = app.token(&app.key, json!({"subject_token": old, "provider": "github"})).await;
    assert_error(r, 403, "subject_token_expired").await;
}

#[tokio::test]
async fn a_token_of_another_issuer_is_refused() {
    let app = app().await;
    // Another IdP, minting tokens for the same audience and the same user.
    let other = DevProvider::start(DevProviderConfig {
        display_name: "Another IdP".to_owned(),
        role: Role::IdentityProvider,
        jwt_access_token_audience: Some(ACME_MCP.to_owned()),
        ..DevProviderConfig::default()
    })
    .await
    .unwrap();
    let foreign = other.issue_grant(MCP_CLIENT_ID, "alice", "openid").0;
    let r = app.token(&app.key, json!({"subject_token": foreign, "provider": "github"})).await;
    assert_error(r, 403, "subject_token_issuer").await;
    other.stop().await;
}

/// The claims of a genuine access token of the app's IdP for alice and acme's MCP server.
fn claims(app: &TestApp) -> serde_json::Value {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    json!({"iss": app.idp.issuer(), "sub": "alice", "aud": ACME_MCP, "exp": now + 600, "iat": now})
}

#[tokio::test]
async fn a_forged_or_wrongly_typed_token_or_one_without_a_claim_is_refused() {
    let app = app().await;
    let genuine = claims(&app);
    // The control: the helper's honest token passes, so each case below is refused for the
    // one thing it changes.
    let honest = app.idp.sign_jwt("at+jwt", &genuine, None);
    app.token_ok(json!({"subject_token": honest, "provider": "github"})).await;

    let without = |claim: &str| {
        let mut c = genuine.clone();
        c.as_object_mut().unwrap().remove(claim);
        c
    };
    let mut empty_sub = genuine.clone();
    empty_sub["sub"] = json!("");
    let secret = b"mcp-test-client-secret".to_vec();
    let cases = [
        // An ID token, or another JWT of the IdP, is not an access token (RFC 9068 §4).
        ("typ JWT", app.idp.sign_jwt("JWT", &genuine, None)),
        ("no typ", app.idp.sign_jwt("", &genuine, None)),
        ("a key not in the JWKS", app.idp.sign_jwt("at+jwt", &genuine, Some(Forgery::WrongKey))),
        ("alg none", app.idp.sign_jwt("at+jwt", &genuine, Some(Forgery::Unsigned))),
        ("HS256", app.idp.sign_jwt("at+jwt", &genuine, Some(Forgery::Hs256(secret)))),
        ("an unknown kid", app.idp.sign_jwt("at+jwt", &genuine, Some(Forgery::UnknownKid))),
        ("no exp", app.idp.sign_jwt("at+jwt", &without("exp"), None)),
        ("no aud", app.idp.sign_jwt("at+jwt", &without("aud"), None)),
        ("no sub", app.idp.sign_jwt("at+jwt", &without("sub"), None)),
        ("an empty sub", app.idp.sign_jwt("at+jwt", &empty_sub, None)),
        ("not a JWT", "abc.def.ghi".to_owned()),
    ];
    for (what, t) in cases {
        let r = app.token(&app.key, json!({"subject_token": t, "provider": "github"})).await;
        let body = assert_error(r, 403, "subject_token_invalid").await;
        assert!(!body.to_string().contains(&t), "{what}: the token is not echoed");
    }
    // A token without `iss` names no issuer of ours.
    let t = app.idp.sign_jwt("at+jwt", &without("iss"), None);
    assert_error(
        app.token(&app.key, json!({"subject_token": t, "provider": "github"})).await,
        403,
        "subject_token_issuer",
    )
    .await;
    // Valid from `nbf` on (beyond the skew of a minute).
    let mut later = genuine.clone();
    later["nbf"] = json!(time::OffsetDateTime::now_utc().unix_timestamp() + 600);
    let t = app.idp.sign_jwt("at+jwt", &later, None);
    let r = app.token(&app.key, json!({"subject_token": t, "provider": "github"})).await;
    assert_error(r, 403, "subject_token_not_yet_valid").await;
    // No request was turned into an elicitation but the honest one's.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM elicitations").fetch_one(&app.pool).await.unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn with_require_subject_token_a_bare_subject_is_refused() {
    let app = app().await;
    let r = app.token(&app.beta_key, json!({"subject": "alice", "provider": "github"})).await;
    assert_error(r, 403, "subject_token_required").await;
    // Nothing was created for the bare request.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM elicitations WHERE tenant_id = 'beta'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
    // Acme does not require it: a bare subject is still taken there.
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["status"], "connect_required");
}

#[tokio::test]
async fn a_tenant_without_an_audience_takes_no_token_and_a_request_needs_a_subject() {
    let app = spawn_app_with(Options::default()).await;
    // Checked before any verification: the form of a JWT is enough.
    let r = app.token(&app.key, json!({"subject_token": "e30.e30.c2ln", "provider": "github"})).await;
    assert_error(r, 400, "subject_token_not_accepted").await;
    let r = app.token(&app.key, json!({"provider": "github"})).await;
    assert_error(r, 400, "invalid_subject").await;
}

#[tokio::test]
async fn the_tokens_never_reach_the_log() {
    let logs = crate::logs::capture_logs();
    let app = app().await;
    let alice = token_of(&app, "alice");
    app.token_ok(json!({"subject_token": alice, "provider": "github"})).await;
    let r = app.token(&app.key, json!({"subject": "bob", "subject_token": alice, "provider": "github"})).await;
    assert_error(r, 403, "subject_token_subject").await;
    let signature = alice.rsplit('.').next().unwrap();
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(logs.contains("subject_token_subject"), "the refusal's reason is logged");
    assert!(!logs.contains(signature), "the subject token's signature is in the log");
}

#[tokio::test]
async fn a_tenant_that_requires_the_token_takes_one_for_its_own_audience() {
    let app = app().await;
    let mut c = claims(&app);
    c["aud"] = json!(BETA_MCP);
    let t = app.idp.sign_jwt("at+jwt", &c, None);
    let r = app.token(&app.beta_key, json!({"subject_token": t, "provider": "github"})).await;
    assert_eq!(r.status(), 200);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["status"], "connect_required");
    assert_eq!(elicited_subject(&app, &b).await, "alice");
}

#[tokio::test]
async fn an_instance_whose_file_leaves_the_settings_out_keeps_them_for_everyone() {
    let a = app().await;
    // A second instance on the same database, its file without `require_subject_token`
    // (an older or shorter file): its start-up sync must not lower beta's setting.
    let b = crate::support::spawn_on(&a, &Options::default()).await;
    for app in [&a, &b] {
        let r = app.token(&app.beta_key, json!({"subject": "alice", "provider": "github"})).await;
        assert_error(r, 403, "subject_token_required").await;
    }
}

#[tokio::test]
async fn a_tenant_setting_changed_in_the_database_reaches_another_instance() {
    let a = app().await;
    let b = crate::support::spawn_on(&a, &Options::default()).await;
    let bare = json!({"subject": "alice", "provider": "github"});
    assert_eq!(b.token(&b.key, bare.clone()).await.status(), 200, "acme takes a bare subject at first");
    sqlx::query("UPDATE tenants SET require_subject_token = true WHERE id = 'acme'").execute(&a.pool).await.unwrap();
    crate::support::eventually(std::time::Duration::from_secs(5), "instance b requires the token", || async {
        b.token(&b.key, bare.clone()).await.status() == 403
    })
    .await;
    assert_error(b.token(&b.key, bare).await, 403, "subject_token_required").await;
}

#[tokio::test]
async fn an_unknown_key_id_is_retried_later_while_the_keys_cannot_be_fetched_again() {
    let app = app().await;
    let unknown = app.idp.sign_jwt("at+jwt", &claims(&app), Some(Forgery::UnknownKid));
    let ask = json!({"subject_token": unknown, "provider": "github"});
    // The first one fetches the IdP's keys again; the key is not there: refused.
    assert_error(app.token(&app.key, ask.clone()).await, 403, "subject_token_invalid").await;
    // Within the minute the keys are not fetched again: perhaps the IdP has just rotated
    // them, so the caller is told to come back (and the IdP is not asked).
    let fetches = app.idp.stats().jwks_requests;
    let r = app.token(&app.key, ask).await;
    assert!(r.headers().get("retry-after").is_some());
    assert_error(r, 503, "temporarily_unavailable").await;
    assert_eq!(app.idp.stats().jwks_requests, fetches, "no fetch for a made-up key id within the minute");
}

#[tokio::test]
async fn the_last_known_keys_serve_while_the_idp_cannot_be_reached() {
    let clock = std::sync::Arc::new(mcp_connect::domain::ManualClock::default());
    let app = spawn_app_with(Options {
        mcp_audience: Some(ACME_MCP.to_owned()),
        clock: Some(clock.clone()),
        ..Options::default()
    })
    .await;
    app.token_ok(json!({"subject_token": token_of(&app, "alice"), "provider": "github"})).await;
    // The IdP's keys can no longer be fetched, and the hour the metadata is kept has passed.
    app.idp.switches().set_jwks_unavailable(true);
    clock.advance(std::time::Duration::from_secs(3601));
    let b = app.token_ok(json!({"subject_token": token_of(&app, "alice"), "provider": "github"})).await;
    assert_eq!(b["status"], "connect_required");
}
