//! Whose token a request asks for. An MCP server names the subject; a tenant with a
//! `subject_token_audience` lets it prove the subject instead, with the user's own MCP
//! access token (`subject_token`, after RFC 8693's token exchange): an access token of
//! the primary IdP, meant for that tenant's MCP server, whose `sub` is then the subject.
//! A tenant that sets `require_subject_token` refuses a bare subject, so that a leaked
//! server key alone fetches nobody's token.

use crate::app::AppState;
use crate::domain::{Subject, TenantId};
use crate::oauth::access_token::{self, AccessTokenRefusal};
use crate::oauth::resolve::{IdpConfig, Source};
use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;

#[derive(Debug, thiserror::Error)]
pub enum SubjectError {
    #[error("the API key's tenant is not active")]
    TenantInactive,
    #[error("the request names neither a subject nor a subject token")]
    Missing,
    #[error("this tenant requires a subject token")]
    TokenRequired,
    #[error("this tenant takes no subject token (it has no subject_token_audience)")]
    TokenNotAccepted,
    #[error(transparent)]
    Refused(AccessTokenRefusal),
    #[error("the subject token is another subject's than the one named")]
    OtherSubject,
    /// The IdP's keys could not be had: a retry may succeed.
    #[error("the IdP's keys are unavailable: {0}")]
    Unavailable(String),
}

/// The subject of a request to `tenant` that named `named` and carried `token`.
pub async fn proven_subject(
    state: &AppState,
    tenant: &TenantId,
    named: Option<Subject>,
    token: Option<&SecretString>,
    now: OffsetDateTime,
) -> Result<Subject, SubjectError> {
    // A tenant that is not active (here, now) has no policy: refused, never taken as "no
    // token required" (its key stops verifying a moment later anyway).
    let policy = state.directory.tenants.subject_token_policy(tenant).ok_or(SubjectError::TenantInactive)?;
    let Some(token) = token else {
        if policy.is_required() {
            return Err(SubjectError::TokenRequired);
        }
        return named.ok_or(SubjectError::Missing);
    };
    let audience = policy.audience.ok_or(SubjectError::TokenNotAccepted)?;
    // The tenant's own IdP: a token of another tenant's IdP fails the issuer check.
    let idp = state.directory.tenant_idp(tenant).ok_or(SubjectError::TenantInactive)?;
    // Boxed: inline, the keys' fetch would make every request's future as large as its
    // own (`flows::token`).
    let sub = Box::pin(verified_sub(state, idp, token.expose_secret(), &audience, now)).await?;
    let proven = Subject::parse(&sub).map_err(|_| SubjectError::Refused(AccessTokenRefusal::Invalid))?;
    match named {
        Some(n) if n != proven => Err(SubjectError::OtherSubject),
        _ => Ok(proven),
    }
}

/// The `sub` of a token that passes every check of `oauth::access_token` against the
/// tenant's IdP's keys (fetched again, at most once a minute, for a key id they lack).
async fn verified_sub(
    state: &AppState,
    idp: &IdpConfig,
    raw: &str,
    audience: &str,
    now: OffsetDateTime,
) -> Result<String, SubjectError> {
    let issuer = idp.issuer.as_str();
    let header = access_token::precheck(raw, issuer).map_err(SubjectError::Refused)?;
    let cached =
        state.resolver.idp(&state.outbound, idp).await.map_err(|e| SubjectError::Unavailable(e.to_string()))?;
    let server = state
        .resolver
        .holding_key(&state.outbound, Source::Idp(idp), cached.clone(), Some(&header.kid))
        .await
        .map_err(|e| SubjectError::Unavailable(e.to_string()))?;
    let jwks = server.jwks.as_ref().ok_or_else(|| SubjectError::Unavailable("the IdP publishes no keys".to_owned()))?;
    // A key id the keys lack although they could not be fetched again just now (at most
    // once a minute, and tokens with made-up ids may have used that up): the IdP may have
    // rotated its keys a moment ago, so a retry is told to come back rather than refused.
    // Fetched again and still unknown: refused below.
    if !crate::oauth::flow::jwks_has_key(jwks, &header.kid) && std::sync::Arc::ptr_eq(&cached, &server) {
        return Err(SubjectError::Unavailable(
            "a key id the IdP's keys lack; they were fetched within the minute".to_owned(),
        ));
    }
    access_token::verify(raw, &header, jwks, issuer, audience, now, idp.clock_skew).map_err(SubjectError::Refused)
}
