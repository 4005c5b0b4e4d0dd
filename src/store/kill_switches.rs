//! `kill_switches`: per-provider stops, for one tenant or for all.

use sqlx::PgExecutor;
use time::OffsetDateTime;

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct KillSwitchRow {
    pub tenant_id: Option<String>,
    pub provider: String,
    pub mode: String,
    pub reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

pub async fn set_kill_switch(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&str>,
    provider: &str,
    mode: &str,
    reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"INSERT INTO kill_switches (tenant_id, provider, mode, reason) VALUES ($1, $2, $3, $4)
           ON CONFLICT (coalesce(tenant_id, ''), provider)
           DO UPDATE SET mode = EXCLUDED.mode, reason = EXCLUDED.reason, updated_at = now()"#,
        tenant_id,
        provider,
        mode,
        reason
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn clear_kill_switch(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&str>,
    provider: &str,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "DELETE FROM kill_switches WHERE coalesce(tenant_id, '') = coalesce($1, '') AND provider = $2",
        tenant_id,
        provider
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// The switches in force for a tenant's provider: its own and the global one.
pub async fn modes_in_force(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    provider: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT mode FROM kill_switches WHERE provider = $2 AND (tenant_id = $1 OR tenant_id IS NULL)",
        tenant_id,
        provider
    )
    .fetch_all(db)
    .await
}

pub async fn list_kill_switches(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&str>,
) -> Result<Vec<KillSwitchRow>, sqlx::Error> {
    sqlx::query_as!(
        KillSwitchRow,
        r#"SELECT tenant_id, provider, mode, reason, updated_at FROM kill_switches
           WHERE $1::text IS NULL OR tenant_id = $1 OR tenant_id IS NULL
           ORDER BY provider, tenant_id NULLS FIRST"#,
        tenant_id
    )
    .fetch_all(db)
    .await
}
