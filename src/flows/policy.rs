//! Whether a tenant may use a provider now: configured, allowed for the tenant, and not
//! stopped by an operator's kill switch (cached, invalidated across instances).

use crate::app::AppState;
use crate::domain::AuditKind;
use crate::domain::{KillState, ProviderId, TenantId};
use crate::oauth::Provider;
use crate::store::{self, audit::AuditEvent};
use crate::webhooks::{self, Event};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown provider")]
    UnknownProvider,
    #[error("provider not allowed for this tenant")]
    ProviderNotAllowed,
}

pub async fn kill_state(state: &AppState, tenant: &str, provider: &str) -> Result<KillState, sqlx::Error> {
    if let Some(k) = state.caches.kill_state(tenant, provider) {
        return Ok(k);
    }
    let epoch = state.caches.epoch();
    let modes = store::kill_switches::modes_in_force(&state.pool, tenant, provider).await?;
    let k = if modes.iter().any(|m| m == "no_token_handouts") {
        KillState::NoTokenHandouts
    } else if modes.is_empty() {
        KillState::Open
    } else {
        KillState::NoNewElicitations
    };
    state.caches.store_kill_state(epoch, tenant, provider, k);
    Ok(k)
}

/// Resolves the provider for a tenant: configured, and allowed for this tenant.
pub fn provider_for(state: &AppState, tenant: &TenantId, provider: &ProviderId) -> Result<Arc<Provider>, PolicyError> {
    let p = state.providers.get(provider).ok_or(PolicyError::UnknownProvider)?;
    if state.tenants.allows(tenant, provider) != Some(true) {
        return Err(PolicyError::ProviderNotAllowed);
    }
    Ok(p.clone())
}

/// An operator sets (`mode`) or lifts (`None`) a tenant's kill switch for a provider, with an
/// audit event; every instance obeys at once (the change is announced from the database).
pub async fn change_kill_switch(
    state: &AppState,
    tenant: &TenantId,
    provider: &ProviderId,
    mode: Option<&str>,
    reason: Option<&str>,
    api_key_id: &str,
) -> Result<(), sqlx::Error> {
    let mut tx = store::begin(&state.pool).await?;
    match mode {
        Some(m) => {
            store::kill_switches::set_kill_switch(&mut *tx, Some(tenant.as_str()), provider.as_str(), m, reason).await?
        }
        None => {
            store::kill_switches::clear_kill_switch(&mut *tx, Some(tenant.as_str()), provider.as_str()).await?;
        }
    }
    let mut ev = AuditEvent::new(AuditKind::KillSwitchChanged);
    ev.tenant_id = Some(tenant.to_string());
    ev.provider = Some(provider.to_string());
    ev.api_key_id = Some(api_key_id.to_owned());
    ev.detail = serde_json::json!({ "mode": mode.unwrap_or("off"), "reason": reason });
    store::audit::insert_event(&mut *tx, &ev).await?;
    let event = Event::kill_switch(Some(tenant.as_str()), provider.as_str(), mode.unwrap_or("off"), "admin", reason);
    webhooks::emit(&mut tx, &event).await?;
    tx.commit().await?;
    state.caches.forget_kill_switches();
    Ok(())
}
