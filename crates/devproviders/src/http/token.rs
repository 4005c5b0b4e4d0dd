//! The token endpoint (RFC 6749 §3.2): the authorization_code grant (§4.1.3, with PKCE),
//! the refresh_token grant (§6, with rotation and replay detection), and the identity
//! provider's dev subject grant.

use super::client_auth::ClientForm;
use super::error::OAuthError;
use crate::config::{DEV_SUBJECT_GRANT_TYPE, Role};
use crate::crypto::token_hash;
use crate::keys::SignError;
use crate::state::{IdTokenSubject, ProviderState};
use crate::switches::{SwitchValues, TokenFailure};
use actix_web::{HttpResponse, web};
use serde::Serialize;
use std::time::Duration;
use time::OffsetDateTime;

/// Long enough that any caller's timeout fires first.
const HANG: Duration = Duration::from_secs(3600);

/// RFC 6749 §5.1.
#[derive(Serialize)]
struct TokenResponse {
    access_token: String,
    token_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_in: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refresh_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
}

impl TokenResponse {
    fn new(state: &ProviderState, switches: &SwitchValues, access_token: String, scope: &str) -> Self {
        Self {
            access_token,
            token_type: "Bearer",
            expires_in: (!switches.omit_expires_in).then(|| state.access_token_ttl_secs()),
            refresh_token: None,
            scope: (!scope.is_empty()).then(|| scope.to_owned()),
            id_token: None,
        }
    }
}

fn signing_failed(e: SignError) -> OAuthError {
    tracing::error!(error = %e, "token signing failed");
    OAuthError::server_error()
}

pub(crate) async fn token(
    req: actix_web::HttpRequest,
    state: web::Data<ProviderState>,
    form: ClientForm,
) -> Result<HttpResponse, OAuthError> {
    let traceparent = req.headers().get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
    state.record(|stats| stats.token_traceparents.push(traceparent));
    let how = if req.headers().contains_key(actix_web::http::header::AUTHORIZATION) {
        "client_secret_basic"
    } else {
        "client_secret_post"
    };
    state.record(|stats| stats.token_client_auth.push(how));
    let grant_type = form.params.get("grant_type").ok_or(OAuthError::invalid_request("grant_type is missing"))?;
    let response = match grant_type {
        "authorization_code" => {
            state.record(|stats| stats.authorization_code_exchanges += 1);
            let switches = state.switches.snapshot();
            misbehave(&switches).await?;
            if let Some(r) = junk(&switches) {
                return Ok(r);
            }
            let r = exchange_code(&state, &form, &switches).await?;
            answer_late(&switches).await;
            r
        }
        "refresh_token" => {
            state.record(|stats| stats.refresh_calls += 1);
            let switches = state.switches.snapshot();
            misbehave(&switches).await?;
            if let Some(r) = junk(&switches) {
                return Ok(r);
            }
            let r = refresh(&state, &form, &switches)?;
            answer_late(&switches).await;
            r
        }
        DEV_SUBJECT_GRANT_TYPE if state.role == Role::IdentityProvider => dev_subject(&state, &form)?,
        _ => return Err(OAuthError::unsupported_grant_type()),
    };
    Ok(HttpResponse::Ok().json(response))
}

/// The answer-delay switch: the tokens are issued (and a rotated refresh token retired)
/// already, so a client that gives up now has lost them.
async fn answer_late(switches: &SwitchValues) {
    if !switches.answer_delay.is_zero() {
        tokio::time::sleep(switches.answer_delay).await;
    }
}

/// The delay and failure switches, applied before any code or token is touched.
async fn misbehave(switches: &SwitchValues) -> Result<(), OAuthError> {
    if !switches.token_delay.is_zero() {
        tokio::time::sleep(switches.token_delay).await;
    }
    match switches.token_failure {
        None => Ok(()),
        Some(TokenFailure::ServerError) => Err(OAuthError::server_error()),
        Some(TokenFailure::InvalidGrant) => Err(OAuthError::invalid_grant("refused by the token_failure switch")),
        Some(TokenFailure::Timeout) => {
            tokio::time::sleep(HANG).await;
            Err(OAuthError::server_error())
        }
        Some(TokenFailure::Html | TokenFailure::GarbageJson | TokenFailure::NoAccessToken) => Ok(()),
    }
}

/// The switches whose answer is not a token response at all; nothing is touched.
fn junk(switches: &SwitchValues) -> Option<HttpResponse> {
    match switches.token_failure? {
        TokenFailure::Html => Some(
            HttpResponse::Ok()
                .content_type("text/html; charset=utf-8")
                .body("<!doctype html><title>Down for maintenance</title><h1>Back soon</h1>"),
        ),
        TokenFailure::GarbageJson => {
            Some(HttpResponse::Ok().content_type("application/json").body("{\"access_token\": \"gho_"))
        }
        TokenFailure::NoAccessToken => {
            Some(HttpResponse::Ok().json(serde_json::json!({"token_type": "Bearer", "expires_in": 3600})))
        }
        _ => None,
    }
}

async fn exchange_code(
    state: &web::Data<ProviderState>,
    form: &ClientForm,
    switches: &SwitchValues,
) -> Result<TokenResponse, OAuthError> {
    let code = form.params.get("code").ok_or(OAuthError::invalid_request("code is missing"))?;
    if switches.id_token_wrong_key && switches.id_token_alg.is_none() {
        // Generating the second key takes a moment; keep it off the async threads.
        let keys_owner = state.clone();
        web::block(move || keys_owner.keys.prepare_wrong_key())
            .await
            .map_err(|_| OAuthError::server_error())?
            .map_err(signing_failed)?;
    }
    let client_id = form.client.client_id.as_str();
    let now = OffsetDateTime::now_utc();
    let redeemed = state
        .grants()
        .redeem_code(
            &token_hash(code),
            client_id,
            form.params.get("redirect_uri"),
            form.params.get("code_verifier"),
            now,
        )
        .inspect_err(|e| tracing::info!(client_id, reason = e.description(), "authorization code refused"))?;

    let access_token = state
        .mint_access_token(redeemed.grant, client_id, &redeemed.username, &redeemed.scope, now)
        .map_err(signing_failed)?;
    let mut response = TokenResponse::new(state, switches, access_token, &redeemed.scope);
    if !switches.omit_refresh_token {
        response.refresh_token = Some(state.mint_refresh_token(redeemed.grant));
    }
    // OIDC Core §3.1.3.3: an ID token only when the openid scope was asked for.
    if redeemed.scope.split_whitespace().any(|s| s == "openid") && !switches.omit_id_token {
        let subject = IdTokenSubject {
            client_id,
            client_secret: &form.client.client_secret,
            username: &redeemed.username,
            nonce: redeemed.nonce.as_deref(),
            auth_time: redeemed.auth_time,
        };
        response.id_token = Some(state.id_token(&subject, switches, now).map_err(signing_failed)?);
    }
    tracing::info!(client_id, "authorization code exchanged");
    Ok(response)
}

fn refresh(state: &ProviderState, form: &ClientForm, switches: &SwitchValues) -> Result<TokenResponse, OAuthError> {
    let presented = form.params.get("refresh_token").ok_or(OAuthError::invalid_request("refresh_token is missing"))?;
    let client_id = form.client.client_id.as_str();
    // Omitting the refresh token from the answer means the client keeps the old one, so the
    // old one must stay valid: no rotation then.
    let rotate = switches.rotate_refresh_tokens && !switches.omit_refresh_token;
    let refreshed = state
        .grants()
        .refresh(&token_hash(presented), client_id, form.params.get("scope"), rotate)
        .inspect_err(|e| tracing::info!(client_id, reason = e.description(), "refresh refused"))?;
    let now = OffsetDateTime::now_utc();
    let access_token = state
        .mint_access_token(refreshed.grant, client_id, &refreshed.username, &refreshed.scope, now)
        .map_err(signing_failed)?;
    let mut response = TokenResponse::new(state, switches, access_token, &refreshed.scope);
    response.refresh_token = match (switches.omit_refresh_token, rotate) {
        (true, _) => None,
        (false, true) => Some(state.mint_refresh_token(refreshed.grant)),
        (false, false) => Some(presented.to_owned()),
    };
    tracing::info!(client_id, rotated = rotate, "access token refreshed");
    Ok(response)
}

/// `grant_type=urn:mcp-connect:dev:subject&subject=<name>`: a token for any subject the
/// authenticated client names. Only the identity provider role offers it, and only on
/// 127.0.0.1, because it is exactly as trustworthy as the client secret.
fn dev_subject(state: &ProviderState, form: &ClientForm) -> Result<TokenResponse, OAuthError> {
    let subject = form
        .params
        .get("subject")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or(OAuthError::invalid_request("subject is missing"))?;
    let scope = form.params.get("scope").unwrap_or_default();
    // RFC 8707: the MCP server the token is for, among the configured audiences.
    let audience = match form.params.get("resource") {
        None => None,
        Some(r) => Some(state.audience_for(r).ok_or(OAuthError::invalid_target("no such resource here"))?),
    };
    let client_id = form.client.client_id.as_str();
    let grant = state.grants().new_grant(client_id, subject, scope);
    let now = OffsetDateTime::now_utc();
    let access_token =
        state.mint_access_token_for(grant, client_id, subject, scope, audience, now).map_err(signing_failed)?;
    tracing::info!(client_id, "dev subject token issued");
    Ok(TokenResponse::new(state, &state.switches.snapshot(), access_token, scope))
}
