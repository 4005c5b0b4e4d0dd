//! `/admin/v1/kill-switches`: the tenant's switches, set and lifted.

use super::{db, provider};
use crate::app::AppState;
use crate::flows::policy;
use crate::http::api::AdminCaller;
use crate::http::error::ApiError;
use crate::store;
use actix_web::{HttpResponse, web};

pub async fn list_kill_switches(caller: AdminCaller, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let rows =
        store::kill_switches::list_kill_switches(&state.pool, Some(caller.0.tenant.as_str())).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "kill_switches": rows })))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillBody {
    mode: String,
    reason: Option<String>,
}

pub async fn set_kill_switch(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<KillBody>,
) -> Result<HttpResponse, ApiError> {
    let p = provider(&state, &path)?;
    if !matches!(body.mode.as_str(), "no_new_elicitations" | "no_token_handouts") {
        return Err(ApiError::bad_request("invalid_request", "mode must be no_new_elicitations or no_token_handouts"));
    }
    let reason = body.reason.as_deref().filter(|r| r.len() <= 500 && !r.chars().any(char::is_control));
    if body.reason.is_some() && reason.is_none() {
        return Err(ApiError::bad_request("invalid_request", "reason must be at most 500 printable characters"));
    }
    policy::change_kill_switch(&state, &caller.0.tenant, &p, Some(&body.mode), reason, caller.0.id.as_str())
        .await
        .map_err(db)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "provider": p, "mode": body.mode })))
}

pub async fn clear_kill_switch(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let p = provider(&state, &path)?;
    policy::change_kill_switch(&state, &caller.0.tenant, &p, None, None, caller.0.id.as_str()).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "provider": p, "mode": "off" })))
}
