//! An operator switches a tenant off or on (`mcp-connect tenant`): its API keys and
//! connect links stop, or work again, on every instance. Start-up never deactivates one.

use crate::domain::{AuditKind, TenantId};
use crate::store::{self, PgPool, audit::AuditEvent};

/// Switches a tenant on or off, with an audit event when it changed. `None`: no such
/// tenant; `Some(changed)`.
pub async fn set_tenant_active(
    pool: &PgPool,
    tenant: &TenantId,
    active: bool,
    by: &str,
) -> Result<Option<bool>, sqlx::Error> {
    let mut tx = store::begin(pool).await?;
    let Some(was) = store::tenants::set_tenant_active(&mut *tx, tenant.as_str(), active).await? else {
        return Ok(None);
    };
    if was != active {
        let mut ev = AuditEvent::new(if active { AuditKind::TenantActivated } else { AuditKind::TenantDeactivated });
        ev.tenant_id = Some(tenant.to_string());
        ev.detail = serde_json::json!({ "by": by });
        store::audit::insert_event(&mut *tx, &ev).await?;
    }
    tx.commit().await?;
    Ok(Some(was != active))
}
