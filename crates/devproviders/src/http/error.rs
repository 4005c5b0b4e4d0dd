//! RFC 6749 §5.2 error responses for the JSON endpoints.

use crate::grants::GrantError;
use actix_web::http::StatusCode;
use actix_web::http::header::WWW_AUTHENTICATE;
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

#[derive(Debug)]
pub(crate) struct OAuthError {
    status: StatusCode,
    code: &'static str,
    description: Option<&'static str>,
}

impl OAuthError {
    fn new(status: StatusCode, code: &'static str, description: Option<&'static str>) -> Self {
        Self { status, code, description }
    }

    pub(crate) fn invalid_request(description: &'static str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", Some(description))
    }

    /// RFC 6749 §5.2: 401 with a `WWW-Authenticate` challenge, whichever way the client tried.
    pub(crate) fn invalid_client() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "invalid_client", Some("client authentication failed"))
    }

    pub(crate) fn invalid_grant(description: &'static str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_grant", Some(description))
    }

    /// RFC 8707 §2: a `resource` the server does not mint for.
    pub(crate) fn invalid_target(description: &'static str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_target", Some(description))
    }

    pub(crate) fn unsupported_grant_type() -> Self {
        Self::new(StatusCode::BAD_REQUEST, "unsupported_grant_type", None)
    }

    /// The detail goes to the log, not to the client.
    pub(crate) fn server_error() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", Some("the provider failed; try again"))
    }

    #[cfg(test)]
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }
}

impl From<GrantError> for OAuthError {
    fn from(e: GrantError) -> Self {
        Self::new(StatusCode::BAD_REQUEST, e.code(), Some(e.description()))
    }
}

impl std::fmt::Display for OAuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code)
    }
}

impl ResponseError for OAuthError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        if self.status == StatusCode::UNAUTHORIZED {
            response.insert_header((WWW_AUTHENTICATE, "Basic realm=\"dev-provider\""));
        }
        let body = match self.description {
            Some(description) => json!({"error": self.code, "error_description": description}),
            None => json!({"error": self.code}),
        };
        response.json(body)
    }
}
