//! OpenID Connect Discovery 1.0 §3 and RFC 8414 metadata (one document serves both), and the
//! JWKS (RFC 7517) that publishes the signing key.

use crate::config::{DEV_SUBJECT_GRANT_TYPE, Role};
use crate::state::ProviderState;
use actix_web::{HttpResponse, web};
use serde_json::json;

pub(crate) async fn metadata(state: web::Data<ProviderState>) -> HttpResponse {
    let issuer = &state.issuer;
    let mut grant_types = vec!["authorization_code", "refresh_token"];
    if state.role == Role::IdentityProvider {
        grant_types.push(DEV_SUBJECT_GRANT_TYPE);
    }
    let switches = state.switches.snapshot();
    let advertise_iss = switches.advertise_iss;
    let mut doc = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "userinfo_endpoint": format!("{issuer}/userinfo"),
        "jwks_uri": format!("{issuer}/jwks"),
        "revocation_endpoint": format!("{issuer}/revoke"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "code_challenge_methods_supported": ["S256"],
        "grant_types_supported": grant_types,
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "claims_supported": [
            "iss", "sub", "aud", "azp", "exp", "iat", "auth_time", "nonce",
            "name", "preferred_username", "email"
        ],
        "authorization_response_iss_parameter_supported": advertise_iss,
    });
    if let Some(fields) = doc.as_object_mut() {
        fields.extend(switches.metadata_override);
    }
    HttpResponse::Ok().json(doc)
}

pub(crate) async fn jwks(state: web::Data<ProviderState>) -> HttpResponse {
    state.record(|stats| stats.jwks_requests += 1);
    if state.switches.snapshot().jwks_unavailable {
        return HttpResponse::ServiceUnavailable().finish();
    }
    HttpResponse::Ok().json(state.keys.jwks())
}
