//! The identity provider role's dev subject grant and JWT access tokens.

use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_connect_devproviders::{DEV_SUBJECT_GRANT_TYPE, DevProviderConfig, Role};
use reqwest::StatusCode;
use rsa::{BigUint, Pkcs1v15Sign, RsaPublicKey};
use sha2::{Digest, Sha256};

const AUDIENCE: &str = "http://127.0.0.1:1/mcp";

async fn jwt_provider() -> mcp_connect_devproviders::DevProvider {
    start_with(DevProviderConfig {
        role: Role::IdentityProvider,
        jwt_access_token_audience: Some(AUDIENCE.into()),
        ..DevProviderConfig::default()
    })
    .await
}

/// RS256 signature check against the provider's JWKS, by hand.
async fn signature_verifies(provider: &mcp_connect_devproviders::DevProvider, jwt: &str) -> bool {
    let jwks = json(http().get(format!("{}/jwks", provider.base_url())).send().await.unwrap()).await;
    let key = &jwks["keys"][0];
    let number = |field: &str| BigUint::from_bytes_be(&URL_SAFE_NO_PAD.decode(key[field].as_str().unwrap()).unwrap());
    let public = RsaPublicKey::new(number("n"), number("e")).unwrap();
    let (input, signature) = jwt.rsplit_once('.').unwrap();
    let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
    public.verify(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(input.as_bytes()), &signature).is_ok()
}

#[tokio::test]
async fn the_dev_subject_grant_issues_a_signed_jwt_access_token() {
    let provider = jwt_provider().await;
    let response = token_request(
        &provider,
        &[("grant_type", DEV_SUBJECT_GRANT_TYPE), ("subject", "carol"), ("scope", "mcp:tools")],
    )
    .await;
    let body = json(response).await;
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    assert!(body.get("refresh_token").is_none());
    let jwt = body["access_token"].as_str().unwrap();
    assert!(signature_verifies(&provider, jwt).await);

    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(jwt.split('.').next().unwrap()).unwrap()).unwrap();
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["typ"], "at+jwt");
    let claims = jwt_claims(jwt);
    assert_eq!(claims["iss"], provider.issuer());
    assert_eq!(claims["sub"], "carol");
    assert_eq!(claims["aud"], AUDIENCE);
    assert_eq!(claims["client_id"], CLIENT_ID);
    assert_eq!(claims["scope"], "mcp:tools");
    assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 3600);
    assert!(claims["jti"].as_str().unwrap().len() >= 43);

    assert_eq!(userinfo_status(&provider, jwt).await, StatusCode::OK);
    provider.revoke_all_for("carol");
    assert_eq!(userinfo_status(&provider, jwt).await, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn code_flow_access_tokens_are_jwts_too_when_configured() {
    let provider = jwt_provider().await;
    let body = tokens(&provider, "openid").await;
    let access = body["access_token"].as_str().unwrap();
    assert_eq!(jwt_claims(access)["sub"], "alice");
    assert!(signature_verifies(&provider, access).await);
    let (issued, _) = provider.issue_grant(CLIENT_ID, "dave", "x");
    assert_eq!(jwt_claims(&issued)["sub"], "dave");
}

#[tokio::test]
async fn the_dev_subject_grant_needs_a_subject_and_client_credentials() {
    let provider = jwt_provider().await;
    let missing = token_request(&provider, &[("grant_type", DEV_SUBJECT_GRANT_TYPE)]).await;
    assert_oauth_error(missing, StatusCode::BAD_REQUEST, "invalid_request").await;
    let anonymous = http()
        .post(format!("{}/token", provider.base_url()))
        .form(&[("grant_type", DEV_SUBJECT_GRANT_TYPE), ("subject", "carol"), ("client_id", CLIENT_ID)])
        .send()
        .await
        .unwrap();
    assert_oauth_error(anonymous, StatusCode::UNAUTHORIZED, "invalid_client").await;
}

#[tokio::test]
async fn a_downstream_provider_does_not_offer_the_dev_subject_grant() {
    let provider = start(Role::Downstream).await;
    let response = token_request(&provider, &[("grant_type", DEV_SUBJECT_GRANT_TYPE), ("subject", "carol")]).await;
    assert_oauth_error(response, StatusCode::BAD_REQUEST, "unsupported_grant_type").await;
}

#[tokio::test]
async fn the_dev_subject_grant_mints_for_the_resource_named_among_the_configured_audiences() {
    const SECOND: &str = "http://127.0.0.1:2/mcp";
    let provider = start_with(DevProviderConfig {
        role: Role::IdentityProvider,
        jwt_access_token_audience: Some(AUDIENCE.into()),
        extra_access_token_audiences: vec![SECOND.into()],
        ..DevProviderConfig::default()
    })
    .await;
    let grant = |resource: Option<&'static str>| {
        let mut form = vec![("grant_type", DEV_SUBJECT_GRANT_TYPE), ("subject", "carol")];
        form.extend(resource.map(|r| ("resource", r)));
        let provider = &provider;
        async move { token_request(provider, &form).await }
    };
    // No resource: the first audience; a configured one: that one (RFC 8707).
    let first = json(grant(None).await).await;
    assert_eq!(jwt_claims(first["access_token"].as_str().unwrap())["aud"], AUDIENCE);
    let second = json(grant(Some(SECOND)).await).await;
    assert_eq!(jwt_claims(second["access_token"].as_str().unwrap())["aud"], SECOND);
    // Any other resource is refused, never minted for, nor silently given the first.
    let other = grant(Some("http://127.0.0.1:3/mcp")).await;
    assert_oauth_error(other, StatusCode::BAD_REQUEST, "invalid_target").await;
}
