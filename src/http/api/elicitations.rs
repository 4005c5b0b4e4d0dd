//! `GET /v1/elicitations/{id}`: the status of one of the caller's elicitations.

use super::ServerCaller;
use super::token::rfc3339;
use crate::app::AppState;
use crate::domain::{ElicitationId, ElicitationStatus};
use crate::http::error::ApiError;
use actix_web::{HttpResponse, web};
use time::OffsetDateTime;

pub async fn get_elicitation(
    caller: ServerCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id =
        ElicitationId::parse(&path.into_inner()).map_err(|e| ApiError::bad_request("invalid_elicitation_id", e.0))?;
    let e = crate::store::elicitations::find_for_tenant(&state.pool, caller.0.tenant.as_str(), id.as_uuid())
        .await
        .map_err(|e| ApiError::from_db(&e))?
        .ok_or_else(|| ApiError::not_found("elicitation_not_found", "no such elicitation"))?;
    // A pending record past its deadline is reported as what it is, before clean-up runs.
    let mut status = e.status;
    if status == ElicitationStatus::Pending && e.expires_at <= OffsetDateTime::now_utc() {
        status = ElicitationStatus::Expired;
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "id": id.to_string(),
        "status": status,
        "subject": e.subject,
        "provider": e.provider,
        "scopes": e.scopes,
        "created_at": rfc3339(e.created_at),
        "expires_at": rfc3339(e.expires_at),
        "completed_at": e.completed_at.map(rfc3339),
        "cancel_reason": e.cancel_reason,
    })))
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// What the MCP client answered: `cancel` or `decline`. Recorded, never acted on as a
    /// business decision (a cancel is not a "no").
    reason: Option<String>,
}

/// `POST /v1/elicitations/{id}/cancel`: the MCP client answered `cancel` or `decline` to the
/// URL elicitation. The link stops working (its states are spent); the answer is the
/// elicitation's status afterwards, so a repeat is harmless.
pub async fn cancel_elicitation(
    caller: ServerCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let id =
        ElicitationId::parse(&path.into_inner()).map_err(|e| ApiError::bad_request("invalid_elicitation_id", e.0))?;
    // The body is optional, but one that is sent must be the documented object: a
    // malformed one is a 400, not a cancel without a reason.
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        serde_json::from_slice::<CancelBody>(&body)
            .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not a cancel request: {e}")))?
            .reason
    };
    if reason.as_deref().is_some_and(|r| !matches!(r, "cancel" | "decline")) {
        return Err(ApiError::bad_request("invalid_request", "reason must be \"cancel\" or \"decline\""));
    }
    let e = crate::flows::cancel::cancel_by_client(
        &state,
        caller.0.tenant.as_str(),
        id.as_uuid(),
        reason.as_deref(),
        caller.0.id.as_str(),
    )
    .await
    .map_err(|e| ApiError::from_db(&e))?
    .ok_or_else(|| ApiError::not_found("elicitation_not_found", "no such elicitation"))?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "id": id.to_string(),
        "status": e.status,
        "cancel_reason": e.cancel_reason,
    })))
}
