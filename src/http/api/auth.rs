//! Extractors that exist only for an authenticated caller. A handler that takes one
//! cannot run without a valid key of the right scope.

use crate::api_keys::{KeyRejection, VerifiedKey};
use crate::app::AppState;
use crate::domain::{ApiKeyId, Caller, KeyScope, TenantId};
use crate::http::error::{ApiError, ErrorCode};
use crate::workload::Proof;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::LocalBoxFuture;

const REALM: &str = "Bearer realm=\"mcp-connect\"";

/// A tenant's key: its id and its tenant (for a workload token, the workload's caller id),
/// and how the caller proved it.
#[derive(Debug, Clone)]
pub struct TenantKey {
    pub id: ApiKeyId,
    pub tenant: TenantId,
    pub proof: crate::workload::Proof,
}

impl TenantKey {
    /// Who this is, as an admin action's actor names it.
    pub fn caller(&self) -> Caller {
        self.proof.caller(self.id.clone())
    }
}

/// An MCP server, authenticated by a server-scope key. The tenant comes from the key.
#[derive(Debug, Clone)]
pub struct ServerCaller(pub TenantKey);

/// A tenant's operator, authenticated by an admin-scope key.
#[derive(Debug, Clone)]
pub struct AdminCaller(pub TenantKey);

/// The platform's operator, authenticated by an operator-scope key (of no tenant), or a
/// workload token an operator's issuer signed.
#[derive(Debug, Clone)]
pub struct OperatorCaller(pub Caller);

fn unauthorized(description: &str, with_error: bool) -> ApiError {
    let mut e = ApiError::new(ErrorCode::InvalidApiKey, description);
    // RFC 6750 §3: no error code when no credentials were sent.
    e.www_authenticate = Some(if with_error { format!("{REALM}, error=\"invalid_token\"") } else { REALM.to_owned() });
    e
}

async fn authenticate(req: HttpRequest, scope: KeyScope) -> Result<(VerifiedKey, Proof), ApiError> {
    let state = req
        .app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| ApiError::internal(&"application state missing"))?;
    let header = match req.headers().get(actix_web::http::header::AUTHORIZATION) {
        None => return Err(unauthorized("send Authorization: Bearer <api key>", false)),
        Some(h) => h.to_str().map_err(|_| unauthorized("malformed Authorization header", true))?,
    };
    let (scheme, key) = header.split_once(' ').ok_or_else(|| unauthorized("malformed Authorization header", true))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(unauthorized("use the Bearer scheme", true));
    }
    let key = key.trim();
    // A workload token where a tenant (or the operator) trusts a workload issuer: told
    // apart by its shape, never by trying it as an API key too. Only the operator's rules
    // grant the operator scope, and only the operator scope (`domain::workload`).
    if crate::workload::looks_like_jwt(key) {
        let trusted = state.directory.tenants.workload_issuers();
        if !trusted.is_empty() {
            // Boxed, as the large cold awaits of `flows::token` are: inline, its future
            // (an issuer's keys fetched) would be most of this one's size.
            let admitted = Box::pin(state.workloads.admit(&state.outbound, key, &trusted, scope)).await?;
            let (tenant, caller) = admitted.granted.ok_or_else(|| insufficient_scope(scope))?;
            let proof = Proof::Workload(std::sync::Arc::new(secrecy::SecretString::from(key.to_owned())));
            return Ok((VerifiedKey { id: caller, tenant, scope }, proof));
        }
    }
    let key = match state.api_keys.verify(key).await {
        Ok(k) => k,
        Err(KeyRejection::Malformed) => return Err(unauthorized("malformed api key", true)),
        Err(KeyRejection::Invalid) => return Err(unauthorized("unknown, wrong or revoked api key", true)),
        Err(KeyRejection::TenantInactive) => {
            return Err(ApiError::new(
                ErrorCode::TenantDisabled,
                "the key's tenant is switched off (an operator's active: false); ask the operator",
            ));
        }
        Err(KeyRejection::Database(e)) => return Err(ApiError::from_db(e)),
        Err(e @ KeyRejection::Task) => return Err(ApiError::internal(&e)),
        Err(KeyRejection::Throttled(wait)) => {
            return Err(ApiError::new(
                ErrorCode::TooManyAttempts,
                "several wrong secrets were sent for this key id just now; retry shortly",
            )
            .retry_after(wait.as_secs().max(1)));
        }
        Err(KeyRejection::Busy) => {
            return Err(ApiError::new(
                ErrorCode::TemporarilyUnavailable,
                "too many api keys are being verified at once; retry shortly",
            ));
        }
    };
    if key.scope != scope {
        return Err(insufficient_scope(scope));
    }
    Ok((key, Proof::ApiKey))
}

fn insufficient_scope(scope: KeyScope) -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::InsufficientScope,
        match scope {
            KeyScope::Operator => "this endpoint needs an operator key".to_owned(),
            KeyScope::Admin => "this endpoint needs an admin key".to_owned(),
            other => format!("this endpoint needs a {} key", other.as_str()),
        },
    );
    e.www_authenticate = Some(format!("{REALM}, error=\"insufficient_scope\", scope=\"{}\"", scope.as_str()));
    e
}

/// A tenant's key of the scope asked for. (A server or admin key always has a tenant: the
/// database refuses one without.)
async fn tenant_key(req: HttpRequest, scope: KeyScope) -> Result<TenantKey, ApiError> {
    let (key, proof) = authenticate(req, scope).await?;
    let tenant = key.tenant.ok_or_else(|| ApiError::internal(&"a tenant's key without a tenant"))?;
    Ok(TenantKey { id: key.id, tenant, proof })
}

impl FromRequest for ServerCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { tenant_key(req, KeyScope::Server).await.map(ServerCaller) })
    }
}

impl FromRequest for AdminCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { tenant_key(req, KeyScope::Admin).await.map(AdminCaller) })
    }
}

impl FromRequest for OperatorCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            authenticate(req, KeyScope::Operator).await.map(|(k, proof)| OperatorCaller(proof.caller(k.id)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::api::{assert_small, future_size};

    #[test]
    fn a_key_check_moves_a_small_future_because_a_workload_token_check_is_boxed() {
        // The future the extractor's async block awaits, boxed with it on every request.
        let size = future_size(|req: HttpRequest| tenant_key(req, KeyScope::Server));
        assert_small("tenant_key", size, 1440);
    }
}
