//! `/admin/v1/audit`: the tenant's audit trail, newest first, or oldest first after a cursor
//! (`after`: how a reader follows it). Pages go by `store::audit::Cursor`, which a late
//! commit cannot slip behind.

use super::{db, limit, subject};
use crate::app::AppState;
use crate::domain::Subject;
use crate::http::api::AdminCaller;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::store::{
    self,
    audit::{Cursor, Page},
};
use actix_web::{HttpResponse, web};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    #[param(schema_with = crate::http::schema::subject)]
    subject: Option<String>,
    #[param(schema_with = crate::http::schema::provider)]
    provider: Option<String>,
    /// An event kind, e.g. `connection_created`, `token_handed_out`.
    #[param(pattern = "^[a-z_]{1,64}$")]
    kind: Option<String>,
    /// Events at or after this time (RFC 3339).
    #[param(format = DateTime)]
    since: Option<String>,
    /// Events before this time (RFC 3339).
    #[param(format = DateTime)]
    until: Option<String>,
    /// Newest first, older than this cursor (`next_before` of the previous page).
    #[param(pattern = "^[0-9]+-[0-9]+$")]
    before: Option<String>,
    /// Oldest first, newer than this cursor (`next_after`; `0-0` from the start): how a
    /// reader follows the trail. Not together with `before`.
    #[param(pattern = "^[0-9]+-[0-9]+$")]
    after: Option<String>,
    /// Page size, 1-1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct AuditRow {
    id: i64,
    #[serde(with = "time::serde::rfc3339")]
    at: time::OffsetDateTime,
    subject: Option<String>,
    /// The issuer of the identity provider whose `sub` `subject` is: the person is the
    /// pair (`null`: no subject, or written before issuers were recorded).
    issuer: Option<String>,
    provider: Option<String>,
    kind: String,
    elicitation_id: Option<Uuid>,
    connection_id: Option<Uuid>,
    /// The API key, or the workload's caller id (then `workload` names it).
    api_key_id: Option<String>,
    /// The workload that signed in with its platform's token instead of an API key
    /// (docs/workload-identity.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    workload: Option<WorkloadCaller>,
    /// What else the event carries (a reason, the actor); never a token, code or secret.
    #[schema(value_type = Object)]
    detail: serde_json::Value,
    /// Events this row stands for: the hand-outs of its minute, 1 for every other kind.
    count: i32,
    #[serde(with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    first_at: Option<time::OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    last_at: Option<time::OffsetDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<String>,
}

/// A workload caller: who signed the token it signed in with, and whom it names.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct WorkloadCaller {
    /// The token's `iss`.
    issuer: String,
    /// Where the issuer's keys were found: its `jwks_uri`, or `discovery`.
    key_source: String,
    /// The token's `sub`.
    subject: String,
}

impl From<store::audit::AuditRow> for AuditRow {
    fn from(r: store::audit::AuditRow) -> Self {
        Self {
            id: r.id,
            at: r.at,
            subject: r.subject,
            issuer: r.issuer,
            provider: r.provider,
            kind: r.kind,
            elicitation_id: r.elicitation_id,
            connection_id: r.connection_id,
            api_key_id: r.api_key_id,
            workload: r.workload.and_then(|w| serde_json::from_value(w).ok()),
            detail: r.detail,
            count: r.count,
            first_at: r.first_at,
            last_at: r.last_at,
            instance: r.instance,
        }
    }
}

/// A page of the audit trail.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    events: Vec<AuditRow>,
    /// With `before` (or neither): the cursor of the next older page; null when this page
    /// was not full.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_before: Option<Option<String>>,
    /// With `after`: where to ask next (the same cursor when nothing new was listable yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    next_after: Option<String>,
}

fn cursor_param(name: &'static str, v: &str) -> Result<Cursor, ApiError> {
    Cursor::parse(v).ok_or_else(|| {
        ApiError::new(ErrorCode::InvalidRequest, format!("{name} must be a cursor from an earlier page (or 0-0)"))
    })
}

fn time_param(name: &'static str, v: Option<&str>) -> Result<Option<OffsetDateTime>, ApiError> {
    v.map(|s| {
        OffsetDateTime::parse(s, &Rfc3339)
            .map_err(|_| ApiError::new(ErrorCode::InvalidRequest, format!("{name} must be RFC 3339")))
    })
    .transpose()
}

/// The tenant's audit trail: newest first, or oldest first after a cursor. A page never
/// skips an event that commits late.
#[utoipa::path(
    get,
    path = "/admin/v1/audit",
    operation_id = "listAuditEvents",
    tag = "admin",
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of events.", body = AuditPage),
        (status = 400, description = "`invalid_subject`, `invalid_query` or `invalid_request` (a bad cursor, time, kind, provider or limit; `before` with `after`).", body = ErrorBody),
    ),
    security(("admin_key" = [])),
)]
pub async fn audit(
    caller: AdminCaller,
    state: web::Data<AppState>,
    q: web::Query<AuditQuery>,
) -> Result<HttpResponse, ApiError> {
    let s = q.subject.as_deref().map(subject).transpose()?;
    let kind = q.kind.as_deref();
    if kind.is_some_and(|k| k.is_empty() || k.len() > 64 || !k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')) {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "kind must be a lower-case event name"));
    }
    if q.provider.as_deref().is_some_and(|p| crate::domain::ProviderId::parse(p).is_err()) {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "provider must be a provider name"));
    }
    let filter = store::audit::AuditFilter {
        subject: s.as_ref().map(Subject::as_str),
        provider: q.provider.as_deref(),
        kind,
        since: time_param("since", q.since.as_deref())?,
        until: time_param("until", q.until.as_deref())?,
        page: match (q.before.as_deref(), q.after.as_deref()) {
            (Some(_), Some(_)) => {
                return Err(ApiError::new(ErrorCode::InvalidRequest, "give before or after, not both"));
            }
            (Some(b), None) => Page::Before(Some(cursor_param("before", b)?)),
            (None, Some(a)) => Page::After(cursor_param("after", a)?),
            (None, None) => Page::Before(None),
        },
        limit: limit(q.limit)?,
    };
    let rows = store::audit::list_events(&state.pool, &caller.0.tenant, &filter).await.map_err(db)?;
    let last = rows.last().map(|r| r.cursor().to_string());
    let body = match filter.page {
        // A full page may have more behind it.
        Page::Before(_) => {
            let next = last.filter(|_| rows.len() as i64 == filter.limit);
            AuditPage {
                events: rows.into_iter().map(AuditRow::from).collect(),
                next_before: Some(next),
                next_after: None,
            }
        }
        // Where to ask next; the same cursor when nothing new was listable yet.
        Page::After(from) => {
            let next = last.unwrap_or_else(|| from.to_string());
            AuditPage {
                events: rows.into_iter().map(AuditRow::from).collect(),
                next_before: None,
                next_after: Some(next),
            }
        }
    };
    Ok(HttpResponse::Ok().json(body))
}
