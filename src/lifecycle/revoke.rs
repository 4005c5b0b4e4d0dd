//! Revocation (DESIGN.md invariant 9): the grant is revoked at the provider where it has
//! an RFC 7009 endpoint (refresh token first, since revoking it ends the whole grant at
//! most providers, then the access token), and the ciphertexts are deleted whatever the
//! provider said. The row stays as a `revoked` tombstone for the audit trail.

use super::RowIds;
use crate::startup::AppState;
use crate::store::{self, audit::AuditEvent};
use crate::vault::Field;
use secrecy::ExposeSecret;
use uuid::Uuid;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Revoked {
    pub connection_id: Uuid,
    pub subject: String,
    pub provider: String,
    /// `revoked`, `no_revocation_endpoint`, `already_revoked`, or `failed: <reason>`.
    pub provider_result: String,
}

/// Revokes one connection of `tenant`. `None` when the tenant has no such connection.
pub async fn revoke_connection(
    state: &AppState,
    tenant: &str,
    id: Uuid,
    actor: &str,
) -> Result<Option<Revoked>, sqlx::Error> {
    let mut tx = state.pool.begin().await?;
    let Some(row) = store::connections::lock_connection(&mut *tx, id).await? else { return Ok(None) };
    if row.tenant_id != tenant {
        return Ok(None);
    }
    let mut out = Revoked {
        connection_id: row.id,
        subject: row.subject.clone(),
        provider: row.provider.clone(),
        provider_result: String::new(),
    };
    if row.status == "revoked" {
        out.provider_result = "already_revoked".to_owned();
        return Ok(Some(out));
    }
    out.provider_result = revoke_at_provider(state, &row).await;
    store::connections::mark_revoked(&mut *tx, row.id).await?;
    let mut ev = AuditEvent::for_connection("connection_revoked", &row);
    ev.detail = serde_json::json!({ "provider_result": out.provider_result, "by": actor });
    store::audit::insert_event(&mut *tx, &ev).await?;
    tx.commit().await?;
    state.caches.forget_connection(&row.tenant_id, &row.subject, &row.provider);
    Ok(Some(out))
}

/// Calls the provider's revocation endpoint; never fails the local revocation.
async fn revoke_at_provider(state: &AppState, row: &store::connections::ConnectionRow) -> String {
    let Some(ids) = RowIds::of(row) else { return "failed: bad row".to_owned() };
    let Some(provider) = state.providers.get(&ids.provider).cloned() else {
        return "failed: provider no longer configured".to_owned();
    };
    let server = match state.resolver.provider(&state.outbound, &provider).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "provider unavailable for revocation");
            return "failed: provider unavailable".to_owned();
        }
    };
    let Some(url) = &server.revocation_url else { return "no_revocation_endpoint".to_owned() };
    let Some(key_id) = &row.key_id else { return "failed: nothing to revoke".to_owned() };
    let binding = ids.binding();
    let mut results = Vec::new();
    for (field, ct, hint) in [
        (Field::RefreshToken, &row.refresh_token_ct, "refresh_token"),
        (Field::AccessToken, &row.access_token_ct, "access_token"),
    ] {
        let Some(ct) = ct else { continue };
        let token = match state.vault.open(key_id, &binding, field, ct) {
            Ok(t) => t,
            Err(e) => {
                results.push(format!("{hint}: unreadable ({e})"));
                continue;
            }
        };
        let sent = state
            .outbound
            .post_form_basic(
                url,
                &server.client_id,
                server.client_secret.expose_secret(),
                &[("token", token.expose_secret()), ("token_type_hint", hint)],
            )
            .await;
        // RFC 7009 §2.2: 200 whether or not the token was still valid.
        match sent {
            Ok(200) => {}
            Ok(status) => results.push(format!("{hint}: HTTP {status}")),
            Err(e) => results.push(format!("{hint}: {e}")),
        }
    }
    if results.is_empty() { "revoked".to_owned() } else { format!("failed: {}", results.join("; ")) }
}

/// Off-boarding: every live connection of a subject, optionally for one provider.
pub async fn revoke_subject(
    state: &AppState,
    tenant: &str,
    subject: &str,
    provider: Option<&str>,
    actor: &str,
) -> Result<Vec<Revoked>, sqlx::Error> {
    let ids = store::connections::live_connection_ids(&state.pool, tenant, subject, provider).await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(r) = revoke_connection(state, tenant, id, actor).await? {
            out.push(r);
        }
    }
    Ok(out)
}
