//! Admin API under `/admin/v1`, for operators. Every call takes an admin-scope key and
//! acts on the key's tenant only (an operator of every tenant uses the CLI, which talks
//! to the database directly). Responses hold metadata, never a token.

pub(crate) mod audit;
pub(crate) mod connections;
pub(crate) mod elicitations;
pub(crate) mod kill_switches;
pub(crate) mod webhooks;

use crate::app::AppState;
use crate::domain::{ConnectionId, ProviderId, Subject};
use crate::http::error::{ApiError, BODY_LIMIT, ErrorCode, json_error, path_error, query_error, resource};
use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/admin/v1")
            .app_data(
                web::JsonConfig::default().limit(BODY_LIMIT).content_type_required(true).error_handler(json_error),
            )
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .service(resource("/connections", "GET").route(web::get().to(connections::list_connections)))
            .service(resource("/connections/{id}", "GET").route(web::get().to(connections::get_connection)))
            .service(resource("/connections/{id}/revoke", "POST").route(web::post().to(connections::revoke_one)))
            .service(resource("/revocations", "POST").route(web::post().to(connections::revoke_subject)))
            .service(resource("/elicitations/cancel", "POST").route(web::post().to(elicitations::cancel_elicitations)))
            .service(resource("/kill-switches", "GET").route(web::get().to(kill_switches::list_kill_switches)))
            .service(
                resource("/kill-switches/{provider}", "PUT, DELETE")
                    .route(web::put().to(kill_switches::set_kill_switch))
                    .route(web::delete().to(kill_switches::clear_kill_switch)),
            )
            .service(resource("/audit", "GET").route(web::get().to(audit::audit)))
            .service(
                resource("/webhooks", "GET, POST")
                    .route(web::get().to(webhooks::list_webhooks))
                    .route(web::post().to(webhooks::create_webhook)),
            )
            .service(
                resource("/webhooks/{id}", "GET, DELETE")
                    .route(web::get().to(webhooks::get_webhook))
                    .route(web::delete().to(webhooks::delete_webhook)),
            )
            .service(resource("/webhooks/{id}/rotate-secret", "POST").route(web::post().to(webhooks::rotate_secret)))
            .service(resource("/webhooks/{id}/deliveries", "GET").route(web::get().to(webhooks::list_deliveries)))
            .default_service(web::to(crate::http::api::not_found)),
    );
}

fn db(e: sqlx::Error) -> ApiError {
    ApiError::from_db(e)
}

fn subject(s: &str) -> Result<Subject, ApiError> {
    Subject::parse(s).map_err(|e| ApiError::new(ErrorCode::InvalidSubject, e.0))
}

fn provider(state: &AppState, s: &str) -> Result<ProviderId, ApiError> {
    let p = ProviderId::parse(s).map_err(|e| ApiError::new(ErrorCode::UnknownProvider, e.0))?;
    if state.directory.providers.get(&p).is_none() {
        return Err(ApiError::new(ErrorCode::UnknownProvider, "no provider of that name is configured"));
    }
    Ok(p)
}

fn connection_id(s: &str) -> Result<ConnectionId, ApiError> {
    ConnectionId::parse(s).map_err(|e| ApiError::new(ErrorCode::InvalidConnectionId, e.0))
}

fn limit(l: Option<i64>) -> Result<i64, ApiError> {
    match l {
        None => Ok(100),
        Some(n) if (1..=1000).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::new(ErrorCode::InvalidRequest, "limit must be 1-1000")),
    }
}
