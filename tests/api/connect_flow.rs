//! The browser connect flow against a real IdP and a real provider (both HTTP servers on
//! loopback): the happy path, and one test per way it must refuse.

use crate::support::browser::{Browser, location};
use crate::support::{TestApp, last_connect_failure, spawn_app};
use mcp_connect_devproviders::{IdTokenAlg, IssMode, TokenFailure, TokenKind};
use serde_json::json;

#[tokio::test]
async fn the_whole_flow_connects_and_the_retry_gets_the_token() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let r = browser.connect(&app, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 200);
    let html = r.text().await.unwrap();
    assert!(html.contains("Connected"), "{html}");
    assert!(html.contains("Acme Assistant"));
    assert_eq!(app.elicitation_status(&id).await, "completed");

    // The authorization request carried PKCE S256, a 256-bit state, a nonce, our exact
    // redirect URI and the configured scopes.
    let p = app.provider.stats().last_authorize_params.unwrap();
    assert_eq!(p["code_challenge_method"], "S256");
    assert_eq!(p["state"].len(), 43);
    assert_eq!(p["nonce"].len(), 43);
    assert_eq!(p["redirect_uri"], format!("{}/connect/testp/callback", app.base));
    assert_eq!(p["scope"], "openid profile");

    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": id})).await;
    assert_eq!(b["status"], "connected");
    assert_eq!(b["account"]["login"], "octo-alice");
    let token = b["access_token"].as_str().unwrap();
    // The token works at the provider: it is the real grant.
    let me: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/userinfo", app.provider.base_url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["login"], "octo-alice");
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    let kinds = app.audit_kinds().await;
    for k in ["elicitation_created", "connect_started", "connect_completed"] {
        assert!(kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
}

#[tokio::test]
async fn a_plain_oauth2_provider_with_rfc9207_from_the_config_connects() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "plainp").await;
    let r = Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.elicitation_status(&id).await, "completed");
    let p = app.provider.stats().last_authorize_params.unwrap();
    assert!(!p.contains_key("nonce"));
    assert_eq!(p["scope"], "read");
}

#[tokio::test]
async fn the_subject_goes_as_login_hint_only_to_a_provider_configured_for_it() {
    let app = spawn_app().await;
    // plainp: `login_hint = "subject"`; the page of a provider that knows the hint
    // offers that account first.
    let (_, url) = app.elicit("alice", "plainp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    assert_eq!(
        app.provider.stats().last_authorize_params.unwrap().get("login_hint").map(String::as_str),
        Some("alice")
    );
    // testp: not configured, so the subject stays with us.
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    assert!(!app.provider.stats().last_authorize_params.unwrap().contains_key("login_hint"));
}

#[tokio::test]
async fn alices_link_opened_by_bob_is_refused_and_stays_usable_for_alice() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let bob = Browser::new();
    let r = bob.open(&app, &url, "bob").await;
    assert_eq!(r.status(), 403);
    let html = r.text().await.unwrap();
    assert!(html.contains("This link was made for another account"), "{html}");
    assert!(!html.contains("alice"), "the page must not reveal whose link it is");
    // Bob cannot start the authorization either, even with his own valid CSRF token.
    let csrf = crate::support::browser::form_value(&html, "csrf");
    let r = bob
        .client
        .post(format!("{}/connect/testp/authorize", app.base))
        .form(&[("csrf", csrf.as_str()), ("e", id.as_str()), ("decision", "connect")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Nor decline it for Alice.
    let r = bob
        .client
        .post(format!("{}/connect/testp/authorize", app.base))
        .form(&[("csrf", csrf.as_str()), ("e", id.as_str()), ("decision", "decline")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.provider.stats().authorize_requests, 0);
    assert!(app.audit_kinds().await.iter().any(|k| k == "identity_mismatch"));

    let r = Browser::new().connect(&app, &url, "alice", "octo-alice").await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.elicitation_status(&id).await, "completed");
}

#[tokio::test]
async fn a_replayed_callback_exchanges_no_second_code_and_stores_no_second_grant() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, &url, "alice", "octo-alice").await;
    assert_eq!(browser.get(&cb).await.status(), 200);
    // Reload in the same browser: a sensible page, nothing done.
    let r = browser.get(&cb).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Already connected"));
    // The same callback replayed from another browser: refused.
    let other = Browser::new();
    other.login(&app, "alice").await;
    assert_eq!(other.get(&cb).await.status(), 403);
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    assert_eq!(app.connection_count().await, 1);
    // The connect link itself, opened again: used, and it does not claim nothing happened.
    let r = browser.get(&url).await;
    assert_eq!(r.status(), 410);
    let html = r.text().await.unwrap();
    assert!(html.contains("already used") && !html.contains("Nothing was connected"), "{html}");
}

#[tokio::test]
async fn a_double_click_on_connect_leads_to_one_grant() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let page = browser.open(&app, &url, "alice").await.text().await.unwrap();
    let first = browser.consent(&app, "testp", &page, "connect").await;
    let second = browser.consent(&app, "testp", &page, "connect").await;
    let cb1 = browser.answer_authorize(&location(&first), "octo-alice", "allow").await;
    let cb2 = browser.answer_authorize(&location(&second), "octo-alice", "allow").await;
    assert_eq!(browser.get(&cb1).await.status(), 200);
    let r = browser.get(&cb2).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Already connected"));
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    assert_eq!(app.connection_count().await, 1);
}

/// Two callbacks of one link (two tabs that both went to the provider) arriving together:
/// one code is exchanged, one grant kept, the link completed once. The second waits on the
/// link's lock and finds it connected: no second grant is made at all (a revocation of a
/// duplicate could end the kept grant too, or, without a revocation endpoint, not happen).
#[tokio::test]
async fn two_callbacks_of_one_link_arriving_together_keep_exactly_one_grant() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let page = browser.open(&app, &url, "alice").await.text().await.unwrap();
    let first = browser.consent(&app, "testp", &page, "connect").await;
    let second = browser.consent(&app, "testp", &page, "connect").await;
    let cb1 = browser.answer_authorize(&location(&first), "octo-alice", "allow").await;
    let cb2 = browser.answer_authorize(&location(&second), "octo-alice", "allow").await;
    app.provider.switches().set_token_delay(std::time::Duration::from_millis(500));
    let (r1, r2) = tokio::join!(browser.get(&cb1), browser.get(&cb2));
    let (s1, s2) = (r1.status().as_u16(), r2.status().as_u16());
    let (p1, p2) = (r1.text().await.unwrap(), r2.text().await.unwrap());
    let won = |status: u16, page: &str| status == 200 && page.contains("Connected") && !page.contains("Already");
    let lost = |status: u16, page: &str| {
        (status == 200 && page.contains("Already connected"))
            || (status == 409 && page.contains("Connected in another window"))
    };
    assert!(
        (won(s1, &p1) && lost(s2, &p2)) || (won(s2, &p2) && lost(s1, &p1)),
        "one connects, the other is told: {s1} {p1}\n{s2} {p2}"
    );
    assert_eq!(app.connection_count().await, 1, "one grant kept");
    assert_eq!(app.elicitation_status(&id).await, "completed");
    let completed = app.audit_kinds().await.iter().filter(|k| *k == "connect_completed").count();
    assert_eq!(completed, 1, "completed once");
    let stats = app.provider.stats();
    assert_eq!(stats.authorization_code_exchanges, 1, "one code exchanged");
    assert!(stats.revocations.is_empty(), "nothing to revoke: {:?}", stats.revocations);
    // The kept one is usable.
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": id})).await;
    assert_eq!(b["status"], "connected", "{b}");
}

#[tokio::test]
async fn an_expired_state_is_refused() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, &url, "alice", "octo-alice").await;
    sqlx::query("UPDATE oauth_states SET expires_at = now() - interval '1 second'").execute(&app.pool).await.unwrap();
    let r = browser.get(&cb).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("too late"));
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
}

#[tokio::test]
async fn a_state_from_another_browser_session_is_refused() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let first = Browser::new();
    let cb = first.connect_until_callback(&app, &url, "alice", "octo-alice").await;
    // Same subject, other session (e.g. a link pushed to another device).
    let second = Browser::new();
    second.login(&app, "alice").await;
    let r = second.get(&cb).await;
    assert_eq!(r.status(), 403);
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    // No session at all: refused too.
    assert_eq!(Browser::new().get(&cb).await.status(), 403);
    assert_eq!(app.connection_count().await, 0);
}

#[tokio::test]
async fn a_provider_swapped_in_the_callback_path_is_refused() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, &url, "alice", "octo-alice").await;
    let swapped = cb.replace("/connect/testp/callback", "/connect/plainp/callback");
    let r = browser.get(&swapped).await;
    assert_eq!(r.status(), 400);
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
    assert_eq!(app.connection_count().await, 0);
    // The state was consumed by that attempt: the original callback is dead too.
    assert_eq!(browser.get(&cb).await.status(), 400);
}

#[tokio::test]
async fn a_provider_swapped_in_the_connect_path_is_an_invalid_link() {
    let app = spawn_app().await;
    let (id, _) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    let r = browser.get(&format!("{}/connect/plainp?e={id}", app.base)).await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn unknown_or_tampered_elicitation_ids_are_an_invalid_link() {
    let app = spawn_app().await;
    let (id, _) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    let mut tampered = id.clone().into_bytes();
    tampered[0] = if tampered[0] == b'a' { b'b' } else { b'a' };
    let tampered = String::from_utf8(tampered).unwrap();
    for e in [tampered.as_str(), "nonsense", "", &id.to_uppercase()] {
        let r = browser.get(&format!("{}/connect/testp?e={e}", app.base)).await;
        assert_eq!(r.status(), 404, "{e}");
        let html = r.text().await.unwrap();
        assert!(html.contains("This link is not valid"));
        assert!(html.contains("Request id"));
    }
    assert_eq!(browser.get(&format!("{}/connect/testp", app.base)).await.status(), 404);
}

#[tokio::test]
async fn an_expired_or_finished_elicitation_shows_a_clear_page() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    sqlx::query("UPDATE elicitations SET expires_at = now() - interval '1 second'").execute(&app.pool).await.unwrap();
    let r = browser.get(&url).await;
    assert_eq!(r.status(), 410);
    assert!(r.text().await.unwrap().contains("expired"));
    sqlx::query("UPDATE elicitations SET status = 'cancelled' WHERE id = $1::uuid")
        .bind(&id)
        .execute(&app.pool)
        .await
        .unwrap();
    let r = browser.get(&url).await;
    assert_eq!(r.status(), 410);
    assert!(r.text().await.unwrap().contains("no longer active"));
}

/// A connect whose callback must succeed: alice, as `octo-alice` at the provider, and the
/// elicitation completed.
async fn connects(app: &TestApp, provider: &str) {
    let (id, url) = app.elicit("alice", provider).await;
    assert_eq!(Browser::new().connect(app, &url, "alice", "octo-alice").await.status(), 200);
    assert_eq!(app.elicitation_status(&id).await, "completed");
}

/// A connect whose callback must be refused with this reason code (a page, no
/// credential, the elicitation still pending, and the reason in the audit trail).
async fn refused_callback(app: &TestApp, provider: &str, reason: &str) -> serde_json::Value {
    let (id, url) = app.elicit("alice", provider).await;
    let browser = Browser::new();
    let r = browser.connect(app, &url, "alice", "octo-alice").await;
    // A refusal page (4xx), or the provider's fault (502, 503): never our 500.
    assert!(r.status().is_client_error() || [502, 503].contains(&r.status().as_u16()), "status {}", r.status());
    assert_eq!(app.connection_count().await, 0, "no credential attached");
    assert_eq!(app.elicitation_status(&id).await, "pending");
    let detail = last_connect_failure(app).await;
    assert_eq!(detail["reason"], reason, "{detail}");
    detail
}

#[tokio::test]
async fn a_wrong_iss_in_the_authorization_response_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_iss_mode(IssMode::Wrong);
    refused_callback(&app, "testp", "iss_mismatch").await;
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
}

#[tokio::test]
async fn a_missing_iss_is_refused_where_the_provider_advertises_rfc9207() {
    let app = spawn_app().await;
    app.provider.switches().set_iss_mode(IssMode::Missing);
    refused_callback(&app, "testp", "iss_missing").await;
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
}

#[tokio::test]
async fn a_missing_iss_is_refused_where_the_config_says_the_provider_sends_it() {
    let app = spawn_app().await;
    app.provider.switches().set_advertise_iss(false);
    app.provider.switches().set_iss_mode(IssMode::Missing);
    refused_callback(&app, "plainp", "iss_missing").await;
}

#[tokio::test]
async fn an_iss_that_is_present_is_compared_even_where_rfc9207_is_not_advertised() {
    let app = spawn_app().await;
    app.provider.switches().set_advertise_iss(false);
    app.provider.switches().set_iss_mode(IssMode::Wrong);
    refused_callback(&app, "testp", "iss_mismatch").await;
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
}

#[tokio::test]
async fn a_missing_iss_is_accepted_where_the_provider_does_not_use_rfc9207() {
    let app = spawn_app().await;
    app.provider.switches().set_advertise_iss(false);
    app.provider.switches().set_iss_mode(IssMode::Missing);
    connects(&app, "testp").await;
}

#[tokio::test]
async fn an_id_token_for_another_audience_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_audience(Some("someone-else".into()));
    refused_callback(&app, "testp", "id_token_audience").await;
}

#[tokio::test]
async fn an_id_token_with_a_wrong_nonce_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_nonce(Some("replayed-nonce".into()));
    refused_callback(&app, "testp", "id_token_nonce").await;
}

#[tokio::test]
async fn an_expired_id_token_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_expired(true);
    refused_callback(&app, "testp", "id_token_expired").await;
}

#[tokio::test]
async fn an_id_token_expired_within_the_clock_skew_is_accepted() {
    let app = spawn_app().await;
    // The provider's clock is 20 s behind: its fresh token looks expired to us.
    app.provider.switches().set_id_token_times(-80, -20);
    connects(&app, "testp").await;
}

#[tokio::test]
async fn an_id_token_expired_beyond_the_clock_skew_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_times(-180, -90);
    refused_callback(&app, "testp", "id_token_expired").await;
}

#[tokio::test]
async fn an_id_token_issued_in_the_future_beyond_the_clock_skew_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_times(300, 3_900);
    refused_callback(&app, "testp", "id_token_iat_in_future").await;
}

#[tokio::test]
async fn an_id_token_issued_a_little_in_the_future_is_accepted() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_times(30, 3_630);
    connects(&app, "testp").await;
}

#[tokio::test]
async fn an_id_token_whose_azp_is_another_client_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_azp(Some("another-client".into()));
    refused_callback(&app, "testp", "id_token_azp").await;
}

#[tokio::test]
async fn an_id_token_signed_with_an_unknown_key_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_wrong_key(true);
    refused_callback(&app, "testp", "id_token_signature").await;
}

#[tokio::test]
async fn an_id_token_from_another_issuer_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_issuer(Some("http://evil.example".into()));
    refused_callback(&app, "testp", "id_token_issuer").await;
}

#[tokio::test]
async fn a_token_response_without_an_id_token_is_refused_where_the_provider_is_oidc() {
    let app = spawn_app().await;
    app.provider.switches().set_omit_id_token(true);
    refused_callback(&app, "testp", "id_token_missing").await;
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
}

#[tokio::test]
async fn an_id_token_that_is_not_a_jwt_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_malformed(true);
    refused_callback(&app, "testp", "id_token_malformed").await;
}

#[tokio::test]
async fn an_unsigned_id_token_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_alg(Some(IdTokenAlg::Unsigned));
    refused_callback(&app, "testp", "id_token_algorithm").await;
}

#[tokio::test]
async fn an_id_token_signed_hs256_with_the_client_secret_is_refused() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_alg(Some(IdTokenAlg::Hs256ClientSecret));
    refused_callback(&app, "testp", "id_token_algorithm").await;
}

#[tokio::test]
async fn an_id_token_naming_a_kid_the_jwks_lacks_is_refused_after_one_more_fetch_of_the_keys() {
    let app = spawn_app().await;
    // Signed with the published key, but under a kid the provider never published.
    app.provider.switches().set_id_token_kid(Some("rotated-away".into()));
    refused_callback(&app, "testp", "id_token_unknown_key").await;
    let fetched = app.provider.stats().jwks_requests;
    assert_eq!(fetched, 2, "once at discovery, once more for the unknown kid");
    // The same again within the minute: refused the same way, and the keys are not fetched.
    refused_callback(&app, "testp", "id_token_unknown_key").await;
    assert_eq!(app.provider.stats().jwks_requests, fetched);
}

#[tokio::test]
async fn an_id_token_with_an_untrusted_second_audience_and_no_azp_is_refused_for_its_audience() {
    let app = spawn_app().await;
    // aud = [our client, another]: openidconnect trusts no other audience, so this is refused
    // for `aud` before the azp rule (several audiences need an azp) is reached.
    app.provider.switches().set_id_token_extra_audience(Some("another-client".into()));
    app.provider.switches().set_omit_id_token_azp(true);
    refused_callback(&app, "testp", "id_token_audience").await;
}

#[tokio::test]
async fn a_state_whose_redirect_uri_is_not_the_registered_one_is_refused() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, &url, "alice", "octo").await;
    sqlx::query("UPDATE oauth_states SET redirect_uri = 'https://evil.example/connect/testp/callback'")
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(browser.get(&cb).await.status(), 400);
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
    assert_eq!(app.connection_count().await, 0);
}

#[tokio::test]
async fn a_failing_token_endpoint_leaves_the_elicitation_pending() {
    let app = spawn_app().await;
    app.provider.switches().set_token_failure(Some(TokenFailure::ServerError));
    refused_callback(&app, "testp", "provider_unavailable").await;
    app.provider.switches().set_token_failure(None);
    assert!(app.audit_kinds().await.iter().any(|k| k == "connect_failed"));
}

#[tokio::test]
async fn decline_on_our_page_is_a_normal_outcome() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let page = browser.open(&app, &url, "alice").await.text().await.unwrap();
    let r = browser.consent(&app, "testp", &page, "decline").await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Nothing was connected"));
    assert_eq!(app.elicitation_status(&id).await, "declined");
    assert_eq!(app.provider.stats().authorize_requests, 0);
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": id})).await;
    assert_eq!(b["status"], "declined");
}

#[tokio::test]
async fn access_denied_at_the_provider_is_a_decline() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let page = browser.open(&app, &url, "alice").await.text().await.unwrap();
    let r = browser.consent(&app, "testp", &page, "connect").await;
    let cb = browser.answer_authorize(&location(&r), "octo", "deny").await;
    assert!(cb.contains("error=access_denied"));
    let r = browser.get(&cb).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Nothing was connected"));
    assert_eq!(app.elicitation_status(&id).await, "declined");
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": id})).await;
    assert_eq!(b["status"], "declined");
}

#[tokio::test]
async fn a_missing_or_wrong_csrf_token_is_403() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let page = browser.open(&app, &url, "alice").await.text().await.unwrap();
    let good = crate::support::browser::form_value(&page, "csrf");
    let bad = format!("{}x", &good[..good.len() - 1]);
    for form in [
        vec![("e", id.as_str()), ("decision", "connect")],
        vec![("csrf", bad.as_str()), ("e", id.as_str()), ("decision", "connect")],
    ] {
        let r = browser.client.post(format!("{}/connect/testp/authorize", app.base)).form(&form).send().await.unwrap();
        assert_eq!(r.status(), 403);
    }
    // Another session's token does not work here either.
    let other = Browser::new();
    let other_page = other.open(&app, &url, "alice").await.text().await.unwrap();
    let other_csrf = crate::support::browser::form_value(&other_page, "csrf");
    assert_ne!(other_csrf, good);
    let r = browser
        .client
        .post(format!("{}/connect/testp/authorize", app.base))
        .form(&[("csrf", other_csrf.as_str()), ("e", id.as_str()), ("decision", "connect")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(app.provider.stats().authorize_requests, 0);
}

#[tokio::test]
async fn return_to_pointing_off_site_is_refused() {
    let app = spawn_app().await;
    let browser = Browser::new();
    for bad in ["https://evil.example/", "//evil.example/x", "/\\evil.example"] {
        let url = format!(
            "{}/login?return_to={}",
            app.base,
            url::form_urlencoded::byte_serialize(bad.as_bytes()).collect::<String>()
        );
        let r = browser.get(&url).await;
        assert_eq!(r.status(), 400, "{bad}");
        assert!(r.headers().get("location").is_none());
    }
    assert_eq!(app.idp.stats().authorize_requests, 0);
}

#[tokio::test]
async fn return_to_that_resolves_to_another_host_is_refused_and_a_good_one_comes_back_absolute() {
    let app = spawn_app().await;
    let browser = Browser::new();
    let login_url = |raw: &str| {
        format!(
            "{}/login?return_to={}",
            app.base,
            url::form_urlencoded::byte_serialize(raw.as_bytes()).collect::<String>()
        )
    };
    // Each of these becomes the path `//evil.example...` once dot segments are resolved.
    for bad in ["/.//evil.example/p", "/x/..//evil.example", "/%2e//evil.example", "/\t/evil.example"] {
        let r = browser.get(&login_url(bad)).await;
        assert_eq!(r.status(), 400, "{bad}");
        assert!(r.headers().get("location").is_none(), "{bad}");
        assert!(r.text().await.unwrap().contains("points away from this service"), "{bad}");
    }
    assert_eq!(app.idp.stats().authorize_requests, 0);
    // Through the real IdP sign-in: the way back is normalised and absolute on our origin.
    let r = browser.get(&login_url("/x/../connect/testp?e=1#frag")).await;
    assert_eq!(r.status(), 303);
    let back = browser.answer_authorize(&location(&r), "alice", "allow").await;
    let r = browser.get(&back).await;
    assert_eq!(r.status(), 303);
    assert_eq!(location(&r), format!("{}/connect/testp?e=1", app.base));
}

#[tokio::test]
async fn a_login_response_replayed_into_another_browser_is_refused() {
    let app = spawn_app().await;
    let victim = Browser::new();
    let r = victim.get(&format!("{}/login?return_to=/", app.base)).await;
    // The attacker signs in at the IdP and hands the victim the redirect back.
    let attacker = Browser::new();
    let back = attacker.answer_authorize(&location(&r), "mallory", "allow").await;
    let fresh = Browser::new();
    assert_eq!(fresh.get(&back).await.status(), 400);
}

#[tokio::test]
async fn a_different_upstream_account_on_reconnect_is_refused_and_the_old_one_kept() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    // A second grant is needed (more scopes), and Alice signs in at the provider as someone else.
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "scopes": ["openid", "email"]})).await;
    let url = b["elicitation"]["url"].as_str().unwrap();
    let r = Browser::new().connect(&app, url, "alice", "octo-mallory").await;
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("different account"));
    let login: String = sqlx::query_scalar("SELECT account_login FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(login, "octo-alice");
    assert!(app.audit_kinds().await.iter().any(|k| k == "account_mismatch"));
}

#[tokio::test]
async fn reconnecting_the_same_upstream_account_replaces_the_grant_in_place() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    let first = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "scopes": ["openid", "email"]})).await;
    let url = b["elicitation"]["url"].as_str().unwrap();
    assert_eq!(Browser::new().connect(&app, url, "alice", "octo-alice").await.status(), 200);
    let second = app.token_ok(json!({"subject": "alice", "provider": "testp", "scopes": ["email"]})).await;
    assert_eq!(second["status"], "connected");
    assert_eq!(second["connection_id"], first["connection_id"]);
    assert_ne!(second["access_token"], first["access_token"]);
    assert_eq!(app.connection_count().await, 1);
}

#[tokio::test]
async fn pages_cannot_be_framed_send_no_referrer_and_are_not_cached() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let r = browser.open(&app, &url, "alice").await;
    assert_eq!(r.status(), 200);
    let h = r.headers();
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("default-src 'none'"));
    // The Connect button's redirect may go to the provider's origin and nowhere else.
    assert!(csp.contains(&format!("form-action 'self' {}", app.provider.base_url())), "{csp}");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert_eq!(h["cache-control"], "no-store");
    assert_eq!(h["x-dns-prefetch-control"], "off");
    let html = r.text().await.unwrap();
    // The provider's full domain is on the page, and nothing is loaded from it.
    assert!(html.contains("127.0.0.1"), "{html}");
    assert!(!html.contains(&format!("src=\"{}", app.provider.base_url())));
    assert!(!html.contains("<script"));
    assert!(html.contains("lang=\"en\""));
    // Error pages too.
    let r = browser.get(&format!("{}/connect/testp?e=x", app.base)).await;
    assert!(r.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
}

#[tokio::test]
async fn the_session_cookie_is_http_only_and_same_site() {
    let app = spawn_app().await;
    let client =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).cookie_store(true).build().unwrap();
    let r = client.get(format!("{}/login?return_to=/", app.base)).send().await.unwrap();
    let login_cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(login_cookie.contains("HttpOnly") && login_cookie.contains("SameSite=Lax"), "{login_cookie}");
    let b = Browser { client: client.clone() };
    let back = b.answer_authorize(&location(&r), "alice", "allow").await;
    let r = client.get(&back).send().await.unwrap();
    let cookies: Vec<String> =
        r.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let session = cookies.iter().find(|c| c.starts_with("mcpc_session=")).unwrap();
    assert!(
        session.contains("HttpOnly") && session.contains("SameSite=Lax") && session.contains("Max-Age="),
        "{session}"
    );
    // Only a hash of the session id is stored.
    let value = session.split(';').next().unwrap().split('=').nth(1).unwrap();
    let rows: Vec<String> =
        sqlx::query_scalar("SELECT s::text FROM browser_sessions s").fetch_all(&app.pool).await.unwrap();
    assert!(!rows.iter().any(|r| r.contains(value)));
}

#[tokio::test]
async fn logout_ends_the_session() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let page = browser.open(&app, &url, "alice").await.text().await.unwrap();
    let csrf = crate::support::browser::form_value(&page, "csrf");
    let r = browser.client.post(format!("{}/logout", app.base)).form(&[("csrf", csrf.as_str())]).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM browser_sessions").fetch_one(&app.pool).await.unwrap();
    assert_eq!(n, 0);
    // Back to the login redirect.
    assert_eq!(browser.get(&url).await.status(), 303);
}

/// The provider saw the refresh token, then the access token, revoked.
fn revoked_refresh_then_access(app: &TestApp) {
    let kinds: Vec<TokenKind> = app.provider.stats().revocations.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, vec![TokenKind::Refresh, TokenKind::Access], "revocations at the provider");
}

#[tokio::test]
async fn a_callback_refused_for_its_id_token_revokes_the_grant_the_exchange_made() {
    let app = spawn_app().await;
    app.provider.switches().set_id_token_audience(Some("someone-else".into()));
    let detail = refused_callback(&app, "testp", "id_token_audience").await;
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    revoked_refresh_then_access(&app);
    assert_eq!(detail["provider_revocation"], "revoked", "{detail}");
}

#[tokio::test]
async fn a_callback_whose_account_lookup_fails_revokes_the_grant_the_exchange_made() {
    let app = spawn_app().await;
    app.provider.switches().set_userinfo_override(Some(json!({"sub": "octo-alice", "nothing": "useful"})));
    let detail = refused_callback(&app, "testp", "account_lookup_failed").await;
    revoked_refresh_then_access(&app);
    assert_eq!(detail["provider_revocation"], "revoked", "{detail}");
}

#[tokio::test]
async fn a_userinfo_subject_other_than_the_id_tokens_is_refused_and_the_grant_revoked() {
    let app = spawn_app().await;
    app.provider
        .switches()
        .set_userinfo_override(Some(json!({"sub": "octo-mallory", "id": 7, "login": "octo-mallory"})));
    let detail = refused_callback(&app, "testp", "userinfo_subject_mismatch").await;
    revoked_refresh_then_access(&app);
    assert_eq!(detail["provider_revocation"], "revoked", "{detail}");
}

#[tokio::test]
async fn a_reconnect_refused_for_another_account_revokes_the_new_grant_and_keeps_the_old() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "scopes": ["openid", "email"]})).await;
    let url = b["elicitation"]["url"].as_str().unwrap();
    let r = Browser::new().connect(&app, url, "alice", "octo-mallory").await;
    assert_eq!(r.status(), 409);
    revoked_refresh_then_access(&app);
    let detail = last_connect_failure(&app).await;
    assert_eq!(detail["reason"], "account_mismatch");
    assert_eq!(detail["provider_revocation"], "revoked", "{detail}");
    // Alice's own grant still works.
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(b["status"], "connected");
    assert_eq!(b["account"]["login"], "octo-alice");
}

#[tokio::test]
async fn a_link_completing_while_another_commits_the_same_connection_keeps_one_grant_and_revokes_its_own() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, &url, "alice", "octo-alice").await;
    // Another link of alice's (another tab, other scopes) is committing its connection at
    // this very moment: its row is written but not yet committed when our callback looks.
    let mut other = app.pool.sqlx_pool().begin().await.unwrap();
    let kept = app.insert_sealed_on(&mut other, "acme", "alice", "testp", "gho_kept", None, &["openid"], None).await;
    let callback = tokio::spawn({
        let client = browser.client.clone();
        async move { client.get(&cb).send().await.unwrap() }
    });
    // The callback exchanges its code, then waits on the unique key for the other commit.
    let waiting = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO connections%'",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap()
            == 1
    };
    crate::support::eventually(std::time::Duration::from_secs(5), "the callback's insert waits on ours", waiting).await;
    other.commit().await.unwrap();
    let r = callback.await.unwrap();
    assert_eq!(r.status(), 409, "told, never a 500");
    assert!(r.text().await.unwrap().contains("Connected in another window"));
    assert_eq!(app.connection_count().await, 1);
    let kept_id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(kept_id, kept.as_uuid());
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    revoked_refresh_then_access(&app);
    let detail = last_connect_failure(&app).await;
    assert_eq!(detail["reason"], "connected_concurrently");
    assert_eq!(detail["provider_revocation"], "revoked");
    assert_eq!(app.elicitation_status(&id).await, "pending");
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(b["access_token"], "gho_kept");
}

#[tokio::test]
async fn after_signing_out_of_a_refused_link_the_next_sign_in_asks_for_the_account_and_returns_to_it() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let r = browser.open(&app, &url, "bob").await;
    assert_eq!(r.status(), 403);
    // A first sign-in asks for nothing special.
    assert!(!app.idp.stats().last_authorize_params.unwrap().contains_key("prompt"));
    let html = r.text().await.unwrap();
    let (csrf, back) =
        (crate::support::browser::form_value(&html, "csrf"), crate::support::browser::form_value(&html, "return_to"));
    assert_eq!(back, format!("/connect/testp?e={id}"));
    let r = browser
        .client
        .post(format!("{}/logout", app.base))
        .form(&[("csrf", csrf.as_str()), ("return_to", back.as_str())])
        .send()
        .await
        .unwrap();
    // The dev IdP has no end_session_endpoint: our own signed-out page.
    assert_eq!(r.status(), 200);
    let html = r.text().await.unwrap();
    let again = regex_lite::Regex::new(r#"id="sign-in-again" href="([^"]+)""#).unwrap().captures(&html).unwrap()[1]
        .replace("&amp;", "&");
    assert!(again.starts_with(&format!("{}/login?return_to=", app.base)), "{again}");
    let r = browser.get(&again).await;
    assert_eq!(r.status(), 303);
    let authorize = location(&r);
    let params: std::collections::HashMap<_, _> =
        url::Url::parse(&authorize).unwrap().query_pairs().into_owned().collect();
    assert_eq!(params.get("prompt").map(String::as_str), Some("login"), "the IdP is asked to let the person choose");
    let back = browser.answer_authorize(&authorize, "alice", "allow").await;
    let r = browser.get(&back).await;
    assert_eq!(r.status(), 303);
    assert_eq!(location(&r), url, "back to the link");
    assert_eq!(browser.get(&url).await.status(), 200, "alice's consent page");
    // Signed in again: the next login is an ordinary one.
    let r = browser.get(&format!("{}/login?return_to=/", app.base)).await;
    assert!(!location(&r).contains("prompt="));
}

#[tokio::test]
async fn a_sign_out_post_without_a_session_ends_nothing_at_the_idp_and_sets_nothing() {
    let app = spawn_app().await;
    // A cross-site form post carries no session cookie (SameSite=Lax).
    let r = app
        .client
        .post(format!("{}/logout", app.base))
        .form(&[("return_to", "/connect/testp?e=x;Domain=evil.example")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cookies: Vec<String> =
        r.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    assert!(cookies.iter().all(|c| !c.starts_with("mcpc_relogin")), "{cookies:?}");
}

#[tokio::test]
async fn every_answer_carries_hsts_when_the_public_base_url_is_https_and_none_over_http() {
    // Over http (the loopback demo) a browser ignores it, and localhost must not be pinned.
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/connect/testp?e=x", app.base)).send().await.unwrap();
    assert!(r.headers().get("strict-transport-security").is_none());

    let https = |extra: &str| crate::support::Options {
        env: vec![("MCP_CONNECT_PUBLIC_BASE_URL", "https://connect.example.test".to_owned())],
        extra_toml: extra.to_owned(),
        ..Default::default()
    };
    let app = crate::support::spawn_app_with(https("")).await;
    for path in ["/connect/testp?e=x", "/login?return_to=/", "/connections", "/healthz", "/v1/token", "/nowhere"] {
        let r = app.client.get(format!("{}{path}", app.base)).send().await.unwrap();
        assert_eq!(r.headers()["strict-transport-security"], "max-age=31536000", "{path}");
    }
    let app = crate::support::spawn_app_with(https("[hsts]\nmax_age_seconds = 300\n")).await;
    let r = app.client.get(format!("{}/connections", app.base)).send().await.unwrap();
    assert_eq!(r.headers()["strict-transport-security"], "max-age=300");
    let app = crate::support::spawn_app_with(https("[hsts]\nmax_age_seconds = 0\n")).await;
    let r = app.client.get(format!("{}/connections", app.base)).send().await.unwrap();
    assert!(r.headers().get("strict-transport-security").is_none(), "0 turns it off");
}

#[tokio::test]
async fn a_login_callback_replayed_with_its_cookie_is_refused() {
    let app = spawn_app().await;
    let browser = Browser::new();
    let r = browser.get(&format!("{}/login?return_to=/", app.base)).await;
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let back = browser.answer_authorize(&location(&r), "alice", "allow").await;
    let replay = |back: String, cookie: String| async move {
        let c = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        c.get(back).header("cookie", cookie).send().await.unwrap()
    };
    assert_eq!(replay(back.clone(), cookie.clone()).await.status(), 303, "the first use signs in");
    let r = replay(back, cookie).await;
    assert_eq!(r.status(), 400, "the same answer and cookie again");
    assert!(r.headers().get("set-cookie").is_none_or(|c| !c.to_str().unwrap().contains("mcpc_session=")));
    let sessions: i64 = sqlx::query_scalar("SELECT count(*) FROM browser_sessions").fetch_one(&app.pool).await.unwrap();
    assert_eq!(sessions, 1, "one sign-in, one session");
}

#[tokio::test]
async fn a_login_cookie_for_another_sign_in_or_tampered_is_refused() {
    let app = spawn_app().await;
    let one = Browser::new();
    let r1 = one.get(&format!("{}/login?return_to=/", app.base)).await;
    let cookie1 = r1.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let two = Browser::new();
    let r2 = two.get(&format!("{}/login?return_to=/", app.base)).await;
    let back2 = two.answer_authorize(&location(&r2), "alice", "allow").await;
    let c = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    // The second sign-in's answer with the first sign-in's cookie.
    let r = c.get(&back2).header("cookie", &cookie1).send().await.unwrap();
    assert_eq!(r.status(), 400);
    // A changed byte in the cookie.
    let (name, value) = cookie1.split_once('=').unwrap();
    let mut bytes = value.as_bytes().to_vec();
    let i = bytes.len() - 5;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = format!("{name}={}", String::from_utf8(bytes).unwrap());
    let r = c.get(&back2).header("cookie", tampered).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("This sign-in has expired"));
}
