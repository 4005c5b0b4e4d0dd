//! `tenants`: mirrored from the configuration at start-up.

use crate::config::TenantConfig;
use sqlx::PgExecutor;

pub async fn upsert_tenant(db: impl PgExecutor<'_>, t: &TenantConfig) -> Result<(), sqlx::Error> {
    let providers: Vec<String> = t.providers.iter().map(|p| p.as_str().to_owned()).collect();
    sqlx::query!(
        r#"INSERT INTO tenants (id, display_name, allowed_providers, active, updated_at)
           VALUES ($1, $2, $3, true, now())
           ON CONFLICT (id) DO UPDATE
           SET display_name = EXCLUDED.display_name, allowed_providers = EXCLUDED.allowed_providers,
               active = true, updated_at = now()"#,
        t.id.as_str(),
        t.display_name,
        &providers
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Marks every tenant not in `keep` inactive: its keys stop working.
pub async fn deactivate_tenants_not_in(db: impl PgExecutor<'_>, keep: &[String]) -> Result<u64, sqlx::Error> {
    let r =
        sqlx::query!("UPDATE tenants SET active = false, updated_at = now() WHERE active AND NOT (id = ANY($1))", keep)
            .execute(db)
            .await?;
    Ok(r.rows_affected())
}

pub async fn tenant_exists(db: impl PgExecutor<'_>, id: &str) -> Result<bool, sqlx::Error> {
    let r = sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1 AND active) AS "e!""#, id)
        .fetch_one(db)
        .await?;
    Ok(r)
}
