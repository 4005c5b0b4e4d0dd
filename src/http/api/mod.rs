//! JSON API for MCP servers under `/v1`, authenticated with a server-scope API key.

mod auth;
pub(crate) mod elicitations;
pub(crate) mod token;

pub use auth::{AdminCaller, ServerCaller};

use crate::http::error::{ApiError, ErrorCode, json_error, path_error, query_error};
use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v1")
            .app_data(web::JsonConfig::default().limit(16 * 1024).content_type_required(true).error_handler(json_error))
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .route("/token", web::post().to(token::post_token))
            .route("/elicitations/{id}", web::get().to(elicitations::get_elicitation))
            .route("/elicitations/{id}/cancel", web::post().to(elicitations::cancel_elicitation))
            .default_service(web::to(not_found)),
    );
}

pub async fn not_found() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::not_found(ErrorCode::NotFound, "no such endpoint"))
}
