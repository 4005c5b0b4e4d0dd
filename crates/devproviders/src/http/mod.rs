//! The provider's HTTP surface. Protocol endpoints answer JSON errors as RFC 6749 §5.2
//! describes; the browser endpoint answers HTML.

mod apikey;
mod authorize;
mod client_auth;
mod discovery;
mod error;
mod params;
mod revoke;
mod token;
mod userinfo;

use actix_web::web;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/.well-known/openid-configuration", web::get().to(discovery::metadata))
        .route("/.well-known/oauth-authorization-server", web::get().to(discovery::metadata))
        .route("/jwks", web::get().to(discovery::jwks))
        .route("/authorize", web::get().to(authorize::show))
        .route("/authorize", web::post().to(authorize::decide))
        .route("/token", web::post().to(token::token))
        .route("/userinfo", web::get().to(userinfo::userinfo))
        .route("/userinfo", web::post().to(userinfo::userinfo))
        .route("/revoke", web::post().to(revoke::revoke))
        .route("/api/me", web::get().to(apikey::me));
}
