//! Token revocation (RFC 7009).

use super::client_auth::ClientForm;
use super::error::OAuthError;
use crate::crypto::token_hash;
use crate::state::ProviderState;
use crate::stats::Revocation;
use actix_web::{HttpResponse, web};

/// RFC 7009 §2.2: 200 for any token, known or not, so the answer tells the caller nothing.
pub(crate) async fn revoke(state: web::Data<ProviderState>, form: ClientForm) -> Result<HttpResponse, OAuthError> {
    let token = form.params.get("token").ok_or(OAuthError::invalid_request("token is missing"))?;
    let client_id = form.client.client_id;
    let kind = state.grants().revoke(&token_hash(token), &client_id);
    tracing::info!(client_id, ?kind, "revocation");
    let token_type_hint = form.params.get("token_type_hint").map(str::to_owned);
    state.record(|stats| stats.revocations.push(Revocation { token_type_hint, kind, client_id }));
    Ok(HttpResponse::Ok().finish())
}
