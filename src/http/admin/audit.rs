//! `/admin/v1/audit`: the tenant's audit trail, newest first, or oldest first after a cursor
//! (`after`: how a reader follows it). Pages go by `store::audit::Cursor`, which a late
//! commit cannot slip behind.

use super::{db, limit, subject};
use crate::app::AppState;
use crate::domain::Subject;
use crate::http::api::AdminCaller;
use crate::http::error::ApiError;
use crate::store::{
    self,
    audit::{Cursor, Page},
};
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
    before: Option<String>,
    after: Option<String>,
    limit: Option<i64>,
}

fn cursor_param(name: &'static str, v: &str) -> Result<Cursor, ApiError> {
    Cursor::parse(v).ok_or_else(|| {
        ApiError::bad_request("invalid_request", format!("{name} must be a cursor from an earlier page (or 0-0)"))
    })
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
    if q.provider.as_deref().is_some_and(|p| crate::domain::ProviderId::parse(p).is_err()) {
        return Err(ApiError::bad_request("invalid_request", "provider must be a provider name"));
    }
    let filter = store::audit::AuditFilter {
        subject: s.as_ref().map(Subject::as_str),
        provider: q.provider.as_deref(),
        kind,
        since: time_param("since", q.since.as_deref())?,
        until: time_param("until", q.until.as_deref())?,
        page: match (q.before.as_deref(), q.after.as_deref()) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request("invalid_request", "give before or after, not both"));
            }
            (Some(b), None) => Page::Before(Some(cursor_param("before", b)?)),
            (None, Some(a)) => Page::After(cursor_param("after", a)?),
            (None, None) => Page::Before(None),
        },
        limit: limit(q.limit)?,
    };
    let rows = store::audit::list_events(&state.pool, caller.0.tenant.as_str(), &filter).await.map_err(db)?;
    let last = rows.last().map(|r| r.cursor().to_string());
    let body = match filter.page {
        // A full page may have more behind it.
        Page::Before(_) => {
            let next = last.filter(|_| rows.len() as i64 == filter.limit);
            serde_json::json!({ "events": rows, "next_before": next })
        }
        // Where to ask next; the same cursor when nothing new was listable yet.
        Page::After(from) => {
            let next = last.unwrap_or_else(|| from.to_string());
            serde_json::json!({ "events": rows, "next_after": next })
        }
    };
    Ok(HttpResponse::Ok().json(body))
}
