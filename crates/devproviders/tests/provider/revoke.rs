//! Revocation (RFC 7009) and the administrator's kill switch.

use crate::helpers::*;
use mcp_connect_devproviders::{Revocation, Role, TokenKind};
use reqwest::StatusCode;

async fn revoke(provider: &mcp_connect_devproviders::DevProvider, form: &[(&str, &str)]) -> StatusCode {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    http()
        .post(format!("{}/revoke", provider.base_url()))
        .basic_auth(enc(CLIENT_ID), Some(enc(CLIENT_SECRET)))
        .form(form)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn revoking_an_access_token_stops_only_that_token_and_is_recorded() {
    let provider = start(Role::Downstream).await;
    let body = tokens(&provider, "repo").await;
    let access = body["access_token"].as_str().unwrap();
    assert_eq!(revoke(&provider, &[("token", access), ("token_type_hint", "access_token")]).await, StatusCode::OK);
    assert_eq!(userinfo_status(&provider, access).await, StatusCode::UNAUTHORIZED);
    let refreshed = json(refresh(&provider, body["refresh_token"].as_str().unwrap()).await).await;
    assert_eq!(userinfo_status(&provider, refreshed["access_token"].as_str().unwrap()).await, StatusCode::OK);
    assert_eq!(
        provider.stats().revocations,
        vec![Revocation {
            token_type_hint: Some("access_token".into()),
            kind: TokenKind::Access,
            client_id: CLIENT_ID.into()
        }]
    );
}

#[tokio::test]
async fn revoking_a_refresh_token_kills_its_whole_grant() {
    let provider = start(Role::Downstream).await;
    let body = tokens(&provider, "repo").await;
    let refresh_token = body["refresh_token"].as_str().unwrap();
    assert_eq!(revoke(&provider, &[("token", refresh_token)]).await, StatusCode::OK);
    assert_eq!(userinfo_status(&provider, body["access_token"].as_str().unwrap()).await, StatusCode::UNAUTHORIZED);
    assert_oauth_error(refresh(&provider, refresh_token).await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    let recorded = provider.stats().revocations;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].kind, TokenKind::Refresh);
    assert_eq!(recorded[0].token_type_hint, None);
}

#[tokio::test]
async fn revoking_an_unknown_token_is_still_200_but_an_unknown_client_is_401() {
    let provider = start(Role::Downstream).await;
    assert_eq!(revoke(&provider, &[("token", "never-issued")]).await, StatusCode::OK);
    assert_eq!(provider.stats().revocations[0].kind, TokenKind::Unknown);

    let response = http()
        .post(format!("{}/revoke", provider.base_url()))
        .basic_auth(CLIENT_ID, Some("wrong"))
        .form(&[("token", "x")])
        .send()
        .await
        .unwrap();
    assert_oauth_error(response, StatusCode::UNAUTHORIZED, "invalid_client").await;
    assert_eq!(provider.stats().revocations.len(), 1);
}

#[tokio::test]
async fn revoke_all_for_kills_every_grant_of_that_user_only() {
    let provider = start(Role::Downstream).await;
    let (alice_at, alice_rt) = provider.issue_grant(CLIENT_ID, "alice", "repo");
    let (alice_at2, _) = provider.issue_grant(CLIENT_ID, "alice", "user");
    let (bob_at, _) = provider.issue_grant(CLIENT_ID, "bob", "repo");
    provider.revoke_all_for("alice");
    assert_eq!(userinfo_status(&provider, &alice_at).await, StatusCode::UNAUTHORIZED);
    assert_eq!(userinfo_status(&provider, &alice_at2).await, StatusCode::UNAUTHORIZED);
    assert_oauth_error(refresh(&provider, &alice_rt).await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    assert_eq!(userinfo_status(&provider, &bob_at).await, StatusCode::OK);
}
