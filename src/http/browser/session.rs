//! The browser session: a random 256-bit id in an HttpOnly cookie, only its hash in the
//! database. The CSRF token of a session is derived from its id, so it needs no storage
//! and dies with the session.

use super::pages::PageError;
use crate::app::AppState;
use crate::crypto;
use crate::flows::connect::SessionInfo;
use crate::flows::login::SESSION_PURPOSE;
use crate::http::middleware::RequestId;
use actix_web::cookie::{Cookie, SameSite};
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use base64::Engine;
use futures_util::future::LocalBoxFuture;
use time::OffsetDateTime;

pub fn session_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-mcpc_session" } else { "mcpc_session" }
}

pub fn login_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-mcpc_login" } else { "mcpc_login" }
}

/// Set by sign-out: the next login asks the IdP to let the person choose the account. Its
/// value is where to return (a path on this service, checked again when used).
pub fn relogin_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-mcpc_relogin" } else { "mcpc_relogin" }
}

/// A cookie as our pages set them: HttpOnly, SameSite=Lax, Path=/, Secure on https
/// (which the `__Host-` prefix requires).
pub fn cookie(name: &'static str, value: String, secure: bool, max_age: time::Duration) -> Cookie<'static> {
    Cookie::build(name, value)
        .path("/")
        .http_only(true)
        .secure(secure)
        .same_site(SameSite::Lax)
        .max_age(max_age)
        .finish()
}

pub fn removal(name: &'static str, secure: bool) -> Cookie<'static> {
    let mut c = cookie(name, String::new(), secure, time::Duration::ZERO);
    c.make_removal();
    c
}

/// A logged-in browser.
#[derive(Debug, Clone)]
pub struct BrowserSession {
    pub info: SessionInfo,
    csrf: String,
}

impl BrowserSession {
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Constant-time check of a submitted CSRF token.
    pub fn csrf_matches(&self, submitted: Option<&str>) -> bool {
        submitted.is_some_and(|s| crypto::constant_time_eq(s.as_bytes(), self.csrf.as_bytes()))
    }
}

fn csrf_for(session_id: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(crypto::lookup_hash("csrf", session_id))
}

/// The session, if the browser has a live one. A database error is an error page, never
/// "not logged in".
pub struct MaybeSession(pub Option<BrowserSession>);

pub fn request_id(req: &HttpRequest) -> RequestId {
    req.extensions().get::<RequestId>().cloned().unwrap_or_else(|| RequestId("-".to_owned()))
}

impl FromRequest for MaybeSession {
    type Error = PageError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let rid = request_id(&req);
            let state = req
                .app_data::<web::Data<AppState>>()
                .cloned()
                .ok_or_else(|| PageError::internal(&rid.0, &"application state missing"))?;
            let Some(c) = req.cookie(session_cookie_name(state.urls.secure_cookies)) else {
                return Ok(MaybeSession(None));
            };
            let id = c.value();
            if !crypto::looks_like_token(id) {
                return Ok(MaybeSession(None));
            }
            let id_hash = crypto::lookup_hash(SESSION_PURPOSE, id);
            let row = crate::store::sessions::find_session(&state.pool, &id_hash, OffsetDateTime::now_utc())
                .await
                .map_err(|e| PageError::internal(&rid.0, &e))?;
            let Some(row) = row else { return Ok(MaybeSession(None)) };
            // A session of an IdP no longer configured says nothing now.
            if state.directory.idps.by_issuer(&row.issuer).is_none() {
                return Ok(MaybeSession(None));
            }
            let info = SessionInfo { subject: row.subject, issuer: row.issuer, id_hash };
            Ok(MaybeSession(Some(BrowserSession { info, csrf: csrf_for(id) })))
        })
    }
}
