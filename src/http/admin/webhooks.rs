//! `/admin/v1/webhooks`: the tenant's signed webhook endpoints and their deliveries.

use super::{db, limit};
use crate::app::AppState;
use crate::domain::WebhookId;
use crate::flows::webhooks::{self as flow, Webhook};
use crate::http::api::AdminCaller;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::schema::WebhookPath;
use crate::store;
use actix_web::{HttpResponse, web};
use secrecy::ExposeSecret;
use time::OffsetDateTime;
use uuid::Uuid;

/// An endpoint to register.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "url": "https://hooks.example.com/mcp-connect",
    "events": ["connection.revoked", "connection.needs_reauth"],
    "description": "grant changes for the assistant"
}))]
pub struct NewWebhookBody {
    /// `https://` (or `http://` to a loopback address where `webhooks.allow_loopback` is
    /// set), no user name or password, no fragment, at most 2048 characters. The address it
    /// resolves to is checked on every delivery.
    #[schema(max_length = 2048)]
    url: String,
    /// The event kinds to deliver (at least one).
    #[schema(value_type = Vec<crate::webhooks::EventKind>, min_items = 1, max_items = 64)]
    events: Vec<String>,
    /// At most 200 characters, no control characters.
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    description: Option<String>,
}

/// An endpoint and its signing secret: the only time the secret is shown.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct WebhookWithSecret {
    #[serde(flatten)]
    webhook: Webhook,
    /// The signing secret (`whsec_` and base64), for a Standard Webhooks verifier. Shown
    /// once: store it now.
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    secret: String,
}

/// The tenant's endpoints.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Webhooks {
    webhooks: Vec<Webhook>,
}

fn webhook_id(s: &str) -> Result<WebhookId, ApiError> {
    WebhookId::parse(s).map_err(|e| ApiError::new(ErrorCode::InvalidWebhookId, e.0))
}

fn not_found() -> ApiError {
    ApiError::new(ErrorCode::WebhookNotFound, "no such webhook")
}

/// Registers an endpoint for the tenant. The answer holds the signing secret, once.
#[utoipa::path(
    post,
    path = "/admin/v1/webhooks",
    operation_id = "createWebhook",
    tag = "admin",
    request_body = NewWebhookBody,
    responses(
        (status = 201, description = "Registered; deliveries start with the next event.", body = WebhookWithSecret,
            links(
                ("GetWebhook" = (operation_id = "getWebhook", parameters(("id" = "$response.body#/id")))),
                ("ListDeliveries" = (operation_id = "listWebhookDeliveries", parameters(("id" = "$response.body#/id")))),
                ("RotateSecret" = (operation_id = "rotateWebhookSecret", parameters(("id" = "$response.body#/id")))),
                ("DeleteWebhook" = (operation_id = "deleteWebhook", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 400, description = "`invalid_json`, `invalid_webhook_url` or `invalid_request` (events, description).", body = ErrorBody),
        (status = 409, description = "`too_many_webhooks`: the tenant has 16.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn create_webhook(
    caller: AdminCaller,
    state: web::Data<AppState>,
    body: web::Json<NewWebhookBody>,
) -> Result<HttpResponse, ApiError> {
    let r = flow::check_registration(&body.url, &body.events, body.description.as_deref(), state.webhook_policy)?;
    let (webhook, secret) = flow::register(&state.pool, &state.keys, &caller.0.tenant, &r, Some(&caller.0.id)).await?;
    Ok(HttpResponse::Created().json(WebhookWithSecret { webhook, secret: secret.expose_secret().to_owned() }))
}

/// The tenant's endpoints (never their secrets).
#[utoipa::path(
    get,
    path = "/admin/v1/webhooks",
    operation_id = "listWebhooks",
    tag = "admin",
    responses((status = 200, description = "The endpoints, oldest first.", body = Webhooks)),
    security(("admin_key" = [])),
)]
pub async fn list_webhooks(caller: AdminCaller, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let webhooks = flow::list(&state.pool, &caller.0.tenant).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(Webhooks { webhooks }))
}

/// One endpoint.
#[utoipa::path(
    get,
    path = "/admin/v1/webhooks/{id}",
    operation_id = "getWebhook",
    tag = "admin",
    params(WebhookPath),
    responses(
        (status = 200, description = "The endpoint.", body = Webhook),
        (status = 400, description = "`invalid_webhook_id`.", body = ErrorBody),
        (status = 404, description = "`webhook_not_found`: none of that id in this tenant.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn get_webhook(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<WebhookPath>,
) -> Result<HttpResponse, ApiError> {
    let id = webhook_id(&path.id)?;
    let w = flow::get(&state.pool, &caller.0.tenant, id).await.map_err(db)?.ok_or_else(not_found)?;
    Ok(HttpResponse::Ok().json(w))
}

/// Deletes an endpoint: nothing more is sent to it, pending deliveries included.
#[utoipa::path(
    delete,
    path = "/admin/v1/webhooks/{id}",
    operation_id = "deleteWebhook",
    tag = "admin",
    params(WebhookPath),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "`invalid_webhook_id`.", body = ErrorBody),
        (status = 404, description = "`webhook_not_found`: none of that id in this tenant (also after a delete).", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn delete_webhook(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<WebhookPath>,
) -> Result<HttpResponse, ApiError> {
    let id = webhook_id(&path.id)?;
    if !flow::delete(&state.pool, &caller.0.tenant, id, &caller.0.id).await.map_err(db)? {
        return Err(not_found());
    }
    Ok(HttpResponse::NoContent().finish())
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RotateQuery {
    /// Keep signing with the replaced secret for 24 hours (default `true`); `false` stops it
    /// at once, for a secret that leaked.
    keep_previous: Option<bool>,
}

/// A new signing secret, shown once. The one it replaces is still signed with for 24 hours
/// (two signatures in `webhook-signature`), so receivers can switch without losing an
/// event, unless `keep_previous=false`; a secret replaced before is dropped at once.
#[utoipa::path(
    post,
    path = "/admin/v1/webhooks/{id}/rotate-secret",
    operation_id = "rotateWebhookSecret",
    tag = "admin",
    params(WebhookPath, RotateQuery),
    responses(
        (status = 200, description = "The endpoint and its new secret.", body = WebhookWithSecret),
        (status = 400, description = "`invalid_webhook_id` or `invalid_query`.", body = ErrorBody),
        (status = 404, description = "`webhook_not_found`: none of that id in this tenant.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn rotate_secret(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<WebhookPath>,
    q: web::Query<RotateQuery>,
) -> Result<HttpResponse, ApiError> {
    let id = webhook_id(&path.id)?;
    let keep = q.keep_previous.unwrap_or(true);
    let (webhook, secret) = flow::rotate_secret(&state.pool, &state.keys, &caller.0.tenant, id, keep, &caller.0.id)
        .await?
        .ok_or_else(not_found)?;
    Ok(HttpResponse::Ok().json(WebhookWithSecret { webhook, secret: secret.expose_secret().to_owned() }))
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// Deliveries older than this one (`next_before` of the previous page).
    #[param(minimum = 1)]
    before: Option<i64>,
    /// Page size, 1-1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct DeliveryRow {
    /// The delivery's number (newest first; `before` pages on it).
    id: i64,
    /// The event's id: the `webhook-id` header and the payload's `id`.
    #[serde(serialize_with = "event_id")]
    #[schema(value_type = String, example = "evt_0193a0c4e1b27c5e8f0a1b2c3d4e5f60")]
    event_id: Uuid,
    #[schema(example = "connection.revoked")]
    event_type: String,
    /// `pending` (waiting or being retried), `delivered`, or `failed` (retried for 24 h).
    #[schema(example = "delivered")]
    status: String,
    attempts: i32,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    /// When the next attempt is due (pending deliveries).
    #[serde(with = "time::serde::rfc3339::option")]
    next_attempt_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    last_attempt_at: Option<OffsetDateTime>,
    /// The receiver's status code at the last attempt, if it answered.
    last_status: Option<i32>,
    /// Why the last attempt did not count: `status` (not 2xx), `timeout`, `connect` (the
    /// address refused the connection), `request`, `address_refused` (the URL's name did
    /// not resolve, or resolved to no address that may be reached: one code, so that a
    /// tenant cannot learn which internal names exist), `secret_unreadable` (this instance
    /// lacks the vault key of the secret); on a delivery that ended without being
    /// delivered, `backlog_dropped` (the tenant had more pending deliveries than
    /// `webhooks.max_pending_per_tenant`, and this was among the oldest) or
    /// `tenant_inactive` (the tenant was switched off).
    last_error: Option<String>,
    /// At most 1 KB of the receiver's last answer.
    last_response: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    finished_at: Option<OffsetDateTime>,
}

impl From<store::webhooks::DeliveryRow> for DeliveryRow {
    fn from(r: store::webhooks::DeliveryRow) -> Self {
        Self {
            id: r.id,
            event_id: r.event_id,
            event_type: r.event_type,
            status: r.status,
            attempts: r.attempts,
            created_at: r.created_at,
            next_attempt_at: r.next_attempt_at,
            last_attempt_at: r.last_attempt_at,
            last_status: r.last_status,
            last_error: r.last_error,
            last_response: r.last_response,
            finished_at: r.finished_at,
        }
    }
}

fn event_id<S: serde::Serializer>(id: &uuid::Uuid, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("evt_{}", id.simple()))
}

/// A page of an endpoint's deliveries, newest first.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Deliveries {
    deliveries: Vec<DeliveryRow>,
    /// Where the next older page starts; null when this page was not full.
    next_before: Option<i64>,
}

/// An endpoint's deliveries: attempts, the receiver's status codes and answer (1 KB), the
/// next retry, or `failed` after 24 hours of them.
#[utoipa::path(
    get,
    path = "/admin/v1/webhooks/{id}/deliveries",
    operation_id = "listWebhookDeliveries",
    tag = "admin",
    params(WebhookPath, DeliveriesQuery),
    responses(
        (status = 200, description = "Newest first.", body = Deliveries),
        (status = 400, description = "`invalid_webhook_id`, `invalid_query` or `invalid_request` (limit, before).", body = ErrorBody),
        (status = 404, description = "`webhook_not_found`: none of that id in this tenant.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn list_deliveries(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<WebhookPath>,
    q: web::Query<DeliveriesQuery>,
) -> Result<HttpResponse, ApiError> {
    let id = webhook_id(&path.id)?;
    let limit = limit(q.limit)?;
    if q.before.is_some_and(|b| b < 1) {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "before must be a delivery id"));
    }
    let deliveries = flow::deliveries(&state.pool, &caller.0.tenant, id, q.before, limit)
        .await
        .map_err(db)?
        .ok_or_else(not_found)?;
    let next_before = (deliveries.len() as i64 == limit).then(|| deliveries.last().map(|d| d.id)).flatten();
    let deliveries = deliveries.into_iter().map(DeliveryRow::from).collect();
    Ok(HttpResponse::Ok().json(Deliveries { deliveries, next_before }))
}
