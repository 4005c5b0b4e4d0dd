//! The UserInfo endpoint and the direct-issue test helper.

use crate::helpers::*;
use mcp_connect_devproviders::{DevProviderConfig, Role};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn userinfo_describes_the_user_behind_a_live_token() {
    let provider = start(Role::Downstream).await;
    let access = tokens(&provider, "repo").await["access_token"].as_str().unwrap().to_owned();
    let response = http().get(format!("{}/userinfo", provider.base_url())).bearer_auth(&access).send().await.unwrap();
    let body = json(response).await;
    assert_eq!(body["sub"], "alice");
    assert_eq!(body["login"], "alice");
    assert_eq!(body["preferred_username"], "alice");
    assert_eq!(body["name"], "alice");
    assert_eq!(body["email"], "alice@dev.invalid");
    let id = body["id"].as_u64().expect("a JSON number");

    let (other, _) = provider.issue_grant(CLIENT_ID, "alice", "repo");
    let again = json(http().get(format!("{}/userinfo", provider.base_url())).bearer_auth(&other).send().await.unwrap());
    assert_eq!(again.await["id"].as_u64(), Some(id), "the id is stable per name");
    assert_eq!(provider.stats().userinfo_calls, 2);
}

#[tokio::test]
async fn userinfo_refuses_a_missing_or_unknown_token() {
    let provider = start(Role::Downstream).await;
    let response = http().get(format!("{}/userinfo", provider.base_url())).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
    assert_eq!(userinfo_status(&provider, "made-up").await, StatusCode::UNAUTHORIZED);
    assert_eq!(provider.stats().userinfo_calls, 2);
}

#[tokio::test]
async fn an_access_token_stops_working_when_it_expires() {
    let provider =
        start_with(DevProviderConfig { access_token_ttl: Duration::from_secs(1), ..DevProviderConfig::default() })
            .await;
    let (access, _) = provider.issue_grant(CLIENT_ID, "alice", "repo");
    assert_eq!(userinfo_status(&provider, &access).await, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(userinfo_status(&provider, &access).await, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_userinfo_override_replaces_the_profile() {
    let provider = start(Role::Downstream).await;
    provider.switches().set_userinfo_override(Some(json!({"sub": "someone-else"})));
    let (access, _) = provider.issue_grant(CLIENT_ID, "alice", "repo");
    let response = http().get(format!("{}/userinfo", provider.base_url())).bearer_auth(&access).send().await.unwrap();
    assert_eq!(json(response).await, json!({"sub": "someone-else"}));
}

#[tokio::test]
async fn issued_grants_refresh_like_real_ones() {
    let provider = start(Role::Downstream).await;
    let (_, refresh_token) = provider.issue_grant(CLIENT_ID, "alice", "repo");
    let body = json(refresh(&provider, &refresh_token).await).await;
    assert_eq!(body["scope"], "repo");
    assert_eq!(userinfo_status(&provider, body["access_token"].as_str().unwrap()).await, StatusCode::OK);
}
