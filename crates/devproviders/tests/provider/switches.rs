//! The misbehaviour switches.

use crate::helpers::*;
use mcp_connect_devproviders::{DevProvider, IssMode, Role, TokenFailure};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

#[tokio::test]
async fn iss_modes_reach_success_and_error_redirects_alike() {
    let provider = start(Role::Downstream).await;
    let pkce = pkce();
    for (mode, expected) in [
        (IssMode::Correct, Some(provider.issuer())),
        (IssMode::Missing, None),
        (IssMode::Wrong, Some("http://evil.example".into())),
    ] {
        provider.switches().set_iss_mode(mode);
        let html = open_page(&provider, &authorize_params(&pkce, "repo")).await;
        for decision in ["allow", "deny"] {
            let q = query(&submit(&provider, &html, "dev-user", decision).await);
            assert_eq!(q.get("iss"), expected.as_ref(), "{mode:?} {decision}");
        }
    }
}

#[tokio::test]
async fn discovery_can_stop_advertising_the_iss_parameter() {
    let provider = start(Role::Downstream).await;
    provider.switches().set_advertise_iss(false);
    let url = format!("{}/.well-known/openid-configuration", provider.base_url());
    let oidc = json(http().get(url).send().await.unwrap()).await;
    assert_eq!(oidc["authorization_response_iss_parameter_supported"], false);
}

async fn id_token(provider: &DevProvider) -> String {
    tokens(provider, "openid").await["id_token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn each_id_token_tampering_switch_makes_openidconnect_reject_the_token() {
    let provider = start(Role::IdentityProvider).await;
    let switches = provider.switches();
    let cases: [(&str, &dyn Fn()); 5] = [
        ("audience", &|| switches.set_id_token_audience(Some("another-app".into()))),
        ("nonce", &|| switches.set_id_token_nonce(Some("another-nonce".into()))),
        ("expired", &|| switches.set_id_token_expired(true)),
        ("issuer", &|| switches.set_id_token_issuer(Some("http://evil.example".into()))),
        ("wrong key", &|| switches.set_id_token_wrong_key(true)),
    ];
    for (name, tamper) in cases {
        switches.reset();
        tamper();
        let token = id_token(&provider).await;
        assert!(verify_id_token(&provider, &token, "nonce-1").await.is_err(), "{name} tampering went unnoticed");
    }
    switches.reset();
    let token = id_token(&provider).await;
    assert_eq!(verify_id_token(&provider, &token, "nonce-1").await, Ok("alice".to_owned()));
}

#[tokio::test]
async fn the_token_delay_holds_back_both_grants() {
    let provider = start(Role::Downstream).await;
    let pkce = pkce();
    let code = authorize(&provider, &pkce, "repo", "alice").await;
    provider.switches().set_token_delay(Duration::from_millis(400));
    let started = Instant::now();
    let body = json(exchange(&provider, &code, &pkce.verifier).await).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    let started = Instant::now();
    json(refresh(&provider, body["refresh_token"].as_str().unwrap()).await).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn token_failures_hit_both_grants_and_leave_the_code_and_refresh_token_usable() {
    let provider = start(Role::Downstream).await;
    let pkce = pkce();
    let code = authorize(&provider, &pkce, "repo", "alice").await;

    provider.switches().set_token_failure(Some(TokenFailure::ServerError));
    assert_oauth_error(
        exchange(&provider, &code, &pkce.verifier).await,
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
    )
    .await;
    provider.switches().set_token_failure(Some(TokenFailure::InvalidGrant));
    assert_oauth_error(exchange(&provider, &code, &pkce.verifier).await, StatusCode::BAD_REQUEST, "invalid_grant")
        .await;

    provider.switches().set_token_failure(None);
    let body = json(exchange(&provider, &code, &pkce.verifier).await).await;
    let refresh_token = body["refresh_token"].as_str().unwrap();

    provider.switches().set_token_failure(Some(TokenFailure::ServerError));
    assert_oauth_error(refresh(&provider, refresh_token).await, StatusCode::INTERNAL_SERVER_ERROR, "server_error")
        .await;
    provider.switches().set_token_failure(Some(TokenFailure::InvalidGrant));
    assert_oauth_error(refresh(&provider, refresh_token).await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    provider.switches().set_token_failure(None);
    json(refresh(&provider, refresh_token).await).await;

    let stats = provider.stats();
    assert_eq!(stats.authorization_code_exchanges, 3);
    assert_eq!(stats.refresh_calls, 3);
}

#[tokio::test]
async fn the_timeout_failure_never_answers_and_stop_does_not_wait_for_it() {
    let provider = start(Role::Downstream).await;
    let (_, refresh_token) = provider.issue_grant(CLIENT_ID, "alice", "repo");
    provider.switches().set_token_failure(Some(TokenFailure::Timeout));
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().unwrap();
    let result = impatient
        .post(format!("{}/token", provider.base_url()))
        .basic_auth(CLIENT_ID, Some(CLIENT_SECRET.replace(':', "%3A").replace('+', "%2B").replace('&', "%26")))
        .form(&[("grant_type", "refresh_token"), ("refresh_token", refresh_token.as_str())])
        .send()
        .await;
    assert!(result.unwrap_err().is_timeout());

    // Another request is still in flight on the server side; stopping must not wait for it.
    let hanging = tokio::spawn(refresh_owned(provider.base_url(), refresh_token));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let base = provider.base_url();
    provider.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    hanging.abort();
    assert!(http().get(format!("{base}/jwks")).send().await.is_err(), "the port is closed after stop");
}

async fn refresh_owned(base: String, refresh_token: String) {
    let _ = http()
        .post(format!("{base}/token"))
        .form(&[("grant_type", "refresh_token"), ("refresh_token", refresh_token.as_str())])
        .send()
        .await;
}

#[tokio::test]
async fn refresh_and_expiry_can_be_left_out_of_token_responses() {
    let provider = start(Role::Downstream).await;
    provider.switches().set_omit_refresh_token(true);
    provider.switches().set_omit_expires_in(true);
    let body = tokens(&provider, "repo").await;
    assert!(body["access_token"].is_string());
    assert!(body.get("refresh_token").is_none());
    assert!(body.get("expires_in").is_none());

    // A refresh answered without a refresh token leaves the old one valid.
    provider.switches().set_omit_refresh_token(false);
    let rt = tokens(&provider, "repo").await["refresh_token"].as_str().unwrap().to_owned();
    provider.switches().set_omit_refresh_token(true);
    for _ in 0..2 {
        let again = json(refresh(&provider, &rt).await).await;
        assert!(again.get("refresh_token").is_none());
    }
}
