//! `kill_switches`: per-provider stops, for one tenant or for all (`tenant_id` NULL).

use crate::domain::{KillMode, ProviderId, TenantId};
use sqlx::PgExecutor;
use time::OffsetDateTime;

#[derive(Debug, Clone)]
pub struct KillSwitchRow {
    /// `None`: the switch holds for every tenant.
    pub tenant_id: Option<TenantId>,
    pub provider: ProviderId,
    pub mode: KillMode,
    pub reason: Option<String>,
    pub updated_at: OffsetDateTime,
}

pub async fn set_kill_switch(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&TenantId>,
    provider: &ProviderId,
    mode: KillMode,
    reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"INSERT INTO kill_switches (tenant_id, provider, mode, reason) VALUES ($1, $2, $3, $4)
           ON CONFLICT (coalesce(tenant_id, ''), provider)
           DO UPDATE SET mode = EXCLUDED.mode, reason = EXCLUDED.reason, updated_at = now()"#,
        tenant_id.map(TenantId::as_str),
        provider.as_str(),
        mode.as_str(),
        reason
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn clear_kill_switch(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&TenantId>,
    provider: &ProviderId,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "DELETE FROM kill_switches WHERE coalesce(tenant_id, '') = coalesce($1, '') AND provider = $2",
        tenant_id.map(TenantId::as_str),
        provider.as_str()
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// The switches in force for a tenant's provider: its own and the global one.
pub async fn modes_in_force(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    provider: &ProviderId,
) -> Result<Vec<KillMode>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT mode AS "mode: KillMode" FROM kill_switches
           WHERE provider = $2 AND (tenant_id = $1 OR tenant_id IS NULL)"#,
        tenant_id.as_str(),
        provider.as_str()
    )
    .fetch_all(db)
    .await
}

/// Every switch (`None`), or those that hold for one tenant: its own and the global ones.
pub async fn list_kill_switches(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&TenantId>,
) -> Result<Vec<KillSwitchRow>, sqlx::Error> {
    sqlx::query_as!(
        KillSwitchRow,
        r#"SELECT tenant_id AS "tenant_id: TenantId", provider AS "provider: ProviderId", mode AS "mode: KillMode",
                  reason, updated_at
           FROM kill_switches
           WHERE $1::text IS NULL OR tenant_id = $1 OR tenant_id IS NULL
           ORDER BY provider, tenant_id NULLS FIRST"#,
        tenant_id.map(TenantId::as_str)
    )
    .fetch_all(db)
    .await
}
