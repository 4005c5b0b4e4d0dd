//! `/admin/v1/kill-switches`: the tenant's switches, set and lifted.

use super::{db, provider};
use crate::app::AppState;
use crate::domain::{KillMode, ProviderId, TenantId};
use crate::flows::kill_switches::{KillSwitchChange, Operator, change_kill_switch};
use crate::http::api::AdminCaller;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::schema::ProviderPath;
use crate::store;
use actix_web::{HttpResponse, web};

/// The tenant's kill switches, and the global ones.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct KillSwitches {
    kill_switches: Vec<KillSwitch>,
}

/// One switch in force.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct KillSwitch {
    /// `null`: set by the operator for every tenant.
    #[schema(value_type = Option<String>)]
    tenant_id: Option<TenantId>,
    #[schema(value_type = String)]
    provider: ProviderId,
    mode: KillMode,
    reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    updated_at: time::OffsetDateTime,
}

impl From<store::kill_switches::KillSwitchRow> for KillSwitch {
    fn from(r: store::kill_switches::KillSwitchRow) -> Self {
        KillSwitch {
            tenant_id: r.tenant_id,
            provider: r.provider,
            mode: r.mode,
            reason: r.reason,
            updated_at: r.updated_at,
        }
    }
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
    let rows = store::kill_switches::list_kill_switches(&state.pool, Some(&caller.0.tenant)).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(KillSwitches { kill_switches: rows.into_iter().map(KillSwitch::from).collect() }))
}

/// What to stop, and why (shown to operators, never to people).
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"mode": "no_token_handouts", "reason": "incident 42"}))]
pub struct KillBody {
    // Read as a string so that an unknown mode is `invalid_request`, not `invalid_json`.
    #[schema(value_type = KillMode)]
    mode: String,
    /// At most 500 characters, no control characters.
    #[schema(value_type = Option<String>, max_length = 500, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    reason: Option<String>,
}

/// The provider's switch for this tenant afterwards.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct KillSwitchState {
    #[schema(value_type = String, example = "github")]
    provider: ProviderId,
    /// `no_new_elicitations`, `no_token_handouts`, or `off`.
    #[schema(example = "no_token_handouts")]
    mode: &'static str,
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
    let mode = KillMode::parse(&body.mode).map_err(|_| {
        ApiError::new(ErrorCode::InvalidRequest, "mode must be no_new_elicitations or no_token_handouts")
    })?;
    let by = Operator::AdminKey { key: &caller.0.id, tenant: &caller.0.tenant };
    let change = KillSwitchChange { provider: &p, mode: Some(mode), reason: body.reason.as_deref() };
    change_kill_switch(&state.pool, Some(&state.caches), by, change).await?;
    Ok(HttpResponse::Ok().json(KillSwitchState { provider: p, mode: mode.as_str() }))
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
    let by = Operator::AdminKey { key: &caller.0.id, tenant: &caller.0.tenant };
    let change = KillSwitchChange { provider: &p, mode: None, reason: None };
    change_kill_switch(&state.pool, Some(&state.caches), by, change).await?;
    Ok(HttpResponse::Ok().json(KillSwitchState { provider: p, mode: KillMode::or_off(None) }))
}
