//! The JSON error of the API surfaces: `{"error": code, "error_description": text}` with
//! a stable code. Internal detail goes to the log, never into the body.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use std::fmt;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub description: String,
    pub www_authenticate: Option<String>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, description: impl Into<String>) -> Self {
        Self { status, code, description: description.into(), www_authenticate: None, retry_after: None }
    }

    pub fn bad_request(code: &'static str, description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, description)
    }

    pub fn not_found(code: &'static str, description: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, description)
    }

    /// Logs `detail` with the error level and answers a generic 500.
    pub fn internal(detail: &dyn fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "internal error; see the service log")
    }

    /// The database is unreachable or overloaded: worth a retry.
    pub fn unavailable(detail: &dyn fmt::Display) -> Self {
        tracing::error!(error = %detail, "dependency unavailable");
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "temporarily_unavailable",
            "temporarily unavailable; retry later",
        );
        e.retry_after = Some(2);
        e
    }

    pub fn from_db(e: &sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => Self::unavailable(e),
            e if crate::store::lookup::connection_lost(e) || crate::store::lookup::server_busy(e) => {
                Self::unavailable(e)
            }
            _ => Self::internal(e),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.description)
    }
}

#[derive(serde::Serialize)]
struct Body<'a> {
    error: &'a str,
    error_description: &'a str,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut r = HttpResponse::build(self.status);
        if let Some(w) = &self.www_authenticate {
            r.insert_header(("WWW-Authenticate", w.as_str()));
        }
        if let Some(s) = self.retry_after {
            r.insert_header(("Retry-After", s.to_string()));
        }
        r.json(Body { error: self.code, error_description: &self.description })
    }
}

/// Maps actix's JSON extractor errors to stable codes. The description never quotes
/// the body: a value in it could be a secret.
pub fn json_error(err: actix_web::error::JsonPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    use actix_web::error::JsonPayloadError as J;
    let e = match &err {
        J::ContentType => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        ),
        J::Overflow { .. } | J::OverflowKnownLength { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "the body is too large")
        }
        J::Deserialize(de) => {
            let what = if de.is_data() { "does not match the expected fields and types" } else { "is not valid JSON" };
            ApiError::bad_request(
                "invalid_json",
                format!("the body {what} (line {}, column {})", de.line(), de.column()),
            )
        }
        _ => ApiError::bad_request("invalid_json", "the body could not be read"),
    };
    e.into()
}

/// Path and query extractor errors.
pub fn path_error(_err: actix_web::error::PathError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    ApiError::bad_request("invalid_path", "a path parameter is malformed").into()
}

pub fn query_error(_err: actix_web::error::QueryPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    ApiError::bad_request("invalid_query", "the query string is malformed").into()
}
