//! `POST /v1/token` logic: reconcile first (the elicitation named by the caller, then the
//! stored connection), hand out a usable token, or create or reuse an elicitation. A
//! retried tool call therefore never starts a second grant (DESIGN.md invariant 6).
//!
//! The large awaits off the cached path are boxed (`Box::pin(..).await`): the database
//! read, the refresh, the new elicitation, the provider's discovery, the wait. An async
//! fn's future is as large as the largest it awaits inline, and actix-web moves the
//! request's whole future into its box: with those inline, the handler's future was
//! 18,296 bytes in a release build, copied on every request (`memmove` was 5.9 % of the
//! service's CPU for a cached hand-out in a profile of issue 46, 3.1 % after). A path
//! that takes them pays an allocation for each; the cached one takes none, and its
//! future is about 4 KB in the tests' build (the tests of `http::api::token` and
//! `http::api::auth` hold it there). The small awaits (the elicitation named, the kill
//! switch, the data key) stay inline.

use super::policy::{PolicyError, kill_state, provider_for};
use super::refresh::{self, RefreshError};
use crate::app::AppState;
use crate::cache::CachedConnection;
use crate::domain::{
    Account, ApiKeyId, ConnectionId, ConnectionKey, ConnectionStatus, ElicitationId, ElicitationStatus, KillState,
    ProviderId, Scopes, Subject, TenantId,
};
use crate::domain::{AuditKind, HandOut, HandOutRequest, RefreshPolicy, check_handout};
use crate::keys::Scope;
use crate::oauth::resolve::ResolveError;
use crate::providers::Provider;
use crate::providers::credential::Credential;
use crate::store::connections::packed::Shape;
use crate::store::{self, audit::AuditEvent, connections::ConnectionRow, elicitations::ElicitationRow};
use crate::vault::{Field, RowBinding};
use crate::webhooks::EventKind;
use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;

/// A validated token request.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub subject: Subject,
    pub provider: ProviderId,
    /// `None`: the caller takes whatever the connection has; a new grant asks for the
    /// provider's default scopes.
    pub scopes: Option<Scopes>,
    pub elicitation_id: Option<ElicitationId>,
    pub mcp_context: serde_json::Value,
}

#[derive(Debug)]
pub enum TokenOutcome {
    Connected {
        access_token: SecretString,
        /// For an `api_key` or `basic` provider: its kind and every field typed.
        credential: Option<(&'static str, Credential)>,
        /// Its key id, token type, scopes and issuer, as the connection has them (moved from
        /// the cache's entry or the row read, not copied).
        shape: std::sync::Arc<Shape>,
        expires_at: Option<OffsetDateTime>,
        account: Option<Account>,
        connection_id: ConnectionId,
        /// The connection as the lookup cache holds it, when served from there: its
        /// hand-out audit row then names who holds it without reading its row again.
        holder: Option<crate::store::connections::packed::PackedConnection>,
    },
    ConnectRequired(ElicitationRow),
    Declined(ElicitationId),
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("elicitation not found")]
    ElicitationNotFound,
    #[error("elicitation belongs to another subject or provider")]
    ElicitationMismatch,
    #[error("the provider is disabled by the operator")]
    ProviderDisabled,
    /// The provider's server cannot be used as it is configured or describes itself, and
    /// no retry changes that: no link is made that could only fail.
    #[error("the provider's configuration is refused: {0}")]
    ProviderMisconfigured(#[source] ResolveError),
    /// The provider's server could not be resolved just now (down, slow, busy).
    #[error("the provider could not be reached: {0}")]
    ProviderUnreachable(#[source] ResolveError),
    /// The refresh the hand-out needed did not happen: the provider is down, this
    /// instance is stopping, or a fault (a dead grant is not an error: it asks for a new
    /// consent).
    #[error("refresh: {0}")]
    Refresh(#[from] RefreshError),
    #[error("a pending elicitation kept appearing and vanishing; retry")]
    ElicitationRace,
    /// The tenant names an IdP this instance's configuration lacks (or it was just
    /// switched off): another instance, or this one after its file is fixed, can answer.
    #[error("the tenant's identity provider is not configured on this instance")]
    IdpUnavailable,
    #[error(transparent)]
    Fault(#[from] super::Fault),
}
super::fault::wraps_fault!(TokenError);

/// The hand-out `/v1/token` makes: [`credential_for`], counted in the hand-out audit when it
/// hands a credential to `api_key`'s caller.
pub async fn token_for(
    state: &AppState,
    tenant: &TenantId,
    api_key: &ApiKeyId,
    req: TokenRequest,
    now: OffsetDateTime,
) -> Result<TokenOutcome, TokenError> {
    let out = credential_for(state, tenant, req, now).await?;
    record_handout(&state.handouts, api_key, &out).await;
    Ok(out)
}

/// The subject's usable credential for the provider (refreshed first where due), or what
/// to ask the person: every rule of the hand-out, nothing counted (the proxy counts its
/// calls itself, by method and answer).
pub async fn credential_for(
    state: &AppState,
    tenant: &TenantId,
    req: TokenRequest,
    now: OffsetDateTime,
) -> Result<TokenOutcome, TokenError> {
    let provider = provider_for(&state.directory, tenant, &req.provider)?;
    // A typed credential has no scopes: whatever a tool names, it is asked for none.
    let mut req = req;
    if provider.credential().is_some() {
        req.scopes = Some(Scopes::default());
    }
    // The subject is the tenant's IdP's: rows of another IdP's namesake are not its.
    let idp = state.directory.tenant_idp(tenant).ok_or(TokenError::IdpUnavailable)?;
    let issuer = idp.issuer.as_str();
    let killed = kill_state(&state.pool, &state.caches, tenant, &req.provider).await?;
    if killed == KillState::NoTokenHandouts {
        return Err(TokenError::ProviderDisabled);
    }

    if let Some(eid) = req.elicitation_id
        && let Some(answer) = elicitation_answer(&state.pool, tenant, issuer, &req, eid, now).await?
    {
        return Ok(answer);
    }
    // The request's parts moved into the key (a cached hand-out copies only the tenant).
    let TokenRequest { subject, provider: provider_id, scopes, mcp_context, .. } = req;
    let key = ConnectionKey { tenant: tenant.clone(), subject, provider: provider_id };
    let ask = HandOutRequest { issuer, scopes: scopes.as_ref() };
    if let Some(out) = cached_token(&state.connections, &state.keys, state.refresh, &key, &provider, ask, now).await? {
        return Ok(out);
    }

    // A connection of another IdP's subject of the same name (the tenant changed its IdP
    // since) is not this subject's: as if there were none, and a new grant replaces it.
    let ours = |row: &ConnectionRow| row.issuer.as_deref() == Some(issuer);
    let conn =
        Box::pin(state.connections.read(&key, |row| ours(row) && !refresh::needs_refresh(row, now, state.refresh)))
            .await?
            .filter(ours);
    if let Some(c) = &conn
        && let Some(out) = Box::pin(usable_token(state, &key, &provider, ask, c, now)).await?
    {
        return Ok(out);
    }
    if killed != KillState::Open {
        return Err(TokenError::ProviderDisabled);
    }

    // A new grant asks for what was asked plus what the old connection had, so a
    // re-connect for one more scope does not lose the others.
    let wanted = scopes.unwrap_or_else(|| provider.default_scopes().clone());
    let wanted = match &conn {
        Some(c) if c.status == ConnectionStatus::Active => wanted.union(&c.scopes),
        _ => wanted,
    };
    // A link is made only for a provider whose server can be used: a configuration or a
    // server that is refused would send the person to a page that can only fail, and the
    // MCP server and the person to wait for what cannot come.
    if provider.credential().is_none() {
        Box::pin(super::remote::provider_server(state, &provider)).await.map_err(|e| {
            if e.is_transient() { TokenError::ProviderUnreachable(e) } else { TokenError::ProviderMisconfigured(e) }
        })?;
    }
    let e = Box::pin(pending_elicitation(state, &key, issuer, &mcp_context, &wanted, now)).await?;
    Ok(TokenOutcome::ConnectRequired(e))
}

/// [`token_for`], and when its answer is the still pending elicitation the request named,
/// held up to `wait` until that elicitation changes (`flows::wait`), then answered afresh:
/// the token the moment the connect commits, or the same pending answer when the wait
/// runs out.
pub async fn token_waiting(
    state: &AppState,
    tenant: &TenantId,
    api_key: &ApiKeyId,
    proof: &crate::workload::Proof,
    req: TokenRequest,
    wait: std::time::Duration,
) -> Result<TokenOutcome, TokenError> {
    let named = req.elicitation_id;
    let watch = named.as_ref().and_then(|id| super::wait::watch(state, tenant, id, wait));
    // Armed before the first read, so a commit in between is not missed.
    let changed = watch.as_ref().map(|w| w.changed());
    let again = changed.is_some().then(|| req.clone());
    let first = token_for(state, tenant, api_key, req, OffsetDateTime::now_utc()).await?;
    let (Some(changed), Some(again), TokenOutcome::ConnectRequired(e)) = (changed, again, &first) else {
        return Ok(first);
    };
    if named.is_none_or(|n| n != e.id) || !Box::pin(super::wait::until(state, changed, e.expires_at, wait)).await {
        return Ok(first);
    }
    // Up to 30 s have passed since the key was verified: a key revoked (or a tenant
    // switched off, a workload's rule or issuer removed) meanwhile gets no token, only
    // what it was answered before the wait.
    let usable = match proof {
        crate::workload::Proof::ApiKey => Box::pin(store::api_keys::api_key_usable(&state.pool, api_key)).await?,
        crate::workload::Proof::Workload(token) => {
            let trusted = state.directory.tenants.workload_issuers();
            Box::pin(state.workloads.still_admits(&state.outbound, token.expose_secret(), &trusted, tenant)).await
        }
    };
    if !usable {
        return Ok(first);
    }
    Box::pin(token_for(state, tenant, api_key, again, OffsetDateTime::now_utc())).await
}

/// The answer a retried call gets from its elicitation alone: still pending (the same
/// link again) or declined. `None`: look at the connection (completed), or make a fresh
/// elicitation (expired, cancelled, overdue).
async fn elicitation_answer(
    db: &crate::store::Db,
    tenant: &TenantId,
    issuer: &str,
    req: &TokenRequest,
    eid: ElicitationId,
    now: OffsetDateTime,
) -> Result<Option<TokenOutcome>, TokenError> {
    let e = store::elicitations::find_for_tenant(db, tenant, eid).await?.ok_or(TokenError::ElicitationNotFound)?;
    if e.subject != req.subject || e.provider != req.provider {
        return Err(TokenError::ElicitationMismatch);
    }
    // Made for the subject of the IdP the tenant had before: a fresh link replaces it.
    if e.issuer.as_deref() != Some(issuer) {
        return Ok(None);
    }
    Ok(match e.status {
        ElicitationStatus::Pending if e.expires_at > now => Some(TokenOutcome::ConnectRequired(e)),
        ElicitationStatus::Declined => Some(TokenOutcome::Declined(eid)),
        _ => None,
    })
}

/// The fast path: the row as cached (ciphertext), when it can go out as it is.
async fn cached_token(
    connections: &crate::app::ConnectionRepo,
    keys: &crate::keys::Keys,
    policy: RefreshPolicy,
    key: &ConnectionKey,
    provider: &Provider,
    ask: HandOutRequest<'_>,
    now: OffsetDateTime,
) -> Result<Option<TokenOutcome>, TokenError> {
    let Some(c) = connections.cached(key) else {
        return Ok(None);
    };
    match check_handout(c.facts(), ask, policy, now) {
        HandOut::Serve => {
            let opened =
                keys.using(&c.shape.key_id, Scope::Tenant(&key.tenant), |k| open_token(k, key, provider, &c)).await?;
            Ok(opened?.map(|token| connected(c, token)))
        }
        // Anything else is decided on the row as it is now.
        HandOut::ServeNearExpiry | HandOut::Refresh | HandOut::Expire | HandOut::Reconnect => Ok(None),
    }
}

/// Opens the connection's access token if the connection can serve this request,
/// refreshing it first when it is about to expire.
async fn usable_token(
    state: &AppState,
    key: &ConnectionKey,
    provider: &Provider,
    ask: HandOutRequest<'_>,
    c: &ConnectionRow,
    now: OffsetDateTime,
) -> Result<Option<TokenOutcome>, TokenError> {
    let entry = match check_handout(c.facts(), ask, state.refresh, now) {
        HandOut::Reconnect => return Ok(None),
        // Near expiry with nothing to refresh with: still valid for a little while.
        HandOut::Serve | HandOut::ServeNearExpiry => CachedConnection::of(c),
        HandOut::Refresh => match refresh::refresh(state, c, now).await {
            Ok(row) => CachedConnection::of(&row),
            Err(RefreshError::NeedsReauth | RefreshError::Gone) => return Ok(None),
            Err(e) => return Err(e.into()),
        },
        HandOut::Expire => {
            if refresh::expire_without_refresh(&state.pool, &state.connections, c).await? {
                return Ok(None);
            }
            // Changed since it was read (a reconnect): serve the row as it is now.
            let Some(now_row) = store::connections::find_connection(&state.pool, &c.key()).await? else {
                return Ok(None);
            };
            if now_row.issuer != c.issuer || check_handout(now_row.facts(), ask, state.refresh, now) != HandOut::Serve {
                return Ok(None);
            }
            CachedConnection::of(&now_row)
        }
    };
    match entry {
        Some(entry) => {
            let scope = Scope::Tenant(&key.tenant);
            let opened = state.keys.using(&entry.shape.key_id, scope, |k| open_token(k, key, provider, &entry)).await?;
            Ok(opened?.map(|token| connected(entry, token)))
        }
        None => Ok(None),
    }
}

/// An access token opened for the caller, and for a typed credential its kind and fields.
type Opened = (SecretString, Option<(&'static str, Credential)>);

/// Opens the access token of a usable connection for the caller; `None`: the row is of
/// another kind than its provider (see below).
fn open_token(
    sealed_with: &crate::vault::SealKey,
    key: &ConnectionKey,
    provider: &Provider,
    c: &CachedConnection,
) -> Result<Option<Opened>, TokenError> {
    let connection = c.id;
    let row = RowBinding {
        tenant: &key.tenant,
        subject: &key.subject,
        provider: &key.provider,
        connection,
        generation: c.seal_version,
        issuer: Some(&c.shape.issuer),
    };
    let opened = sealed_with.open(&row, Field::AccessToken, &c.access_token_ct)?;
    // A typed credential is sealed as one document: its primary value is the token, and
    // every field goes along. (The provider's kind decides, not the stored token type.)
    // A row of the other kind (the file changed the provider's template since it was
    // made) is not handed out: the person connects anew, and that replaces it.
    // So is a typed one of another type or other fields than the provider asks for now
    // (a password is never handed out as an API key).
    let typed_row = crate::providers::credential::is_typed(&c.shape.token_type);
    let (access_token, credential) = match (provider.credential(), typed_row) {
        (None, false) => (opened, None),
        (Some(spec), true) => match Credential::from_opened(&opened) {
            Some(typed) if spec.fits(&c.shape.token_type, &typed) => {
                (SecretString::from(typed.token.clone()), Some((spec.credential_type(), typed)))
            }
            _ => return Ok(None),
        },
        _ => {
            tracing::warn!(provider = %key.provider, "a connection of another kind than its provider's; a new connect replaces it");
            return Ok(None);
        }
    };
    Ok(Some((access_token, credential)))
}

/// The answer for a connection whose token was opened: what it has is moved into it (the
/// shape's `Arc`, the account's strings, the cache's entry), nothing copied.
fn connected(c: CachedConnection, (access_token, credential): Opened) -> TokenOutcome {
    TokenOutcome::Connected {
        access_token,
        credential,
        shape: c.shape,
        expires_at: c.access_expires_at,
        account: c.account_id.map(|id| Account { id: id.into(), login: c.account_login.map(Into::into) }),
        connection_id: c.id,
        holder: c.packed,
    }
}

/// The "token handed out" audit: counted into this minute's row (`store::handouts`).
async fn record_handout(handouts: &crate::store::handouts::HandoutAudit, api_key: &ApiKeyId, out: &TokenOutcome) {
    if let TokenOutcome::Connected { connection_id, holder, .. } = out {
        handouts.record(*connection_id, api_key, holder.as_ref()).await;
    }
}

/// The pending elicitation for `key` (the request's tenant, subject and provider), created
/// if there is none. Concurrent callers converge on one row through the partial unique
/// index.
async fn pending_elicitation(
    state: &AppState,
    key: &ConnectionKey,
    issuer: &str,
    mcp_context: &serde_json::Value,
    scopes: &Scopes,
    now: OffsetDateTime,
) -> Result<ElicitationRow, TokenError> {
    let (tenant, s, p) = (&key.tenant, &key.subject, &key.provider);
    let mut tx = store::begin(&state.pool).await?;
    let expired = store::elicitations::expire_overdue_for(&mut *tx, tenant, s, p, issuer, now).await?;
    super::events::links_closed(&mut tx, EventKind::ElicitationExpired, &expired, "service", "expired").await?;
    tx.commit().await?;
    crate::telemetry::metrics::elicitations_finished(ElicitationStatus::Expired, expired.len() as u64);
    for _ in 0..3 {
        if let Some(e) = store::elicitations::find_pending(&state.pool, tenant, s, issuer, p, scopes).await? {
            return Ok(e);
        }
        let id = ElicitationId::generate();
        let ttl = time::Duration::try_from(state.lifetimes.elicitation).unwrap_or(time::Duration::minutes(10));
        let new = store::elicitations::NewElicitation {
            id,
            tenant_id: tenant,
            subject: s,
            issuer,
            provider: p,
            scopes,
            mcp_context: mcp_context.clone(),
            expires_at: now + ttl,
        };
        let mut tx = store::begin(&state.pool).await?;
        if store::elicitations::insert_pending(&mut *tx, &new).await? {
            let mut ev = AuditEvent::new(AuditKind::ElicitationCreated);
            ev.tenant_id = Some(tenant.clone());
            ev.subject = Some(s.clone());
            ev.issuer = Some(issuer.to_owned());
            ev.provider = Some(p.clone());
            ev.elicitation_id = Some(id);
            ev.detail = serde_json::json!({ "scopes": scopes.as_slice() });
            store::audit::insert_event(&mut *tx, &ev).await?;
            metrics::counter!(crate::telemetry::metrics::ELICITATIONS_CREATED, "provider" => p.to_string())
                .increment(1);
        }
        tx.commit().await?;
    }
    // Three rounds of "someone else inserted, then it vanished" means something else is
    // wrong; report it rather than loop.
    Err(TokenError::ElicitationRace)
}
