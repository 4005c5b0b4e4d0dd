//! An operator sets or lifts a provider's kill switch: for one tenant (its admin key, or
//! the CLI with `--tenant`) or for every tenant (the CLI). One transaction writes the
//! switch, its audit event and its webhook event; every instance obeys at once (the change
//! is announced from the database), and this instance forgets its cached states before
//! it answers.

use super::Fault;
use crate::cache::Caches;
use crate::domain::{ApiKeyId, AuditKind, KillMode, ProviderId, TenantId};
use crate::store::{self, Db, audit::AuditEvent};
use crate::webhooks::{self, Event};

/// Who changes a switch, and so for whom: a tenant's admin key only ever its own tenant's.
#[derive(Debug, Clone, Copy)]
pub enum Operator<'a> {
    /// `mcp-connect killswitch` on the operator's machine: one tenant, or every tenant
    /// (`None`).
    Cli { tenant: Option<&'a TenantId> },
    /// A tenant's admin API key.
    AdminKey { key: &'a ApiKeyId, tenant: &'a TenantId },
}

impl Operator<'_> {
    fn tenant(&self) -> Option<&TenantId> {
        match *self {
            Operator::Cli { tenant } => tenant,
            Operator::AdminKey { tenant, .. } => Some(tenant),
        }
    }
}

/// What to change: `mode` `None` lifts the switch.
#[derive(Debug, Clone, Copy)]
pub struct KillSwitchChange<'a> {
    pub provider: &'a ProviderId,
    pub mode: Option<KillMode>,
    /// Shown to operators (the audit trail, the webhook's `note`), never to people.
    pub reason: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum KillSwitchError {
    #[error("reason must be at most 500 printable characters")]
    Reason,
    #[error(transparent)]
    Fault(#[from] Fault),
}
super::fault::wraps_fault!(KillSwitchError);

/// A reason an operator may write into the audit trail and webhooks: at most 500
/// characters, no control characters (a line break would forge a log line in a receiver).
fn reason_ok(reason: &str) -> bool {
    reason.chars().count() <= 500 && !reason.chars().any(char::is_control)
}

pub async fn change_kill_switch(
    pool: &Db,
    caches: Option<&Caches>,
    by: Operator<'_>,
    change: KillSwitchChange<'_>,
) -> Result<(), KillSwitchError> {
    let KillSwitchChange { provider, mode, reason } = change;
    if reason.is_some_and(|r| !reason_ok(r)) {
        return Err(KillSwitchError::Reason);
    }
    let tenant = by.tenant();
    let mut tx = store::begin(pool).await?;
    match mode {
        Some(m) => store::kill_switches::set_kill_switch(&mut *tx, tenant, provider, m, reason).await?,
        None => {
            store::kill_switches::clear_kill_switch(&mut *tx, tenant, provider).await?;
        }
    }
    let mode_now = KillMode::or_off(mode);
    let mut ev = AuditEvent::new(AuditKind::KillSwitchChanged);
    ev.tenant_id = tenant.cloned();
    ev.provider = Some(provider.clone());
    let by_name = match by {
        Operator::Cli { .. } => {
            ev.detail = serde_json::json!({ "mode": mode_now, "reason": reason, "by": "cli" });
            "cli"
        }
        Operator::AdminKey { key, .. } => {
            ev.api_key_id = Some(key.clone());
            ev.detail = serde_json::json!({ "mode": mode_now, "reason": reason });
            "admin"
        }
    };
    store::audit::insert_event(&mut *tx, &ev).await?;
    let event = Event::kill_switch(tenant, provider, mode_now, by_name, reason);
    webhooks::emit(&mut tx, &event).await?;
    tx.commit().await?;
    if let Some(caches) = caches {
        caches.forget_kill_switches();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::reason_ok;

    #[test]
    fn a_reason_is_at_most_500_printable_characters() {
        assert!(reason_ok("incident 42"));
        assert!(reason_ok(&"é".repeat(500)), "characters, not bytes");
        assert!(!reason_ok(&"x".repeat(501)));
        for bad in ["two\nlines", "tab\there", "nul\u{0}", "c1\u{85}"] {
            assert!(!reason_ok(bad), "{bad:?}");
        }
    }
}
