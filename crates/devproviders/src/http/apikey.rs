//! A service that takes API keys and passwords rather than OAuth, for the `api_key` and
//! `basic` providers: `GET /api/me` answers who a credential belongs to, or 401.
//! Valid are the key `devkey-<name>` (in `X-Api-Key`, `Authorization: Bearer` or the
//! `api_key` query parameter) and HTTP Basic `<name>` / `devpass-<name>`, for a `<name>` of
//! 1-64 letters, digits, `-` and `_`.

use super::userinfo::numeric_id;
use crate::state::ProviderState;
use actix_web::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

pub(crate) const KEY_PREFIX: &str = "devkey-";
pub(crate) const PASSWORD_PREFIX: &str = "devpass-";

fn a_name(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|h| h.to_str().ok())
}

/// Whose credential the request carries, if any is valid.
fn owner(req: &HttpRequest, query: &web::Query<Vec<(String, String)>>) -> Option<String> {
    let key = header(req, "x-api-key")
        .or_else(|| header(req, AUTHORIZATION.as_str()).and_then(|h| h.strip_prefix("Bearer ")))
        .or_else(|| query.iter().find(|(k, _)| k == "api_key").map(|(_, v)| v.as_str()));
    if let Some(name) = key.and_then(|k| k.strip_prefix(KEY_PREFIX)) {
        return a_name(name).then(|| name.to_owned());
    }
    let basic = header(req, AUTHORIZATION.as_str()).and_then(|h| h.strip_prefix("Basic "))?;
    let decoded = String::from_utf8(STANDARD.decode(basic.trim()).ok()?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    (a_name(user) && password.strip_prefix(PASSWORD_PREFIX) == Some(user)).then(|| user.to_owned())
}

pub(crate) async fn me(
    state: web::Data<ProviderState>,
    req: HttpRequest,
    query: web::Query<Vec<(String, String)>>,
) -> HttpResponse {
    state.record(|stats| stats.credential_checks += 1);
    match owner(&req, &query) {
        Some(name) => HttpResponse::Ok().json(json!({ "id": numeric_id(&name), "login": name })),
        None => HttpResponse::Unauthorized()
            .insert_header((WWW_AUTHENTICATE, "Basic realm=\"dev\""))
            .json(json!({ "error": "invalid_credential" })),
    }
}
