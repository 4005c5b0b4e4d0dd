//! Each tenant its own primary IdP: tenant `acme` signs people in at the default `[idp]`,
//! tenant `beta` at `[idps.second]`, another dev IdP. The person is the pair (issuer,
//! `sub`): `alice` at one IdP and `alice` at the other never see or end each other's
//! connections, never pass each other's links, and never get each other's tokens.

use crate::support::browser::{Browser, absolute, form_value, location};
use crate::support::{Options, TestApp, spawn_app_with};
use mcp_connect_devproviders::{ClientRegistration, DevProvider, DevProviderConfig, Role};
use serde_json::json;
use std::sync::Arc;

/// An app whose tenant `beta` (allowed `github` and `testp`) names `second`, a dev IdP of
/// its own; `acme` keeps the default one.
async fn two_idps() -> (TestApp, Arc<DevProvider>) {
    two_idps_with(&[]).await
}

/// [`two_idps`] with more of beta's settings (lines of its `[[tenants]]` table).
async fn two_idps_with(beta: &[&str]) -> (TestApp, Arc<DevProvider>) {
    let second = DevProvider::start(DevProviderConfig {
        display_name: "Second Identity Provider".to_owned(),
        role: Role::IdentityProvider,
        ..DevProviderConfig::default()
    })
    .await
    .unwrap();
    let opts = Options {
        extra_toml: format!("[idps.second]\nissuer = \"{}\"\nclient_id = \"mcp-connect-b\"\n", second.issuer()),
        env: vec![("MCP_CONNECT_IDPS_SECOND_CLIENT_SECRET", "second-secret".to_owned())],
        patch: vec![(
            "display_name = \"Beta Bot\"\nproviders = [\"github\"]",
            format!(
                "display_name = \"Beta Bot\"\nproviders = [\"github\", \"testp\"]\nidp = \"second\"\n{}",
                beta.join("\n")
            ),
        )],
        ..Options::default()
    };
    let app = spawn_app_with(opts).await;
    second.add_client(ClientRegistration {
        client_id: "mcp-connect-b".to_owned(),
        client_secret: "second-secret".to_owned(),
        redirect_uris: vec![format!("{}/login/callback/second", app.base)],
    });
    (app, Arc::new(second))
}

/// Makes a row of beta's as it was written before beta named the second IdP: its subject
/// the default IdP's.
async fn made_for_the_default_idp(app: &TestApp, table: &str, id: &str) {
    let sql = format!("UPDATE {table} SET issuer = $1 WHERE id = $2::uuid");
    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(app.idp.issuer()).bind(id).execute(&app.pool).await.unwrap();
}

/// Signs `browser` in as `subject` through `/login` (at the IdP `idp` names), and checks
/// that the IdP it was sent to is `at`.
async fn sign_in(app: &TestApp, browser: &Browser, idp: Option<&str>, at: &DevProvider, subject: &str) {
    let query = idp.map(|i| format!("&idp={i}")).unwrap_or_default();
    let r = browser.get(&format!("{}/login?return_to=/connections{query}", app.base)).await;
    assert_eq!(r.status(), 303);
    let authorize = location(&r);
    assert!(authorize.starts_with(&at.base_url()), "sent to {authorize}");
    let back = browser.answer_authorize(&authorize, subject, "allow").await;
    let r = browser.get(&back).await;
    assert_eq!(r.status(), 303, "login callback: {}", r.text().await.unwrap());
}

async fn connections_page(app: &TestApp, browser: &Browser) -> String {
    let r = browser.get(&format!("{}/connections", app.base)).await;
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

async fn beta_token(app: &TestApp, subject: &str, provider: &str) -> serde_json::Value {
    let r = app.token(&app.beta_key, json!({"subject": subject, "provider": provider})).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn the_same_sub_at_two_idps_is_two_people_for_pages_links_and_tokens() {
    let (app, second) = two_idps().await;
    let acme_alice = app.insert_connection("acme", "alice", "github", "gho_acme_alice", &["repo"], None).await;
    let beta_alice = app.insert_connection("beta", "alice", "github", "gho_beta_alice", &["repo"], None).await;
    let issuer_of = |id: mcp_connect::domain::ConnectionId| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT issuer FROM connections WHERE id = $1")
                .bind(id.as_uuid())
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(issuer_of(acme_alice).await, app.idp.issuer());
    assert_eq!(issuer_of(beta_alice).await, second.issuer());

    // "Your connections": alice at the default IdP sees acme's only, alice at the second
    // IdP beta's only.
    let at_a = Browser::new();
    sign_in(&app, &at_a, None, &app.idp, "alice").await;
    let html = connections_page(&app, &at_a).await;
    assert!(html.contains("<h2>Acme Assistant</h2>") && !html.contains("Beta Bot"), "{html}");
    let at_b = Browser::new();
    sign_in(&app, &at_b, Some("second"), &second, "alice").await;
    let html_b = connections_page(&app, &at_b).await;
    assert!(html_b.contains("<h2>Beta Bot</h2>") && !html_b.contains("Acme Assistant"), "{html_b}");
    // Each page says at which IdP its alice signed in.
    let host = |u: String| u.trim_start_matches("http://").trim_end_matches('/').to_owned();
    assert!(html.contains(&format!("at <code>{}</code>", host(app.idp.issuer()))), "{html}");
    assert!(html_b.contains(&format!("at <code>{}</code>", host(second.issuer()))), "{html_b}");

    // Neither ends the other's: the same answer as for a connection that does not exist.
    let csrf = form_value(&html, "csrf");
    let r = at_a
        .client
        .post(format!("{}/connections/disconnect", app.base))
        .form(&[("csrf", csrf.as_str()), ("id", &beta_alice.to_string())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("does not exist or is not yours"));
    let status: String = sqlx::query_scalar("SELECT status FROM connections WHERE id = $1")
        .bind(beta_alice.as_uuid())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(status, "active", "beta's alice keeps her connection");

    // Tokens: each tenant hands out its own IdP's alice's.
    let b = beta_token(&app, "alice", "github").await;
    assert_eq!(b["access_token"], "gho_beta_alice", "{b}");
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(a["access_token"], "gho_acme_alice", "{a}");

    // A beta link opened by alice of the default IdP: not the consent page, but the
    // sign-in at beta's IdP (she is someone else there). Nothing is recorded as a
    // mismatch: she never claimed to be beta's alice.
    let link = beta_token(&app, "alice", "testp").await;
    let url = link["elicitation"]["url"].as_str().unwrap().to_owned();
    let r = at_a.get(&url).await;
    assert_eq!(r.status(), 303);
    let login = absolute(&app, &location(&r));
    assert!(login.contains("/login?return_to=") && login.ends_with("&idp=second"), "{login}");
    let r = at_a.get(&login).await;
    assert!(location(&r).starts_with(&second.base_url()), "to the second IdP: {}", location(&r));
    assert!(!app.audit_kinds().await.contains(&"identity_mismatch".to_owned()));

    // An acme link opened by alice of the second IdP: to the default IdP's sign-in.
    let (_, acme_url) = app.elicit("alice", "testp").await;
    let r = at_b.get(&acme_url).await;
    assert_eq!(r.status(), 303);
    let login = absolute(&app, &location(&r));
    assert!(!login.contains("idp="), "the default IdP is not named: {login}");
    let r = at_b.get(&login).await;
    assert!(location(&r).starts_with(&app.idp.base_url()), "to the default IdP: {}", location(&r));

    // Beta's alice connects through her own IdP, and beta hands out her new grant; acme's
    // alice still has no testp connection. Beta's webhook names her by issuer and subject.
    let beta = mcp_connect::domain::TenantId::parse("beta").unwrap();
    let beta_admin =
        mcp_connect::flows::api_keys::create_api_key(&app.pool, &beta, mcp_connect::domain::KeyScope::Admin, None)
            .await
            .unwrap();
    let r = app
        .client
        .post(format!("{}/admin/v1/webhooks", app.base))
        .bearer_auth(secrecy::ExposeSecret::expose_secret(&beta_admin.key))
        .json(&json!({"url": "http://127.0.0.1:9/hook", "events": ["connection.created"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = Browser::new().connect(&app, &url, "alice", "octo-beta-alice").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let b = beta_token(&app, "alice", "testp").await;
    assert_eq!(b["status"], "connected", "{b}");
    assert_eq!(b["account"]["login"], "octo-beta-alice");
    let a = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(a["status"], "connect_required", "{a}");
    let issuer: String =
        sqlx::query_scalar("SELECT issuer FROM connections WHERE tenant_id = 'beta' AND provider = 'testp'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(issuer, second.issuer());
    let payload: String =
        sqlx::query_scalar("SELECT payload::text FROM webhook_deliveries WHERE event_type = 'connection.created'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
    assert_eq!((&payload["data"]["subject"], &payload["data"]["issuer"]), (&json!("alice"), &json!(second.issuer())));

    // The audit trail names each alice with her IdP's issuer.
    let trail: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT tenant_id, kind, issuer FROM audit_events
         WHERE subject = 'alice' AND kind IN ('elicitation_created', 'connect_started', 'connect_completed')",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(trail.iter().any(|(t, k, _)| t == "beta" && k == "connect_completed"), "{trail:?}");
    for (tenant, kind, issuer) in &trail {
        let want = if tenant == "beta" { second.issuer() } else { app.idp.issuer() };
        assert_eq!(issuer.as_deref(), Some(want.as_str()), "{tenant} {kind}");
    }
    let r = app
        .client
        .get(format!("{}/admin/v1/audit?kind=connect_completed", app.base))
        .bearer_auth(secrecy::ExposeSecret::expose_secret(&beta_admin.key))
        .send()
        .await
        .unwrap();
    let listed: serde_json::Value = r.json().await.unwrap();
    assert_eq!(listed["events"][0]["issuer"], json!(second.issuer()), "{listed}");
}

#[tokio::test]
async fn a_tenant_that_changed_its_idp_hands_nothing_of_the_old_idps_namesake_to_the_new() {
    let (app, _second) = two_idps().await;
    // Beta's alice of the *default* IdP connected before beta named the second IdP (the
    // row as it was then), and a link of hers is still pending.
    let old = app.insert_connection("beta", "alice", "github", "gho_old_idps_alice", &["repo"], None).await;
    made_for_the_default_idp(&app, "connections", &old.to_string()).await;
    // No cached copy from before the update may answer: the update is a change like any.
    let b = beta_token(&app, "alice", "github").await;
    assert_eq!(b["status"], "connect_required", "another IdP's alice's token is not handed out: {b}");
    assert!(!b.to_string().contains("gho_old_idps_alice"));
    let e = b["elicitation"]["id"].as_str().unwrap().to_owned();
    let issuer: String = sqlx::query_scalar("SELECT issuer FROM elicitations WHERE id = $1::uuid")
        .bind(&e)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(issuer, _second.issuer(), "the new link is for the second IdP's alice");

    // A pending link made for the old IdP's alice is not handed out again: the next call
    // closes it and makes a fresh one for the new IdP's.
    made_for_the_default_idp(&app, "elicitations", &e).await;
    let again = beta_token(&app, "alice", "github").await;
    assert_ne!(again["elicitation"]["id"].as_str().unwrap(), e, "{again}");
    assert_eq!(app.elicitation_status(&e).await, "expired");
    let named = app
        .token(&app.beta_key, json!({"subject": "alice", "provider": "github", "elicitation_id": e}))
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(named["elicitation"]["id"], again["elicitation"]["id"], "{named}");
}

#[tokio::test]
async fn rows_written_without_an_issuer_become_the_default_idps_at_start() {
    let (app, second) = two_idps().await;
    let id = app.insert_connection("beta", "alice", "github", "gho_unrecorded", &["repo"], None).await;
    // As a binary of the release before writes it (it knows no issuer).
    sqlx::query("UPDATE connections SET issuer = NULL WHERE id = $1")
        .bind(id.as_uuid())
        .execute(&app.pool)
        .await
        .unwrap();
    let b = beta_token(&app, "alice", "github").await;
    assert_eq!(b["status"], "connect_required", "a row without an issuer matches nobody: {b}");
    // More links without one than a backfill batch holds.
    sqlx::query(
        "INSERT INTO elicitations (id, tenant_id, subject, provider, scopes, mcp_context, status, expires_at)
         SELECT gen_random_uuid(), 'acme', 'user' || n, 'github', '{}', '{}', 'expired', now()
         FROM generate_series(1, 2500) AS n",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query("UPDATE elicitations SET issuer = NULL").execute(&app.pool).await.unwrap();
    mcp_connect::startup::sync_tenants(&app.pool, &[], &app.idp.issuer()).await.unwrap();
    let unset: i64 = sqlx::query_scalar("SELECT count(*) FROM elicitations WHERE issuer IS DISTINCT FROM $1")
        .bind(app.idp.issuer())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(unset, 0, "every link, in batches");
    let issuer: String = sqlx::query_scalar("SELECT issuer FROM connections WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(issuer, app.idp.issuer(), "the default IdP's, the only one the old binaries had");
    assert_ne!(issuer, second.issuer());
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(a["status"], "connect_required", "acme's alice has nothing either: the row is beta's");
}

#[tokio::test]
async fn a_sign_in_link_naming_an_unknown_idp_is_refused() {
    let (app, _second) = two_idps().await;
    let r = Browser::new().get(&format!("{}/login?return_to=/&idp=nonesuch", app.base)).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("names a sign-in service this service does not have"));
}

const BETA_MCP: &str = "https://beta-mcp.example/mcp";

#[tokio::test]
async fn a_subject_token_is_checked_against_the_tenants_own_idp() {
    let (app, second) = two_idps_with(&[&format!("subject_token_audience = \"{BETA_MCP}\"")]).await;
    app.insert_connection("beta", "alice", "github", "gho_beta_alice", &["repo"], None).await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let claims = |iss: String| json!({"iss": iss, "sub": "alice", "aud": BETA_MCP, "exp": now + 600, "iat": now});
    // The control: beta's own IdP's token for beta's MCP server proves alice.
    let own = second.sign_jwt("at+jwt", &claims(second.issuer()), None);
    let r = app.token(&app.beta_key, json!({"subject_token": own, "provider": "github"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["access_token"], "gho_beta_alice");
    // The default IdP's token for the same `sub` and audience is another person's.
    let other = app.idp.sign_jwt("at+jwt", &claims(app.idp.issuer()), None);
    let r = app.token(&app.beta_key, json!({"subject_token": other, "provider": "github"})).await;
    crate::support::assert_error(r, 403, "subject_token_issuer").await;
    // Nor does a token naming beta's IdP but signed by the default IdP's keys pass.
    let forged = app.idp.sign_jwt("at+jwt", &claims(second.issuer()), None);
    let r = app.token(&app.beta_key, json!({"subject_token": forged, "provider": "github"})).await;
    crate::support::assert_error(r, 403, "subject_token_invalid").await;
}

/// A tenant moved to another IdP; the old IdP's alice still holds a live grant there.
/// The new IdP's alice connects: the old grant is revoked at the provider before its row is
/// replaced (nobody could revoke it afterwards), the trail says so, and beta hands out the
/// new grant. A link made for the old IdP's alice is over on the page.
#[tokio::test]
async fn connecting_over_another_idps_namesake_revokes_the_old_grant_and_old_links_are_over() {
    let (app, second) = two_idps().await;
    let (old_access, old_refresh) = app.provider.issue_grant("testp-client", "octo-old-idp", "openid profile");
    // Sealed for the default IdP's alice (as it was written before the move).
    let mut db = app.pool.sqlx_pool().acquire().await.unwrap();
    let scopes = ["openid", "profile"];
    let issuer = app.idp.issuer();
    let old = app
        .insert_sealed_for(
            &mut db,
            Some(&issuer),
            "beta",
            "alice",
            "testp",
            &old_access,
            Some(&old_refresh),
            &scopes,
            None,
        )
        .await;
    drop(db);

    // A link of the old IdP's alice (as it was made before the move), opened by her.
    let stale = beta_token(&app, "alice", "github").await;
    let stale_id = stale["elicitation"]["id"].as_str().unwrap().to_owned();
    made_for_the_default_idp(&app, "elicitations", &stale_id).await;
    let at_a = Browser::new();
    sign_in(&app, &at_a, None, &app.idp, "alice").await;
    let r = at_a.get(stale["elicitation"]["url"].as_str().unwrap()).await;
    assert_eq!(r.status(), 410, "the old IdP's link is over");
    assert_eq!(app.elicitation_status(&stale_id).await, "pending", "nothing attached, nothing closed by the page");

    // The new IdP's alice connects testp.
    let link = beta_token(&app, "alice", "testp").await;
    assert_eq!(link["status"], "connect_required", "{link}");
    let r = Browser::new().connect(&app, link["elicitation"]["url"].as_str().unwrap(), "alice", "octo-new").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let kinds: Vec<_> = app.provider.stats().revocations.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [mcp_connect_devproviders::TokenKind::Refresh, mcp_connect_devproviders::TokenKind::Access],
        "the old IdP's alice's grant is revoked at the provider"
    );
    let (issuer, detail): (String, serde_json::Value) = sqlx::query_as(
        "SELECT c.issuer, a.detail FROM connections c JOIN audit_events a ON a.connection_id = c.id
         WHERE c.id = $1 AND a.kind = 'connect_completed'",
    )
    .bind(old.as_uuid())
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(issuer, second.issuer());
    assert_eq!(detail["replaced_other_idps"]["issuer"], app.idp.issuer(), "{detail}");
    assert_eq!(detail["replaced_other_idps"]["provider_result"], "revoked", "{detail}");
    let b = beta_token(&app, "alice", "testp").await;
    assert_eq!(b["account"]["login"], "octo-new", "{b}");
}

#[tokio::test]
async fn a_tenants_idp_moves_only_when_a_file_names_another_and_the_move_is_in_the_trail() {
    let (app, _second) = two_idps().await;
    let idp_of = || async {
        sqlx::query_scalar::<_, String>("SELECT idp FROM tenants WHERE id = 'beta'").fetch_one(&app.pool).await.unwrap()
    };
    assert_eq!(idp_of().await, "second");
    let beta = |idp: Option<&str>| mcp_connect::domain::TenantConfig {
        id: mcp_connect::domain::TenantId::parse("beta").unwrap(),
        display_name: "Beta Bot".to_owned(),
        providers: vec![mcp_connect::domain::ProviderId::parse("github").unwrap()],
        subject_token: Default::default(),
        idp: idp.map(|i| mcp_connect::domain::IdpName::parse(i).unwrap()),
        hand_out: None,
        workload_issuers: None,
    };
    let issuer = app.idp.issuer();
    // An instance whose file leaves `idp` out (an older or shorter file) moves nothing.
    mcp_connect::startup::sync_tenants(&app.pool, &[beta(None)], &issuer).await.unwrap();
    assert_eq!(idp_of().await, "second");
    assert!(!app.audit_kinds().await.contains(&"tenant_idp_changed".to_owned()));
    // One that names another moves it, and says so.
    mcp_connect::startup::sync_tenants(&app.pool, &[beta(Some("default"))], &issuer).await.unwrap();
    assert_eq!(idp_of().await, "default");
    let detail: serde_json::Value =
        sqlx::query_scalar("SELECT detail FROM audit_events WHERE kind = 'tenant_idp_changed' AND tenant_id = 'beta'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(detail, json!({"from": "second", "to": "default", "by": "configuration"}));
}

#[tokio::test]
async fn a_row_the_release_before_inserts_without_an_issuer_gets_the_default_idps_at_once() {
    let (app, _second) = two_idps().await;
    // As a binary of the release before writes a link (it knows no issuer).
    let id = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO elicitations (id, tenant_id, subject, provider, scopes, mcp_context, status, expires_at)
         VALUES ($1, 'acme', 'alice', 'github', '{}', '{}', 'pending', now() + interval '10 minutes')",
    )
    .bind(id)
    .execute(&app.pool)
    .await
    .unwrap();
    let issuer: String = sqlx::query_scalar("SELECT issuer FROM elicitations WHERE id = $1")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(issuer, app.idp.issuer());
}

/// Each named IdP answers at a callback of its own (`/login/callback/<name>`): a sign-in
/// sent to one IdP whose answer arrives at another's callback is a mix-up and refused,
/// before any code is redeemed.
#[tokio::test]
async fn a_sign_in_answered_at_another_idps_callback_is_refused() {
    let (app, second) = two_idps().await;
    let browser = Browser::new();
    let r = browser.get(&format!("{}/login?return_to=/connections&idp=second", app.base)).await;
    let authorize = location(&r);
    let redirect = url::Url::parse(&authorize)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "redirect_uri")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    assert_eq!(redirect, format!("{}/login/callback/second", app.base));
    let back = browser.answer_authorize(&authorize, "alice", "allow").await;
    assert!(back.starts_with(&redirect), "{back}");
    // Delivered at the default IdP's callback instead (as a mixing-up IdP would send it).
    let moved = back.replacen("/login/callback/second", "/login/callback", 1);
    let r = browser.get(&moved).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("did not pass the security checks"));
    assert_eq!(second.stats().authorization_code_exchanges, 0, "no code was redeemed");
    // At its own callback the same answer completes (the refusal spent nothing).
    let r = browser.get(&back).await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
}

/// A person of the tenant's previous IdP ends her stale connection on "Your connections":
/// the pending links of the tenant's present IdP's namesake stay open.
#[tokio::test]
async fn ending_an_old_idps_connection_closes_none_of_the_new_idps_namesakes_links() {
    let (app, _second) = two_idps().await;
    let stale = app.insert_connection("beta", "alice", "github", "gho_old", &["repo"], None).await;
    made_for_the_default_idp(&app, "connections", &stale.to_string()).await;
    let link = beta_token(&app, "alice", "github").await;
    let id = link["elicitation"]["id"].as_str().unwrap().to_owned();

    let at_a = Browser::new();
    sign_in(&app, &at_a, None, &app.idp, "alice").await;
    let html = connections_page(&app, &at_a).await;
    assert!(html.contains("Beta Bot"), "her stale connection is listed: {html}");
    let r = at_a
        .client
        .post(format!("{}/connections/disconnect", app.base))
        .form(&[("csrf", form_value(&html, "csrf").as_str()), ("id", &stale.to_string())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    assert_eq!(app.elicitation_status(&id).await, "pending", "the second IdP's alice's link stays open");
}

#[tokio::test]
async fn a_grant_whose_row_is_rewritten_to_another_idps_namesake_does_not_open() {
    let (app, second) = two_idps().await;
    // beta's alice at the second IdP holds a grant, bound to that IdP.
    app.insert_connection("beta", "alice", "github", "gho_second_alice", &["repo"], None).await;
    let ct: Vec<u8> = sqlx::query_scalar("SELECT access_token_ct FROM connections").fetch_one(&app.pool).await.unwrap();
    assert!(mcp_connect::vault::is_issuer_bound(&ct), "sealed with the issuer bound");
    assert_eq!(beta_token(&app, "alice", "github").await["access_token"], "gho_second_alice");

    // beta moves to the default IdP (an operator's change: its people are others now), and a
    // database writer rewrites the row's issuer so that the default IdP's alice would get it.
    sqlx::query("UPDATE tenants SET idp = 'default' WHERE id = 'beta'").execute(&app.pool).await.unwrap();
    sqlx::query("UPDATE connections SET issuer = $1").bind(app.idp.issuer()).execute(&app.pool).await.unwrap();
    assert!(app.state.caches.barrier(&app.pool).await);
    app.state.caches.forget_connection(&mcp_connect::domain::ConnectionKey {
        tenant: mcp_connect::domain::TenantId::parse("beta").unwrap(),
        subject: mcp_connect::domain::Subject::parse("alice").unwrap(),
        provider: mcp_connect::domain::ProviderId::parse("github").unwrap(),
    });
    let r = app.token(&app.beta_key, json!({"subject": "alice", "provider": "github"})).await;
    let text = r.text().await.unwrap();
    assert!(!text.contains("gho_second_alice"), "another IdP's namesake got the grant: {text}");
    assert!(text.contains("internal_error"), "{text}");
    let _ = second;
}
