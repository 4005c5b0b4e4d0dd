//! `GET /v1/elicitations/{id}`: the status of one of the caller's elicitations.

use super::ServerCaller;
use super::token::rfc3339;
use crate::app::AppState;
use crate::domain::{ElicitationId, ElicitationStatus};
use crate::http::error::{ApiError, BODY_LIMIT, ErrorBody, ErrorCode};
use crate::http::schema::ElicitationPath;
use actix_web::HttpMessage;
use actix_web::HttpRequest;
use actix_web::{HttpResponse, web};
use futures_util::StreamExt;
use time::OffsetDateTime;

/// `?wait_seconds=`: hold the answer while the elicitation is pending.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// While the elicitation is pending, hold the answer up to this many seconds (0 to 30)
    /// until its status changes.
    #[param(minimum = 0, maximum = 30)]
    wait_seconds: Option<u64>,
}

/// The status of one of the tenant's elicitations (a pending one past its deadline is
/// reported `expired`). With `wait_seconds`, a pending one is answered when it changes
/// (woken by the change that commits it, on any instance) or when the wait runs out.
#[utoipa::path(
    get,
    path = "/v1/elicitations/{id}",
    operation_id = "getElicitation",
    tag = "v1",
    params(ElicitationPath, WaitQuery),
    responses(
        (status = 200, description = "The elicitation.", body = Elicitation,
            links(("CancelElicitation" = (operation_id = "cancelElicitation", parameters(("id" = "$response.body#/id")))))),
        (status = 400, description = "`invalid_elicitation_id`, `invalid_query`, or `invalid_request` (`wait_seconds` over 30).", body = ErrorBody),
        (status = 404, description = "`elicitation_not_found`: none of that id in this tenant.", body = ErrorBody),
    ),
    security(("server_key" = [])),
)]
pub async fn get_elicitation(
    caller: ServerCaller,
    state: web::Data<AppState>,
    path: web::Path<ElicitationPath>,
    q: web::Query<WaitQuery>,
) -> Result<HttpResponse, ApiError> {
    let id = ElicitationId::parse(&path.id).map_err(|e| ApiError::new(ErrorCode::InvalidElicitationId, e.0))?;
    let wait = super::token::wait_of(q.wait_seconds)?;
    let tenant = &caller.0.tenant;
    let find = || async {
        crate::store::elicitations::find_for_tenant(&state.pool, tenant, id)
            .await?
            .ok_or_else(|| ApiError::new(ErrorCode::ElicitationNotFound, "no such elicitation"))
    };
    let watch = crate::flows::wait::watch(&state, tenant, &id, wait);
    // Armed before the read, so a change that commits in between still wakes us.
    let changed = watch.as_ref().map(|w| w.changed());
    let mut e = find().await?;
    if let Some(changed) = changed
        && e.status == ElicitationStatus::Pending
        && e.expires_at > OffsetDateTime::now_utc()
        && crate::flows::wait::until(&state, changed, e.expires_at, wait).await
    {
        e = find().await?;
    }
    // A pending record past its deadline is reported as what it is, before clean-up runs.
    let mut status = e.status;
    if status == ElicitationStatus::Pending && e.expires_at <= OffsetDateTime::now_utc() {
        status = ElicitationStatus::Expired;
    }
    Ok(HttpResponse::Ok().json(Elicitation {
        id: id.to_string(),
        status,
        subject: e.subject.as_str().to_owned(),
        provider: e.provider.as_str().to_owned(),
        scopes: e.scopes.as_slice().to_vec(),
        created_at: rfc3339(e.created_at),
        expires_at: rfc3339(e.expires_at),
        completed_at: e.completed_at.map(rfc3339),
        cancel_reason: e.cancel_reason,
    }))
}

/// One elicitation: the link a person was asked to open, and how it ended.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Elicitation {
    #[schema(format = Uuid)]
    id: String,
    status: ElicitationStatus,
    subject: String,
    provider: String,
    scopes: Vec<String>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    expires_at: String,
    #[schema(value_type = Option<String>, format = DateTime)]
    completed_at: Option<String>,
    /// What closed it: the MCP client's `cancel` or `decline`, or an operator's action.
    cancel_reason: Option<String>,
}

/// The elicitation after a cancel.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Cancelled {
    #[schema(format = Uuid)]
    id: String,
    status: ElicitationStatus,
    cancel_reason: Option<String>,
    /// The provider the link was for, and its display name (for the MCP server's "not
    /// connected" text).
    #[schema(schema_with = crate::http::schema::provider)]
    provider: String,
    #[schema(example = "GitHub")]
    provider_name: String,
}

/// The MCP client's answer to the URL elicitation. The body may be left out.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCancelBody {
    /// What the MCP client answered: `cancel` or `decline`. Recorded, never acted on as a
    /// business decision (a cancel is not a "no").
    #[schema(value_type = Option<CancelReason>)]
    reason: Option<String>,
}

#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[expect(dead_code, reason = "the schema of `ClientCancelBody::reason`: the handler reads a string, nothing builds it")]
enum CancelReason {
    Cancel,
    Decline,
}

/// An optional JSON body: at most [`BODY_LIMIT`], and `application/json` when there is
/// one. Read here rather than by actix's `Bytes` extractor, whose refusal of an oversized
/// body is plain text instead of the API's error.
async fn optional_json_body(req: &HttpRequest, mut payload: web::Payload) -> Result<web::BytesMut, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| ApiError::new(ErrorCode::InvalidJson, "the body could not be read"))?;
        if body.len() + chunk.len() > BODY_LIMIT {
            return Err(ApiError::new(ErrorCode::PayloadTooLarge, "the body is too large"));
        }
        body.extend_from_slice(&chunk);
    }
    let json = req
        .mime_type()
        .ok()
        .flatten()
        .is_some_and(|m| m.subtype() == "json" || m.suffix().is_some_and(|s| s == "json"));
    if !json && !body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(ErrorCode::UnsupportedMediaType, "send the body as application/json"));
    }
    Ok(body)
}

/// The MCP client answered `cancel` or `decline` to the
/// URL elicitation. The link stops working (its states are spent); the answer is the
/// elicitation's status afterwards, so a repeat is harmless.
#[utoipa::path(
    post,
    path = "/v1/elicitations/{id}/cancel",
    operation_id = "cancelElicitation",
    tag = "v1",
    params(ElicitationPath),
    request_body(content = Option<ClientCancelBody>, description = "Optional.", content_type = "application/json"),
    responses(
        (status = 200, description = "The elicitation's status afterwards (a repeat is harmless; a finished one keeps its status).", body = Cancelled),
        (status = 400, description = "`invalid_elicitation_id`, `invalid_json` or `invalid_request`.", body = ErrorBody),
        (status = 404, description = "`elicitation_not_found`: none of that id in this tenant.", body = ErrorBody),
    ),
    security(("server_key" = [])),
)]
pub async fn cancel_elicitation(
    caller: ServerCaller,
    state: web::Data<AppState>,
    path: web::Path<ElicitationPath>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let id = ElicitationId::parse(&path.id).map_err(|e| ApiError::new(ErrorCode::InvalidElicitationId, e.0))?;
    let body = optional_json_body(&req, payload).await?;
    // The body is optional, but one that is sent must be the documented object: a
    // malformed one is a 400, not a cancel without a reason.
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        // `null` is the same as no body.
        serde_json::from_slice::<Option<ClientCancelBody>>(&body)
            // serde's message may quote the body: say where, never what.
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::InvalidJson,
                    format!("the body is not a cancel request (line {}, column {})", e.line(), e.column()),
                )
            })?
            .and_then(|b| b.reason)
    };
    if reason.as_deref().is_some_and(|r| !matches!(r, "cancel" | "decline")) {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "reason must be \"cancel\" or \"decline\""));
    }
    let e = crate::flows::cancel::cancel_by_client(&state.pool, &caller.0.tenant, id, reason.as_deref(), &caller.0.id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::ElicitationNotFound, "no such elicitation"))?;
    Ok(HttpResponse::Ok().json(Cancelled {
        id: id.to_string(),
        status: e.status,
        cancel_reason: e.cancel_reason,
        provider_name: super::token::provider_name(&state, &e.provider),
        provider: e.provider.as_str().to_owned(),
    }))
}
