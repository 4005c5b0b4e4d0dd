//! Admin API under `/admin/v1`, for operators. Every call takes an admin-scope key and
//! acts on the key's tenant only (an operator of every tenant uses the CLI, which talks
//! to the database directly). Responses hold metadata, never a token.

use crate::app::AppState;
use crate::domain::{ConnectionId, ProviderId, Subject};
use crate::flows::revoke;
use crate::http::api::AdminCaller;
use crate::http::error::{ApiError, json_error, path_error, query_error};
use crate::store::{self, audit::AuditEvent};
use actix_web::{HttpResponse, web};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/admin/v1")
            .app_data(web::JsonConfig::default().limit(16 * 1024).content_type_required(true).error_handler(json_error))
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .route("/connections", web::get().to(list_connections))
            .route("/connections/{id}", web::get().to(get_connection))
            .route("/connections/{id}/revoke", web::post().to(revoke_one))
            .route("/revocations", web::post().to(revoke_subject))
            .route("/elicitations/cancel", web::post().to(cancel_elicitations))
            .route("/kill-switches", web::get().to(list_kill_switches))
            .route("/kill-switches/{provider}", web::put().to(set_kill_switch))
            .route("/kill-switches/{provider}", web::delete().to(clear_kill_switch))
            .route("/audit", web::get().to(audit))
            .default_service(web::to(crate::http::api::not_found)),
    );
}

fn db(e: sqlx::Error) -> ApiError {
    ApiError::from_db(&e)
}

fn subject(s: &str) -> Result<Subject, ApiError> {
    Subject::parse(s).map_err(|e| ApiError::bad_request("invalid_subject", e.0))
}

fn provider(state: &AppState, s: &str) -> Result<ProviderId, ApiError> {
    let p = ProviderId::parse(s).map_err(|e| ApiError::bad_request("unknown_provider", e.0))?;
    if state.providers.get(&p).is_none() {
        return Err(ApiError::bad_request("unknown_provider", "no provider of that name is configured"));
    }
    Ok(p)
}

fn connection_id(s: &str) -> Result<ConnectionId, ApiError> {
    ConnectionId::parse(s).map_err(|e| ApiError::bad_request("invalid_connection_id", e.0))
}

fn limit(l: Option<i64>) -> Result<i64, ApiError> {
    match l {
        None => Ok(100),
        Some(n) if (1..=1000).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::bad_request("invalid_request", "limit must be 1-1000")),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    subject: Option<String>,
    provider: Option<String>,
    status: Option<String>,
    /// Opaque cursor from the previous page's `next`.
    after: Option<String>,
    limit: Option<i64>,
}

async fn list_connections(
    caller: AdminCaller,
    state: web::Data<AppState>,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let subject = q.subject.as_deref().map(subject).transpose()?;
    let provider = q.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    if let Some(s) = &q.status
        && crate::domain::ConnectionStatus::parse(s).is_err()
    {
        return Err(ApiError::bad_request("invalid_request", "status must be active, needs_reauth or revoked"));
    }
    let limit = limit(q.limit)?;
    let after = q.after.as_deref().map(decode_cursor).transpose()?;
    let rows = store::connections::list_connections(
        &state.pool,
        caller.0.tenant.as_str(),
        subject.as_ref().map(Subject::as_str),
        provider.as_ref().map(ProviderId::as_str),
        q.status.as_deref(),
        after.as_ref().map(|(s, p)| (s.as_str(), p.as_str())),
        limit,
    )
    .await
    .map_err(db)?;
    let next =
        (rows.len() as i64 == limit).then(|| rows.last().map(|r| encode_cursor(&r.subject, &r.provider))).flatten();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "connections": rows, "next": next })))
}

fn encode_cursor(subject: &str, provider: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::json!([subject, provider]).to_string())
}

fn decode_cursor(c: &str) -> Result<(String, String), ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("invalid_cursor", "the cursor is not one this API gave out");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c).map_err(|_| bad())?;
    serde_json::from_slice::<(String, String)>(&raw).map_err(|_| bad())
}

async fn get_connection(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = connection_id(&path)?;
    let row = store::connections::connection_meta(&state.pool, caller.0.tenant.as_str(), id.as_uuid())
        .await
        .map_err(db)?
        .ok_or_else(|| ApiError::not_found("connection_not_found", "no such connection"))?;
    Ok(HttpResponse::Ok().json(row))
}

async fn revoke_one(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = connection_id(&path)?;
    let actor = format!("api_key:{}", caller.0.id);
    let r = revoke::revoke_connection(&state, caller.0.tenant.as_str(), id.as_uuid(), &actor)
        .await
        .map_err(db)?
        .ok_or_else(|| ApiError::not_found("connection_not_found", "no such connection"))?;
    Ok(HttpResponse::Ok().json(r))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectBody {
    subject: String,
    provider: Option<String>,
}

async fn revoke_subject(
    caller: AdminCaller,
    state: web::Data<AppState>,
    body: web::Json<SubjectBody>,
) -> Result<HttpResponse, ApiError> {
    let s = subject(&body.subject)?;
    let p = body.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    let actor = format!("api_key:{}", caller.0.id);
    let done = revoke::revoke_subject(
        &state,
        caller.0.tenant.as_str(),
        s.as_str(),
        p.as_ref().map(ProviderId::as_str),
        &actor,
    )
    .await
    .map_err(db)?;
    Ok(HttpResponse::Ok().json(done))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    subject: Option<String>,
    provider: Option<String>,
}

async fn cancel_elicitations(
    caller: AdminCaller,
    state: web::Data<AppState>,
    body: web::Json<CancelBody>,
) -> Result<HttpResponse, ApiError> {
    let s = body.subject.as_deref().map(subject).transpose()?;
    let p = body.provider.as_deref().map(|p| provider(&state, p)).transpose()?;
    if s.is_none() && p.is_none() {
        return Err(ApiError::bad_request("invalid_request", "name a subject, a provider, or both"));
    }
    let tenant = caller.0.tenant.as_str();
    let mut tx = state.pool.begin().await.map_err(db)?;
    let ids = store::elicitations::cancel_pending(
        &mut tx,
        tenant,
        s.as_ref().map(Subject::as_str),
        p.as_ref().map(ProviderId::as_str),
        OffsetDateTime::now_utc(),
    )
    .await
    .map_err(db)?;
    let mut ev = AuditEvent::new("elicitations_cancelled");
    ev.tenant_id = Some(tenant.to_owned());
    ev.subject = s.as_ref().map(|x| x.to_string());
    ev.provider = p.as_ref().map(|x| x.to_string());
    ev.api_key_id = Some(caller.0.id.to_string());
    ev.detail = serde_json::json!({ "count": ids.len(), "elicitation_ids": ids });
    store::audit::insert_event(&mut *tx, &ev).await.map_err(db)?;
    tx.commit().await.map_err(db)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "cancelled": ids })))
}

async fn list_kill_switches(caller: AdminCaller, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
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

async fn set_kill_switch(
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
    change_kill_switch(&state, &caller, &p, Some(&body.mode), reason).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "provider": p, "mode": body.mode })))
}

async fn clear_kill_switch(
    caller: AdminCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let p = provider(&state, &path)?;
    change_kill_switch(&state, &caller, &p, None, None).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "provider": p, "mode": "off" })))
}

async fn change_kill_switch(
    state: &AppState,
    caller: &AdminCaller,
    p: &ProviderId,
    mode: Option<&str>,
    reason: Option<&str>,
) -> Result<(), ApiError> {
    let tenant = caller.0.tenant.as_str();
    let mut tx = state.pool.begin().await.map_err(db)?;
    match mode {
        Some(m) => {
            store::kill_switches::set_kill_switch(&mut *tx, Some(tenant), p.as_str(), m, reason).await.map_err(db)?
        }
        None => {
            store::kill_switches::clear_kill_switch(&mut *tx, Some(tenant), p.as_str()).await.map_err(db)?;
        }
    }
    let mut ev = AuditEvent::new("kill_switch_changed");
    ev.tenant_id = Some(tenant.to_owned());
    ev.provider = Some(p.to_string());
    ev.api_key_id = Some(caller.0.id.to_string());
    ev.detail = serde_json::json!({ "mode": mode.unwrap_or("off"), "reason": reason });
    store::audit::insert_event(&mut *tx, &ev).await.map_err(db)?;
    tx.commit().await.map_err(db)?;
    state.caches.forget_kill_switches();
    Ok(())
}

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

async fn audit(
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
