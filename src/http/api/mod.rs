//! JSON API for MCP servers under `/v1`, authenticated with a server-scope API key.

mod auth;
pub(crate) mod elicitations;
pub(crate) mod proxy;
pub(crate) mod token;

pub use auth::{AdminCaller, OperatorCaller, ServerCaller, TenantKey};

use crate::http::error::{ApiError, BODY_LIMIT, ErrorCode, json_error, path_error, query_error, resource};
use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v1")
            .app_data(
                web::JsonConfig::default().limit(BODY_LIMIT).content_type_required(true).error_handler(json_error),
            )
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .service(resource("/token", "POST").route(web::post().to(token::post_token)))
            .service(resource("/elicitations/{id}", "GET").route(web::get().to(elicitations::get_elicitation)))
            .service(
                resource("/elicitations/{id}/cancel", "POST").route(web::post().to(elicitations::cancel_elicitation)),
            )
            // Any method: the provider's API decides, within the provider's proxy rules.
            .service(web::resource("/proxy/{provider}/{path:.*}").route(web::route().to(proxy::proxy)))
            .default_service(web::to(not_found)),
    );
}

pub async fn not_found() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::NotFound, "no such endpoint"))
}

/// The size of the future `f` makes, read from its type: no state is needed to know it.
/// A request's futures are moved whole into actix-web's boxes, so their size is copied on
/// every request (`flows::token`).
#[cfg(test)]
fn future_size<A, F: std::future::Future>(_: impl Fn(A) -> F) -> usize {
    std::mem::size_of::<F>()
}

/// Asserts that the hot future `name`, of `size` bytes, is at most a quarter larger than
/// `measured` (what it took in the tests' build when this was written). A cold path awaited inline grows it
/// by far more: in the tests' build the refresh alone took `post_token`'s future from
/// 4,024 to 7,864 bytes, and the workload-token check the key check's from 1,440 to 5,168.
/// Measured in the tests' (debug) build: a release build lays futures out differently
/// (`post_token`'s was 18,296 bytes there before the cold awaits were boxed), and a new
/// rustc can move these figures; then they are measured again.
#[cfg(test)]
#[track_caller]
fn assert_small(name: &str, size: usize, measured: usize) {
    eprintln!("{name}: {size} bytes");
    assert!(size <= measured + measured / 4, "{name}'s future is {size} bytes: a cold path awaited inline?");
}
