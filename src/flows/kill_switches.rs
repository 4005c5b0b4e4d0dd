//! An operator sets or lifts a provider's kill switch: for one tenant (its admin key, or
//! the CLI with `--tenant`) or for every tenant (the CLI). One transaction writes the
//! switch, its audit event and its webhook event; every instance obeys at once (the change
//! is announced from the database), and this instance forgets its cached states before
//! it answers.

use super::Fault;
use crate::cache::Caches;
use crate::domain::{ApiKeyId, AuditKind, KillMode, ProviderId, TenantId};
use crate::store::{self, PgPool, audit::AuditEvent};
use crate::webhooks::{self, Event};

/// What to change: `mode` `None` lifts the switch.
#[derive(Debug, Clone, Copy)]
pub struct KillSwitchChange<'a> {
    /// `None`: the switch for every tenant (only the CLI sets those).
    pub tenant: Option<&'a TenantId>,
    pub provider: &'a ProviderId,
    pub mode: Option<KillMode>,
    /// Shown to operators, never to people.
    pub reason: Option<&'a str>,
}

/// Who changed it, as the audit trail and the webhook event name them.
#[derive(Debug, Clone, Copy)]
pub enum Operator<'a> {
    /// `mcp-connect killswitch` on the operator's machine.
    Cli,
    /// A tenant's admin API key.
    AdminKey(&'a ApiKeyId),
}

pub async fn change_kill_switch(
    pool: &PgPool,
    caches: Option<&Caches>,
    change: KillSwitchChange<'_>,
    by: Operator<'_>,
) -> Result<(), Fault> {
    let KillSwitchChange { tenant, provider, mode, reason } = change;
    let mut tx = store::begin(pool).await?;
    match mode {
        Some(m) => store::kill_switches::set_kill_switch(&mut *tx, tenant, provider, m, reason).await?,
        None => {
            store::kill_switches::clear_kill_switch(&mut *tx, tenant, provider).await?;
        }
    }
    let mode_now = KillMode::or_off(mode);
    let mut ev = AuditEvent::new(AuditKind::KillSwitchChanged);
    ev.tenant_id = tenant.map(TenantId::to_string);
    ev.provider = Some(provider.to_string());
    let by_name = match by {
        Operator::Cli => {
            ev.detail = serde_json::json!({ "mode": mode_now, "reason": reason, "by": "cli" });
            "cli"
        }
        Operator::AdminKey(id) => {
            ev.api_key_id = Some(id.to_string());
            ev.detail = serde_json::json!({ "mode": mode_now, "reason": reason });
            "admin"
        }
    };
    store::audit::insert_event(&mut *tx, &ev).await?;
    let event = Event::kill_switch(tenant.map(TenantId::as_str), provider.as_str(), mode_now, by_name, reason);
    webhooks::emit(&mut tx, &event).await?;
    tx.commit().await?;
    if let Some(caches) = caches {
        caches.forget_kill_switches();
    }
    Ok(())
}
