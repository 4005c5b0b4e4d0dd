//! Page templates (askama, all extending `base.html`) and the browser error type.

use crate::http::middleware::RequestId;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use askama::Template;
use std::fmt;

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    message: &'a str,
    hint: &'a str,
    request_id: &'a str,
    outcome: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "refused.html")]
pub struct RefusedPage<'a> {
    pub signed_in_as: &'a str,
    pub csrf: &'a str,
    pub request_id: &'a str,
    /// The link to come back to after signing out (a path on this service).
    pub return_to: &'a str,
}

#[derive(Template)]
#[template(path = "consent.html")]
pub struct ConsentPage<'a> {
    pub tenant_name: &'a str,
    pub provider_name: &'a str,
    pub provider_domain: &'a str,
    pub provider_id: &'a str,
    pub scopes: &'a [String],
    pub signed_in_as: &'a str,
    pub csrf: &'a str,
    pub elicitation_id: &'a str,
}

#[derive(Template)]
#[template(path = "credential.html")]
pub struct CredentialPage<'a> {
    pub tenant_name: &'a str,
    pub provider_name: &'a str,
    /// The host the value is checked at; `None`: not checked.
    pub provider_domain: Option<&'a str>,
    pub provider_id: &'a str,
    pub fields: &'a [crate::providers::credential::Field],
    pub signed_in_as: &'a str,
    pub csrf: &'a str,
    pub elicitation_id: &'a str,
    /// Why the last submit was not taken (never the value).
    pub error: Option<&'a str>,
}

/// The credential form again, with why the last submit was not taken (400).
pub fn render_refused_form(page: &CredentialPage<'_>) -> Result<HttpResponse, PageError> {
    let html = page.render().map_err(|e| PageError::internal("-", &e))?;
    Ok(respond(StatusCode::BAD_REQUEST, html, None))
}

#[derive(Template)]
#[template(path = "result.html")]
pub struct ResultPage<'a> {
    pub title: &'a str,
    pub message: &'a str,
    pub tenant_name: &'a str,
    pub class: &'a str,
}

#[derive(Template)]
#[template(path = "signed_out.html")]
pub struct SignedOutPage<'a> {
    /// Sign in again (with the account choice forced) and return to the link, if known.
    pub sign_in_again: Option<&'a str>,
}

/// Renders a page (200). `form_action` extends the CSP `form-action` for a form whose POST
/// answers with a redirect to another origin (the provider).
pub fn render(page: &impl Template, form_action: Option<&str>) -> Result<HttpResponse, PageError> {
    let html = page.render().map_err(|e| PageError::internal("-", &e))?;
    Ok(respond(StatusCode::OK, html, form_action))
}

/// What kind of refusal a page is: it decides the page's status, in this one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// The request or the provider's answer is not acceptable (400).
    Refused,
    /// It belongs to another session or account, or lacks its CSRF token (403).
    Forbidden,
    /// No such link or connection (404).
    NotFound,
    /// It conflicts with what is held: another window connected, another account (409).
    Conflict,
    /// The link was good once and is not any more (410).
    Gone,
    /// The provider answered with an error or an answer that failed the checks (502).
    ProviderFailed,
    /// Paused, restarting or unreachable: try again later (503, with Retry-After).
    Unavailable,
    /// A fault on our side (500); the detail is in the log.
    Internal,
}

impl PageKind {
    pub const fn status(self) -> StatusCode {
        match self {
            PageKind::Refused => StatusCode::BAD_REQUEST,
            PageKind::Forbidden => StatusCode::FORBIDDEN,
            PageKind::NotFound => StatusCode::NOT_FOUND,
            PageKind::Conflict => StatusCode::CONFLICT,
            PageKind::Gone => StatusCode::GONE,
            PageKind::ProviderFailed => StatusCode::BAD_GATEWAY,
            PageKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            PageKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The page asks to try again in a minute; so does the header, for what reads it.
    const fn retry_after(self) -> Option<&'static str> {
        match self {
            PageKind::Unavailable => Some("60"),
            _ => None,
        }
    }
}

fn respond(status: StatusCode, html: String, form_action: Option<&str>) -> HttpResponse {
    let csp = format!(
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'{}; frame-ancestors 'none'; base-uri 'none'",
        form_action.map(|o| format!(" {o}")).unwrap_or_default()
    );
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header(("content-security-policy", csp))
        .body(html)
}

/// A page that says what happened in plain words and what to do, with a request id.
#[derive(Debug)]
pub struct PageError {
    pub kind: PageKind,
    pub title: &'static str,
    pub message: String,
    pub hint: &'static str,
    pub request_id: String,
    /// A page of its own (the identity-mismatch refusal) instead of the error template.
    pub page: Option<Box<OwnPage>>,
    /// What the step left undone, said under the hint: "Nothing was connected." on the
    /// connect flow's pages, "Nothing was disconnected." on the connections page's, `None`
    /// where a connection does exist.
    pub outcome: Option<&'static str>,
}

/// A rendered page of its own, for [`PageError::with_page`].
#[derive(Debug)]
pub struct OwnPage {
    pub html: String,
    /// Another origin a form on the page may lead to (the refusal page's Sign out goes on
    /// to the IdP's end-session endpoint): added to the CSP `form-action`.
    pub form_action: Option<String>,
}

pub const NOTHING_CONNECTED: &str = "Nothing was connected.";

pub const HINT_RETRY: &str = "Go back to your assistant and try again; it will give you a new link.";

impl PageError {
    pub fn new(
        rid: &RequestId,
        kind: PageKind,
        title: &'static str,
        message: impl Into<String>,
        hint: &'static str,
    ) -> Self {
        Self {
            kind,
            title,
            message: message.into(),
            hint,
            request_id: rid.0.clone(),
            page: None,
            outcome: Some(NOTHING_CONNECTED),
        }
    }

    /// An error answered with its own template.
    pub fn with_page(rid: &RequestId, kind: PageKind, title: &'static str, page: &impl Template) -> Self {
        match page.render() {
            Ok(html) => Self {
                kind,
                title,
                message: String::new(),
                hint: "",
                request_id: rid.0.clone(),
                page: Some(Box::new(OwnPage { html, form_action: None })),
                outcome: Some(NOTHING_CONNECTED),
            },
            Err(e) => Self::internal(&rid.0, &e),
        }
    }

    /// The same page with another line for what the step left undone.
    #[must_use]
    pub fn with_outcome(self, outcome: Option<&'static str>) -> Self {
        Self { outcome, ..self }
    }

    pub fn internal(rid: &str, detail: &dyn fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error on a page");
        Self {
            kind: PageKind::Internal,
            title: "Something went wrong",
            message: "The service could not finish this step.".to_owned(),
            hint: HINT_RETRY,
            request_id: rid.to_owned(),
            page: None,
            outcome: Some(NOTHING_CONNECTED),
        }
    }
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.status(), self.title)
    }
}

impl ResponseError for PageError {
    fn status_code(&self) -> StatusCode {
        self.kind.status()
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.kind.status();
        if let Some(p) = &self.page {
            return respond(status, p.html.clone(), p.form_action.as_deref());
        }
        let page = ErrorPage {
            title: self.title,
            message: &self.message,
            hint: self.hint,
            request_id: &self.request_id,
            outcome: self.outcome,
        };
        let mut r = match page.render() {
            Ok(html) => respond(status, html, None),
            Err(_) => HttpResponse::build(status).content_type("text/plain; charset=utf-8").body(self.title),
        };
        if let Some(wait) = self.kind.retry_after() {
            r.headers_mut()
                .insert(actix_web::http::header::RETRY_AFTER, actix_web::http::header::HeaderValue::from_static(wait));
        }
        r
    }
}
