//! `/admin/v1/connections` and `/admin/v1/revocations`: list, read, revoke, off-board.

use super::{connection_id, db, limit, provider, subject};
use crate::app::AppState;
use crate::domain::ConnectionStatus;
use crate::flows::revoke;
use crate::http::api::AdminCaller;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::schema::ConnectionPath;
use crate::store;
use actix_web::{HttpResponse, web};
use time::OffsetDateTime;
use uuid::Uuid;

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[param(schema_with = crate::http::schema::subject)]
    subject: Option<String>,
    #[param(schema_with = crate::http::schema::provider)]
    provider: Option<String>,
    #[param(value_type = Option<ConnectionStatus>)]
    status: Option<String>,
    /// Opaque cursor from the previous page's `next`.
    after: Option<String>,
    /// Page size, 1-1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// Connection metadata for operators: never a ciphertext.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ConnectionMeta {
    id: Uuid,
    subject: String,
    provider: String,
    account_id: Option<String>,
    account_login: Option<String>,
    scopes: Vec<String>,
    status: ConnectionStatus,
    /// When the row was first made (its first connect).
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    /// When the grant in force was made: the last connect (a reconnect after a revocation
    /// is a new grant on the same row).
    #[serde(with = "time::serde::rfc3339")]
    granted_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    refreshed_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    last_used_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    access_expires_at: Option<OffsetDateTime>,
}

impl From<store::connections::ConnectionMeta> for ConnectionMeta {
    fn from(r: store::connections::ConnectionMeta) -> Self {
        Self {
            id: r.id.as_uuid(),
            subject: r.subject.to_string(),
            provider: r.provider.to_string(),
            account_id: r.account_id,
            account_login: r.account_login,
            scopes: r.scopes.as_slice().to_vec(),
            status: r.status,
            created_at: r.created_at,
            granted_at: r.granted_at,
            refreshed_at: r.refreshed_at,
            last_used_at: r.last_used_at,
            access_expires_at: r.access_expires_at,
        }
    }
}

/// A page of connections, by subject and provider.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ConnectionPage {
    connections: Vec<ConnectionMeta>,
    /// The `after` of the next page; null on the last page.
    next: Option<String>,
}

/// The tenant's connections (metadata only, never a token), filtered and paged.
#[utoipa::path(
    get,
    path = "/admin/v1/connections",
    operation_id = "listConnections",
    tag = "admin",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of connections.", body = ConnectionPage,
            links(
                ("GetConnection" = (operation_id = "getConnection", parameters(("id" = "$response.body#/connections/0/id")))),
                ("RevokeConnection" = (operation_id = "revokeConnection", parameters(("id" = "$response.body#/connections/0/id")))),
            )),
        (status = 400, description = "`invalid_subject`, `unknown_provider`, `invalid_cursor`, `invalid_query` or `invalid_request`.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
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
        .map_err(|_| ApiError::new(ErrorCode::InvalidRequest, "status must be active, needs_reauth or revoked"))?;
    let limit = limit(q.limit)?;
    let after = q.after.as_deref().map(decode_cursor).transpose()?;
    let filter = store::connections::ConnectionFilter {
        id: None,
        subject: subject.as_ref(),
        provider: provider.as_ref(),
        status,
        after: after.as_ref().map(|(s, p)| (s.as_str(), p.as_str())),
    };
    let rows = store::connections::list_connections(&state.pool, &caller.0.tenant, &filter, limit).await.map_err(db)?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|r| encode_cursor(r.subject.as_str(), r.provider.as_str())))
        .flatten();
    Ok(HttpResponse::Ok()
        .json(ConnectionPage { connections: rows.into_iter().map(ConnectionMeta::from).collect(), next }))
}

fn encode_cursor(subject: &str, provider: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::json!([subject, provider]).to_string())
}

fn decode_cursor(c: &str) -> Result<(String, String), ApiError> {
    use base64::Engine;
    let bad = || ApiError::new(ErrorCode::InvalidCursor, "the cursor is not one this API gave out");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c).map_err(|_| bad())?;
    serde_json::from_slice::<(String, String)>(&raw).map_err(|_| bad())
}

/// One connection's metadata.
#[utoipa::path(
    get,
    path = "/admin/v1/connections/{id}",
    operation_id = "getConnection",
    tag = "admin",
    params(ConnectionPath),
    responses(
        (status = 200, description = "The connection.", body = ConnectionMeta,
            links(("RevokeConnection" = (operation_id = "revokeConnection", parameters(("id" = "$response.body#/id")))))),
        (status = 400, description = "`invalid_connection_id`.", body = ErrorBody),
        (status = 404, description = "`connection_not_found`: none of that id in this tenant.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn get_connection(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<ConnectionPath>,
) -> Result<HttpResponse, ApiError> {
    let id = connection_id(&path.id)?;
    let row = store::connections::connection_meta(&state.pool, &caller.0.tenant, id)
        .await
        .map_err(db)?
        .ok_or_else(|| ApiError::new(ErrorCode::ConnectionNotFound, "no such connection"))?;
    Ok(HttpResponse::Ok().json(ConnectionMeta::from(row)))
}

/// Revokes a connection: at the provider (RFC 7009) where it can, then the stored tokens
/// are deleted, the cache entry dropped on every instance, and the subject's pending links
/// for the provider closed.
#[utoipa::path(
    post,
    path = "/admin/v1/connections/{id}/revoke",
    operation_id = "revokeConnection",
    tag = "admin",
    params(ConnectionPath),
    responses(
        (status = 200, description = "Revoked (a repeat answers `already_revoked`).", body = revoke::Revoked),
        (status = 400, description = "`invalid_connection_id`.", body = ErrorBody),
        (status = 404, description = "`connection_not_found`: none of that id in this tenant.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn revoke_one(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<ConnectionPath>,
) -> Result<HttpResponse, ApiError> {
    let id = connection_id(&path.id)?;
    let actor = caller.0.caller().actor();
    let r = revoke::revoke_connection(&state, &caller.0.tenant, id, &actor, revoke::RevokedBy::Admin)
        .await
        .map_err(db)?
        .ok_or_else(|| ApiError::new(ErrorCode::ConnectionNotFound, "no such connection"))?;
    Ok(HttpResponse::Ok().json(r))
}

/// Off-boarding: a subject, at one provider or all.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"subject": "alice"}))]
pub struct SubjectBody {
    #[schema(schema_with = crate::http::schema::subject)]
    subject: String,
    /// Only this provider's connections; all when left out.
    #[schema(schema_with = crate::http::schema::opt_provider)]
    provider: Option<String>,
}

/// Off-boards a subject: closes their pending links, then revokes every live connection
/// (of one provider, or all).
#[utoipa::path(
    post,
    path = "/admin/v1/revocations",
    operation_id = "revokeSubject",
    tag = "admin",
    request_body = SubjectBody,
    responses(
        (status = 200, description = "What was revoked and how many links were closed.", body = revoke::OffBoarded),
        (status = 400, description = "`invalid_json`, `invalid_subject` or `unknown_provider`.", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn revoke_subject(
    caller: AdminCaller,
    state: web::Data<AppState>,
    body: web::Json<SubjectBody>,
) -> Result<HttpResponse, ApiError> {
    let s = subject(&body.subject)?;
    let p = body.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    let actor = caller.0.caller().actor();
    let done = revoke::revoke_subject(&state, &caller.0.tenant, &s, p.as_ref(), &actor).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(done))
}
