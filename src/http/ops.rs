//! Liveness and readiness for load balancers and orchestrators.

use crate::app::AppState;
use actix_web::{HttpResponse, web};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz)).route("/readyz", web::get().to(readyz));
}

/// The process is up.
async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

/// Not draining, the key store answered, the database answers, and every migration this
/// binary knows is applied.
async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if state.lifecycle.shutdown.is_draining() {
        return HttpResponse::ServiceUnavailable().json(serde_json::json!({ "status": "draining" }));
    }
    if state.caches.is_unheard() {
        return HttpResponse::ServiceUnavailable().json(serde_json::json!({
            "status": "listener_not_hearing",
            "detail": "the change listener did not hear its own test notification: database.listen_url must reach PostgreSQL itself, not a transaction pooler",
        }));
    }
    if let Err(detail) = state.keys.store().readiness() {
        return HttpResponse::ServiceUnavailable()
            .json(serde_json::json!({ "status": "key_store_unavailable", "detail": detail }));
    }
    match crate::store::migrations_applied(&state.pool).await {
        Ok(true) => HttpResponse::Ok().json(serde_json::json!({ "status": "ready" })),
        Ok(false) => HttpResponse::ServiceUnavailable().json(serde_json::json!({ "status": "migrations_pending" })),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            HttpResponse::ServiceUnavailable().json(serde_json::json!({ "status": "database_unavailable" }))
        }
    }
}
