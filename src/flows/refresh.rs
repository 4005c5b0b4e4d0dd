//! Refresh on lookup (DESIGN.md invariant 7). At most one refresh per connection is in
//! flight: in this process a per-connection async mutex makes the other callers wait for
//! the first; across instances the row lock (`SELECT ... FOR UPDATE`) does, and the
//! generation counter (`version`) tells a caller that waited that the row was refreshed
//! meanwhile, so it uses the new token instead of refreshing again. The provider call runs
//! with a timeout shorter than the lock and idle-transaction timeouts it runs under.
//!
//! Rotation-safe: a new refresh token is sealed and committed before any caller sees the
//! new access token; an omitted refresh token keeps the old one; an omitted `expires_in`
//! stores an unknown expiry (NULL), which is refreshed after `unknown_expiry_refresh`.

use crate::app::AppState;
use crate::domain::AuditKind;
use crate::domain::{ConnectionStatus, RefreshPolicy};
use crate::keys::Scope;
use crate::oauth::flow::{self, FlowError};
use crate::store::{self, audit::AuditEvent, connections::ConnectionRow};
use crate::telemetry::metrics::REFRESHES;
use crate::vault::Field;
use crate::webhooks::EventKind;

use time::OffsetDateTime;
use tracing::Instrument;

/// When a row needs a refresh before its token is handed out (the rule is
/// [`RefreshPolicy::needs_refresh`]).
pub fn needs_refresh(row: &ConnectionRow, now: OffsetDateTime, policy: RefreshPolicy) -> bool {
    policy.needs_refresh(row.access_expires_at, row.refresh_token_ct.is_some(), row.refreshed_at, now)
}

#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error("the grant is dead; the connection now needs a new consent")]
    NeedsReauth,
    #[error("the provider is temporarily unavailable: {0}")]
    Transient(String),
    #[error("the connection is no longer active")]
    Gone,
    #[error("this instance is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Fault(#[from] super::Fault),
}
super::fault::wraps_fault!(RefreshError);

/// Refreshes `observed` unless someone else already did; returns the row to hand out from.
///
/// Invariant 13: the provider call and its commit run in a task of their own, which the
/// caller awaits but cannot cancel. A request dropped mid-refresh (client reset, proxy
/// timeout) would otherwise lose a rotated refresh token the provider has just issued, and
/// the next refresh would replay the old one (`invalid_grant`, or the whole grant killed by
/// reuse detection).
pub async fn refresh(
    state: &AppState,
    observed: &ConnectionRow,
    now: OffsetDateTime,
) -> Result<ConnectionRow, RefreshError> {
    refresh_spawned(state, observed, now, Due::WhenNearExpiry).await
}

/// When a refresh is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// The token is about to expire ([`needs_refresh`]).
    WhenNearExpiry,
    /// The provider refused the token: whatever its expiry says (still once per version).
    Refused,
}

/// The provider refused `sent`, the access token of `key`'s connection (a proxied call's
/// `401`): refreshes the grant once, unless the row holds another token by now (a
/// concurrent call refreshed it, or the person connected anew). Many calls refused at once
/// make one refresh: each compares the token it sent, and the refresh is fenced on the
/// row's version.
pub async fn refresh_refused(
    state: &AppState,
    key: &crate::domain::ConnectionKey,
    sent: &secrecy::SecretString,
    now: OffsetDateTime,
) -> Result<secrecy::SecretString, RefreshError> {
    use secrecy::ExposeSecret;
    let row = store::connections::find_connection(&state.pool, key).await?.ok_or(RefreshError::Gone)?;
    let current = access_token(state, &row).await?;
    if current.expose_secret() != sent.expose_secret() {
        // Another call refreshed it (the lookup cache may not have heard yet): this one.
        return Ok(current);
    }
    let refreshed = refresh_spawned(state, &row, now, Due::Refused).await?;
    access_token(state, &refreshed).await
}

/// A row's access token, opened.
async fn access_token(state: &AppState, row: &ConnectionRow) -> Result<secrecy::SecretString, RefreshError> {
    if row.status != ConnectionStatus::Active {
        return Err(RefreshError::NeedsReauth);
    }
    let (Some(key_id), Some(at_ct)) = (&row.key_id, &row.access_token_ct) else {
        return Err(RefreshError::NeedsReauth);
    };
    Ok(state.keys.opening(key_id, Scope::Tenant(&row.tenant_id)).await?.open(
        &row.binding(),
        Field::AccessToken,
        at_ct,
    )?)
}

async fn refresh_spawned(
    state: &AppState,
    observed: &ConnectionRow,
    now: OffsetDateTime,
    due: Due,
) -> Result<ConnectionRow, RefreshError> {
    // On the HTTP worker's own task set (the callers are the `/v1/token` and `/v1/proxy`
    // handlers): the
    // task keeps this worker's pool, needs no `Send` (sqlx's executor futures trip rustc's
    // higher-ranked `Send` check, rust-lang/rust#102211), and outlives the request.
    if state.lifecycle.shutdown.is_stopping() {
        return Err(RefreshError::ShuttingDown);
    }
    // A span inside the request's: the refresh and its provider call are the request's
    // children in a trace, even when the request has gone.
    let span = tracing::info_span!("refresh", provider = %observed.provider);
    state
        .lifecycle
        .detached
        .spawn_local(refresh_single_flight(state.clone(), observed.clone(), now, due).instrument(span))
        .await?
}

async fn refresh_single_flight(
    state: AppState,
    observed: ConnectionRow,
    now: OffsetDateTime,
    due: Due,
) -> Result<ConnectionRow, RefreshError> {
    let lock = state.refresh_gate.lock_for(observed.id);
    let result = {
        let _held = lock.clone().lock_owned().await;
        refresh_locked(&state, &observed, now, due).await
    };
    state.refresh_gate.release(observed.id, lock);
    result
}

async fn refresh_locked(
    state: &AppState,
    observed: &ConnectionRow,
    now: OffsetDateTime,
    due: Due,
) -> Result<ConnectionRow, RefreshError> {
    // The keys read first, outside the transaction (a miss reads the database: not on a
    // second connection while this one is held); below they are hits.
    if let Some(key_id) = &observed.key_id {
        state.keys.opening(key_id, Scope::Tenant(&observed.tenant_id)).await?;
    }
    state.keys.sealing(Scope::Tenant(&observed.tenant_id)).await?;
    let mut tx = store::begin(&state.pool).await?;
    fence(&mut tx, state.lifetimes.outbound_timeout).await?;
    let row = store::connections::lock_connection(&mut *tx, observed.id).await?.ok_or(RefreshError::Gone)?;
    // Replaced meanwhile by a connect of another IdP's subject of the same name (the
    // tenant changed IdP): not the grant this caller may have.
    if row.issuer != observed.issuer {
        return Err(RefreshError::Gone);
    }
    if row.status != ConnectionStatus::Active {
        return Err(if row.status == ConnectionStatus::NeedsReauth {
            RefreshError::NeedsReauth
        } else {
            RefreshError::Gone
        });
    }
    if row.version != observed.version || (due == Due::WhenNearExpiry && !needs_refresh(&row, now, state.refresh)) {
        // Refreshed by another caller while we waited for the lock: use theirs.
        tx.commit().await?;
        return Ok(row);
    }
    // A provider (or a caller provoking a 401) does not drive refreshes at will: one a
    // minute per connection for refused tokens (checked here, past the fence, so the calls
    // that waited for this one's refresh are not refused by it).
    if due == Due::Refused && state.proxy.limits.refresh_for_refusal(&row.id).is_err() {
        return Err(RefreshError::Transient("refreshed for a refusal moments ago".to_owned()));
    }
    let binding = row.binding();
    let (Some(key_id), Some(rt_ct)) = (&row.key_id, &row.refresh_token_ct) else {
        return Err(RefreshError::NeedsReauth);
    };
    let sealed_with = state.keys.opening(key_id, Scope::Tenant(&row.tenant_id)).await?;
    let refresh_token = sealed_with.open(&binding, Field::RefreshToken, rt_ct)?;
    // The key the answer is sealed with, before the provider is asked: a key store that
    // is down fails the refresh here, not after the provider rotated the refresh token.
    let sealing = state.keys.sealing(Scope::Tenant(&row.tenant_id)).await?;
    let provider = state.directory.providers.get(&row.provider).ok_or(RefreshError::Gone)?.clone();
    // An OAuth grant under an id that now names a typed-credential provider: nothing to
    // refresh it with; the person connects anew.
    if provider.credential().is_some() {
        return Err(RefreshError::NeedsReauth);
    }
    let server =
        super::remote::provider_server(state, &provider).await.map_err(|e| RefreshError::Transient(e.to_string()))?;
    let redirect = state.urls.provider_redirect_uri(&row.provider);
    let answer = flow::refresh(&server, &state.outbound, &redirect, &refresh_token).await;
    metrics::counter!(REFRESHES, "outcome" => answer.as_ref().map_or_else(FlowError::reason, |_| "succeeded"))
        .increment(1);
    match answer {
        Ok(tokens) => {
            let stored = seal_refreshed(&sealing, &sealed_with, &row, &refresh_token, &tokens, now)?;
            commit_refreshed(state, tx, &row, &stored, &tokens).await?;
            Ok(stored.into_row(row, now))
        }
        Err(FlowError::InvalidGrant) => {
            grant_is_dead(&state.caches, tx, &row).await?;
            Err(RefreshError::NeedsReauth)
        }
        Err(e) => {
            // The grant is kept as it was: roll back, report, let the caller retry.
            drop(tx);
            tracing::warn!(provider = %row.provider, reason = e.reason(), provider_answer = %e, "refresh failed");
            let mut ev = AuditEvent::for_connection(AuditKind::RefreshFailed, &row);
            ev.detail = serde_json::json!({ "reason": e.reason() });
            store::audit::insert_event(&state.pool, &ev).await?;
            Err(RefreshError::Transient(e.reason().to_owned()))
        }
    }
}

/// The provider call is bounded by the outbound timeout; these bound the row lock and the
/// idle transaction a little above it, so a stuck instance cannot hold the row.
async fn fence(tx: &mut crate::store::Conn, outbound_timeout: std::time::Duration) -> Result<(), sqlx::Error> {
    let fence = format!("{}ms", outbound_timeout.as_millis() + 5_000);
    sqlx::query!(
        r#"SELECT set_config('lock_timeout', $1, true) AS "lock!",
                  set_config('idle_in_transaction_session_timeout', $1, true) AS "idle!""#,
        fence
    )
    .fetch_one(tx)
    .await?;
    Ok(())
}

/// Stores the refreshed grant on the locked row with its audit event, commits, and drops
/// the cached copy on every instance.
async fn commit_refreshed(
    state: &AppState,
    mut tx: store::Tx,
    row: &ConnectionRow,
    stored: &Resealed,
    tokens: &flow::TokenSet,
) -> Result<(), RefreshError> {
    if !store::connections::store_refreshed(&mut *tx, row.id, row.version, &stored.grant()).await? {
        // Cannot happen under the row lock; if it does, hand out nothing stale.
        return Err(RefreshError::Transient("concurrent write".to_owned()));
    }
    let mut ev = AuditEvent::for_connection(AuditKind::RefreshSucceeded, row);
    ev.detail = serde_json::json!({
        "rotated": tokens.refresh_token.is_some(),
        "expiry_known": tokens.expires_in.is_some(),
    });
    store::audit::insert_event(&mut *tx, &ev).await?;
    crate::domain::failpoint::stop_here("refresh.before_commit").await;
    tx.commit().await?;
    state.connections.forget(&row.key());
    Ok(())
}

/// A refreshed grant, sealed and ready to store.
struct Resealed {
    /// The key it was sealed with.
    key_id: String,
    /// The seal generation it was sealed at (the row's next).
    generation: i64,
    access_ct: Vec<u8>,
    refresh_ct: Vec<u8>,
    id_ct: Option<Vec<u8>>,
    token_type: String,
    expires_at: Option<OffsetDateTime>,
}

impl Resealed {
    fn grant(&self) -> store::connections::SealedGrant<'_> {
        store::connections::SealedGrant {
            generation: self.generation,
            key_id: &self.key_id,
            access_token_ct: &self.access_ct,
            refresh_token_ct: Some(&self.refresh_ct),
            id_token_ct: self.id_ct.as_deref(),
            token_type: &self.token_type,
            access_expires_at: self.expires_at,
        }
    }

    /// The row as it is after the commit, to hand out from.
    fn into_row(self, row: ConnectionRow, now: OffsetDateTime) -> ConnectionRow {
        ConnectionRow {
            key_id: Some(self.key_id),
            access_token_ct: Some(self.access_ct),
            refresh_token_ct: Some(self.refresh_ct),
            id_token_ct: self.id_ct,
            token_type: self.token_type,
            access_expires_at: self.expires_at,
            refreshed_at: Some(now),
            version: row.version + 1,
            seal_version: Some(self.generation),
            xmin: 0,
            ..row
        }
    }
}

/// Seals the provider's answer. Rotation: the new refresh token if there is one, else the
/// old one, re-sealed with `sealing` (the tenant's key now) with the rest of the row (and
/// the ID token likewise, opened with `sealed_with`, the row's key).
fn seal_refreshed(
    sealing: &crate::vault::SealKey,
    sealed_with: &crate::vault::SealKey,
    row: &ConnectionRow,
    old_refresh: &secrecy::SecretString,
    tokens: &flow::TokenSet,
    now: OffsetDateTime,
) -> Result<Resealed, RefreshError> {
    // Opened at the row's generation, sealed at its next: the ciphertexts this write
    // replaces (a rotated-out refresh token) no longer open if put back.
    let (current, next) = (row.binding(), row.next_binding());
    let access_ct = sealing.seal(&next, Field::AccessToken, &tokens.access_token)?;
    let keep = tokens.refresh_token.as_ref().unwrap_or(old_refresh);
    let refresh_ct = sealing.seal(&next, Field::RefreshToken, keep)?;
    let id_ct = match (&tokens.id_token, &row.id_token_ct) {
        (Some(new), _) => Some(sealing.seal(&next, Field::IdToken, new)?),
        (None, Some(old)) => {
            let t = sealed_with.open(&current, Field::IdToken, old)?;
            Some(sealing.seal(&next, Field::IdToken, &t)?)
        }
        (None, None) => None,
    };
    let expires_at = tokens.expires_in.and_then(|d| time::Duration::try_from(d).ok()).map(|d| now + d);
    Ok(Resealed {
        key_id: sealing.key_id().to_owned(),
        generation: row.next_generation(),
        access_ct,
        refresh_ct,
        id_ct,
        token_type: tokens.token_type.clone(),
        expires_at,
    })
}

/// `invalid_grant`: the connection needs a new consent; its tokens go.
async fn grant_is_dead(
    caches: &crate::cache::Caches,
    mut tx: store::Tx,
    row: &ConnectionRow,
) -> Result<(), RefreshError> {
    // Under the row lock: the version is the one just read.
    store::connections::mark_needs_reauth(&mut *tx, row.id, row.version).await?;
    let mut ev = AuditEvent::for_connection(AuditKind::RefreshFailed, row);
    ev.detail = serde_json::json!({ "reason": "invalid_grant" });
    store::audit::insert_event(&mut *tx, &ev).await?;
    store::audit::insert_event(&mut *tx, &AuditEvent::for_connection(AuditKind::ReauthNeeded, row)).await?;
    super::events::connection(&mut tx, EventKind::ConnectionNeedsReauth, row, "provider", "invalid_grant", None)
        .await?;
    tx.commit().await?;
    caches.forget_connection(&row.key());
    Ok(())
}

/// No refresh token and an expired access token: the connection needs a new consent.
/// Decided on `row` as read without a lock, so the mark applies only while the row is still
/// that version: a grant a reconnect stored meanwhile is kept. Returns whether it marked.
pub async fn expire_without_refresh(
    pool: &store::Db,
    connections: &crate::app::ConnectionRepo,
    row: &ConnectionRow,
) -> Result<bool, sqlx::Error> {
    let mut tx = store::begin(pool).await?;
    if !store::connections::mark_needs_reauth(&mut *tx, row.id, row.version).await? {
        return Ok(false);
    }
    let mut ev = AuditEvent::for_connection(AuditKind::ReauthNeeded, row);
    ev.detail = serde_json::json!({ "reason": "expired_without_refresh_token" });
    store::audit::insert_event(&mut *tx, &ev).await?;
    let reason = "expired_without_refresh_token";
    super::events::connection(&mut tx, EventKind::ConnectionNeedsReauth, row, "service", reason, None).await?;
    tx.commit().await?;
    connections.forget(&row.key());
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(exp: Option<OffsetDateTime>, refresh: bool, refreshed_at: Option<OffsetDateTime>) -> ConnectionRow {
        ConnectionRow {
            id: crate::domain::ConnectionId::from_uuid(uuid::Uuid::nil()),
            tenant_id: crate::domain::TenantId::parse("t").unwrap(),
            subject: crate::domain::Subject::parse("s").unwrap(),
            provider: crate::domain::ProviderId::parse("p").unwrap(),
            account_id: None,
            account_login: None,
            scopes: crate::domain::Scopes::default(),
            status: ConnectionStatus::Active,
            key_id: Some("k".into()),
            access_token_ct: Some(vec![1]),
            refresh_token_ct: refresh.then(|| vec![2]),
            id_token_ct: None,
            token_type: "Bearer".into(),
            access_expires_at: exp,
            created_at: OffsetDateTime::UNIX_EPOCH,
            refreshed_at,
            version: 0,
            seal_version: Some(1),
            xmin: 1,
            issuer: Some("https://idp.example".into()),
        }
    }

    #[test]
    fn a_token_is_refreshed_within_the_margin_of_its_expiry() {
        let now = OffsetDateTime::now_utc();
        let p = RefreshPolicy { margin: time::Duration::seconds(60), unknown_expiry: time::Duration::hours(1) };
        assert!(needs_refresh(&row(Some(now + time::Duration::seconds(30)), true, None), now, p));
        assert!(needs_refresh(&row(Some(now - time::Duration::seconds(1)), true, None), now, p));
        assert!(!needs_refresh(&row(Some(now + time::Duration::seconds(120)), true, None), now, p));
    }

    #[test]
    fn an_unknown_expiry_is_refreshed_on_a_schedule_not_never() {
        let now = OffsetDateTime::now_utc();
        let p = RefreshPolicy { margin: time::Duration::seconds(60), unknown_expiry: time::Duration::hours(1) };
        assert!(!needs_refresh(&row(None, true, Some(now - time::Duration::minutes(5))), now, p));
        assert!(needs_refresh(&row(None, true, Some(now - time::Duration::minutes(61))), now, p));
        // Nothing to refresh with: handed out until the provider says otherwise.
        assert!(!needs_refresh(&row(None, false, Some(now - time::Duration::days(2))), now, p));
    }
}
