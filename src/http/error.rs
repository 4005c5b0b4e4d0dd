//! The JSON error of the API surfaces: `{"error": code, "error_description": text}` with
//! a stable code. Internal detail goes to the log, never into the body.
//!
//! The one place where the API surfaces turn a flow's refusal or fault into a code, its
//! status and Retry-After: the `From` impls at the end. Handlers use `?`.

use crate::flows::Fault;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use std::fmt;

/// Declares the error codes once: the enum (its OpenAPI schema lists every value, each
/// with its meaning), the string each is sent and counted as, and its HTTP status.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:literal => $status:ident,)*) => {
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

            /// The one HTTP status each code is answered with: a code's status never
            /// depends on which handler or flow refused.
            pub const fn status(self) -> StatusCode {
                match self {
                    $(ErrorCode::$variant => StatusCode::$status,)*
                }
            }
        }
    };
}

error_codes! {
    /// The API key is missing, malformed, unknown, wrong or revoked (401, with WWW-Authenticate).
    InvalidApiKey = "invalid_api_key" => UNAUTHORIZED,
    /// The key is valid but of the other scope (server vs admin) (403, with WWW-Authenticate).
    InsufficientScope = "insufficient_scope" => FORBIDDEN,
    /// The key is right, but its tenant is switched off by an operator.
    TenantDisabled = "tenant_disabled" => FORBIDDEN,
    /// A workload token that is no signed JWT of its issuer: malformed, no `kid`, a signature that does not verify, a missing `exp`, `aud` or `sub` (401).
    WorkloadTokenInvalid = "workload_token_invalid" => UNAUTHORIZED,
    /// A workload token signed with an algorithm never accepted (`none`, HMAC) (401).
    WorkloadTokenAlgorithm = "workload_token_algorithm" => UNAUTHORIZED,
    /// A workload token whose `typ` is not the one its issuer's tokens carry (401).
    WorkloadTokenType = "workload_token_type" => UNAUTHORIZED,
    /// A workload token naming a key its issuer does not publish (401).
    WorkloadTokenUnknownKey = "workload_token_unknown_key" => UNAUTHORIZED,
    /// A workload token of an issuer no active tenant trusts (401).
    WorkloadTokenIssuer = "workload_token_issuer" => UNAUTHORIZED,
    /// A workload token meant for another audience than the one its tenant expects (401).
    WorkloadTokenAudience = "workload_token_audience" => UNAUTHORIZED,
    /// A workload token that has expired (401).
    WorkloadTokenExpired = "workload_token_expired" => UNAUTHORIZED,
    /// A workload token not valid yet (`nbf` or `iat` ahead, beyond the issuer's skew) (401).
    WorkloadTokenNotYetValid = "workload_token_not_yet_valid" => UNAUTHORIZED,
    /// A workload token that lives longer than its tenant's `max_lifetime_seconds` (401).
    WorkloadTokenLifetime = "workload_token_lifetime" => UNAUTHORIZED,
    /// Another token of the issuer carried this token's `jti` (401).
    WorkloadTokenReplayed = "workload_token_replayed" => UNAUTHORIZED,
    /// A valid workload token that no rule of a tenant trusting its issuer gives a scope (403).
    WorkloadNoRule = "workload_no_rule" => FORBIDDEN,
    /// Rules of more than one tenant give the workload token this scope (403).
    WorkloadRuleAmbiguous = "workload_rule_ambiguous" => FORBIDDEN,
    /// The database or this instance is busy, unreachable or shutting down, or the request collided with a concurrent change (503, with Retry-After).
    TemporarilyUnavailable = "temporarily_unavailable" => SERVICE_UNAVAILABLE,
    /// Several wrong secrets were sent for this key id just now: it is verified again after `Retry-After` seconds (429).
    TooManyAttempts = "too_many_attempts" => TOO_MANY_REQUESTS,
    /// A fault on our side (a bug or a vault key that is gone); never expected. Details are in the service log only.
    InternalError = "internal_error" => INTERNAL_SERVER_ERROR,
    /// The body is not JSON, or does not have the documented fields and types.
    InvalidJson = "invalid_json" => BAD_REQUEST,
    /// The body was not sent as application/json.
    UnsupportedMediaType = "unsupported_media_type" => UNSUPPORTED_MEDIA_TYPE,
    /// The body is larger than 16 KiB (the proxy: than 10 MiB).
    PayloadTooLarge = "payload_too_large" => PAYLOAD_TOO_LARGE,
    /// A path parameter is malformed.
    InvalidPath = "invalid_path" => BAD_REQUEST,
    /// The query string is malformed.
    InvalidQuery = "invalid_query" => BAD_REQUEST,
    /// A field or parameter is out of its documented range.
    InvalidRequest = "invalid_request" => BAD_REQUEST,
    /// The subject is not 1-255 printable characters.
    InvalidSubject = "invalid_subject" => BAD_REQUEST,
    /// The tenant requires the user's MCP access token (`subject_token`); a bare `subject` is refused.
    SubjectTokenRequired = "subject_token_required" => FORBIDDEN,
    /// The tenant takes no `subject_token` (it has no `subject_token_audience`).
    SubjectTokenNotAccepted = "subject_token_not_accepted" => BAD_REQUEST,
    /// The `subject_token` is not an access token of the primary IdP: not a JWT, not `typ` `at+jwt`, an HMAC or unknown algorithm, an unknown key, a signature that does not verify, a missing claim, or a `sub` that is no subject.
    SubjectTokenInvalid = "subject_token_invalid" => FORBIDDEN,
    /// The `subject_token` was issued by another issuer than the primary IdP.
    SubjectTokenIssuer = "subject_token_issuer" => FORBIDDEN,
    /// The `subject_token` is meant for another audience than the tenant's `subject_token_audience`.
    SubjectTokenAudience = "subject_token_audience" => FORBIDDEN,
    /// The `subject_token` has expired (beyond the IdP's clock skew).
    SubjectTokenExpired = "subject_token_expired" => FORBIDDEN,
    /// The `subject_token` is not valid yet (`nbf`, beyond the clock skew).
    SubjectTokenNotYetValid = "subject_token_not_yet_valid" => FORBIDDEN,
    /// The `subject_token`'s `sub` is not the `subject` the request names.
    SubjectTokenSubject = "subject_token_subject" => FORBIDDEN,
    /// No provider of that name is configured.
    UnknownProvider = "unknown_provider" => BAD_REQUEST,
    /// A scope is empty, too long, or holds a space or a control character.
    InvalidScope = "invalid_scope" => BAD_REQUEST,
    /// The elicitation id is not one this service gives out.
    InvalidElicitationId = "invalid_elicitation_id" => BAD_REQUEST,
    /// No elicitation of that id belongs to the caller's tenant.
    ElicitationNotFound = "elicitation_not_found" => NOT_FOUND,
    /// The elicitation belongs to another subject or provider.
    ElicitationMismatch = "elicitation_mismatch" => BAD_REQUEST,
    /// The tenant may not use that provider.
    ProviderNotAllowed = "provider_not_allowed" => FORBIDDEN,
    /// An operator has switched the provider off (kill switch).
    ProviderDisabled = "provider_disabled" => FORBIDDEN,
    /// The provider could not refresh the token, or its server be reached, just now; a connection is kept (503, with Retry-After).
    ProviderUnavailable = "provider_unavailable" => SERVICE_UNAVAILABLE,
    /// The provider's configuration, or what its server says of itself (discovery), is refused for a reason a retry cannot fix; no link is made. The operator must fix it; the service log says what (502, no Retry-After).
    ProviderMisconfigured = "provider_misconfigured" => BAD_GATEWAY,
    /// The proxy: no usable connection; the body is also `/v1/token`'s `connect_required` answer (428).
    ConnectRequired = "connect_required" => PRECONDITION_REQUIRED,
    /// The proxy: the elicitation named by `MCP-Connect-Elicitation-Id` was declined by the person.
    ConnectDeclined = "connect_declined" => FORBIDDEN,
    /// The proxy: this provider has no API origins to proxy to (`[providers.<name>.proxy]`).
    ProxyNotConfigured = "proxy_not_configured" => FORBIDDEN,
    /// The proxy: the path or query is not forwarded as it is (a dot or empty segment, an encoded slash, backslash, dot or percent sign, a character that must be encoded, an absolute-form request target).
    ProxyPathRefused = "proxy_path_refused" => BAD_REQUEST,
    /// The proxy: the path is not under a prefix this provider's proxy allows.
    ProxyPathNotAllowed = "proxy_path_not_allowed" => FORBIDDEN,
    /// The proxy: this provider's proxy does not take that method (405, with `Allow`).
    ProxyMethodNotAllowed = "proxy_method_not_allowed" => METHOD_NOT_ALLOWED,
    /// The proxy: `MCP-Connect-Origin` is not one of the provider's API origins.
    ProxyOriginNotAllowed = "proxy_origin_not_allowed" => BAD_REQUEST,
    /// The proxy: the provider's API could not be reached, or broke off (502).
    UpstreamUnreachable = "upstream_unreachable" => BAD_GATEWAY,
    /// The proxy: the provider's API address is one the SSRF guard refuses (a provider of the operator API).
    UpstreamRefused = "upstream_refused" => BAD_GATEWAY,
    /// The proxy: the provider's API sent no answer head in time (504).
    UpstreamTimeout = "upstream_timeout" => GATEWAY_TIMEOUT,
    /// The proxy: this connection or tenant sent more requests than `[proxy]` allows just now (429, with `Retry-After`).
    RateLimited = "rate_limited" => TOO_MANY_REQUESTS,
    /// The proxy: the provider's answer is larger than the proxy passes.
    UpstreamTooLarge = "upstream_too_large" => BAD_GATEWAY,
    /// The connection id is not a UUID.
    InvalidConnectionId = "invalid_connection_id" => BAD_REQUEST,
    /// No connection of that id belongs to the caller's tenant.
    ConnectionNotFound = "connection_not_found" => NOT_FOUND,
    /// The cursor is not one this API gave out.
    InvalidCursor = "invalid_cursor" => BAD_REQUEST,
    /// The webhook id is not a UUID.
    InvalidWebhookId = "invalid_webhook_id" => BAD_REQUEST,
    /// No webhook endpoint of that id belongs to the caller's tenant.
    WebhookNotFound = "webhook_not_found" => NOT_FOUND,
    /// The webhook URL is malformed, not https (http only to a loopback address where `webhooks.allow_loopback` is set), or names an address that may not be reached; the description says which.
    InvalidWebhookUrl = "invalid_webhook_url" => BAD_REQUEST,
    /// The tenant has as many webhook endpoints as it may (16).
    TooManyWebhooks = "too_many_webhooks" => CONFLICT,
    /// The tenant id is not 1-64 characters of a-z, 0-9, `-` and `_`.
    InvalidTenantId = "invalid_tenant_id" => BAD_REQUEST,
    /// No tenant of that id (for a new key: no active one).
    TenantNotFound = "tenant_not_found" => NOT_FOUND,
    /// A tenant of that id exists already.
    TenantExists = "tenant_exists" => CONFLICT,
    /// The operator API has made as many tenants as it may (10000).
    TooManyTenants = "too_many_tenants" => CONFLICT,
    /// The operator API has made as many providers as it may (1000).
    TooManyProviders = "too_many_providers" => CONFLICT,
    /// A configuration file keeps this tenant's settings: change them there (only `active` changes over the API).
    TenantKeptByFile = "tenant_kept_by_file" => CONFLICT,
    /// The tenant was ended (its data keys destroyed): it stays off.
    TenantEnded = "tenant_ended" => CONFLICT,
    /// The tenant holds values sealed before data keys: run `mcp-connect rotate-key`, then end it.
    TenantNotUnderDataKeys = "tenant_not_under_data_keys" => CONFLICT,
    /// No IdP of that name is configured (`default` or one of `[idps.<name>]`).
    UnknownIdp = "unknown_idp" => BAD_REQUEST,
    /// No provider of that id was made over the operator API (one of a configuration file is listed, not changed here).
    ProviderNotFound = "provider_not_found" => NOT_FOUND,
    /// A provider of that id exists already.
    ProviderExists = "provider_exists" => CONFLICT,
    /// A configuration file keeps this provider: change it there.
    ProviderKeptByFile = "provider_kept_by_file" => CONFLICT,
    /// The provider's sealed client secret does not open with the keyring (a key removed, or its row changed outside the API): it is not served; send a new `client_secret`.
    ProviderSecretUnopenable = "provider_secret_unopenable" => CONFLICT,
    /// No such endpoint.
    NotFound = "not_found" => NOT_FOUND,
    /// The endpoint does not take that method (405, with `Allow`).
    MethodNotAllowed = "method_not_allowed" => METHOD_NOT_ALLOWED,
}

/// An answer of `/v1` or `/admin/v1` that is not a success: its code decides the status.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub description: String,
    pub www_authenticate: Option<String>,
    pub retry_after: Option<u64>,
    /// The methods the endpoint takes, for a 405's `Allow`.
    pub allow: Option<std::borrow::Cow<'static, str>>,
}

impl ApiError {
    /// Answered with the code's status; a code that asks for a retry says when (1 s,
    /// `provider_unavailable` 5 s) unless [`Self::retry_after`] sets another wait.
    pub fn new(code: ErrorCode, description: impl Into<String>) -> Self {
        let retry_after = match code {
            ErrorCode::TemporarilyUnavailable | ErrorCode::TooManyAttempts => Some(1),
            ErrorCode::ProviderUnavailable => Some(5),
            _ => None,
        };
        Self { code, description: description.into(), www_authenticate: None, retry_after, allow: None }
    }

    #[must_use]
    pub fn retry_after(self, seconds: u64) -> Self {
        Self { retry_after: Some(seconds), ..self }
    }

    /// Logs `detail` with the error level and answers a generic 500.
    pub fn internal(detail: &dyn fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(ErrorCode::InternalError, "internal error; see the service log")
    }

    /// A passing fault (the database unreachable or overloaded): worth a retry.
    pub fn unavailable(detail: &dyn fmt::Display) -> Self {
        tracing::error!(error = %detail, "dependency unavailable");
        Self::new(ErrorCode::TemporarilyUnavailable, "temporarily unavailable; retry later").retry_after(2)
    }

    pub fn from_db(e: sqlx::Error) -> Self {
        Fault::from(e).into()
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
        self.code.status()
    }

    fn error_response(&self) -> HttpResponse {
        let mut r = HttpResponse::build(self.code.status());
        // Every answer of ours says so: behind `/v1/proxy`, a caller tells it from the
        // provider's (whose `MCP-Connect-*` headers are dropped).
        r.insert_header((ERROR_HEADER, self.code.as_str()));
        if let Some(w) = &self.www_authenticate {
            r.insert_header(("WWW-Authenticate", w.as_str()));
        }
        if let Some(a) = &self.allow {
            r.insert_header(("Allow", a.as_ref()));
        }
        if let Some(s) = self.retry_after {
            r.insert_header(("Retry-After", s.to_string()));
        }
        r.json(ErrorBody { error: self.code, error_description: &self.description })
    }
}

/// On every error answer of ours, its code: behind `/v1/proxy` a caller tells ours from
/// the provider's by it.
pub const ERROR_HEADER: &str = "mcp-connect-error";

/// The largest JSON body `/v1` and `/admin/v1` read.
pub const BODY_LIMIT: usize = 16 * 1024;

/// An endpoint under `path` whose methods are `allow` (e.g. `"PUT, DELETE"`): any other
/// method gets a 405 `method_not_allowed` with `Allow` (RFC 9110 §15.5.6).
pub fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    actix_web::web::resource(path).default_service(actix_web::web::to(move || async move {
        let mut e = ApiError::new(ErrorCode::MethodNotAllowed, format!("this endpoint takes {allow}"));
        e.allow = Some(allow.into());
        Err::<HttpResponse, _>(e)
    }))
}

/// Maps actix's JSON extractor errors to stable codes. The description never quotes
/// the body: a value in it could be a secret.
pub fn json_error(err: actix_web::error::JsonPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    use actix_web::error::JsonPayloadError as J;
    let e = match &err {
        J::ContentType => ApiError::new(ErrorCode::UnsupportedMediaType, "send the body as application/json"),
        J::Overflow { .. } | J::OverflowKnownLength { .. } => {
            ApiError::new(ErrorCode::PayloadTooLarge, "the body is too large")
        }
        J::Deserialize(de) => {
            let what = if de.is_data() { "does not match the expected fields and types" } else { "is not valid JSON" };
            ApiError::new(
                ErrorCode::InvalidJson,
                format!("the body {what} (line {}, column {})", de.line(), de.column()),
            )
        }
        _ => ApiError::new(ErrorCode::InvalidJson, "the body could not be read"),
    };
    e.into()
}

/// Path and query extractor errors.
pub fn path_error(_err: actix_web::error::PathError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    ApiError::new(ErrorCode::InvalidPath, "a path parameter is malformed").into()
}

pub fn query_error(_err: actix_web::error::QueryPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    ApiError::new(ErrorCode::InvalidQuery, "the query string is malformed").into()
}

// --- What each flow error is answered with ------------------------------------------------

impl From<Fault> for ApiError {
    fn from(f: Fault) -> Self {
        if f.is_transient() { Self::unavailable(&f) } else { Self::internal(&f) }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        Fault::from(e).into()
    }
}

impl From<crate::flows::policy::PolicyError> for ApiError {
    fn from(e: crate::flows::policy::PolicyError) -> Self {
        use crate::flows::policy::PolicyError as P;
        match e {
            P::UnknownProvider => Self::new(ErrorCode::UnknownProvider, "no provider of that name is configured"),
            P::ProviderNotAllowed => {
                Self::new(ErrorCode::ProviderNotAllowed, "this MCP server may not use that provider")
            }
            P::ProviderDeactivated => {
                Self::new(ErrorCode::ProviderDisabled, "an operator has switched the provider off")
            }
        }
    }
}

impl From<crate::flows::token::TokenError> for ApiError {
    fn from(e: crate::flows::token::TokenError) -> Self {
        use crate::flows::refresh::RefreshError as R;
        use crate::flows::token::TokenError as T;
        match e {
            T::Policy(p) => p.into(),
            T::ElicitationNotFound => Self::new(ErrorCode::ElicitationNotFound, "no such elicitation"),
            T::ElicitationMismatch => {
                Self::new(ErrorCode::ElicitationMismatch, "the elicitation belongs to another subject or provider")
            }
            T::ProviderDisabled => {
                Self::new(ErrorCode::ProviderDisabled, "the operator has disabled this provider for now")
            }
            // The detail (which endpoint, which address, the server's words) is the
            // operator's: in the log, not in a tenant's answer.
            // Said once per resolution in the resolver's log (kept a minute): not per call.
            T::ProviderMisconfigured(e) => {
                tracing::debug!(error = %e, "a provider's configuration or server is refused; no link is made");
                Self::new(
                    ErrorCode::ProviderMisconfigured,
                    "this provider's configuration, or what its server says of itself, is refused; a retry will not \
                     help: the operator of mcp-connect must fix it (the service log says what)",
                )
            }
            T::ProviderUnreachable(e) => {
                tracing::debug!(error = %e, "a provider's server could not be resolved");
                Self::new(
                    ErrorCode::ProviderUnavailable,
                    "the provider's server could not be reached just now; retry later",
                )
            }
            T::Refresh(R::Transient(why)) => {
                tracing::warn!(reason = %why, "refresh failed transiently");
                Self::new(
                    ErrorCode::ProviderUnavailable,
                    "the provider could not refresh the token right now; the connection is kept, retry later",
                )
            }
            T::Refresh(R::ShuttingDown) => {
                Self::new(ErrorCode::TemporarilyUnavailable, "this instance is shutting down; retry")
            }
            // The flow answers these itself (a new consent); should one get here, the
            // connection changed under the request, and a retry sees it as it is now.
            T::IdpUnavailable => {
                tracing::warn!("the tenant names an IdP this instance's configuration lacks");
                Self::new(
                    ErrorCode::TemporarilyUnavailable,
                    "the tenant's identity provider is not available on this instance; retry",
                )
            }
            T::Refresh(R::NeedsReauth | R::Gone) | T::ElicitationRace => {
                Self::new(ErrorCode::TemporarilyUnavailable, "the request collided with concurrent changes; retry")
            }
            T::Refresh(R::Fault(f)) | T::Fault(f) => f.into(),
        }
    }
}

impl From<crate::workload::WorkloadRefusal> for ApiError {
    fn from(e: crate::workload::WorkloadRefusal) -> Self {
        use crate::oauth::access_token::AccessTokenRefusal as R;
        use crate::workload::WorkloadRefusal as W;
        let code = match &e {
            W::Token(R::Invalid) => ErrorCode::WorkloadTokenInvalid,
            W::Token(R::Algorithm) => ErrorCode::WorkloadTokenAlgorithm,
            W::Token(R::Type) => ErrorCode::WorkloadTokenType,
            W::Token(R::UnknownKey) => ErrorCode::WorkloadTokenUnknownKey,
            W::Token(R::Issuer) => ErrorCode::WorkloadTokenIssuer,
            W::Token(R::Audience) => ErrorCode::WorkloadTokenAudience,
            W::Token(R::Expired) => ErrorCode::WorkloadTokenExpired,
            W::Token(R::NotYetValid) => ErrorCode::WorkloadTokenNotYetValid,
            W::Lifetime => ErrorCode::WorkloadTokenLifetime,
            W::Replayed => ErrorCode::WorkloadTokenReplayed,
            W::NoRule => ErrorCode::WorkloadNoRule,
            W::Ambiguous => ErrorCode::WorkloadRuleAmbiguous,
            W::Unavailable(why) => {
                tracing::warn!(reason = %why, "a workload issuer's keys are unavailable");
                return Self::new(
                    ErrorCode::TemporarilyUnavailable,
                    "the workload issuer's keys cannot be fetched just now; retry",
                )
                .retry_after(5);
            }
            W::Database(_) => ErrorCode::InternalError,
        };
        let e = match e {
            W::Database(db) => return Self::from_db(db),
            other => other,
        };
        // The reason is logged (never the token); the body says which check refused.
        tracing::info!(reason = code.as_str(), "workload token refused");
        let mut err = Self::new(code, e.to_string());
        if code.status() == StatusCode::UNAUTHORIZED {
            err.www_authenticate = Some("Bearer realm=\"mcp-connect\", error=\"invalid_token\"".to_owned());
        }
        err
    }
}

impl From<crate::flows::subject::SubjectError> for ApiError {
    fn from(e: crate::flows::subject::SubjectError) -> Self {
        use crate::flows::subject::SubjectError as S;
        use crate::oauth::access_token::AccessTokenRefusal as R;
        let code = match &e {
            // The key verified a moment ago: the tenant was just switched off (a retry
            // meets the key check) or this instance has not loaded it yet.
            S::TenantInactive => {
                return Self::new(ErrorCode::TemporarilyUnavailable, "the key's tenant is not active here now; retry");
            }
            S::Missing => ErrorCode::InvalidSubject,
            S::TokenRequired => ErrorCode::SubjectTokenRequired,
            S::TokenNotAccepted => ErrorCode::SubjectTokenNotAccepted,
            S::Refused(R::Invalid | R::Algorithm | R::Type | R::UnknownKey) => ErrorCode::SubjectTokenInvalid,
            S::Refused(R::Issuer) => ErrorCode::SubjectTokenIssuer,
            S::Refused(R::Audience) => ErrorCode::SubjectTokenAudience,
            S::Refused(R::Expired) => ErrorCode::SubjectTokenExpired,
            S::Refused(R::NotYetValid) => ErrorCode::SubjectTokenNotYetValid,
            S::OtherSubject => ErrorCode::SubjectTokenSubject,
            S::Unavailable(why) => {
                tracing::warn!(reason = %why, "the IdP's keys for a subject token are unavailable");
                return Self::new(
                    ErrorCode::TemporarilyUnavailable,
                    "the IdP's keys cannot be fetched just now; retry",
                );
            }
        };
        // The reason is logged (never the token); the body says which check refused.
        tracing::info!(reason = code.as_str(), "subject refused");
        Self::new(code, e.to_string())
    }
}

impl From<crate::flows::webhooks::WebhookRefusal> for ApiError {
    fn from(r: crate::flows::webhooks::WebhookRefusal) -> Self {
        use crate::flows::webhooks::WebhookRefusal as R;
        match r {
            R::MalformedUrl | R::Fragment => Self::new(ErrorCode::InvalidWebhookUrl, r.to_string()),
            R::Address(a) => Self::new(ErrorCode::InvalidWebhookUrl, format!("url refused ({}): {a}", a.code())),
            _ => Self::new(ErrorCode::InvalidRequest, r.to_string()),
        }
    }
}

impl From<crate::flows::webhooks::WebhookError> for ApiError {
    fn from(e: crate::flows::webhooks::WebhookError) -> Self {
        use crate::flows::webhooks::WebhookError as W;
        match e {
            W::Refused(r) => r.into(),
            W::TooMany => Self::new(ErrorCode::TooManyWebhooks, e.to_string()),
            W::Fault(f) => f.into(),
        }
    }
}

impl From<crate::flows::kill_switches::KillSwitchError> for ApiError {
    fn from(e: crate::flows::kill_switches::KillSwitchError) -> Self {
        use crate::flows::kill_switches::KillSwitchError as K;
        match e {
            K::Reason => Self::new(ErrorCode::InvalidRequest, e.to_string()),
            K::Fault(f) => f.into(),
        }
    }
}
