//! The provider callback (DESIGN.md step 6): the state consumed and its binding checked,
//! `iss`, the code exchange with PKCE, the ID token and account checks, and the grant sealed
//! into the vault under the elicitation's lock. A grant made by the exchange and then not
//! kept, refused or failed, is revoked at the provider (invariant 11).
//!
//! The elicitation's row lock is held across the exchange (see `consumed`): it is what
//! makes the exchange happen once per link, and a second grant is not made at all rather
//! than made and revoked (a provider's revocation may end the whole grant, the kept one
//! too; one without a revocation endpoint would keep it alive).
//!
//! This file is the orchestration: it reads, asks [`checks`] (pure decisions), and owns the
//! transaction from the elicitation's lock to its commit; [`account`] verifies who the
//! grant is for, [`grant`] seals and writes it.

mod account;
pub mod checks;
mod grant;

use super::Fault;
use super::connect::{STATE_PURPOSE, SealedState, SessionInfo};
use super::policy;
use crate::app::AppState;
use crate::crypto;
use crate::domain::AuditKind;
use crate::domain::{
    Account, ConnectionKey, ConnectionStatus, ElicitationStatus, KillState, ProviderId, Subject, TenantId,
};
use crate::oauth::callback::CallbackQuery;
use crate::oauth::flow::{self, AuthServer, FlowError};
use crate::providers::Provider;
use crate::store::{self, audit::AuditEvent, elicitations::ElicitationRow, states::OauthStateRow};
use crate::webhooks::EventKind;
use std::sync::Arc;
use time::OffsetDateTime;

#[derive(Debug)]
pub enum CallbackOutcome {
    Connected { tenant_name: String, account: Option<String> },
    AlreadyConnected { tenant_name: String },
    Declined { tenant_name: String },
}

/// Why a callback was refused: each has a stable reason ([`CallbackRefusal::code`]) for
/// the audit row, the metric and the log. Faults are not refusals ([`CallbackError`]).
#[derive(Debug, thiserror::Error)]
pub enum CallbackRefusal {
    #[error("no state in the callback")]
    MissingState,
    #[error("state unknown or already used")]
    StateUnknown,
    #[error("state expired")]
    StateExpired,
    #[error("no browser session")]
    NoSession,
    #[error("state belongs to another browser session")]
    SessionMismatch,
    #[error("provider in the path is not the state's provider")]
    ProviderMismatch,
    #[error("redirect URI differs from the registered one")]
    RedirectMismatch,
    #[error("RFC 9207 issuer check failed: {0}")]
    Iss(&'static str),
    #[error("the elicitation is no longer pending")]
    ElicitationGone,
    #[error("the provider reported an error: {0}")]
    ProviderError(String),
    #[error("no code in the callback")]
    MissingCode,
    #[error("token exchange failed: {0}")]
    Exchange(FlowError),
    #[error("the provider's account endpoint failed")]
    Account,
    #[error("another link of this subject connected this provider at the same moment")]
    ConnectedConcurrently,
    #[error("the user endpoint's subject is not the ID token's: {0}")]
    UserinfoSubject(&'static str),
    #[error("the grant is for another upstream account than the one already connected")]
    AccountMismatch,
    #[error("provider configuration could not be resolved: {0}")]
    Resolve(#[source] crate::oauth::resolve::ResolveError),
    #[error("the provider is disabled by the operator")]
    ProviderDisabled,
}

impl CallbackRefusal {
    pub fn code(&self) -> &'static str {
        match self {
            CallbackRefusal::MissingState => "missing_state",
            CallbackRefusal::StateUnknown => "state_unknown_or_used",
            CallbackRefusal::StateExpired => "state_expired",
            CallbackRefusal::NoSession => "no_session",
            CallbackRefusal::SessionMismatch => "session_mismatch",
            CallbackRefusal::ProviderMismatch => "provider_mismatch",
            CallbackRefusal::RedirectMismatch => "redirect_uri_mismatch",
            CallbackRefusal::Iss(r) => r,
            CallbackRefusal::ElicitationGone => "elicitation_not_pending",
            CallbackRefusal::ProviderError(_) => "provider_error",
            CallbackRefusal::MissingCode => "missing_code",
            CallbackRefusal::Exchange(e) => e.reason(),
            CallbackRefusal::Account => "account_lookup_failed",
            CallbackRefusal::UserinfoSubject(_) => "userinfo_subject_mismatch",
            CallbackRefusal::ConnectedConcurrently => "connected_concurrently",
            CallbackRefusal::AccountMismatch => "account_mismatch",
            CallbackRefusal::Resolve(_) => "provider_unavailable",
            CallbackRefusal::ProviderDisabled => "provider_disabled",
        }
    }
}

/// A callback that did not connect: refused, or a fault on our side.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    #[error(transparent)]
    Refused(#[from] CallbackRefusal),
    #[error(transparent)]
    Fault(#[from] Fault),
}
super::fault::wraps_fault!(CallbackError);

impl CallbackError {
    pub fn code(&self) -> &'static str {
        match self {
            CallbackError::Refused(r) => r.code(),
            CallbackError::Fault(_) => "internal_error",
        }
    }
}

/// How a callback that did not connect ended, and, when the exchange had made a grant
/// already, what the provider said when it was revoked there (invariant 11).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct CallbackFailure {
    pub error: CallbackError,
    pub provider_revocation: Option<String>,
}

/// A failure before any grant was made: nothing to revoke.
macro_rules! failure_from {
    ($($from:ty),*) => {$(
        impl From<$from> for CallbackFailure {
            fn from(e: $from) -> Self {
                Self { error: e.into(), provider_revocation: None }
            }
        }
    )*};
}
failure_from!(CallbackError, CallbackRefusal, Fault);

/// What a successful code exchange produced, before any of it is kept.
pub(crate) struct Exchanged {
    tenant: TenantId,
    subject: Subject,
    provider: Arc<Provider>,
    server: Arc<AuthServer>,
    tokens: flow::TokenSet,
    nonce: Option<String>,
}

impl Exchanged {
    fn key(&self) -> ConnectionKey {
        ConnectionKey { tenant: self.tenant.clone(), subject: self.subject.clone(), provider: self.provider.id.clone() }
    }
}

/// A grant to keep, however it was made: by a code exchange here, or typed on the
/// credential form (`flows::credential`).
pub(super) struct Grant<'a> {
    pub(super) key: ConnectionKey,
    pub(super) provider: &'a Provider,
    pub(super) tokens: &'a flow::TokenSet,
}

/// `GET /connect/{provider}/callback`. Every refusal after the state was consumed is
/// written to the audit trail as `connect_failed` with its reason.
pub async fn complete(
    state: &AppState,
    path_provider: &ProviderId,
    session: Option<&SessionInfo>,
    q: &CallbackQuery,
    now: OffsetDateTime,
) -> Result<CallbackOutcome, CallbackFailure> {
    let raw_state = checks::raw_state(q)?;
    let session = session.ok_or(CallbackRefusal::NoSession)?;
    let state_hash = crypto::lookup_hash(STATE_PURPOSE, raw_state);

    let Some(st) = store::states::consume_state(&state.pool, &state_hash, now).await.map_err(Fault::from)? else {
        return Ok(unusable_state(state, &state_hash, session, now).await?);
    };
    let result = consumed(state, path_provider, session, q, &st, &state_hash, now).await;
    if let Err(failure) = &result {
        audit_failure(&state.pool, &st, failure).await;
    }
    result
}

async fn audit_failure(db: &crate::store::Db, st: &OauthStateRow, failure: &CallbackFailure) {
    let mut ev = AuditEvent::new(AuditKind::ConnectFailed);
    ev.tenant_id = Some(st.tenant_id.clone());
    ev.subject = Some(st.subject.clone());
    ev.provider = Some(st.provider.clone());
    ev.elicitation_id = Some(st.elicitation_id);
    let reason = failure.error.code();
    ev.detail = match &failure.provider_revocation {
        Some(r) => serde_json::json!({ "reason": reason, "provider_revocation": r }),
        None => serde_json::json!({ "reason": reason }),
    };
    if let Err(e) = store::audit::insert_event(db, &ev).await {
        tracing::error!(error = %e, "could not write audit event");
    }
}

/// A state that could not be consumed: the same browser reloading its finished callback
/// (not an attack, and not a second grant: show the result again), an expired state, or
/// one that never was ours or was used already.
async fn unusable_state(
    state: &AppState,
    state_hash: &[u8],
    session: &SessionInfo,
    now: OffsetDateTime,
) -> Result<CallbackOutcome, CallbackError> {
    let Some(old) = store::states::find_state(&state.pool, state_hash).await? else {
        return Err(CallbackRefusal::StateUnknown.into());
    };
    checks::unusable_state(&old, session, now)?;
    already_connected(state, &old).await?.ok_or_else(|| CallbackRefusal::StateUnknown.into())
}

/// The state's elicitation, if it completed (by this callback earlier, or a concurrent
/// one): the same result shown again.
async fn already_connected(state: &AppState, st: &OauthStateRow) -> Result<Option<CallbackOutcome>, Fault> {
    Ok(match store::elicitations::find_by_id(&state.pool, st.elicitation_id).await? {
        Some(e) if e.status == ElicitationStatus::Completed => {
            Some(CallbackOutcome::AlreadyConnected { tenant_name: state.directory.tenant_name(&e.tenant_id) })
        }
        _ => None,
    })
}

/// The callback once its state is consumed: checks, the elicitation's lock, the exchange,
/// and the grant kept (committed here) or revoked.
async fn consumed(
    state: &AppState,
    path_provider: &ProviderId,
    session: &SessionInfo,
    q: &CallbackQuery,
    st: &OauthStateRow,
    state_hash: &[u8],
    now: OffsetDateTime,
) -> Result<CallbackOutcome, CallbackFailure> {
    let expected_redirect = state.urls.provider_redirect_uri(path_provider);
    checks::state_binding(st, path_provider, session, &expected_redirect)?;
    let (tenant, subject) = (st.tenant_id.clone(), st.subject.clone());
    let provider = policy::provider_for(&state.directory, &tenant, path_provider).map_err(|e| match e {
        policy::PolicyError::ProviderDeactivated => CallbackRefusal::ProviderDisabled,
        _ => CallbackRefusal::ElicitationGone,
    })?;
    if policy::kill_state(&state.pool, &state.caches, &st.tenant_id, &st.provider).await.map_err(Fault::from)?
        != KillState::Open
    {
        return Err(CallbackRefusal::ProviderDisabled.into());
    }
    let server = super::remote::provider_server(state, &provider).await.map_err(CallbackRefusal::Resolve)?;
    // RFC 9207 applies to error responses too.
    flow::check_iss(&server, q.iss.as_deref()).map_err(CallbackRefusal::Iss)?;
    let tenant_name = state.directory.tenant_name(&st.tenant_id);

    let mut tx = store::begin(&state.pool).await.map_err(Fault::from)?;
    // Lock the elicitation for the whole exchange: a concurrent callback for the same
    // elicitation (double click, two tabs) waits here and then finds it completed, so no
    // second code is exchanged and no second grant stored.
    let Some(e) = store::elicitations::lock_pending(&mut *tx, st.elicitation_id, now).await.map_err(Fault::from)?
    else {
        drop(tx);
        return already_connected(state, st).await?.ok_or_else(|| CallbackRefusal::ElicitationGone.into());
    };
    checks::elicitation_matches(st, &e)?;
    // Made for the subject of an IdP the tenant no longer has: over.
    if state.directory.tenant_idp(&e.tenant_id).is_none_or(|i| e.issuer.as_deref() != Some(i.issuer.as_str())) {
        return Err(CallbackRefusal::ElicitationGone.into());
    }

    if let Some(err) = &q.error {
        return match checks::provider_answer(err) {
            checks::ProviderAnswer::Declined => {
                declined_at_provider(&mut tx, &e, now).await.map_err(Fault::from)?;
                tx.commit().await.map_err(Fault::from)?;
                Ok(CallbackOutcome::Declined { tenant_name })
            }
            checks::ProviderAnswer::Refused(r) => Err(r.into()),
        };
    }
    let code = checks::code(q)?;
    let opened =
        (state.keys.opening(&st.key_id, crate::keys::Scope::Tenant(&st.tenant_id)).await.map_err(Fault::from)?)
            .open_aux(STATE_PURPOSE, state_hash, &st.sealed)
            .map_err(Fault::from)?;
    // The key the grant will be sealed with, before the code is exchanged: a key store that
    // is down refuses the callback here, before a grant exists to revoke.
    state.keys.sealing(crate::keys::Scope::Tenant(&st.tenant_id)).await.map_err(Fault::from)?;
    let secret: SealedState = serde_json::from_slice(&opened).map_err(Fault::from)?;
    let tokens = flow::exchange_code(&server, &state.outbound, &expected_redirect, code, &secret.verifier)
        .await
        .map_err(CallbackRefusal::Exchange)?;
    let x = Exchanged { tenant, subject, provider, server, tokens, nonce: secret.nonce };

    // From here a grant exists at the provider: kept only if it is written and committed.
    match keep_and_commit(state, tx, &e, &x, now).await {
        Ok(account) => {
            state.connections.forget(&x.key());
            crate::telemetry::metrics::elicitations_finished(ElicitationStatus::Completed, 1);
            Ok(CallbackOutcome::Connected { tenant_name, account: account.and_then(|a| a.login) })
        }
        Err(error) => {
            let order = flow::revocation_order(&x.tokens);
            let told = flow::revoke_tokens(&x.server, &state.outbound, &order).await;
            Err(CallbackFailure { error, provider_revocation: Some(told) })
        }
    }
}

/// [`keep`] under the lock `tx` holds, and the commit: the account the grant is for, or
/// why it was not kept (the caller revokes it then).
async fn keep_and_commit(
    state: &AppState,
    mut tx: store::Tx,
    e: &ElicitationRow,
    x: &Exchanged,
    now: OffsetDateTime,
) -> Result<Option<Account>, CallbackError> {
    match keep(state, &mut tx, e, x, now).await? {
        Kept::Connected(account) => {
            crate::domain::failpoint::stop_here("callback.before_commit").await;
            tx.commit().await.map_err(Fault::from)?;
            Ok(account)
        }
        Kept::AccountMismatch => {
            // The refusal's audit row commits; nothing else was written.
            tx.commit().await.map_err(Fault::from)?;
            Err(CallbackRefusal::AccountMismatch.into())
        }
    }
}

/// The person declined at the provider (`access_denied`).
async fn declined_at_provider(tx: &mut store::Tx, e: &ElicitationRow, now: OffsetDateTime) -> Result<(), sqlx::Error> {
    store::elicitations::mark_declined(&mut **tx, e.id, &e.subject, now).await?;
    crate::telemetry::metrics::elicitations_finished(ElicitationStatus::Declined, 1);
    let mut ev = AuditEvent::for_elicitation(AuditKind::ConsentDeclined, e);
    ev.detail = serde_json::json!({ "where": "provider" });
    store::audit::insert_event(&mut **tx, &ev).await?;
    super::events::elicitation(tx, EventKind::ElicitationDeclined, e, "provider", "access_denied").await
}

/// What [`keep`] wrote into the transaction.
pub(super) enum Kept {
    /// The grant, the completed elicitation, its audit row and event.
    Connected(Option<Account>),
    /// Only the `account_mismatch` audit row: the held grant of another account stays.
    AccountMismatch,
}

/// Checks the exchanged grant (ID token, account, pinning) and writes it under the
/// elicitation lock `tx` holds; the caller commits.
async fn keep(
    state: &AppState,
    tx: &mut store::Tx,
    e: &ElicitationRow,
    x: &Exchanged,
    now: OffsetDateTime,
) -> Result<Kept, CallbackError> {
    // The time of the check, not of the request: the exchange took a while.
    let account = account::verified(state, x, OffsetDateTime::now_utc()).await?;
    let grant = Grant { key: x.key(), provider: &x.provider, tokens: &x.tokens };
    keep_grant(state, tx, e, &grant, account, now).await
}

/// Writes a checked grant under the elicitation lock `tx` holds (account pinning, the
/// replaced grant of another IdP's namesake revoked, the grant sealed, the elicitation
/// completed, audited, announced); the caller commits.
pub(super) async fn keep_grant(
    state: &AppState,
    tx: &mut store::Tx,
    e: &ElicitationRow,
    x: &Grant<'_>,
    account: Option<Account>,
    now: OffsetDateTime,
) -> Result<Kept, CallbackError> {
    let existing = match store::connections::find_connection(&mut **tx, &x.key).await? {
        // Under its lock: a revoke that commits meanwhile is seen (its status decides the
        // event, and the grant is stored over the row as it is then).
        Some(found) => store::connections::lock_connection(&mut **tx, found.id).await?,
        None => None,
    };
    // A row of another IdP's subject of the same name (the tenant changed IdP since) is
    // not this person's: no account is pinned by it, and this grant replaces it.
    let own = |c: &&store::connections::ConnectionRow| c.issuer.is_some() && c.issuer == e.issuer;
    let held = existing.as_ref().filter(own).map(|c| (c.status, c.account_id.as_deref()));
    if checks::account_pinning(held, account.as_ref(), x.provider.policy.allow_account_change).is_err() {
        let mut ev = AuditEvent::for_elicitation(AuditKind::AccountMismatch, e);
        ev.connection_id = existing.as_ref().map(|c| c.id);
        store::audit::insert_event(&mut **tx, &ev).await?;
        return Ok(Kept::AccountMismatch);
    }

    // The replaced grant of another IdP's namesake is revoked at the provider first
    // (invariant 11: once its ciphertext is replaced nobody could).
    let foreign = match existing.as_ref().filter(|c| !own(c) && c.status != ConnectionStatus::Revoked) {
        Some(c) => Some(serde_json::json!({
            "issuer": c.issuer,
            "provider_result": crate::flows::revoke::revoke_at_provider(state, c).await,
        })),
        None => None,
    };
    let sealing = state.keys.sealing(crate::keys::Scope::Tenant(&x.key.tenant)).await?;
    let (connection, granted) = grant::save(&sealing, tx, e, x, account.as_ref(), existing.as_ref(), now).await?;
    let id = connection;
    store::elicitations::mark_completed(&mut **tx, e.id, id, now).await?;
    // The row's history stays in the trail: a reconnect reuses the row, and only a grant
    // still held (active or needing re-consent) is replaced; a revoked one was gone already.
    let previous = existing.as_ref().map(|c| c.status);
    let mut ev = AuditEvent::for_elicitation(AuditKind::ConnectCompleted, e);
    ev.connection_id = Some(id);
    ev.detail = serde_json::json!({
        "account_id": account.as_ref().map(|a| &a.id),
        "replaced": previous.is_some_and(|s| s != ConnectionStatus::Revoked),
        "previous_status": previous.map(ConnectionStatus::as_str),
        "scopes": granted,
        "replaced_other_idps": foreign,
    });
    store::audit::insert_event(&mut **tx, &ev).await?;
    let login = account.as_ref().and_then(|a| a.login.as_deref());
    super::events::connected(tx, e, id, login, &granted, previous).await?;
    Ok(Kept::Connected(account))
}
