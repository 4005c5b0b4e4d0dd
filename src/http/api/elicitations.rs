//! `GET /v1/elicitations/{id}`: the status of one of the caller's elicitations.

use super::ServerCaller;
use super::token::rfc3339;
use crate::domain::{ElicitationId, ElicitationStatus};
use crate::http::error::ApiError;
use crate::startup::AppState;
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
    let mut status = ElicitationStatus::parse(&e.status).map_err(|err| ApiError::internal(&err))?;
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
    })))
}
