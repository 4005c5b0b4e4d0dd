//! `/admin/v1/elicitations/cancel`: an operator closes pending links.

use super::{db, provider, subject};
use crate::app::AppState;
use crate::flows::cancel;
use crate::http::api::AdminCaller;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use actix_web::{HttpResponse, web};

/// Which pending links to close: a subject's, a provider's, or a subject's at a provider.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"subject": "alice", "provider": "github"}))]
pub struct CancelBody {
    #[schema(schema_with = crate::http::schema::opt_subject)]
    subject: Option<String>,
    #[schema(schema_with = crate::http::schema::opt_provider)]
    provider: Option<String>,
}

/// The ids of the links closed.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct CancelledLinks {
    #[schema(value_type = Vec<String>)]
    cancelled: Vec<crate::domain::ElicitationId>,
}

/// Closes pending links: their states are spent, so a person halfway through gets a clear
/// page and nothing is stored.
#[utoipa::path(
    post,
    path = "/admin/v1/elicitations/cancel",
    operation_id = "cancelElicitations",
    tag = "admin",
    request_body = CancelBody,
    responses(
        (status = 200, description = "The links closed.", body = CancelledLinks),
        (status = 400, description = "`invalid_json`, `invalid_subject`, `unknown_provider`, or `invalid_request` (neither named).", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn cancel_elicitations(
    caller: AdminCaller,
    state: web::Data<AppState>,
    body: web::Json<CancelBody>,
) -> Result<HttpResponse, ApiError> {
    let s = body.subject.as_deref().map(subject).transpose()?;
    let p = body.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    if s.is_none() && p.is_none() {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "name a subject, a provider, or both"));
    }
    let actor = caller.0.caller().actor();
    let by = cancel::Closer {
        actor: &actor,
        api_key_id: Some(&caller.0.id),
        because: cancel::Because::Operator,
        by: "admin",
    };
    let ids = cancel::cancel_pending(
        &state.pool,
        &caller.0.tenant,
        // A tenant's admin names its subjects: those of the tenant's IdP and any before.
        s.as_ref().map(|s| (s, None)),
        p.as_ref(),
        &by,
    )
    .await
    .map_err(db)?;
    Ok(HttpResponse::Ok().json(CancelledLinks { cancelled: ids }))
}
