//! `/login`, `/login/callback`, `/logout`.

use super::pages::{HINT_RETRY, PageError, PageKind, SignedOutPage, render};
use super::refusals::forbidden_csrf;
use super::session::{
    MaybeSession, cookie, login_cookie_name, relogin_cookie_name, removal, request_id, session_cookie_name,
};
use crate::app::AppState;
use crate::flows::login;
use crate::oauth::callback::CallbackQuery;
use actix_web::{HttpRequest, HttpResponse, web};
use time::OffsetDateTime;

#[derive(serde::Deserialize)]
pub struct LoginQuery {
    return_to: Option<String>,
    /// The IdP to sign in at, by name (`[idps.<name>]`); unset: the default `[idp]`. The
    /// connect page names the IdP of its link's tenant.
    idp: Option<String>,
}

pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<LoginQuery>,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let return_to = login::safe_return_to(&state.urls.base, q.return_to.as_deref().unwrap_or("/"))
        .map(|u| login::path_and_query(&u))
        .map_err(|why| {
            tracing::warn!(reason = ?why, "sign-in link refused");
            PageError::new(
                &rid,
                PageKind::Refused,
                "This sign-in link is not valid",
                "It points away from this service, which sign-in links never do.",
                HINT_RETRY,
            )
        })?;
    let idp = match q.idp.as_deref() {
        None => state.directory.idps.default(),
        Some(name) => state.directory.idps.by_name(name).ok_or_else(|| {
            tracing::warn!("sign-in link names an identity provider that is not configured");
            PageError::new(
                &rid,
                PageKind::Refused,
                "This sign-in link is not valid",
                "It names a sign-in service this service does not have.",
                HINT_RETRY,
            )
        })?,
    };
    // After a sign-out from us, let the person pick the account at the IdP.
    let choose_account = req.cookie(relogin_cookie_name(state.urls.secure_cookies)).is_some();
    let started = login::start(&state, idp, &return_to, choose_account, OffsetDateTime::now_utc())
        .await
        .map_err(|e| super::refusals::login_error(&rid, e))?;
    Ok(HttpResponse::SeeOther()
        .insert_header(("location", started.authorize_url.as_str()))
        .cookie(cookie(
            login_cookie_name(state.urls.secure_cookies),
            started.cookie,
            state.urls.secure_cookies,
            time::Duration::minutes(10),
        ))
        .finish())
}

/// `GET /login/callback`: the default IdP's answer.
pub async fn callback(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<CallbackQuery>,
) -> Result<HttpResponse, PageError> {
    answered(req, state, q, crate::domain::DEFAULT_IDP).await
}

/// `GET /login/callback/{idp}`: an `[idps.<name>]`'s answer.
pub async fn callback_of(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<CallbackQuery>,
    idp: web::Path<String>,
) -> Result<HttpResponse, PageError> {
    answered(req, state, q, &idp).await
}

async fn answered(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<CallbackQuery>,
    at: &str,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let login_cookie = req.cookie(login_cookie_name(state.urls.secure_cookies));
    let done = login::complete(&state, login_cookie.as_ref().map(|c| c.value()), &q, at, OffsetDateTime::now_utc())
        .await
        .map_err(|e| super::refusals::login_error(&rid, e))?;
    let ttl = done.expires_at - OffsetDateTime::now_utc();
    // Checked again as it leaves (the stored value is ours, but a Location is only ever an
    // absolute URL on our origin), falling back to the start page.
    let target = login::safe_return_to(&state.urls.base, &done.return_to)
        .unwrap_or_else(|_| state.urls.base.join("/").unwrap_or_else(|_| state.urls.base.clone()));
    Ok(HttpResponse::SeeOther()
        .insert_header(("location", target.as_str()))
        .cookie(cookie(session_cookie_name(state.urls.secure_cookies), done.session_id, state.urls.secure_cookies, ttl))
        .cookie(removal(login_cookie_name(state.urls.secure_cookies), state.urls.secure_cookies))
        .cookie(removal(relogin_cookie_name(state.urls.secure_cookies), state.urls.secure_cookies))
        .finish())
}

#[derive(serde::Deserialize)]
pub struct LogoutForm {
    csrf: Option<String>,
    /// The link to come back to (the refusal page sends the connect link).
    return_to: Option<String>,
}

/// `POST /logout`: ends our session, remembers that the next login must let the person
/// choose the account (`prompt=login`), and ends the IdP's session too where the IdP
/// supports RP-initiated logout; otherwise shows the signed-out page.
pub async fn logout(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: MaybeSession,
    form: web::Form<LogoutForm>,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let secure = state.urls.secure_cookies;
    let Some(s) = &session.0 else {
        // No session (expired, or a cross-site post, which carries no cookie): nothing to
        // end, and nothing is set or sent to the IdP on a stranger's behalf.
        let mut r = render(&SignedOutPage { sign_in_again: None }, None)?;
        r.add_cookie(&removal(session_cookie_name(secure), secure)).map_err(|e| PageError::internal(&rid.0, &e))?;
        return Ok(r);
    };
    if !s.csrf_matches(form.csrf.as_deref()) {
        return Err(forbidden_csrf(&rid, "Open the link from your assistant again."));
    }
    crate::store::sessions::delete_session(&state.pool, &s.info.id_hash)
        .await
        .map_err(|e| PageError::internal(&rid.0, &e))?;
    // The IdP the session was signed in at: its sign-out, and the sign-in that follows.
    let idp = state.directory.idps.by_issuer(&s.info.issuer).cloned();
    // A return path that does not pass the check is dropped, not an error: sign-out works.
    let back = form
        .return_to
        .as_deref()
        .and_then(|raw| login::safe_return_to(&state.urls.base, raw).ok())
        .map_or_else(|| "/".to_owned(), |u| login::path_and_query(&u));
    let idp_name = idp.as_ref().map(|i| i.name.as_str());
    let relogin =
        cookie(relogin_cookie_name(secure), relogin_value(idp_name, &back), secure, time::Duration::minutes(30));
    let logout_url = match &idp {
        Some(idp) => login::idp_logout_url(&state, idp).await,
        None => None,
    };
    let mut r = match logout_url {
        Some(url) => HttpResponse::SeeOther().insert_header(("location", url.as_str())).finish(),
        None => render(&SignedOutPage { sign_in_again: Some(&sign_in_url(&state, &back, idp_name)) }, None)?,
    };
    for c in [removal(session_cookie_name(secure), secure), relogin] {
        r.add_cookie(&c).map_err(|e| PageError::internal(&rid.0, &e))?;
    }
    Ok(r)
}

/// `GET /logout/done`: where the IdP sends the browser after its own sign-out.
pub async fn logout_done(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, PageError> {
    let again = req.cookie(relogin_cookie_name(state.urls.secure_cookies)).and_then(|c| {
        let raw: String =
            url::form_urlencoded::parse(format!("v={}", c.value()).as_bytes()).next().map(|(_, v)| v.into_owned())?;
        // `<idp> <path>`; a cookie of the release before holds the path alone (the default
        // IdP). The name is checked by `/login` when the link is followed.
        let (idp, raw) = match raw.split_once(' ') {
            Some((idp, path)) => (Some(idp), path),
            None => (None, raw.as_str()),
        };
        let back = login::safe_return_to(&state.urls.base, raw).ok()?;
        Some(sign_in_url(&state, &login::path_and_query(&back), idp))
    });
    render(&SignedOutPage { sign_in_again: again.as_deref() }, None)
}

/// The relogin cookie's value: the IdP's name and the path, percent-encoded (a path may
/// hold `;` or `,`, which must not reach the cookie syntax). A checked path has no space.
fn relogin_value(idp: Option<&str>, back: &str) -> String {
    let raw = match idp {
        Some(idp) => format!("{idp} {back}"),
        None => back.to_owned(),
    };
    url::form_urlencoded::byte_serialize(raw.as_bytes()).collect()
}

/// `<base>/login?return_to=<path>[&idp=<name>]`, absolute on our origin (the default IdP
/// is not named).
pub fn sign_in_url(state: &AppState, back: &str, idp: Option<&str>) -> String {
    let mut u = state.urls.base.clone();
    u.set_path("/login");
    let mut q = u.query_pairs_mut();
    q.clear().append_pair("return_to", back);
    if let Some(idp) = idp.filter(|i| *i != crate::domain::DEFAULT_IDP) {
        q.append_pair("idp", idp);
    }
    drop(q);
    u.to_string()
}
