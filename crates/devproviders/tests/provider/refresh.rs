//! The refresh_token grant: rotation, replay detection, scope narrowing.

use crate::helpers::*;
use mcp_connect_devproviders::Role;
use reqwest::StatusCode;

#[tokio::test]
async fn refresh_rotates_and_a_replayed_old_token_kills_the_family() {
    let provider = start(Role::Downstream).await;
    let first = tokens(&provider, "repo").await;
    let rt1 = first["refresh_token"].as_str().unwrap();

    let second = json(refresh(&provider, rt1).await).await;
    let rt2 = second["refresh_token"].as_str().unwrap();
    let at2 = second["access_token"].as_str().unwrap();
    assert_ne!(rt1, rt2);
    assert_ne!(first["access_token"], second["access_token"]);
    assert_eq!(second["scope"], "repo");
    assert_eq!(second["expires_in"], 3600);
    assert_eq!(userinfo_status(&provider, at2).await, StatusCode::OK);

    // A thief replays the old token: the whole family dies, the legitimate holder's too.
    assert_oauth_error(refresh(&provider, rt1).await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    assert_oauth_error(refresh(&provider, rt2).await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    assert_eq!(userinfo_status(&provider, at2).await, StatusCode::UNAUTHORIZED);
    assert_eq!(userinfo_status(&provider, first["access_token"].as_str().unwrap()).await, StatusCode::UNAUTHORIZED);
    assert_eq!(provider.stats().refresh_calls, 3);
}

#[tokio::test]
async fn without_rotation_the_same_refresh_token_comes_back_and_keeps_working() {
    let provider = start(Role::Downstream).await;
    provider.switches().set_rotate_refresh_tokens(false);
    let first = tokens(&provider, "repo").await;
    let rt = first["refresh_token"].as_str().unwrap();
    for _ in 0..2 {
        let again = json(refresh(&provider, rt).await).await;
        assert_eq!(again["refresh_token"], rt);
    }
}

#[tokio::test]
async fn a_refresh_may_narrow_the_scope_but_not_widen_it() {
    let provider = start(Role::Downstream).await;
    provider.switches().set_rotate_refresh_tokens(false);
    let rt = tokens(&provider, "repo user").await["refresh_token"].as_str().unwrap().to_owned();
    let wider = [("grant_type", "refresh_token"), ("refresh_token", &rt), ("scope", "admin")];
    assert_oauth_error(token_request(&provider, &wider).await, StatusCode::BAD_REQUEST, "invalid_scope").await;
    let narrower = [("grant_type", "refresh_token"), ("refresh_token", &rt), ("scope", "user")];
    assert_eq!(json(token_request(&provider, &narrower).await).await["scope"], "user");
}

#[tokio::test]
async fn an_unknown_refresh_token_is_invalid_grant_and_still_counted() {
    let provider = start(Role::Downstream).await;
    assert_oauth_error(refresh(&provider, "not-a-token").await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    assert_eq!(provider.stats().refresh_calls, 1);
}
