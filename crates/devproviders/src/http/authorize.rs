//! The authorization endpoint (RFC 6749 §4.1.1): a page where the person signs in (identity
//! provider role) or consents (downstream role), and the redirect back to the client with a
//! code or an error, carrying `iss` as RFC 9207 describes.

use crate::config::{ClientRegistration, Role};
use crate::crypto::{random_token, token_hash};
use crate::grants::PendingCode;
use crate::pkce;
use crate::state::ProviderState;
use crate::switches::{IssMode, WRONG_ISSUER};
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, LOCATION};
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use std::collections::{BTreeMap, BTreeSet};
use time::OffsetDateTime;
use url::Url;

/// RFC 6749 §4.1.2 recommends at most ten minutes; a minute is plenty on one machine.
const CODE_TTL: time::Duration = time::Duration::seconds(60);
const MAX_USERNAME_LEN: usize = 200;
/// Prefilled on the consent page: a downstream account usually exists already.
const DEFAULT_DOWNSTREAM_ACCOUNT: &str = "dev-user";
/// Names the form adds; they are never carried over as hidden inputs.
const FORM_FIELDS: [&str; 2] = ["username", "decision"];

#[derive(Template)]
#[template(path = "authorize.html")]
struct AuthorizePage<'a> {
    display_name: &'a str,
    client_id: &'a str,
    scopes: Vec<&'a str>,
    params: Vec<&'a (String, String)>,
    identity_provider: bool,
    username: &'a str,
    error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    display_name: &'a str,
    message: &'a str,
}

/// An authorization request that passed every check.
#[derive(Debug)]
struct AuthorizeRequest {
    /// Every parameter as received, carried through the form as hidden inputs.
    params: Vec<(String, String)>,
    client_id: String,
    redirect_uri: String,
    scope: String,
    state: Option<String>,
    code_challenge: String,
    nonce: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum Rejection {
    /// RFC 6749 §4.1.2.1: without a trusted redirect URI the error is shown, never redirected.
    Page(&'static str),
    /// The redirect URI is trusted, so the error goes back to the client.
    Redirect { redirect_uri: String, state: Option<String>, error: &'static str, description: &'static str },
}

/// Checks in the order RFC 6749 §4.1.2.1 implies: client and redirect URI first (errors
/// shown here), then the rest (errors sent to the client).
fn validate(
    pairs: Vec<(String, String)>,
    lookup: impl Fn(&str) -> Option<ClientRegistration>,
) -> Result<AuthorizeRequest, Rejection> {
    let mut first: BTreeMap<&str, &str> = BTreeMap::new();
    let mut repeated: BTreeSet<&str> = BTreeSet::new();
    for (name, value) in &pairs {
        if first.contains_key(name.as_str()) {
            repeated.insert(name);
        } else if !value.is_empty() {
            first.insert(name, value);
        }
    }
    if repeated.contains("client_id") || repeated.contains("redirect_uri") {
        return Err(Rejection::Page("The request names its client or redirect URI more than once."));
    }
    let client_id = *first.get("client_id").ok_or(Rejection::Page("The request names no client (client_id)."))?;
    let client = lookup(client_id).ok_or(Rejection::Page("The request comes from an unknown client."))?;
    let redirect_uri =
        *first.get("redirect_uri").ok_or(Rejection::Page("The request has no redirect URI (redirect_uri)."))?;
    // OAuth 2.1 §2.3.1 and the security BCP §4.1.3: exact string comparison, no patterns.
    if !client.redirect_uris.iter().any(|registered| registered == redirect_uri) {
        return Err(Rejection::Page("The redirect URI is not registered for this client."));
    }
    if Url::parse(redirect_uri).is_err() {
        return Err(Rejection::Page("The registered redirect URI is not a valid URL."));
    }
    let state = first.get("state").map(|s| (*s).to_owned());
    let to_client = |error, description| Rejection::Redirect {
        redirect_uri: redirect_uri.to_owned(),
        state: state.clone(),
        error,
        description,
    };
    if !repeated.is_empty() {
        return Err(to_client("invalid_request", "a parameter is repeated"));
    }
    match first.get("response_type") {
        None => return Err(to_client("invalid_request", "response_type is missing")),
        Some(&"code") => {}
        Some(_) => return Err(to_client("unsupported_response_type", "only response_type=code is supported")),
    }
    // OAuth 2.1 §4.1.1: PKCE is required; `plain` (the default when no method is named) is not offered.
    let code_challenge =
        *first.get("code_challenge").ok_or_else(|| to_client("invalid_request", "code_challenge is required"))?;
    if first.get("code_challenge_method") != Some(&"S256") {
        return Err(to_client("invalid_request", "code_challenge_method must be S256"));
    }
    if !pkce::challenge_is_well_formed(code_challenge) {
        return Err(to_client("invalid_request", "code_challenge is malformed"));
    }
    Ok(AuthorizeRequest {
        client_id: client_id.to_owned(),
        redirect_uri: redirect_uri.to_owned(),
        scope: first.get("scope").map(|s| (*s).to_owned()).unwrap_or_default(),
        state: state.clone(),
        code_challenge: code_challenge.to_owned(),
        nonce: first.get("nonce").map(|s| (*s).to_owned()),
        params: pairs.clone(),
    })
}

/// `GET /authorize`: records the request for tests, then shows the page or the error.
pub(crate) async fn show(state: web::Data<ProviderState>, req: HttpRequest) -> HttpResponse {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(req.query_string().as_bytes()).into_owned().collect();
    let mut recorded = BTreeMap::new();
    for (name, value) in &pairs {
        recorded.entry(name.clone()).or_insert_with(|| value.clone());
    }
    state.record(|stats| {
        stats.authorize_requests += 1;
        stats.last_authorize_params = Some(recorded);
    });
    match validate(pairs, |id| state.client(id)) {
        Err(rejection) => reject(&state, rejection),
        Ok(request) => {
            // OIDC `login_hint`: the account to offer first (mcp-connect sends the MCP
            // subject to a provider configured with `login_hint = "subject"`).
            let hint = request
                .params
                .iter()
                .find(|(k, v)| k == "login_hint" && !v.trim().is_empty() && v.len() <= MAX_USERNAME_LEN)
                .map(|(_, v)| v.as_str());
            let username = match state.role {
                Role::IdentityProvider => "",
                Role::Downstream => hint.unwrap_or(DEFAULT_DOWNSTREAM_ACCOUNT),
            };
            page(&state, &request, username, None)
        }
    }
}

/// `POST /authorize`: the person's answer. Everything is checked again because the form's
/// hidden inputs are as untrusted as the original query.
pub(crate) async fn decide(
    state: web::Data<ProviderState>,
    form: Result<web::Form<Vec<(String, String)>>, actix_web::Error>,
) -> HttpResponse {
    let Ok(web::Form(pairs)) = form else {
        return error_page(&state, StatusCode::BAD_REQUEST, "The form could not be read.");
    };
    let (fields, original): (Vec<_>, Vec<_>) =
        pairs.into_iter().partition(|(name, _)| FORM_FIELDS.contains(&name.as_str()));
    let field = |wanted: &str| fields.iter().rev().find(|(name, _)| name == wanted).map(|(_, v)| v.trim());
    let request = match validate(original, |id| state.client(id)) {
        Ok(request) => request,
        Err(rejection) => return reject(&state, rejection),
    };
    match field("decision") {
        Some("deny") => {
            tracing::info!(client_id = %request.client_id, "authorization denied");
            redirect_to_client(
                &state,
                &request.redirect_uri,
                &[("error", "access_denied"), ("error_description", "the user denied the request")],
                request.state.as_deref(),
            )
        }
        Some("allow") => {
            let username = field("username").unwrap_or_default();
            if username.is_empty() {
                return page(&state, &request, username, Some("Enter a name to continue."));
            }
            if username.len() > MAX_USERNAME_LEN {
                return page(&state, &request, "", Some("That name is too long."));
            }
            let code = random_token();
            let now = OffsetDateTime::now_utc();
            state.grants().insert_code(
                token_hash(&code),
                PendingCode {
                    client_id: request.client_id.clone(),
                    redirect_uri: request.redirect_uri.clone(),
                    code_challenge: request.code_challenge.clone(),
                    scope: request.scope.clone(),
                    nonce: request.nonce.clone(),
                    username: username.to_owned(),
                    auth_time: now,
                    expires_at: now + CODE_TTL,
                },
                now,
            );
            tracing::info!(client_id = %request.client_id, "authorization code issued");
            redirect_to_client(&state, &request.redirect_uri, &[("code", &code)], request.state.as_deref())
        }
        _ => error_page(&state, StatusCode::BAD_REQUEST, "Choose one of the buttons to answer."),
    }
}

fn reject(state: &ProviderState, rejection: Rejection) -> HttpResponse {
    match rejection {
        Rejection::Page(message) => {
            tracing::info!(reason = message, "authorization request refused on the page");
            error_page(state, StatusCode::BAD_REQUEST, message)
        }
        Rejection::Redirect { redirect_uri, state: client_state, error, description } => {
            tracing::info!(error, "authorization request refused to the client");
            redirect_to_client(
                state,
                &redirect_uri,
                &[("error", error), ("error_description", description)],
                client_state.as_deref(),
            )
        }
    }
}

/// 303 so the browser follows with a GET whatever the form method was. Parameters are
/// appended with proper encoding to whatever query the redirect URI already has (RFC 6749 §3.1.2).
fn redirect_to_client(
    state: &ProviderState,
    redirect_uri: &str,
    pairs: &[(&str, &str)],
    client_state: Option<&str>,
) -> HttpResponse {
    let Ok(mut url) = Url::parse(redirect_uri) else {
        return error_page(state, StatusCode::BAD_REQUEST, "The registered redirect URI is not a valid URL.");
    };
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in pairs {
            query.append_pair(name, value);
        }
        if let Some(client_state) = client_state {
            query.append_pair("state", client_state);
        }
        match state.switches.snapshot().iss_mode {
            IssMode::Correct => {
                query.append_pair("iss", &state.issuer);
            }
            IssMode::Wrong => {
                query.append_pair("iss", WRONG_ISSUER);
            }
            IssMode::Missing => {}
        }
    }
    HttpResponse::SeeOther().insert_header((LOCATION, url.as_str())).finish()
}

fn page(state: &ProviderState, request: &AuthorizeRequest, username: &str, error: Option<&str>) -> HttpResponse {
    let status = if error.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    let page = AuthorizePage {
        display_name: &state.display_name,
        client_id: &request.client_id,
        scopes: request.scope.split_whitespace().collect(),
        params: request.params.iter().filter(|(name, _)| !FORM_FIELDS.contains(&name.as_str())).collect(),
        identity_provider: state.role == Role::IdentityProvider,
        username,
        error,
    };
    html(status, page.render())
}

fn error_page(state: &ProviderState, status: StatusCode, message: &str) -> HttpResponse {
    html(status, ErrorPage { display_name: &state.display_name, message }.render())
}

fn html(status: StatusCode, rendered: Result<String, askama::Error>) -> HttpResponse {
    match rendered {
        Ok(body) => HttpResponse::build(status).insert_header((CONTENT_TYPE, "text/html; charset=utf-8")).body(body),
        Err(e) => {
            tracing::error!(error = %e, "cannot render a page");
            HttpResponse::InternalServerError().body("The page could not be rendered.")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    fn lookup(id: &str) -> Option<ClientRegistration> {
        (id == "app").then(|| ClientRegistration {
            client_id: "app".into(),
            client_secret: "s".into(),
            redirect_uris: vec!["http://127.0.0.1:9/cb?x=1".into()],
        })
    }

    fn good() -> Vec<(String, String)> {
        [
            ("response_type", "code"),
            ("client_id", "app"),
            ("redirect_uri", "http://127.0.0.1:9/cb?x=1"),
            ("state", "st"),
            ("code_challenge", CHALLENGE),
            ("code_challenge_method", "S256"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn with(name: &str, value: Option<&str>) -> Vec<(String, String)> {
        let mut pairs: Vec<_> = good().into_iter().filter(|(k, _)| k != name).collect();
        if let Some(value) = value {
            pairs.push((name.to_owned(), value.to_owned()));
        }
        pairs
    }

    fn redirect_error(pairs: Vec<(String, String)>) -> &'static str {
        match validate(pairs, lookup).unwrap_err() {
            Rejection::Redirect { error, state, .. } => {
                assert_eq!(state.as_deref(), Some("st"));
                error
            }
            other => panic!("expected a redirect, got {other:?}"),
        }
    }

    #[test]
    fn a_complete_request_passes() {
        let request = validate(good(), lookup).unwrap();
        assert_eq!(request.code_challenge, CHALLENGE);
        assert_eq!(request.scope, "");
    }

    #[test]
    fn an_unknown_client_is_shown_an_error_page() {
        assert!(matches!(validate(with("client_id", Some("evil")), lookup), Err(Rejection::Page(_))));
        assert!(matches!(validate(with("client_id", None), lookup), Err(Rejection::Page(_))));
    }

    #[test]
    fn a_redirect_uri_that_differs_in_any_way_is_shown_an_error_page() {
        for uri in ["http://127.0.0.1:9/cb", "http://127.0.0.1:9/cb?x=1&y=2", "http://127.0.0.1:9/cb?x=1/", "x"] {
            assert!(matches!(validate(with("redirect_uri", Some(uri)), lookup), Err(Rejection::Page(_))), "{uri}");
        }
        assert!(matches!(validate(with("redirect_uri", None), lookup), Err(Rejection::Page(_))));
    }

    #[test]
    fn a_repeated_redirect_uri_is_shown_an_error_page() {
        let mut pairs = good();
        pairs.push(("redirect_uri".into(), "http://127.0.0.1:9/cb?x=1".into()));
        assert!(matches!(validate(pairs, lookup), Err(Rejection::Page(_))));
    }

    #[test]
    fn a_repeated_other_parameter_goes_back_as_invalid_request() {
        let mut pairs = good();
        pairs.push(("scope".into(), "a".into()));
        pairs.push(("scope".into(), "b".into()));
        assert_eq!(redirect_error(pairs), "invalid_request");
    }

    #[test]
    fn a_missing_or_plain_challenge_goes_back_as_invalid_request() {
        assert_eq!(redirect_error(with("code_challenge", None)), "invalid_request");
        assert_eq!(redirect_error(with("code_challenge_method", None)), "invalid_request");
        assert_eq!(redirect_error(with("code_challenge_method", Some("plain"))), "invalid_request");
        assert_eq!(redirect_error(with("code_challenge", Some("short"))), "invalid_request");
    }

    #[test]
    fn a_response_type_other_than_code_goes_back_as_unsupported() {
        assert_eq!(redirect_error(with("response_type", Some("token"))), "unsupported_response_type");
        assert_eq!(redirect_error(with("response_type", None)), "invalid_request");
    }
}
