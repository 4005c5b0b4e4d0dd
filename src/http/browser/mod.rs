//! HTML pages for people: login at the primary IdP, the connect/consent pages and the
//! provider callback. No JavaScript; every page is unframeable, sends no referrer and is
//! never cached (see `http::middleware`).

mod connect;
mod connections;
mod login;
mod pages;
mod refusals;
mod session;

pub use pages::PageError;
pub use session::{BrowserSession, MaybeSession};

use actix_web::{HttpResponse, web};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/assets/style.css", web::get().to(style))
        .route("/login", web::get().to(login::login))
        .route("/login/callback", web::get().to(login::callback))
        .route("/login/callback/{idp}", web::get().to(login::callback_of))
        .route("/logout", web::post().to(login::logout))
        .route("/logout/done", web::get().to(login::logout_done))
        .route("/connect/{provider}", web::get().to(connect::show))
        .route("/connect/{provider}/authorize", web::post().to(connect::authorize))
        .route("/connect/{provider}/callback", web::get().to(connect::callback))
        // Up to five fields of up to 4096 characters each, of up to 4 bytes, percent-encoded.
        .service(
            web::resource("/connect/{provider}/credential")
                .app_data(web::FormConfig::default().limit(256 * 1024))
                .route(web::post().to(connect::credential)),
        )
        .route("/clients/{provider}", web::get().to(client_metadata))
        .route("/.well-known/jwks.json", web::get().to(jwks))
        .route("/connections", web::get().to(connections::show))
        .route("/connections/disconnect", web::post().to(connections::disconnect));
}

/// `GET /clients/{provider}`: the Client ID Metadata Document mcp-connect is known by at a
/// remote MCP server's authorization server (its URL is the client id); 404 for anything
/// else.
async fn client_metadata(state: web::Data<crate::app::AppState>, path: web::Path<String>) -> HttpResponse {
    let doc = crate::domain::ProviderId::parse(&path)
        .ok()
        .and_then(|id| state.directory.providers.get(&id))
        // A client registered by hand is known by its own id: no document.
        .filter(|p| p.client().is_none())
        .and_then(|p| crate::flows::remote::client_metadata(&state.urls, &p));
    match doc {
        Some(d) => HttpResponse::Ok().insert_header(("cache-control", "public, max-age=300")).json(d),
        None => HttpResponse::NotFound()
            .json(serde_json::json!({"error": "not_found", "error_description": "no such client"})),
    }
}

/// `GET /.well-known/jwks.json`: the public keys mcp-connect signs its `private_key_jwt`
/// client assertions with (docs/keys.md), for providers and IdPs to register as its
/// `jwks_uri`. A key about to sign is here before it does; one that stopped stays a while.
async fn jwks(state: web::Data<crate::app::AppState>) -> HttpResponse {
    let Some(keys) = state.resolver.client_keys() else {
        return HttpResponse::NotFound()
            .json(serde_json::json!({"error": "not_found", "error_description": "no keys"}));
    };
    match keys.jwks(time::OffsetDateTime::now_utc()).await {
        Ok(set) => HttpResponse::Ok().insert_header(("cache-control", "public, max-age=300")).json(set),
        Err(e) => {
            tracing::error!(error = %e, "the client signing keys could not be read");
            HttpResponse::ServiceUnavailable()
                .insert_header(("retry-after", "2"))
                .json(serde_json::json!({"error": "temporarily_unavailable", "error_description": "retry later"}))
        }
    }
}

async fn style() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header(("cache-control", "public, max-age=3600"))
        .body(include_str!("../../../assets/style.css"))
}
