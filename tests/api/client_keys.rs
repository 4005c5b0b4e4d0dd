//! The keys mcp-connect signs `private_key_jwt` client assertions with (RFC 7523): the
//! assertion as a provider verifies it, the JWKS a provider fetches, and a rotation that
//! publishes the next key before it signs and keeps the one before published after.

use crate::support::spawn_app;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::Jwk};
use mcp_connect::keys::client_keys::AssertionClaims;
use serde_json::Value;
use time::{Duration, OffsetDateTime};

fn kids(set: &Value) -> Vec<String> {
    set["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_owned()).collect()
}

fn header_kid(jwt: &str) -> String {
    jsonwebtoken::decode_header(jwt).unwrap().kid.unwrap()
}

/// Verified against the published key with `kid`, as a provider would.
fn verified(jwt: &str, set: &Value, audience: &str) -> AssertionClaims {
    let kid = header_kid(jwt);
    let key = set["keys"].as_array().unwrap().iter().find(|k| k["kid"] == kid.as_str()).expect("the key is published");
    let jwk: Jwk = serde_json::from_value(key.clone()).unwrap();
    let mut v = Validation::new(Algorithm::ES256);
    v.set_audience(&[audience]);
    v.set_required_spec_claims(&["iss", "sub", "aud", "exp"]);
    jsonwebtoken::decode::<AssertionClaims>(jwt, &DecodingKey::from_jwk(&jwk).unwrap(), &v).unwrap().claims
}

#[tokio::test]
async fn an_assertion_names_the_client_for_the_token_endpoint_once_and_verifies_with_the_published_key() {
    let app = spawn_app().await;
    let keys = app.state.resolver.client_keys().unwrap();
    let now = OffsetDateTime::now_utc();
    assert_eq!(keys.jwks(now).await.unwrap(), serde_json::json!({"keys": []}), "a GET makes no key");
    keys.ensure(now).await.unwrap();
    let set = keys.jwks(now).await.unwrap();
    let token_url = "https://as.example/token";
    let a = keys.assertion("client-1", token_url, now).await.unwrap();
    let c = verified(&a, &set, token_url);
    assert_eq!((c.iss.as_str(), c.sub.as_str(), c.aud.as_str()), ("client-1", "client-1", token_url));
    assert_eq!((c.iat, c.exp - c.iat), (now.unix_timestamp(), 60), "one request's worth");
    let again = keys.assertion("client-1", token_url, now).await.unwrap();
    assert_ne!(verified(&again, &set, token_url).jti, c.jti, "a fresh jti each time");
    // Served to anyone: the public half only, cacheable.
    let r = app.client.get(format!("{}/.well-known/jwks.json", app.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "public, max-age=300");
    let served: Value = r.json().await.unwrap();
    assert_eq!(served, set);
    assert!(served["keys"][0].get("d").is_none());
    // The private half is stored sealed, never in clear.
    let (sealed, key_id): (Vec<u8>, String) =
        sqlx::query_as("SELECT private_sealed, key_id FROM client_signing_keys").fetch_one(&app.pool).await.unwrap();
    assert!(key_id.starts_with("dk:"), "under the service's data key: {key_id}");
    use p256::pkcs8::DecodePrivateKey;
    assert!(p256::SecretKey::from_pkcs8_der(&sealed).is_err(), "no PKCS#8 key in clear");
}

#[tokio::test]
async fn a_rotated_key_is_published_before_it_signs_and_the_one_before_stays_published_for_the_overlap() {
    let app = spawn_app().await;
    let keys = app.state.resolver.client_keys().unwrap();
    let t0 = OffsetDateTime::now_utc();
    keys.ensure(t0).await.unwrap();
    let first = kids(&keys.jwks(t0).await.unwrap());
    assert_eq!(first.len(), 1);
    let next = keys.rotate(t0, Duration::hours(1), Duration::hours(24)).await.unwrap();
    let sign = |at: OffsetDateTime| {
        let keys = keys.clone();
        async move { header_kid(&keys.assertion("c", "https://as.example/token", at).await.unwrap()) }
    };
    // Published at once, signing only after the hour providers may cache our JWKS for.
    assert_eq!(kids(&keys.jwks(t0).await.unwrap()), vec![first[0].clone(), next.clone()]);
    assert_eq!(sign(t0 + Duration::minutes(59)).await, first[0]);
    assert_eq!(sign(t0 + Duration::minutes(61)).await, next);
    // The one before stays published for the overlap after the switch, then not.
    let in_overlap = t0 + Duration::hours(24);
    assert_eq!(kids(&keys.jwks(in_overlap).await.unwrap()), vec![first[0].clone(), next.clone()]);
    assert_eq!(kids(&keys.jwks(t0 + Duration::hours(26)).await.unwrap()), vec![next.clone()]);
    // A rotation made later wins over one still pending, and an emergency one (no wait, no
    // overlap) unpublishes the keys before at once.
    let pending = keys.rotate(t0, Duration::hours(1), Duration::hours(24)).await.unwrap();
    let urgent = keys.rotate(t0 + Duration::minutes(1), Duration::ZERO, Duration::ZERO).await.unwrap();
    assert_eq!(sign(t0 + Duration::minutes(2)).await, urgent);
    assert_eq!(sign(t0 + Duration::hours(3)).await, urgent, "not handed back to the pending key");
    assert_eq!(kids(&keys.jwks(t0 + Duration::hours(2)).await.unwrap()), vec![urgent.clone()]);
    let published = kids(&keys.jwks(t0 + Duration::minutes(2)).await.unwrap());
    assert!(!published.contains(&first[0]), "the key that signed is gone at once: {published:?}");
    // Keys made ahead that never signed stay published until they would have signed.
    assert!(published.contains(&pending) && published.contains(&next), "{published:?}");
    // A key is never deleted nor changed in what identifies it.
    let e = sqlx::query("DELETE FROM client_signing_keys").execute(&app.pool).await.unwrap_err();
    assert!(e.to_string().contains("never deleted"), "{e}");
    let e = sqlx::query("UPDATE client_signing_keys SET public_jwk = '{}'").execute(&app.pool).await.unwrap_err();
    assert!(e.to_string().contains("never changes"), "{e}");
}

#[tokio::test]
async fn a_sealed_private_key_moved_to_another_kid_opens_nothing() {
    let app = spawn_app().await;
    let keys = app.state.resolver.client_keys().unwrap();
    let t0 = OffsetDateTime::now_utc();
    keys.ensure(t0).await.unwrap();
    let next = keys.rotate(t0 + Duration::seconds(1), Duration::ZERO, Duration::hours(1)).await.unwrap();
    // The first key's sealed bytes written into the second's row.
    sqlx::query(
        "UPDATE client_signing_keys SET private_sealed = (SELECT private_sealed FROM client_signing_keys WHERE kid <> $1)
          WHERE kid = $1",
    )
    .bind(&next)
    .execute(&app.pool)
    .await
    .unwrap();
    let e = keys.assertion("c", "https://as.example/token", t0 + Duration::seconds(2)).await.unwrap_err();
    assert!(e.to_string().contains("open"), "{e}");
}

#[tokio::test]
async fn a_key_made_ahead_signs_when_none_has_come_yet() {
    let app = spawn_app().await;
    let keys = app.state.resolver.client_keys().unwrap();
    let t0 = OffsetDateTime::now_utc();
    // `client-keys rotate` on an empty table: the only key signs from an hour on.
    let only = keys.rotate(t0, Duration::hours(1), Duration::hours(24)).await.unwrap();
    assert_eq!(header_kid(&keys.assertion("c", "https://as.example/token", t0).await.unwrap()), only);
}

#[tokio::test]
async fn rotate_key_moves_a_client_key_the_keyring_sealed_under_the_service_data_key() {
    use mcp_connect::vault::Keyring;
    let app = spawn_app().await;
    // A key sealed by the keyring, as one made while data keys were off.
    let secret = p256::SecretKey::from_slice(&[7u8; 32]).unwrap();
    use p256::pkcs8::EncodePrivateKey;
    let der = secret.to_pkcs8_der().unwrap();
    let keyring = Keyring::parse(crate::support::KEY_A).unwrap();
    let sealed = keyring.current().seal_aux("client_signing_key", b"old-kid", der.as_bytes()).unwrap();
    sqlx::query(
        "INSERT INTO client_signing_keys (kid, alg, public_jwk, key_id, private_sealed, sign_from)
         VALUES ('old-kid', 'ES256', '{}', 'k-old', $1, now() - interval '1 hour')",
    )
    .bind(&sealed)
    .execute(&app.pool)
    .await
    .unwrap();
    let report = mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.state.keys, 10, |_, _| {}).await.unwrap();
    assert_eq!(report.remaining, 0, "{report:?}");
    let key_id: String = sqlx::query_scalar("SELECT key_id FROM client_signing_keys WHERE kid = 'old-kid'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(key_id.starts_with("dk:"), "{key_id}");
    // It still signs: the keyring may go.
    let keys = app.state.resolver.client_keys().unwrap();
    let jwt = keys.assertion("c", "https://as.example/token", OffsetDateTime::now_utc()).await.unwrap();
    assert_eq!(header_kid(&jwt), "old-kid");
}
