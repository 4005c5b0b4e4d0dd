//! `POST /v1/token`.

use super::ServerCaller;
use crate::app::AppState;
use crate::domain::Account;
use crate::domain::{ElicitationId, ProviderId, Scopes, Subject};
use crate::flows::policy::PolicyError;
use crate::flows::token::{self as tokens, TokenError, TokenOutcome, TokenRequest};
use crate::http::error::ApiError;
use crate::store::elicitations::ElicitationRow;
use crate::telemetry::metrics::TOKEN_REQUESTS;
use actix_web::{HttpResponse, web};
use secrecy::ExposeSecret;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    subject: String,
    provider: String,
    scopes: Option<Vec<String>>,
    elicitation_id: Option<String>,
    /// The MCP session the request belongs to, kept with the elicitation for the audit.
    mcp_session_id: Option<String>,
}

fn parse(body: TokenBody) -> Result<TokenRequest, ApiError> {
    let subject = Subject::parse(&body.subject).map_err(|e| ApiError::bad_request("invalid_subject", e.0))?;
    let provider = ProviderId::parse(&body.provider).map_err(|e| ApiError::bad_request("unknown_provider", e.0))?;
    let scopes =
        body.scopes.map(|s| Scopes::parse(&s)).transpose().map_err(|e| ApiError::bad_request("invalid_scope", e.0))?;
    let elicitation_id = body
        .elicitation_id
        .map(|s| ElicitationId::parse(&s))
        .transpose()
        .map_err(|e| ApiError::bad_request("invalid_elicitation_id", e.0))?;
    let mcp_context = match body.mcp_session_id {
        None => serde_json::json!({}),
        Some(s) if !s.is_empty() && s.len() <= 256 && !s.chars().any(char::is_control) => {
            serde_json::json!({ "mcp_session_id": s })
        }
        Some(_) => {
            return Err(ApiError::bad_request("invalid_request", "mcp_session_id must be 1-256 printable characters"));
        }
    };
    Ok(TokenRequest { subject, provider, scopes, elicitation_id, mcp_context })
}

pub async fn post_token(
    caller: ServerCaller,
    state: web::Data<AppState>,
    body: web::Json<TokenBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    // A configured provider's name, or `other`: labels never carry what a caller made up.
    let provider = match ProviderId::parse(&body.provider) {
        Ok(p) if state.providers.get(&p).is_some() => p.as_str().to_owned(),
        _ => "other".to_owned(),
    };
    let answer = answer(caller, &state, body).await;
    let outcome = match &answer {
        Ok((_, outcome)) => *outcome,
        Err(e) => e.code,
    };
    metrics::counter!(TOKEN_REQUESTS, "provider" => provider, "outcome" => outcome).increment(1);
    answer.map(|(response, _)| response)
}

/// The response, and the outcome it reports.
async fn answer(
    caller: ServerCaller,
    state: &AppState,
    body: TokenBody,
) -> Result<(HttpResponse, &'static str), ApiError> {
    let req = parse(body)?;
    let tenant = caller.0.tenant.clone();
    let provider = req.provider.clone();
    let now = OffsetDateTime::now_utc();
    let outcome = tokens::token_for(state, &tenant, &caller.0.id, req, now).await.map_err(map_error)?;
    Ok(match outcome {
        TokenOutcome::Connected { access_token, token_type, expires_at, scopes, account, connection_id } => (
            HttpResponse::Ok().json(Connected {
                status: "connected",
                access_token: access_token.expose_secret(),
                token_type: &token_type,
                expires_at: expires_at.map(rfc3339),
                scopes: &scopes,
                account: account.as_ref(),
                connection_id: connection_id.to_string(),
            }),
            "connected",
        ),
        TokenOutcome::ConnectRequired(e) => {
            (HttpResponse::Ok().json(connect_required(state, &tenant, &provider, &e)), "connect_required")
        }
        TokenOutcome::Declined(id) => (
            HttpResponse::Ok().json(serde_json::json!({
                "status": "declined",
                "elicitation_id": id.to_string(),
            })),
            "declined",
        ),
    })
}

fn map_error(e: TokenError) -> ApiError {
    match e {
        TokenError::Policy(PolicyError::UnknownProvider) => {
            ApiError::bad_request("unknown_provider", "no provider of that name is configured")
        }
        TokenError::Policy(PolicyError::ProviderNotAllowed) => ApiError::new(
            actix_web::http::StatusCode::FORBIDDEN,
            "provider_not_allowed",
            "this MCP server may not use that provider",
        ),
        TokenError::ElicitationNotFound => ApiError::not_found("elicitation_not_found", "no such elicitation"),
        TokenError::ElicitationMismatch => {
            ApiError::bad_request("elicitation_mismatch", "the elicitation belongs to another subject or provider")
        }
        TokenError::ProviderDisabled => ApiError::new(
            actix_web::http::StatusCode::FORBIDDEN,
            "provider_disabled",
            "the operator has disabled this provider for now",
        ),
        TokenError::ProviderUnavailable(why) => {
            tracing::warn!(reason = %why, "refresh failed transiently");
            let mut e = ApiError::new(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                "provider_unavailable",
                "the provider could not refresh the token right now; the connection is kept, retry later",
            );
            e.retry_after = Some(5);
            e
        }
        TokenError::Database(e) => ApiError::from_db(&e),
        TokenError::Vault(e) => ApiError::internal(&e),
        TokenError::Task(e) => ApiError::internal(&e),
        TokenError::ShuttingDown => {
            let mut e = ApiError::new(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "this instance is shutting down; retry",
            );
            e.retry_after = Some(1);
            e
        }
        TokenError::ElicitationRace => {
            let mut e = ApiError::new(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "the request collided with concurrent changes; retry",
            );
            e.retry_after = Some(1);
            e
        }
    }
}

pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

#[derive(serde::Serialize)]
struct Connected<'a> {
    status: &'static str,
    access_token: &'a str,
    token_type: &'a str,
    expires_at: Option<String>,
    scopes: &'a [String],
    account: Option<&'a Account>,
    connection_id: String,
}

/// The `connect_required` answer, with `mcp` ready for the MCP server's URL elicitation.
fn connect_required(
    state: &AppState,
    tenant: &crate::domain::TenantId,
    provider: &ProviderId,
    e: &ElicitationRow,
) -> serde_json::Value {
    let id = ElicitationId::from_uuid(e.id);
    let url = state.connect_url(provider, &id);
    let tenant_name = state.tenants.display_name(tenant).unwrap_or_else(|| tenant.as_str().to_owned());
    let provider_name = state.providers.get(provider).map_or(provider.as_str(), |p| p.display_name.as_str());
    let message = format!(
        "{tenant_name} needs access to your {provider_name} account. Open the link to sign in and approve the connection; \
         nothing is shared until you do."
    );
    serde_json::json!({
        "status": "connect_required",
        "elicitation": { "id": id.to_string(), "url": url, "expires_at": rfc3339(e.expires_at) },
        "mcp": { "mode": "url", "message": message, "url": url, "elicitationId": id.to_string() },
    })
}
