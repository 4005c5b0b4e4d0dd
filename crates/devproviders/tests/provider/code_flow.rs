//! The authorization code flow with PKCE, end to end, and its rejection paths at /token.

use crate::helpers::*;
use mcp_connect_devproviders::Role;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, Nonce, OAuth2TokenResponse, PkceCodeChallenge, RedirectUrl,
    Scope, TokenResponse,
};
use reqwest::StatusCode;

#[tokio::test]
async fn the_code_flow_with_pkce_issues_tokens_and_an_id_token_openidconnect_accepts() {
    let provider = start(Role::IdentityProvider).await;
    let pkce = pkce();
    let mut params = authorize_params(&pkce, "openid profile");
    params.push(("access_type".into(), "offline".into()));

    let html = open_page(&provider, &params).await;
    let stats = provider.stats();
    assert_eq!(stats.authorize_requests, 1);
    let recorded = stats.last_authorize_params.unwrap();
    assert_eq!(recorded["code_challenge"], pkce.challenge);
    assert_eq!(recorded["code_challenge_method"], "S256");
    assert_eq!(recorded["redirect_uri"], REDIRECT_URI);
    assert_eq!(recorded["scope"], "openid profile");
    assert_eq!(recorded["state"], "st-1 & <odd> \"chars\"");
    assert_eq!(recorded["nonce"], "nonce-1");
    assert_eq!(recorded["access_type"], "offline");

    let location = submit(&provider, &html, "alice", "allow").await;
    assert_eq!(location.as_str().split('?').next().unwrap(), "http://127.0.0.1:9/callback");
    let q = query(&location);
    assert_eq!(q["tenant"], "t1", "the redirect URI's own query is kept");
    assert_eq!(q["state"], "st-1 & <odd> \"chars\"");
    assert_eq!(q["iss"], provider.issuer());
    assert!(q["code"].len() >= 43);

    let response = exchange(&provider, &q["code"], &pkce.verifier).await;
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body = json(response).await;
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    assert_eq!(body["scope"], "openid profile");
    assert!(body["access_token"].as_str().unwrap().len() >= 43);
    assert!(body["refresh_token"].as_str().unwrap().len() >= 43);
    let id_token = body["id_token"].as_str().unwrap();
    assert_eq!(verify_id_token(&provider, id_token, "nonce-1").await, Ok("alice".to_owned()));
    assert!(verify_id_token(&provider, id_token, "another-nonce").await.is_err());

    let claims = jwt_claims(id_token);
    assert_eq!(claims["azp"], CLIENT_ID);
    assert!(claims["auth_time"].is_number());
    assert_eq!(provider.stats().authorization_code_exchanges, 1);
}

#[tokio::test]
async fn openidconnects_own_client_completes_the_flow() {
    let provider = start(Role::IdentityProvider).await;
    let client = CoreClient::from_provider_metadata(
        discover(&provider).await,
        ClientId::new(CLIENT_ID.into()),
        Some(ClientSecret::new(CLIENT_SECRET.into())),
    )
    .set_redirect_uri(RedirectUrl::new(REDIRECT_URI.into()).unwrap());
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, csrf, nonce) = client
        .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
        .add_scope(Scope::new("email".into()))
        .set_pkce_challenge(challenge)
        .url();

    let response = http().get(url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let location = submit(&provider, &response.text().await.unwrap(), "bob", "allow").await;
    let q = query(&location);
    assert_eq!(&q["state"], csrf.secret());

    let tokens = client
        .exchange_code(AuthorizationCode::new(q["code"].clone()))
        .unwrap()
        .set_pkce_verifier(verifier)
        .request_async(&http())
        .await
        .unwrap();
    let id_token = tokens.id_token().expect("openid scope gives an ID token");
    let claims = id_token.claims(&client.id_token_verifier(), &nonce).unwrap();
    assert_eq!(claims.subject().as_str(), "bob");
    assert!(tokens.refresh_token().is_some());
}

#[tokio::test]
async fn no_id_token_without_the_openid_scope() {
    let provider = start(Role::Downstream).await;
    let body = tokens(&provider, "repo").await;
    assert!(body.get("id_token").is_none());
    assert_eq!(body["scope"], "repo");
}

#[tokio::test]
async fn client_secret_post_works_and_a_wrong_secret_is_invalid_client() {
    let provider = start(Role::Downstream).await;
    let pkce = pkce();
    let code = authorize(&provider, &pkce, "repo", "alice").await;
    let url = format!("{}/token", provider.base_url());
    let form = |secret: &'static str| {
        vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.clone()),
            ("redirect_uri", REDIRECT_URI.to_owned()),
            ("code_verifier", pkce.verifier.clone()),
            ("client_id", CLIENT_ID.to_owned()),
            ("client_secret", secret.to_owned()),
        ]
    };
    let wrong = http().post(&url).form(&form("wrong")).send().await.unwrap();
    assert!(wrong.headers().contains_key("www-authenticate"));
    assert_oauth_error(wrong, StatusCode::UNAUTHORIZED, "invalid_client").await;
    assert_eq!(provider.stats().authorization_code_exchanges, 0, "an unauthenticated call never reaches the grant");

    let body = json(http().post(&url).form(&form(CLIENT_SECRET)).send().await.unwrap()).await;
    assert!(body["access_token"].is_string());
}

#[tokio::test]
async fn a_wrong_code_verifier_is_invalid_grant() {
    let provider = start(Role::Downstream).await;
    let code = authorize(&provider, &pkce(), "repo", "alice").await;
    let other = pkce();
    assert_oauth_error(exchange(&provider, &code, &other.verifier).await, StatusCode::BAD_REQUEST, "invalid_grant")
        .await;
}

#[tokio::test]
async fn a_different_redirect_uri_at_the_exchange_is_invalid_grant() {
    let provider = start(Role::Downstream).await;
    let pkce = pkce();
    let code = authorize(&provider, &pkce, "repo", "alice").await;
    let response = token_request(
        &provider,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", "http://127.0.0.1:9/callback"),
            ("code_verifier", &pkce.verifier),
        ],
    )
    .await;
    assert_oauth_error(response, StatusCode::BAD_REQUEST, "invalid_grant").await;
}

#[tokio::test]
async fn a_replayed_code_is_invalid_grant_and_kills_the_first_exchanges_tokens() {
    let provider = start(Role::Downstream).await;
    let pkce = pkce();
    let code = authorize(&provider, &pkce, "repo", "alice").await;
    let first = json(exchange(&provider, &code, &pkce.verifier).await).await;
    let access = first["access_token"].as_str().unwrap();
    assert_eq!(userinfo_status(&provider, access).await, StatusCode::OK);

    assert_oauth_error(exchange(&provider, &code, &pkce.verifier).await, StatusCode::BAD_REQUEST, "invalid_grant")
        .await;
    assert_eq!(userinfo_status(&provider, access).await, StatusCode::UNAUTHORIZED);
    let refresh_token = first["refresh_token"].as_str().unwrap();
    assert_oauth_error(refresh(&provider, refresh_token).await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    assert_eq!(provider.stats().authorization_code_exchanges, 2);
}

#[tokio::test]
async fn an_unknown_grant_type_is_unsupported() {
    let provider = start(Role::Downstream).await;
    let response = token_request(&provider, &[("grant_type", "password"), ("username", "a")]).await;
    assert_oauth_error(response, StatusCode::BAD_REQUEST, "unsupported_grant_type").await;
}
