//! Browser login at the primary identity provider (OIDC authorization code + PKCE +
//! nonce), and the server-side sessions it opens. The session's subject is the IdP's
//! `sub`: the same value the MCP access tokens carry.

use crate::app::AppState;
use crate::crypto;
use crate::domain::AuditKind;
use crate::oauth::flow::{self, FlowError};
use crate::oauth::resolve::IdpConfig;
use crate::oauth::resolve::Source;
use crate::store;
use std::sync::Arc;
use time::OffsetDateTime;
use url::Url;

const LOGIN_TTL: time::Duration = time::Duration::minutes(10);
pub const LOGIN_PURPOSE: &str = "login_state";
pub const SESSION_PURPOSE: &str = "session";
/// The vault purpose of the login cookie's sealed contents (bound to the state's hash).
const COOKIE_PURPOSE: &str = "login_cookie";

/// Why a `return_to` is refused (the sign-in page says it points away from us).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnToRefusal {
    /// Not a path-absolute reference (`/…`): a scheme, a host, or nothing.
    NotAPath,
    /// A backslash, a control character, or over 2 KiB: never in a link we make.
    Malformed,
    /// After normalisation (dot segments, percent-encoding) the path starts with `//` or
    /// `/\`, which a browser reads as another host (`/.//evil.example`, `/x/..//evil.example`).
    LeavesOrigin,
}

/// The only place a post-sign-in redirect target is made: `raw` must be a path on this
/// service. It is resolved against `base` and checked *after* resolution, and returned as
/// an absolute URL on `base`'s origin (DESIGN.md invariant 14), so no later step can turn it
/// into a network-path reference.
pub fn safe_return_to(base: &Url, raw: &str) -> Result<Url, ReturnToRefusal> {
    if !raw.starts_with('/') || raw.starts_with("//") {
        return Err(ReturnToRefusal::NotAPath);
    }
    // The URL parser silently drops tabs and newlines, so `/\t/evil` would become `//evil`.
    if raw.contains('\\') || raw.len() > 2048 || raw.chars().any(char::is_control) {
        return Err(ReturnToRefusal::Malformed);
    }
    let mut joined = base.join(raw).map_err(|_| ReturnToRefusal::Malformed)?;
    joined.set_fragment(None);
    // Measured again as it will be kept (percent-encoding can triple it): it travels in the
    // login cookie, which a browser drops silently past 4 KB.
    if path_and_query(&joined).len() > 2048 {
        return Err(ReturnToRefusal::Malformed);
    }
    let path = joined.path();
    if joined.origin() != base.origin() || path.starts_with("//") || path.starts_with("/\\") {
        return Err(ReturnToRefusal::LeavesOrigin);
    }
    Ok(joined)
}

/// The path and query of a checked target: what the login state stores.
pub fn path_and_query(u: &Url) -> String {
    match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_owned(),
    }
}

/// A sign-in in progress, sealed into its browser's login cookie: no row is written for
/// it (`/login` needs no sign-in, and a row per request would let anyone fill a table). The
/// sealing binds it to the OAuth `state` (associated data: the state's hash), so it opens
/// only with the `state` the IdP sends back, in the browser that started it; it expires
/// with `expires_at`, and a sign-in the IdP completed spends its state
/// (`store::sessions::spend_login_state`), so the same answer is not used twice.
#[derive(serde::Serialize, serde::Deserialize)]
struct SealedLogin {
    /// The name of the IdP the browser was sent to (a cookie of the release before, which
    /// had one IdP, names none: the default).
    #[serde(default = "default_idp")]
    idp: String,
    verifier: String,
    nonce: String,
    return_to: String,
    /// Unix seconds.
    expires_at: i64,
}

fn default_idp() -> String {
    crate::domain::DEFAULT_IDP.to_owned()
}

/// A started login: where to send the browser, and the login cookie's value.
pub struct LoginStart {
    pub authorize_url: Url,
    /// `<key id>.<sealed, base64url>`.
    pub cookie: String,
}

/// The login cookie's value: the key id and what it sealed.
fn cookie_value(key_id: &str, sealed: &[u8]) -> String {
    use base64::Engine;
    format!("{key_id}.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed))
}

/// The parts of a login cookie's value; `None` for anything we did not make.
fn cookie_parts(value: &str) -> Option<(&str, Vec<u8>)> {
    use base64::Engine;
    let (key_id, sealed) = value.rsplit_once('.')?;
    Some((key_id, base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(sealed).ok()?))
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("the identity provider is not reachable: {0}")]
    Unavailable(#[source] crate::oauth::resolve::ResolveError),
    #[error("the login link is unknown, used, expired or from another browser")]
    StateUnusable,
    #[error("the answer arrived at another identity provider's callback")]
    OtherIdpsCallback,
    #[error("the identity provider reported an error: {0}")]
    ProviderError(String),
    #[error("RFC 9207 issuer check failed: {0}")]
    Iss(&'static str),
    #[error("no code in the response")]
    MissingCode,
    #[error("login failed: {0}")]
    Flow(FlowError),
    #[error("the subject from the identity provider is not usable")]
    BadSubject,
    #[error(transparent)]
    Fault(#[from] super::Fault),
}
super::fault::wraps_fault!(LoginError);

/// The IdP's metadata and keys; when they cannot be had, the failure is in the audit trail
/// (`login_failed`, reason `idp_unavailable`) as well as on the page.
async fn server_of(state: &AppState, idp: &IdpConfig) -> Result<Arc<flow::AuthServer>, LoginError> {
    match state.resolver.idp(&state.outbound, idp).await {
        Ok(server) => Ok(server),
        Err(e) => {
            record_failure(&state.pool, idp, "idp_unavailable").await;
            Err(LoginError::Unavailable(e))
        }
    }
}

/// A `login_failed` audit event, at most one a minute per IdP and instance: `/login` needs
/// no sign-in, so an outage hammered by browsers must not become a row per request, and one
/// IdP's outage must not hide another's. Best effort: the page the person sees does not
/// depend on it.
async fn record_failure(db: &crate::store::Db, idp: &IdpConfig, reason: &'static str) {
    static LAST_MINUTE: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, i64>>> =
        std::sync::LazyLock::new(Default::default);
    let minute = OffsetDateTime::now_utc().unix_timestamp().div_euclid(60);
    {
        let mut last = LAST_MINUTE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.insert(idp.name.clone(), minute) == Some(minute) {
            return;
        }
    }
    let mut ev = store::audit::AuditEvent::new(AuditKind::LoginFailed);
    ev.detail = serde_json::json!({ "reason": reason, "idp": idp.name });
    if let Err(e) = store::audit::insert_event(db, &ev).await {
        tracing::warn!(error = %e, "login_failed not recorded");
    }
}

/// Starts a login at `idp`. `choose_account` (the person signed out of us, e.g. to switch accounts)
/// asks the IdP to show its sign-in again (`prompt=login`, OIDC Core §3.1.2.1) instead of
/// silently reusing the session it holds: without it the IdP signs the same person in again.
pub async fn start(
    state: &AppState,
    idp: &IdpConfig,
    return_to: &str,
    choose_account: bool,
    now: OffsetDateTime,
) -> Result<LoginStart, LoginError> {
    let server = server_of(state, idp).await?;
    let prompt = [("prompt".to_owned(), "login".to_owned())];
    let extra: &[(String, String)] = if choose_account { &prompt } else { &[] };
    let req = flow::authorize(&server, &state.urls.login_redirect_uri(idp), &idp.scopes.join(" "), extra, true);
    let state_hash = crypto::lookup_hash(LOGIN_PURPOSE, &req.state);
    let secret = zeroize::Zeroizing::new(serde_json::to_vec(&SealedLogin {
        idp: idp.name.clone(),
        verifier: req.pkce_verifier,
        nonce: req.nonce.unwrap_or_default(),
        return_to: return_to.to_owned(),
        expires_at: (now + LOGIN_TTL).unix_timestamp(),
    })?);
    let key = state.keys.sealing(crate::keys::Scope::Service).await?;
    let sealed = key.seal_aux(COOKIE_PURPOSE, &state_hash, &secret)?;
    Ok(LoginStart { authorize_url: req.url, cookie: cookie_value(key.key_id(), &sealed) })
}

/// OpenID Connect RP-Initiated Logout 1.0 §2: where to send the browser to end its session
/// at the IdP too, when the IdP has an `end_session_endpoint`. The IdP sends it back to
/// `<base>/logout/done` (register that as a post-logout redirect URI). `idp`: the one that
/// signed the session in.
pub async fn idp_logout_url(state: &AppState, idp: &IdpConfig) -> Option<Url> {
    let server = match state.resolver.idp(&state.outbound, idp).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "identity provider unavailable: signing out here only");
            return None;
        }
    };
    let mut url = server.end_session_url.clone()?;
    let mut back = state.urls.base.clone();
    back.set_path("/logout/done");
    url.query_pairs_mut()
        .append_pair("client_id", &idp.client_id)
        .append_pair("post_logout_redirect_uri", back.as_str());
    Some(url)
}

/// A finished login: the new session's id (for the cookie) and where to go.
pub struct LoginDone {
    pub session_id: String,
    pub return_to: String,
    pub expires_at: OffsetDateTime,
}

/// The sign-in the login cookie holds, if it opens with `state_hash` and has not expired.
async fn open_cookie(
    keys: &crate::keys::Keys,
    cookie: &str,
    state_hash: &[u8],
    now: OffsetDateTime,
) -> Option<SealedLogin> {
    let (key_id, sealed) = cookie_parts(cookie)?;
    // Any failure is the browser's problem, never ours: a cookie of another sign-in, a
    // changed byte, or one sealed under a key since removed.
    let opened = keys
        .opening(key_id, crate::keys::Scope::Service)
        .await
        .ok()?
        .open_aux(COOKIE_PURPOSE, state_hash, &sealed)
        .ok()?;
    let login: SealedLogin = serde_json::from_slice(&opened).ok()?;
    (login.expires_at > now.unix_timestamp()).then_some(login)
}

/// Completes a sign-in whose answer arrived at the callback of the IdP named `at`
/// (`default` for `/login/callback`).
pub async fn complete(
    state: &AppState,
    cookie: Option<&str>,
    q: &crate::oauth::callback::CallbackQuery,
    at: &str,
    now: OffsetDateTime,
) -> Result<LoginDone, LoginError> {
    let raw_state = q.state.as_deref().filter(|s| crypto::looks_like_token(s)).ok_or(LoginError::StateUnusable)?;
    let state_hash = crypto::lookup_hash(LOGIN_PURPOSE, raw_state);
    let secret = (match cookie {
        Some(c) => open_cookie(&state.keys, c, &state_hash, now).await,
        None => None,
    })
    .ok_or(LoginError::StateUnusable)?;
    // The IdP this browser was sent to (sealed with the state, so the answer is checked
    // against that IdP alone); one no longer configured ends the sign-in, and so does an
    // answer at another IdP's callback (a mix-up: that IdP sent it, not this one).
    if secret.idp != at {
        return Err(LoginError::OtherIdpsCallback);
    }
    let idp = state.directory.idps.by_name(&secret.idp).cloned().ok_or(LoginError::StateUnusable)?;
    let server = server_of(state, &idp).await?;
    flow::check_iss(&server, q.iss.as_deref()).map_err(LoginError::Iss)?;
    if let Some(e) = &q.error {
        let code: String = e.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
        return Err(LoginError::ProviderError(code));
    }
    let code = q.code.as_deref().filter(|c| !c.is_empty() && c.len() <= 2048).ok_or(LoginError::MissingCode)?;
    let tokens =
        flow::exchange_code(&server, &state.outbound, &state.urls.login_redirect_uri(&idp), code, &secret.verifier)
            .await
            .map_err(LoginError::Flow)?;
    let raw = tokens
        .id_token
        .as_ref()
        .ok_or(LoginError::Flow(FlowError::IdToken(crate::oauth::id_token::IdTokenRefusal::Missing)))?;
    let claims = state
        .resolver
        // The time of the check, not of the request: the exchange took a while.
        .verify_id_token(
            &state.outbound,
            Source::Idp(&idp),
            server.clone(),
            raw,
            &secret.nonce,
            OffsetDateTime::now_utc(),
        )
        .await
        .map_err(LoginError::Flow)?;
    let subject = crate::domain::Subject::parse(&claims.subject).map_err(|_| LoginError::BadSubject)?;
    // Spent only now, after the IdP completed it: a row per sign-in the IdP vouched for,
    // never per request. (The IdP's own one-time code already refuses most replays.)
    let expires = OffsetDateTime::from_unix_timestamp(secret.expires_at).unwrap_or(now);
    if !store::sessions::spend_login_state(&state.pool, &state_hash, expires).await? {
        return Err(LoginError::StateUnusable);
    }

    let session_id = crypto::random_token(32);
    let ttl = time::Duration::try_from(state.lifetimes.session).unwrap_or(time::Duration::hours(1));
    let expires_at = now + ttl;
    store::sessions::insert_session(
        &state.pool,
        &crypto::lookup_hash(SESSION_PURPOSE, &session_id),
        &subject,
        &claims.issuer,
        expires_at,
    )
    .await?;
    Ok(LoginDone { session_id, return_to: secret.return_to, expires_at })
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_to_is_checked_after_normalisation_and_made_absolute_on_our_origin() {
        let base = Url::parse("https://connect.example.com").unwrap();
        let ok = |raw: &str| safe_return_to(&base, raw).map(|u| u.to_string());
        assert_eq!(ok("/connect/github?e=abc").as_deref(), Ok("https://connect.example.com/connect/github?e=abc"));
        assert_eq!(ok("/").as_deref(), Ok("https://connect.example.com/"));
        assert_eq!(ok("/a/./b/../c#frag").as_deref(), Ok("https://connect.example.com/a/c"));
        assert_eq!(ok("/%2e%2e/x").as_deref(), Ok("https://connect.example.com/x"));
        use ReturnToRefusal::*;
        for (raw, why) in [
            ("https://evil.example/", NotAPath),
            ("//evil.example/x", NotAPath),
            ("evil.example", NotAPath),
            ("javascript:alert(1)", NotAPath),
            ("", NotAPath),
            ("/\\evil.example", Malformed),
            ("\\\\evil.example", NotAPath),
            ("/x\r\nLocation: https://evil.example", Malformed),
            ("/\t/evil.example", Malformed),
            // Dot segments and their percent-encoded forms that resolve to `//host`.
            ("/.//evil.example/p", LeavesOrigin),
            ("/x/..//evil.example", LeavesOrigin),
            ("/%2e//evil.example", LeavesOrigin),
            ("/%2E//evil.example", LeavesOrigin),
            ("/x/%2e%2e//evil.example", LeavesOrigin),
            ("/a/b/../..//evil.example", LeavesOrigin),
            ("/././/evil.example", LeavesOrigin),
        ] {
            assert_eq!(safe_return_to(&base, raw), Err(why), "{raw:?}");
        }
        assert_eq!(safe_return_to(&base, &format!("/{}", "a".repeat(2048))), Err(Malformed));
        // Within 2 KiB as sent, over it once percent-encoded (as the login cookie keeps it).
        assert_eq!(safe_return_to(&base, &format!("/{}", "é".repeat(700))), Err(Malformed));
        assert!(safe_return_to(&base, &format!("/{}", "é".repeat(300))).is_ok());
    }

    #[test]
    fn path_and_query_is_what_a_checked_target_stores() {
        let base = Url::parse("https://connect.example.com").unwrap();
        let u = safe_return_to(&base, "/connect/x?e=1").unwrap();
        assert_eq!(path_and_query(&u), "/connect/x?e=1");
        assert_eq!(path_and_query(&safe_return_to(&base, "/").unwrap()), "/");
    }
}
