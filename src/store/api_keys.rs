//! `api_keys`: public id, scope, argon2id hash. The key itself is never stored.

use crate::domain::{ApiKeyId, KeyScope, TenantId};
use sqlx::PgExecutor;
use time::OffsetDateTime;

#[derive(Debug, Clone)]
pub struct ApiKeyRow {
    pub id: ApiKeyId,
    /// `None` for an operator key (it belongs to no tenant).
    pub tenant_id: Option<TenantId>,
    pub scope: KeyScope,
    pub hash: String,
    pub label: Option<String>,
    pub created_at: OffsetDateTime,
    pub last_used_at: Option<OffsetDateTime>,
    pub revoked_at: Option<OffsetDateTime>,
    /// The key's tenant is still active (an operator key: always).
    pub tenant_active: bool,
    /// The fast verifier (see `api_keys`); `None` for a key made before verifiers, until
    /// its first verification by argon2.
    pub verifier: Option<Vec<u8>>,
}

pub async fn insert_api_key(
    db: impl PgExecutor<'_>,
    id: &ApiKeyId,
    tenant_id: Option<&TenantId>,
    scope: KeyScope,
    hash: &str,
    verifier: &[u8],
    label: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO api_keys (id, tenant_id, scope, hash, verifier, label) VALUES ($1, $2, $3, $4, $5, $6)",
        id.as_str(),
        tenant_id.map(TenantId::as_str),
        scope.as_str(),
        hash,
        verifier,
        label
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn find_api_key(db: impl PgExecutor<'_>, id: &ApiKeyId) -> Result<Option<ApiKeyRow>, sqlx::Error> {
    sqlx::query_as!(
        ApiKeyRow,
        // An operator key has no tenant (and a server or admin key always has one).
        r#"SELECT k.id AS "id: ApiKeyId", k.tenant_id AS "tenant_id: TenantId", k.scope AS "scope: KeyScope", k.hash, k.label, k.created_at, k.last_used_at, k.revoked_at,
                  COALESCE(t.active, k.tenant_id IS NULL) AS "tenant_active!", k.verifier
           FROM api_keys k LEFT JOIN tenants t ON t.id = k.tenant_id
           WHERE k.id = $1"#,
        id.as_str()
    )
    .fetch_optional(db)
    .await
}

/// Whether the key may still be used: not revoked, tenant still configured. The cheap
/// re-check behind the verification cache.
pub async fn api_key_usable(db: impl PgExecutor<'_>, id: &ApiKeyId) -> Result<bool, sqlx::Error> {
    let r = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM api_keys k LEFT JOIN tenants t ON t.id = k.tenant_id
                          WHERE k.id = $1 AND k.revoked_at IS NULL
                            AND COALESCE(t.active, k.tenant_id IS NULL)) AS "e!""#,
        id.as_str()
    )
    .fetch_one(db)
    .await?;
    Ok(r)
}

pub async fn list_api_keys(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&TenantId>,
) -> Result<Vec<ApiKeyRow>, sqlx::Error> {
    sqlx::query_as!(
        ApiKeyRow,
        r#"SELECT k.id AS "id: ApiKeyId", k.tenant_id AS "tenant_id: TenantId", k.scope AS "scope: KeyScope", k.hash, k.label, k.created_at, k.last_used_at, k.revoked_at,
                  COALESCE(t.active, k.tenant_id IS NULL) AS "tenant_active!", k.verifier
           FROM api_keys k LEFT JOIN tenants t ON t.id = k.tenant_id
           WHERE $1::text IS NULL OR k.tenant_id = $1
           ORDER BY k.created_at"#,
        tenant_id.map(TenantId::as_str)
    )
    .fetch_all(db)
    .await
}

/// Revokes every key of a tenant still in force; returns their ids.
pub async fn revoke_tenant_keys(db: impl PgExecutor<'_>, tenant: &TenantId) -> Result<Vec<ApiKeyId>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND revoked_at IS NULL
           RETURNING id AS "id: ApiKeyId""#,
        tenant.as_str()
    )
    .fetch_all(db)
    .await
}

/// Revokes a key; returns its tenant (`Some(None)`: an operator key), or `None` when there
/// is no such unrevoked key.
pub async fn revoke_api_key(db: impl PgExecutor<'_>, id: &ApiKeyId) -> Result<Option<Option<TenantId>>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL
           RETURNING tenant_id AS "tenant_id?: TenantId""#,
        id.as_str()
    )
    .fetch_optional(db)
    .await
}

/// Stores the fast verifier of a key made before verifiers, once argon2 has verified it.
pub async fn set_verifier(db: impl PgExecutor<'_>, id: &ApiKeyId, verifier: &[u8]) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE api_keys SET verifier = $2 WHERE id = $1 AND verifier IS NULL", id.as_str(), verifier)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn touch_api_key(db: impl PgExecutor<'_>, id: &ApiKeyId) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE api_keys SET last_used_at = now() WHERE id = $1", id.as_str()).execute(db).await?;
    Ok(())
}
