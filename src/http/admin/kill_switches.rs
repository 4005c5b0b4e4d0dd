//! `/admin/v1/kill-switches`: the tenant's switches, set and lifted.

use super::{db, provider};
use crate::app::AppState;
use crate::domain::ProviderId;
use crate::flows::policy;
use crate::http::api::AdminCaller;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::schema::ProviderPath;
use crate::store;
use actix_web::{HttpResponse, web};

/// The tenant's kill switches, and the global ones.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct KillSwitches {
    kill_switches: Vec<store::kill_switches::KillSwitchRow>,
}

/// The kill switches that apply to this tenant (its own and the global ones).
#[utoipa::path(
    get,
    path = "/admin/v1/kill-switches",
    operation_id = "listKillSwitches",
    tag = "admin",
    responses((status = 200, description = "The switches set.", body = KillSwitches)),
    security(("admin_key" = [])),
)]
pub async fn list_kill_switches(caller: AdminCaller, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let rows =
        store::kill_switches::list_kill_switches(&state.pool, Some(caller.0.tenant.as_str())).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(KillSwitches { kill_switches: rows }))
}

/// What to stop, and why (shown to operators, never to people).
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"mode": "no_token_handouts", "reason": "incident 42"}))]
pub struct KillBody {
    #[schema(value_type = KillMode)]
    mode: String,
    /// At most 500 characters, no control characters.
    #[schema(value_type = Option<String>, max_length = 500, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    reason: Option<String>,
}

/// `no_new_elicitations` stops new links and connects in flight; `no_token_handouts` also
/// stops handing out stored tokens.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // The schema of `KillBody::mode`; the handler reads a string.
enum KillMode {
    NoNewElicitations,
    NoTokenHandouts,
}

/// The provider's switch for this tenant afterwards.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct KillSwitchState {
    #[schema(value_type = String, example = "github")]
    provider: ProviderId,
    /// `no_new_elicitations`, `no_token_handouts`, or `off`.
    #[schema(example = "no_token_handouts")]
    mode: String,
}

/// Sets the tenant's switch for a provider; every instance obeys within a second.
#[utoipa::path(
    put,
    path = "/admin/v1/kill-switches/{provider}",
    operation_id = "setKillSwitch",
    tag = "admin",
    params(ProviderPath),
    request_body = KillBody,
    responses(
        (status = 200, description = "The switch is set.", body = KillSwitchState),
        (status = 400, description = "`unknown_provider`, `invalid_json` or `invalid_request`.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn set_kill_switch(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<ProviderPath>,
    body: web::Json<KillBody>,
) -> Result<HttpResponse, ApiError> {
    let p = provider(&state, &path.provider)?;
    if !matches!(body.mode.as_str(), "no_new_elicitations" | "no_token_handouts") {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "mode must be no_new_elicitations or no_token_handouts"));
    }
    let reason = body.reason.as_deref().filter(|r| r.chars().count() <= 500 && !r.chars().any(char::is_control));
    if body.reason.is_some() && reason.is_none() {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "reason must be at most 500 printable characters"));
    }
    policy::change_kill_switch(&state, &caller.0.tenant, &p, Some(&body.mode), reason, caller.0.id.as_str())
        .await
        .map_err(db)?;
    Ok(HttpResponse::Ok().json(KillSwitchState { provider: p, mode: body.into_inner().mode }))
}

/// Lifts the tenant's switch for a provider (a global one stays).
#[utoipa::path(
    delete,
    path = "/admin/v1/kill-switches/{provider}",
    operation_id = "clearKillSwitch",
    tag = "admin",
    params(ProviderPath),
    responses(
        (status = 200, description = "The switch is off (also when it was not set).", body = KillSwitchState),
        (status = 400, description = "`unknown_provider`.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn clear_kill_switch(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<ProviderPath>,
) -> Result<HttpResponse, ApiError> {
    let p = provider(&state, &path.provider)?;
    policy::change_kill_switch(&state, &caller.0.tenant, &p, None, None, caller.0.id.as_str()).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(KillSwitchState { provider: p, mode: "off".to_owned() }))
}
