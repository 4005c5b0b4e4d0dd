//! `/admin/v1/elicitations/cancel`: an operator closes pending links.

use super::{db, provider, subject};
use crate::app::AppState;
use crate::domain::{ProviderId, Subject};
use crate::flows::cancel;
use crate::http::api::AdminCaller;
use crate::http::error::ApiError;
use actix_web::{HttpResponse, web};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    subject: Option<String>,
    provider: Option<String>,
}

pub async fn cancel_elicitations(
    caller: AdminCaller,
    state: web::Data<AppState>,
    body: web::Json<CancelBody>,
) -> Result<HttpResponse, ApiError> {
    let s = body.subject.as_deref().map(subject).transpose()?;
    let p = body.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    if s.is_none() && p.is_none() {
        return Err(ApiError::bad_request("invalid_request", "name a subject, a provider, or both"));
    }
    let actor = format!("api_key:{}", caller.0.id);
    let by =
        cancel::Closer { actor: &actor, api_key_id: Some(caller.0.id.as_str()), because: cancel::Because::Operator };
    let ids = cancel::cancel_pending(
        &state,
        caller.0.tenant.as_str(),
        s.as_ref().map(Subject::as_str),
        p.as_ref().map(ProviderId::as_str),
        &by,
    )
    .await
    .map_err(db)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "cancelled": ids })))
}
