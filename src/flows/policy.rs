//! Whether a tenant may use a provider now: configured, allowed for the tenant, and not
//! stopped by an operator's kill switch (cached, invalidated across instances).

use crate::cache::Caches;
use crate::domain::{KillState, ProviderId, TenantId};
use crate::providers::Provider;
use crate::store::{self, Db};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown provider")]
    UnknownProvider,
    #[error("provider not allowed for this tenant")]
    ProviderNotAllowed,
    /// Switched off over the operator API: nothing new starts, nothing is handed out.
    #[error("provider switched off by the operator")]
    ProviderDeactivated,
}

/// What the kill switches allow for a tenant's provider now: from the cache, or read and
/// cached.
pub async fn kill_state(
    pool: &Db,
    caches: &Caches,
    tenant: &TenantId,
    provider: &ProviderId,
) -> Result<KillState, sqlx::Error> {
    if let Some(k) = caches.kill_state(tenant, provider) {
        return Ok(k);
    }
    let ticket = caches.ticket();
    let k = KillState::of(&store::kill_switches::modes_in_force(pool, tenant, provider).await?);
    caches.store_kill_state(ticket, tenant, provider, k);
    Ok(k)
}

/// Resolves the provider for a tenant: configured, allowed for this tenant, and not
/// switched off.
pub fn provider_for(
    directory: &crate::app::Directory,
    tenant: &TenantId,
    provider: &ProviderId,
) -> Result<Arc<Provider>, PolicyError> {
    let p = directory.providers.get(provider).ok_or(PolicyError::UnknownProvider)?;
    if directory.tenants.allows(tenant, provider) != Some(true) {
        return Err(PolicyError::ProviderNotAllowed);
    }
    if !p.is_active() {
        return Err(PolicyError::ProviderDeactivated);
    }
    Ok(p)
}
