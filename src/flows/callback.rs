//! The provider callback (DESIGN.md step 6): the state consumed and its binding checked,
//! `iss`, the code exchange with PKCE, the ID token and account checks, and the grant sealed
//! into the vault under the elicitation's lock. A grant refused after the exchange is
//! revoked at the provider (invariant 11).

use super::connect::{STATE_PURPOSE, SealedState, SessionInfo};
use super::policy;
use crate::app::AppState;
use crate::crypto;
use crate::domain::{
    ConnectionId, ConnectionStatus, ElicitationStatus, KillState, ProviderId, Scopes, Subject, TenantId,
};
use crate::oauth::Provider;
use crate::oauth::callback::CallbackQuery;
use crate::oauth::flow::{self, AuthServer, FlowError};
use crate::oauth::resolve::Source;
use crate::store::{self, audit::AuditEvent, elicitations::ElicitationRow, states::OauthStateRow};
use crate::vault::{Field, RowBinding};
use crate::webhooks::EventKind;
use secrecy::SecretString;
use std::sync::Arc;
use time::OffsetDateTime;
use url::Url;

#[derive(Debug)]
pub enum CallbackOutcome {
    Connected { tenant_name: String, account: Option<String> },
    AlreadyConnected { tenant_name: String },
    Declined { tenant_name: String },
}

/// Why a callback ended without attaching a credential. `code()` is the stable reason.
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
    #[error("{refusal} (the new grant was revoked at the provider: {provider_revocation})")]
    GrantRefused { refusal: Box<CallbackRefusal>, provider_revocation: String },
    #[error("the grant is for another upstream account than the one already connected")]
    AccountMismatch,
    #[error("provider configuration could not be resolved: {0}")]
    Resolve(#[source] crate::oauth::resolve::ResolveError),
    #[error("sealed state: {0}")]
    Encoding(#[from] serde_json::Error),
    #[error("the provider is disabled by the operator")]
    ProviderDisabled,
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("vault: {0}")]
    Vault(#[from] crate::vault::VaultError),
}

impl CallbackRefusal {
    /// The refusal itself, without the note that its grant was revoked.
    pub fn into_inner(self) -> CallbackRefusal {
        match self {
            CallbackRefusal::GrantRefused { refusal, .. } => refusal.into_inner(),
            other => other,
        }
    }

    /// What the provider said when the grant of a refused exchange was revoked there.
    pub fn provider_revocation(&self) -> Option<&str> {
        match self {
            CallbackRefusal::GrantRefused { provider_revocation, .. } => Some(provider_revocation),
            _ => None,
        }
    }

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
            CallbackRefusal::GrantRefused { refusal, .. } => refusal.code(),
            CallbackRefusal::AccountMismatch => "account_mismatch",
            CallbackRefusal::Resolve(_) => "provider_unavailable",
            CallbackRefusal::ProviderDisabled => "provider_disabled",
            CallbackRefusal::Database(_) | CallbackRefusal::Vault(_) | CallbackRefusal::Encoding(_) => "internal_error",
        }
    }
}

/// The binding checks of DESIGN.md step 6, on a state that was just consumed.
pub fn check_state_binding(
    s: &OauthStateRow,
    path_provider: &ProviderId,
    session: &SessionInfo,
    expected_redirect: &Url,
) -> Result<(), CallbackRefusal> {
    if s.provider != path_provider.as_str() {
        return Err(CallbackRefusal::ProviderMismatch);
    }
    if !crypto::constant_time_eq(&s.session_hash, &session.id_hash)
        || !crypto::constant_time_eq(s.subject.as_bytes(), session.subject.as_str().as_bytes())
    {
        return Err(CallbackRefusal::SessionMismatch);
    }
    if s.redirect_uri != expected_redirect.as_str() {
        return Err(CallbackRefusal::RedirectMismatch);
    }
    Ok(())
}

/// `GET /connect/{provider}/callback`.
pub async fn complete(
    state: &AppState,
    path_provider: &ProviderId,
    session: Option<&SessionInfo>,
    q: &CallbackQuery,
    now: OffsetDateTime,
) -> Result<CallbackOutcome, CallbackRefusal> {
    let raw_state = q.state.as_deref().filter(|s| crypto::looks_like_token(s)).ok_or(CallbackRefusal::MissingState)?;
    let session = session.ok_or(CallbackRefusal::NoSession)?;
    let state_hash = crypto::lookup_hash(STATE_PURPOSE, raw_state);

    let Some(st) = store::states::consume_state(&state.pool, &state_hash, now).await? else {
        return classify_unusable_state(state, &state_hash, session, now).await;
    };
    let result = complete_consumed(state, path_provider, session, q, &st, &state_hash, now).await;
    if let Err(refusal) = &result {
        let mut ev = AuditEvent::new("connect_failed");
        ev.tenant_id = Some(st.tenant_id.clone());
        ev.subject = Some(st.subject.clone());
        ev.provider = Some(st.provider.clone());
        ev.elicitation_id = Some(st.elicitation_id);
        ev.detail = match refusal.provider_revocation() {
            Some(r) => serde_json::json!({ "reason": refusal.code(), "provider_revocation": r }),
            None => serde_json::json!({ "reason": refusal.code() }),
        };
        if let Err(e) = store::audit::insert_event(&state.pool, &ev).await {
            tracing::error!(error = %e, "could not write audit event");
        }
    }
    result
}

/// A state that could not be consumed: the same browser reloading its finished callback
/// (not an attack, and not a second grant: show the result again), an expired state, or
/// one that never was ours or was used already.
async fn classify_unusable_state(
    state: &AppState,
    state_hash: &[u8],
    session: &SessionInfo,
    now: OffsetDateTime,
) -> Result<CallbackOutcome, CallbackRefusal> {
    let Some(old) = store::states::find_state(&state.pool, state_hash).await? else {
        return Err(CallbackRefusal::StateUnknown);
    };
    if !crypto::constant_time_eq(&old.session_hash, &session.id_hash) {
        return Err(CallbackRefusal::SessionMismatch);
    }
    if old.used_at.is_none() && old.expires_at <= now {
        return Err(CallbackRefusal::StateExpired);
    }
    match store::elicitations::find_by_id(&state.pool, old.elicitation_id).await? {
        Some(e) if e.status == ElicitationStatus::Completed => {
            Ok(CallbackOutcome::AlreadyConnected { tenant_name: state.tenant_name(&e.tenant_id) })
        }
        _ => Err(CallbackRefusal::StateUnknown),
    }
}

async fn complete_consumed(
    state: &AppState,
    path_provider: &ProviderId,
    session: &SessionInfo,
    q: &CallbackQuery,
    st: &OauthStateRow,
    state_hash: &[u8],
    now: OffsetDateTime,
) -> Result<CallbackOutcome, CallbackRefusal> {
    let expected_redirect = state.provider_redirect_uri(path_provider);
    check_state_binding(st, path_provider, session, &expected_redirect)?;
    let tenant = TenantId::parse(&st.tenant_id).map_err(|_| CallbackRefusal::ElicitationGone)?;
    let provider = policy::provider_for(state, &tenant, path_provider).map_err(|_| CallbackRefusal::ElicitationGone)?;
    if policy::kill_state(state, &st.tenant_id, &st.provider).await? != KillState::Open {
        return Err(CallbackRefusal::ProviderDisabled);
    }
    let server = state.resolver.provider(&state.outbound, &provider).await.map_err(CallbackRefusal::Resolve)?;
    // RFC 9207 applies to error responses too.
    flow::check_iss(&server, q.iss.as_deref()).map_err(CallbackRefusal::Iss)?;
    let tenant_name = state.tenant_name(&st.tenant_id);

    let mut tx = store::begin(&state.pool).await?;
    // Lock the elicitation for the whole exchange: a concurrent callback for the same
    // elicitation (double click, two tabs) waits here and then finds it completed, so no
    // second code is exchanged and no second grant stored.
    let Some(e) = store::elicitations::lock_pending(&mut *tx, st.elicitation_id, now).await? else {
        drop(tx);
        let e = store::elicitations::find_by_id(&state.pool, st.elicitation_id).await?;
        return match e {
            Some(e) if e.status == ElicitationStatus::Completed => {
                Ok(CallbackOutcome::AlreadyConnected { tenant_name })
            }
            _ => Err(CallbackRefusal::ElicitationGone),
        };
    };
    if e.tenant_id != st.tenant_id || e.subject != st.subject || e.provider != st.provider {
        return Err(CallbackRefusal::ElicitationGone);
    }

    if let Some(err) = &q.error {
        return provider_error(tx, &e, err, tenant_name, now).await;
    }
    let code = q.code.as_deref().filter(|c| !c.is_empty() && c.len() <= 2048).ok_or(CallbackRefusal::MissingCode)?;

    let opened = state.vault.open_aux(&st.key_id, STATE_PURPOSE, state_hash, &st.sealed)?;
    let secret: SealedState = serde_json::from_slice(&opened)?;
    let tokens = flow::exchange_code(&server, &state.outbound, &expected_redirect, code, &secret.verifier)
        .await
        .map_err(CallbackRefusal::Exchange)?;
    let exchanged = Exchanged { tenant, provider, server, tokens, nonce: secret.nonce };
    keep_or_revoke(state, tx, &e, &exchanged, now)
        .await
        .map(|account| CallbackOutcome::Connected { tenant_name, account })
}

/// The provider answered with an error: `access_denied` declines the elicitation; any
/// other leaves it pending, so the person may try again.
async fn provider_error(
    mut tx: store::Tx,
    e: &ElicitationRow,
    err: &str,
    tenant_name: String,
    now: OffsetDateTime,
) -> Result<CallbackOutcome, CallbackRefusal> {
    if err == "access_denied" {
        store::elicitations::mark_declined(&mut *tx, e.id, &e.subject, now).await?;
        crate::telemetry::metrics::elicitations_finished(ElicitationStatus::Declined, 1);
        let mut ev = AuditEvent::for_elicitation("consent_declined", e);
        ev.detail = serde_json::json!({ "where": "provider" });
        store::audit::insert_event(&mut *tx, &ev).await?;
        super::events::elicitation(&mut tx, EventKind::ElicitationDeclined, e, "provider", "access_denied").await?;
        tx.commit().await?;
        return Ok(CallbackOutcome::Declined { tenant_name });
    }
    let code: String = err.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
    Err(CallbackRefusal::ProviderError(code))
}

/// Stores the grant the exchange made (the account login it names), or (invariant 11) ends it at the provider when it
/// is not kept: account mismatch, failed lookup or ID token, or a failed commit.
async fn keep_or_revoke(
    state: &AppState,
    tx: store::Tx,
    e: &ElicitationRow,
    exchanged: &Exchanged,
    now: OffsetDateTime,
) -> Result<Option<String>, CallbackRefusal> {
    match attach(state, tx, e, exchanged, now).await {
        Ok(account) => {
            crate::telemetry::metrics::elicitations_finished(ElicitationStatus::Completed, 1);
            Ok(account)
        }
        Err(refusal) => {
            let order = flow::revocation_order(&exchanged.tokens);
            let result = flow::revoke_tokens(&exchanged.server, &state.outbound, &order).await;
            Err(CallbackRefusal::GrantRefused { refusal: Box::new(refusal), provider_revocation: result })
        }
    }
}

/// What a successful code exchange produced, before any of it is kept.
struct Exchanged {
    tenant: TenantId,
    provider: Arc<Provider>,
    server: Arc<AuthServer>,
    tokens: flow::TokenSet,
    nonce: Option<String>,
}

/// Checks the exchanged grant (ID token, account, pinning) and stores it under the
/// elicitation lock held by `tx`. Returns the upstream login for the result page.
async fn attach(
    state: &AppState,
    mut tx: store::Tx,
    e: &ElicitationRow,
    x: &Exchanged,
    now: OffsetDateTime,
) -> Result<Option<String>, CallbackRefusal> {
    let (account_id, account_login) = verified_account(state, x, OffsetDateTime::now_utc()).await?;
    let existing = match store::connections::find_connection(&mut *tx, &e.tenant_id, &e.subject, &e.provider).await? {
        // Under its lock: a revoke that commits meanwhile is seen (its status decides the
        // event, and the grant is stored over the row as it is then).
        Some(found) => store::connections::lock_connection(&mut *tx, found.id).await?,
        None => None,
    };
    if let Some(old) = &existing
        && old.status != ConnectionStatus::Revoked
        && let (Some(old_account), Some(new_account)) = (&old.account_id, &account_id)
        && old_account != new_account
        && !x.provider.allow_account_change
    {
        drop(tx);
        let mut ev = AuditEvent::for_elicitation("account_mismatch", e);
        ev.connection_id = Some(old.id);
        store::audit::insert_event(&state.pool, &ev).await?;
        return Err(CallbackRefusal::AccountMismatch);
    }

    let account = (account_id.as_deref(), account_login.as_deref());
    let (connection, granted) = save_grant(state, &mut tx, e, x, account, existing.as_ref(), now).await?;
    store::elicitations::mark_completed(&mut *tx, e.id, connection.as_uuid(), now).await?;
    let mut ev = AuditEvent::for_elicitation("connect_completed", e);
    ev.connection_id = Some(connection.as_uuid());
    // The row's history stays in the trail: a reconnect reuses the row, and only a grant
    // still held (active or needing re-consent) is replaced; a revoked one was gone already.
    let previous = existing.as_ref().map(|c| c.status);
    ev.detail = serde_json::json!({
        "account_id": account_id,
        "replaced": previous.is_some_and(|s| s != ConnectionStatus::Revoked),
        "previous_status": previous.map(ConnectionStatus::as_str),
        "scopes": granted,
    });
    store::audit::insert_event(&mut *tx, &ev).await?;
    let replaced = existing.as_ref().map(|c| c.status);
    let id = connection.as_uuid();
    super::events::connected(&mut tx, e, id, account_login.as_deref(), &granted, replaced).await?;
    crate::domain::failpoint::stop_here("callback.before_commit").await;
    tx.commit().await?;
    state.caches.forget_connection(&e.tenant_id, &e.subject, &e.provider);
    Ok(account_login)
}

/// Seals the grant into the vault (bound to its row) and writes it: a new connection, or
/// the existing one's grant replaced. Returns the connection id and the scopes granted.
/// The exchanged tokens sealed to their row.
struct Sealed {
    access: Vec<u8>,
    refresh: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
}

impl Sealed {
    fn of(state: &AppState, row: &RowBinding<'_>, t: &flow::TokenSet) -> Result<Self, crate::vault::VaultError> {
        let seal = |field: Field, token: &SecretString| state.vault.seal(row, field, token);
        Ok(Self {
            access: seal(Field::AccessToken, &t.access_token)?,
            refresh: t.refresh_token.as_ref().map(|t| seal(Field::RefreshToken, t)).transpose()?,
            id: t.id_token.as_ref().map(|t| seal(Field::IdToken, t)).transpose()?,
        })
    }
}

async fn save_grant(
    state: &AppState,
    tx: &mut store::Tx,
    e: &ElicitationRow,
    x: &Exchanged,
    (account_id, account_login): (Option<&str>, Option<&str>),
    existing: Option<&store::connections::ConnectionRow>,
    now: OffsetDateTime,
) -> Result<(ConnectionId, Vec<String>), CallbackRefusal> {
    let connection = existing.map_or_else(ConnectionId::generate, |c| ConnectionId::from_uuid(c.id));
    let subject = Subject::parse(&e.subject).map_err(|_| CallbackRefusal::ElicitationGone)?;
    let path_provider = &x.provider.id;
    // A reused row's next seal generation (its earlier grants' ciphertexts no longer open
    // if put back), a new row's first.
    let generation = crate::vault::next_generation(existing.and_then(|c| c.seal_version));
    let row = RowBinding {
        tenant: &x.tenant,
        subject: &subject,
        provider: path_provider,
        connection,
        generation: Some(generation),
    };
    let tokens = &x.tokens;
    let sealed = Sealed::of(state, &row, tokens)?;
    let granted = granted_scopes(tokens.scope.as_deref(), &e.scopes);
    let grant = store::connections::SealedGrant {
        generation,
        key_id: state.vault.current_key_id().as_str(),
        access_token_ct: &sealed.access,
        refresh_token_ct: sealed.refresh.as_deref(),
        id_token_ct: sealed.id.as_deref(),
        token_type: &tokens.token_type,
        access_expires_at: tokens.expires_in.and_then(|d| time::Duration::try_from(d).ok()).map(|d| now + d),
    };
    match existing {
        Some(_) => {
            store::connections::replace_grant(
                &mut **tx,
                connection.as_uuid(),
                account_id,
                account_login,
                &granted,
                &grant,
            )
            .await?;
        }
        None => {
            let inserted = store::connections::insert_connection(
                &mut **tx,
                &store::connections::NewConnection {
                    id: connection.as_uuid(),
                    tenant_id: &e.tenant_id,
                    subject: &e.subject,
                    provider: &e.provider,
                    account_id,
                    account_login,
                    scopes: &granted,
                    grant,
                },
            )
            .await?;
            if !inserted {
                // Another link of this subject and provider completed while this exchange
                // ran: that grant is kept, this one is revoked by the caller.
                return Err(CallbackRefusal::ConnectedConcurrently);
            }
        }
    }
    Ok((connection, granted))
}

/// The upstream account of an exchanged grant: the ID token verified where the flow is
/// OIDC, and the user endpoint's answer, whose `sub` must then be the ID token's
/// (OIDC Core §5.3.2).
async fn verified_account(
    state: &AppState,
    x: &Exchanged,
    now: OffsetDateTime,
) -> Result<(Option<String>, Option<String>), CallbackRefusal> {
    let mut id_subject = None;
    if let Some(nonce) = &x.nonce {
        let raw = x
            .tokens
            .id_token
            .as_ref()
            .ok_or(CallbackRefusal::Exchange(FlowError::IdToken("no id_token".to_owned())))?;
        // The time of the check, not of the request: the exchange took a while.
        let v = state
            .resolver
            .verify_id_token(&state.outbound, Source::Provider(&x.provider), x.server.clone(), raw, nonce, now)
            .await
            .map_err(CallbackRefusal::Exchange)?;
        id_subject = Some(v.subject);
    }
    let Some(info) = fetch_userinfo(state, &x.server, &x.tokens.access_token).await? else {
        return Ok((id_subject, None));
    };
    if let Some(id_sub) = &id_subject {
        flow::check_userinfo_subject(id_sub, &info).map_err(CallbackRefusal::UserinfoSubject)?;
    }
    let id = flow::json_field(&info, &x.provider.account_id_field).ok_or(CallbackRefusal::Account)?;
    let login = flow::json_field(&info, &x.provider.account_login_field);
    Ok((Some(id), login))
}

/// Scopes as granted: the token response's `scope` when present (RFC 6749 §5.1), else
/// what was asked for.
fn granted_scopes(response_scope: Option<&str>, asked: &[String]) -> Vec<String> {
    let Some(s) = response_scope else { return asked.to_vec() };
    let parts: Vec<&str> = s.split([' ', ',']).filter(|x| !x.is_empty()).collect();
    Scopes::parse(&parts).map(|s| s.as_slice().to_vec()).unwrap_or_else(|_| asked.to_vec())
}

/// The provider's user endpoint answer, or `None` when it has none.
async fn fetch_userinfo(
    state: &AppState,
    server: &AuthServer,
    access_token: &SecretString,
) -> Result<Option<serde_json::Value>, CallbackRefusal> {
    let Some(url) = &server.userinfo_url else { return Ok(None) };
    let v = state
        .outbound
        .with_guard(&server.guard)
        .get_json(url, Some(secrecy::ExposeSecret::expose_secret(access_token)))
        .await
        .map_err(|_| CallbackRefusal::Account)?;
    Ok(Some(v))
}
