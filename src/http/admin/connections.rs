//! `/admin/v1/connections` and `/admin/v1/revocations`: list, read, revoke, off-board.

use super::{connection_id, db, limit, provider, subject};
use crate::app::AppState;
use crate::domain::{ProviderId, Subject};
use crate::flows::revoke;
use crate::http::api::AdminCaller;
use crate::http::error::ApiError;
use crate::store;
use actix_web::{HttpResponse, web};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    subject: Option<String>,
    provider: Option<String>,
    status: Option<String>,
    /// Opaque cursor from the previous page's `next`.
    after: Option<String>,
    limit: Option<i64>,
}

pub async fn list_connections(
    caller: AdminCaller,
    state: web::Data<AppState>,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let subject = q.subject.as_deref().map(subject).transpose()?;
    let provider = q.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    let status = q
        .status
        .as_deref()
        .map(crate::domain::ConnectionStatus::parse)
        .transpose()
        .map_err(|_| ApiError::bad_request("invalid_request", "status must be active, needs_reauth or revoked"))?;
    let limit = limit(q.limit)?;
    let after = q.after.as_deref().map(decode_cursor).transpose()?;
    let filter = store::connections::ConnectionFilter {
        id: None,
        subject: subject.as_ref().map(Subject::as_str),
        provider: provider.as_ref().map(ProviderId::as_str),
        status,
        after: after.as_ref().map(|(s, p)| (s.as_str(), p.as_str())),
    };
    let rows = store::connections::list_connections(&state.pool, caller.0.tenant.as_str(), &filter, limit)
        .await
        .map_err(db)?;
    let next =
        (rows.len() as i64 == limit).then(|| rows.last().map(|r| encode_cursor(&r.subject, &r.provider))).flatten();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "connections": rows, "next": next })))
}

fn encode_cursor(subject: &str, provider: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::json!([subject, provider]).to_string())
}

fn decode_cursor(c: &str) -> Result<(String, String), ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("invalid_cursor", "the cursor is not one this API gave out");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c).map_err(|_| bad())?;
    serde_json::from_slice::<(String, String)>(&raw).map_err(|_| bad())
}

pub async fn get_connection(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = connection_id(&path)?;
    let row = store::connections::connection_meta(&state.pool, caller.0.tenant.as_str(), id.as_uuid())
        .await
        .map_err(db)?
        .ok_or_else(|| ApiError::not_found("connection_not_found", "no such connection"))?;
    Ok(HttpResponse::Ok().json(row))
}

pub async fn revoke_one(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = connection_id(&path)?;
    let actor = format!("api_key:{}", caller.0.id);
    let r = revoke::revoke_connection(&state, caller.0.tenant.as_str(), id.as_uuid(), &actor)
        .await
        .map_err(db)?
        .ok_or_else(|| ApiError::not_found("connection_not_found", "no such connection"))?;
    Ok(HttpResponse::Ok().json(r))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectBody {
    subject: String,
    provider: Option<String>,
}

pub async fn revoke_subject(
    caller: AdminCaller,
    state: web::Data<AppState>,
    body: web::Json<SubjectBody>,
) -> Result<HttpResponse, ApiError> {
    let s = subject(&body.subject)?;
    let p = body.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    let actor = format!("api_key:{}", caller.0.id);
    let done = revoke::revoke_subject(
        &state,
        caller.0.tenant.as_str(),
        s.as_str(),
        p.as_ref().map(ProviderId::as_str),
        &actor,
    )
    .await
    .map_err(db)?;
    Ok(HttpResponse::Ok().json(done))
}
