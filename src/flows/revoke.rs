//! Revocation (DESIGN.md invariant 9): the grant is revoked at the provider where it has
//! an RFC 7009 endpoint (refresh token first, since revoking it ends the whole grant at
//! most providers, then the access token), and the ciphertexts are deleted whatever the
//! provider said. The row stays as a `revoked` tombstone for the audit trail.

use crate::app::AppState;
use crate::domain::{AuditKind, ConnectionId, ConnectionStatus, ProviderId, Subject, TenantId};
use crate::oauth::flow;
use crate::store::{self, Db, audit::AuditEvent};
use crate::vault::Field;
use crate::webhooks::EventKind;
use uuid::Uuid;

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Revoked {
    pub connection_id: Uuid,
    pub subject: String,
    pub provider: String,
    /// `revoked`, `no_revocation_endpoint`, `already_revoked`, or `failed: <reason>`.
    pub provider_result: String,
    /// Pending links of the same subject and provider closed with it (invariant 12).
    pub cancelled_elicitations: usize,
}

/// Who ends a connection, as webhooks report it (`by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokedBy {
    /// An operator, through the admin API.
    Admin,
    /// The person, on "Your connections".
    Subject,
    /// Off-boarding of a subject (admin API).
    Offboarding,
}

impl RevokedBy {
    pub const fn as_str(self) -> &'static str {
        match self {
            RevokedBy::Admin => "admin",
            RevokedBy::Subject => "subject",
            RevokedBy::Offboarding => "offboarding",
        }
    }
}

/// Invariant 12: ending access also ends the links in flight. Cancels the subject's pending
/// elicitations (of one provider where given) and spends their states, in its own
/// transaction *before* any connection row is locked: a callback that holds an elicitation
/// lock finishes first (and its grant is then revoked with the rest), and one that comes
/// later finds its link cancelled. Returns how many links were closed.
/// `issuer`: only the links of that IdP's subject (`None`: of the subject at any IdP).
pub async fn cancel_links(
    pool: &Db,
    tenant: &TenantId,
    subject: &Subject,
    issuer: Option<&str>,
    provider: Option<&ProviderId>,
    actor: &str,
    by: RevokedBy,
) -> Result<usize, sqlx::Error> {
    let by =
        super::cancel::Closer { actor, api_key_id: None, because: super::cancel::Because::Revocation, by: by.as_str() };
    Ok(super::cancel::cancel_pending(pool, tenant, Some((subject, issuer)), provider, &by).await?.len())
}

/// Revokes one connection of `tenant`. `None` when the tenant has no such connection.
pub async fn revoke_connection(
    state: &AppState,
    tenant: &TenantId,
    id: ConnectionId,
    actor: &str,
    by: RevokedBy,
) -> Result<Option<Revoked>, sqlx::Error> {
    revoke_checked(state, tenant, id, actor, by, None).await
}

/// [`revoke_connection`] of a connection that must still be `person`'s (issuer, subject)
/// under its lock: one replaced meanwhile by a connect of another IdP's namesake is not
/// revoked (`None`).
pub async fn revoke_persons(
    state: &AppState,
    tenant: &TenantId,
    id: ConnectionId,
    person: (&str, &Subject),
    actor: &str,
    by: RevokedBy,
) -> Result<Option<Revoked>, sqlx::Error> {
    revoke_checked(state, tenant, id, actor, by, Some(person)).await
}

async fn revoke_checked(
    state: &AppState,
    tenant: &TenantId,
    id: ConnectionId,
    actor: &str,
    by: RevokedBy,
    person: Option<(&str, &Subject)>,
) -> Result<Option<Revoked>, sqlx::Error> {
    let Some(seen) = store::connections::connection_meta(&state.pool, tenant, id).await? else {
        return Ok(None);
    };
    // A repeat (a reloaded form, a second click) ends nothing new: links opened since the
    // revocation belong to a later connect.
    if seen.status == ConnectionStatus::Revoked {
        return Ok(Some(Revoked {
            connection_id: seen.id.as_uuid(),
            subject: seen.subject.to_string(),
            provider: seen.provider.to_string(),
            provider_result: "already_revoked".to_owned(),
            cancelled_elicitations: 0,
        }));
    }
    let cancelled_elicitations =
        // The links of the person who held it: a namesake of another IdP (the tenant's
        // IdP since) keeps theirs.
        cancel_links(&state.pool, tenant, &seen.subject, seen.issuer.as_deref(), Some(&seen.provider), actor, by).await?;
    let mut tx = store::begin(&state.pool).await?;
    let Some(row) = store::connections::lock_connection(&mut *tx, id).await? else { return Ok(None) };
    if row.tenant_id != *tenant
        || person.is_some_and(|(issuer, subject)| row.issuer.as_deref() != Some(issuer) || row.subject != *subject)
    {
        return Ok(None);
    }
    let mut out = Revoked {
        connection_id: row.id.as_uuid(),
        subject: row.subject.to_string(),
        provider: row.provider.to_string(),
        provider_result: String::new(),
        cancelled_elicitations,
    };
    if row.status == ConnectionStatus::Revoked {
        out.provider_result = "already_revoked".to_owned();
        return Ok(Some(out));
    }
    out.provider_result = revoke_at_provider(state, &row).await;
    store::connections::mark_revoked(&mut *tx, row.id).await?;
    let mut ev = AuditEvent::for_connection(AuditKind::ConnectionRevoked, &row);
    ev.detail = serde_json::json!({ "provider_result": out.provider_result, "by": actor });
    store::audit::insert_event(&mut *tx, &ev).await?;
    // The code only (`failed: <detail>` names internals; the detail stays in the audit).
    let result = out.provider_result.split(':').next();
    super::events::connection(&mut tx, EventKind::ConnectionRevoked, &row, by.as_str(), "revoked", result).await?;
    tx.commit().await?;
    state.connections.forget(&row.key());
    Ok(Some(out))
}

/// Calls the provider's revocation endpoint; never fails the local revocation.
pub(super) async fn revoke_at_provider(state: &AppState, row: &store::connections::ConnectionRow) -> String {
    let Some(provider) = state.directory.providers.get(&row.provider) else {
        return "failed: provider no longer configured".to_owned();
    };
    // A typed credential (by the row: the provider may have changed kind since): nothing
    // to tell the provider, and its document is never sent anywhere (the key is the
    // person's to revoke there); the local revocation deletes its ciphertext.
    if crate::providers::credential::is_typed(&row.token_type) {
        return "no_revocation_endpoint".to_owned();
    }
    if provider.credential().is_some() {
        return "failed: the provider takes typed credentials now; revoke the grant at the provider".to_owned();
    }
    let server = match super::remote::provider_server(state, &provider).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "provider unavailable for revocation");
            return "failed: provider unavailable".to_owned();
        }
    };
    if server.revocation_url.is_none() {
        return "no_revocation_endpoint".to_owned();
    }
    let Some(key_id) = &row.key_id else { return "failed: nothing to revoke".to_owned() };
    let binding = row.binding();
    let key = match state.keys.opening(key_id, crate::keys::Scope::Tenant(&row.tenant_id)).await {
        Ok(key) => key,
        // As a provider that cannot be reached: the local revocation goes on (the detail
        // stays in the log, not in the answer or the trail).
        Err(e) => {
            tracing::warn!(error = %e, "the connection's key did not open for its revocation at the provider");
            return "failed: key unavailable".to_owned();
        }
    };
    let mut unreadable = Vec::new();
    let mut opened = Vec::new();
    for (field, ct, hint) in [
        (Field::RefreshToken, &row.refresh_token_ct, "refresh_token"),
        (Field::AccessToken, &row.access_token_ct, "access_token"),
    ] {
        let Some(ct) = ct else { continue };
        match key.open(&binding, field, ct) {
            Ok(t) => opened.push((hint, t)),
            Err(e) => unreadable.push(format!("{hint}: unreadable ({e})")),
        }
    }
    let tokens: Vec<(&'static str, &secrecy::SecretString)> = opened.iter().map(|(h, t)| (*h, t)).collect();
    let result = flow::revoke_tokens(&server, &state.outbound, &tokens).await;
    match (unreadable.is_empty(), result.strip_prefix("failed: ")) {
        (true, _) => result,
        (false, Some(rest)) => format!("failed: {}; {rest}", unreadable.join("; ")),
        (false, None) => format!("failed: {}", unreadable.join("; ")),
    }
}

/// What off-boarding ended.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct OffBoarded {
    pub revoked: Vec<Revoked>,
    /// Pending links closed, for every provider named (or all of them).
    pub cancelled_elicitations: usize,
}

/// Off-boarding: every pending link and every live connection of a subject, optionally for
/// one provider. The links are closed first, so no callback can attach a grant after the
/// connections were listed.
pub async fn revoke_subject(
    state: &AppState,
    tenant: &TenantId,
    subject: &Subject,
    provider: Option<&ProviderId>,
    actor: &str,
) -> Result<OffBoarded, sqlx::Error> {
    let by = RevokedBy::Offboarding;
    let mut cancelled = cancel_links(&state.pool, tenant, subject, None, provider, actor, by).await?;
    let ids = store::connections::live_connection_ids(&state.pool, tenant, subject, provider).await?;
    let mut revoked = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(r) = revoke_connection(state, tenant, id, actor, by).await? {
            cancelled += r.cancelled_elicitations;
            revoked.push(r);
        }
    }
    Ok(OffBoarded { revoked, cancelled_elicitations: cancelled })
}
