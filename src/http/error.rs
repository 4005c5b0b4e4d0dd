//! The JSON error of the API surfaces: `{"error": code, "error_description": text}` with
//! a stable code. Internal detail goes to the log, never into the body.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use std::fmt;

/// Declares the error codes once: the enum (its OpenAPI schema lists every value, each
/// with its meaning) and the string each is sent and counted as.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:literal,)*) => {
        /// The stable `error` codes of the API. New codes may be added; a code's meaning
        /// never changes.
        // Sent as the variant's name in snake case; the test of the served document checks
        // that this is `$code` for every variant (utoipa does not see a `serde(rename)` made
        // by a macro).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, for documentation and tests.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }
        }
    };
}

error_codes! {
    /// The API key is missing, malformed, unknown, wrong or revoked (401, with WWW-Authenticate).
    InvalidApiKey = "invalid_api_key",
    /// The key is valid but of the other scope (server vs admin) (403, with WWW-Authenticate).
    InsufficientScope = "insufficient_scope",
    /// The database or this instance is busy, unreachable or shutting down, or the request collided with a concurrent change (503, with Retry-After).
    TemporarilyUnavailable = "temporarily_unavailable",
    /// Several wrong secrets were sent for this key id just now: it is verified again after `Retry-After` seconds (429).
    TooManyAttempts = "too_many_attempts",
    /// A fault on our side (a bug or a vault key that is gone); never expected. Details are in the service log only.
    InternalError = "internal_error",
    /// The body is not JSON, or does not have the documented fields and types.
    InvalidJson = "invalid_json",
    /// The body was not sent as application/json.
    UnsupportedMediaType = "unsupported_media_type",
    /// The body is larger than 16 KiB.
    PayloadTooLarge = "payload_too_large",
    /// A path parameter is malformed.
    InvalidPath = "invalid_path",
    /// The query string is malformed.
    InvalidQuery = "invalid_query",
    /// A field or parameter is out of its documented range.
    InvalidRequest = "invalid_request",
    /// The subject is not 1-255 printable characters.
    InvalidSubject = "invalid_subject",
    /// No provider of that name is configured.
    UnknownProvider = "unknown_provider",
    /// A scope is empty, too long, or holds a space or a control character.
    InvalidScope = "invalid_scope",
    /// The elicitation id is not one this service gives out.
    InvalidElicitationId = "invalid_elicitation_id",
    /// No elicitation of that id belongs to the caller's tenant.
    ElicitationNotFound = "elicitation_not_found",
    /// The elicitation belongs to another subject or provider.
    ElicitationMismatch = "elicitation_mismatch",
    /// The tenant may not use that provider.
    ProviderNotAllowed = "provider_not_allowed",
    /// An operator has switched the provider off (kill switch).
    ProviderDisabled = "provider_disabled",
    /// The provider could not refresh the token just now; the connection is kept (503, with Retry-After).
    ProviderUnavailable = "provider_unavailable",
    /// The connection id is not a UUID.
    InvalidConnectionId = "invalid_connection_id",
    /// No connection of that id belongs to the caller's tenant.
    ConnectionNotFound = "connection_not_found",
    /// The cursor is not one this API gave out.
    InvalidCursor = "invalid_cursor",
    /// The webhook id is not a UUID.
    InvalidWebhookId = "invalid_webhook_id",
    /// No webhook endpoint of that id belongs to the caller's tenant.
    WebhookNotFound = "webhook_not_found",
    /// The webhook URL is malformed, not https (http only to a loopback address where `webhooks.allow_loopback` is set), or names an address that may not be reached; the description says which.
    InvalidWebhookUrl = "invalid_webhook_url",
    /// The tenant has as many webhook endpoints as it may (16).
    TooManyWebhooks = "too_many_webhooks",
    /// No such endpoint.
    NotFound = "not_found",
    /// The endpoint does not take that method (405, with `Allow`).
    MethodNotAllowed = "method_not_allowed",
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub description: String,
    pub www_authenticate: Option<String>,
    pub retry_after: Option<u64>,
    /// The methods the endpoint takes, for a 405's `Allow`.
    pub allow: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, description: impl Into<String>) -> Self {
        Self { status, code, description: description.into(), www_authenticate: None, retry_after: None, allow: None }
    }

    pub fn bad_request(code: ErrorCode, description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, description)
    }

    pub fn not_found(code: ErrorCode, description: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, description)
    }

    /// Logs `detail` with the error level and answers a generic 500.
    pub fn internal(detail: &dyn fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::InternalError, "internal error; see the service log")
    }

    /// The database is unreachable or overloaded: worth a retry.
    pub fn unavailable(detail: &dyn fmt::Display) -> Self {
        tracing::error!(error = %detail, "dependency unavailable");
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::TemporarilyUnavailable,
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
        write!(f, "{}: {}", self.code.as_str(), self.description)
    }
}

/// Every error of `/v1` and `/admin/v1`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(example = json!({"error": "invalid_subject", "error_description": "the subject must be 1-255 printable characters"}))]
pub struct ErrorBody<'a> {
    /// What went wrong, as a stable code to branch on.
    pub error: ErrorCode,
    /// The same for people; it may change and never quotes the request.
    pub error_description: &'a str,
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
        if let Some(a) = self.allow {
            r.insert_header(("Allow", a));
        }
        if let Some(s) = self.retry_after {
            r.insert_header(("Retry-After", s.to_string()));
        }
        r.json(ErrorBody { error: self.code, error_description: &self.description })
    }
}

/// The largest JSON body `/v1` and `/admin/v1` read.
pub const BODY_LIMIT: usize = 16 * 1024;

/// An endpoint under `path` whose methods are `allow` (e.g. `"PUT, DELETE"`): any other
/// method gets a 405 `method_not_allowed` with `Allow` (RFC 9110 §15.5.6).
pub fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    actix_web::web::resource(path).default_service(actix_web::web::to(move || async move {
        let mut e = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            format!("this endpoint takes {allow}"),
        );
        e.allow = Some(allow);
        Err::<HttpResponse, _>(e)
    }))
}

/// Maps actix's JSON extractor errors to stable codes. The description never quotes
/// the body: a value in it could be a secret.
pub fn json_error(err: actix_web::error::JsonPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    use actix_web::error::JsonPayloadError as J;
    let e = match &err {
        J::ContentType => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            "send the body as application/json",
        ),
        J::Overflow { .. } | J::OverflowKnownLength { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge, "the body is too large")
        }
        J::Deserialize(de) => {
            let what = if de.is_data() { "does not match the expected fields and types" } else { "is not valid JSON" };
            ApiError::bad_request(
                ErrorCode::InvalidJson,
                format!("the body {what} (line {}, column {})", de.line(), de.column()),
            )
        }
        _ => ApiError::bad_request(ErrorCode::InvalidJson, "the body could not be read"),
    };
    e.into()
}

/// Path and query extractor errors.
pub fn path_error(_err: actix_web::error::PathError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    ApiError::bad_request(ErrorCode::InvalidPath, "a path parameter is malformed").into()
}

pub fn query_error(_err: actix_web::error::QueryPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    ApiError::bad_request(ErrorCode::InvalidQuery, "the query string is malformed").into()
}
