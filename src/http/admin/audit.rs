//! `/admin/v1/audit`: the tenant's audit trail, newest first.

use super::{db, limit, subject};
use crate::app::AppState;
use crate::domain::Subject;
use crate::http::api::AdminCaller;
use crate::http::error::ApiError;
use crate::store;
use actix_web::{HttpResponse, web};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    subject: Option<String>,
    provider: Option<String>,
    kind: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<i64>,
    limit: Option<i64>,
}

fn time_param(name: &'static str, v: Option<&str>) -> Result<Option<OffsetDateTime>, ApiError> {
    v.map(|s| {
        OffsetDateTime::parse(s, &Rfc3339)
            .map_err(|_| ApiError::bad_request("invalid_request", format!("{name} must be RFC 3339")))
    })
    .transpose()
}

pub async fn audit(
    caller: AdminCaller,
    state: web::Data<AppState>,
    q: web::Query<AuditQuery>,
) -> Result<HttpResponse, ApiError> {
    let s = q.subject.as_deref().map(subject).transpose()?;
    let kind = q.kind.as_deref();
    if kind.is_some_and(|k| k.is_empty() || k.len() > 64 || !k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')) {
        return Err(ApiError::bad_request("invalid_request", "kind must be a lower-case event name"));
    }
    let filter = store::audit::AuditFilter {
        subject: s.as_ref().map(Subject::as_str),
        provider: q.provider.as_deref(),
        kind,
        since: time_param("since", q.since.as_deref())?,
        until: time_param("until", q.until.as_deref())?,
        before_id: q.before,
        limit: limit(q.limit)?,
    };
    let rows = store::audit::list_events(&state.pool, caller.0.tenant.as_str(), &filter).await.map_err(db)?;
    let next = (rows.len() as i64 == filter.limit).then(|| rows.last().map(|r| r.id)).flatten();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "events": rows, "next_before": next })))
}
