//! Discovery documents and the JWKS.

use crate::helpers::*;
use mcp_connect_devproviders::{DEV_SUBJECT_GRANT_TYPE, Role};
use serde_json::json;

#[tokio::test]
async fn both_metadata_documents_advertise_every_endpoint_s256_and_rs256() {
    let provider = start(Role::Downstream).await;
    let base = provider.base_url();
    let response = http().get(format!("{base}/.well-known/openid-configuration")).send().await.unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store");
    let oidc = json(response).await;
    let oauth = json(http().get(format!("{base}/.well-known/oauth-authorization-server")).send().await.unwrap()).await;
    assert_eq!(oidc, oauth);

    assert_eq!(oidc["issuer"], provider.issuer());
    assert_eq!(provider.issuer(), base);
    assert!(!base.ends_with('/'));
    for (field, path) in [
        ("authorization_endpoint", "/authorize"),
        ("token_endpoint", "/token"),
        ("userinfo_endpoint", "/userinfo"),
        ("jwks_uri", "/jwks"),
        ("revocation_endpoint", "/revoke"),
    ] {
        assert_eq!(oidc[field], format!("{base}{path}"), "{field}");
    }
    assert_eq!(oidc["response_types_supported"], json!(["code"]));
    assert_eq!(oidc["subject_types_supported"], json!(["public"]));
    assert_eq!(oidc["id_token_signing_alg_values_supported"], json!(["RS256"]));
    assert_eq!(oidc["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(oidc["token_endpoint_auth_methods_supported"], json!(["client_secret_basic", "client_secret_post"]));
    assert_eq!(oidc["grant_types_supported"], json!(["authorization_code", "refresh_token"]));
    assert_eq!(oidc["authorization_response_iss_parameter_supported"], true);
    assert!(oidc["scopes_supported"].as_array().unwrap().contains(&json!("openid")));
    assert!(oidc["claims_supported"].as_array().unwrap().contains(&json!("sub")));
}

#[tokio::test]
async fn the_identity_provider_also_advertises_the_dev_subject_grant() {
    let provider = start(Role::IdentityProvider).await;
    let url = format!("{}/.well-known/openid-configuration", provider.base_url());
    let oidc = json(http().get(url).send().await.unwrap()).await;
    assert!(oidc["grant_types_supported"].as_array().unwrap().contains(&json!(DEV_SUBJECT_GRANT_TYPE)));
}

#[tokio::test]
async fn the_jwks_publishes_one_rs256_signing_key_with_a_kid() {
    let provider = start(Role::Downstream).await;
    let jwks = json(http().get(format!("{}/jwks", provider.base_url())).send().await.unwrap()).await;
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    let key = &keys[0];
    assert_eq!(key["kty"], "RSA");
    assert_eq!(key["use"], "sig");
    assert_eq!(key["alg"], "RS256");
    assert!(!key["kid"].as_str().unwrap().is_empty());
    assert_eq!(key["e"], "AQAB");
    // 2048 bits: 256 bytes, 342 base64url characters.
    assert_eq!(key["n"].as_str().unwrap().len(), 342);
    assert!(key.get("d").is_none(), "no private part");
}

#[tokio::test]
async fn openidconnect_discovers_the_provider_and_its_key() {
    let provider = start(Role::IdentityProvider).await;
    let metadata = discover(&provider).await;
    assert_eq!(metadata.issuer().as_str(), provider.issuer());
    assert_eq!(metadata.jwks().keys().len(), 1);
}
