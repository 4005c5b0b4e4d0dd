//! Admin API under `/admin/v1`, for operators. Every call takes an admin-scope key and
//! acts on the key's tenant only (an operator of every tenant uses the CLI, which talks
//! to the database directly). Responses hold metadata, never a token.

pub(crate) mod audit;
pub(crate) mod connections;
pub(crate) mod elicitations;
pub(crate) mod kill_switches;

use crate::app::AppState;
use crate::domain::{ConnectionId, ProviderId, Subject};
use crate::http::error::{ApiError, ErrorCode, json_error, path_error, query_error};
use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/admin/v1")
            .app_data(web::JsonConfig::default().limit(16 * 1024).content_type_required(true).error_handler(json_error))
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .route("/connections", web::get().to(connections::list_connections))
            .route("/connections/{id}", web::get().to(connections::get_connection))
            .route("/connections/{id}/revoke", web::post().to(connections::revoke_one))
            .route("/revocations", web::post().to(connections::revoke_subject))
            .route("/elicitations/cancel", web::post().to(elicitations::cancel_elicitations))
            .route("/kill-switches", web::get().to(kill_switches::list_kill_switches))
            .route("/kill-switches/{provider}", web::put().to(kill_switches::set_kill_switch))
            .route("/kill-switches/{provider}", web::delete().to(kill_switches::clear_kill_switch))
            .route("/audit", web::get().to(audit::audit))
            .default_service(web::to(crate::http::api::not_found)),
    );
}

fn db(e: sqlx::Error) -> ApiError {
    ApiError::from_db(&e)
}

fn subject(s: &str) -> Result<Subject, ApiError> {
    Subject::parse(s).map_err(|e| ApiError::bad_request(ErrorCode::InvalidSubject, e.0))
}

fn provider(state: &AppState, s: &str) -> Result<ProviderId, ApiError> {
    let p = ProviderId::parse(s).map_err(|e| ApiError::bad_request(ErrorCode::UnknownProvider, e.0))?;
    if state.providers.get(&p).is_none() {
        return Err(ApiError::bad_request(ErrorCode::UnknownProvider, "no provider of that name is configured"));
    }
    Ok(p)
}

fn connection_id(s: &str) -> Result<ConnectionId, ApiError> {
    ConnectionId::parse(s).map_err(|e| ApiError::bad_request(ErrorCode::InvalidConnectionId, e.0))
}

fn limit(l: Option<i64>) -> Result<i64, ApiError> {
    match l {
        None => Ok(100),
        Some(n) if (1..=1000).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::bad_request(ErrorCode::InvalidRequest, "limit must be 1-1000")),
    }
}
