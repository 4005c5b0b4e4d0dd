//! Issuing API keys (the `apikey create` command, `dev`, and the tests' harness): a fresh
//! key, its argon2 hash stored with an audit event; the key itself is shown once.

use crate::api_keys::{NewApiKey, hash_key};
use crate::domain::AuditKind;
use crate::domain::{ApiKeyId, Caller, KeyScope, TenantId};
use crate::store::{self, audit::AuditEvent};

/// Makes a key of a tenant (scope `server` or `admin`), stores its hash and an audit
/// event, and returns it (shown once).
pub async fn create_api_key(
    pool: &store::Db,
    tenant: &TenantId,
    scope: KeyScope,
    label: Option<&str>,
) -> anyhow::Result<NewApiKey> {
    let key = NewApiKey::generate();
    store_api_key(pool, &key, tenant, scope, label).await?;
    Ok(key)
}

/// As [`create_api_key`], made over the operator API by the operator key `by` (which the
/// audit event names).
pub async fn create_api_key_by(
    pool: &store::Db,
    tenant: &TenantId,
    scope: KeyScope,
    label: Option<&str>,
    by: &Caller,
) -> anyhow::Result<NewApiKey> {
    anyhow::ensure!(scope != KeyScope::Operator, "an operator key belongs to no tenant");
    let key = NewApiKey::generate();
    store_key(pool, &key, Some(tenant), scope, label, Some(by)).await?;
    Ok(key)
}

/// Makes an operator key (scope `operator`, of no tenant), as [`create_api_key`] does.
pub async fn create_operator_key(pool: &store::Db, label: Option<&str>) -> anyhow::Result<NewApiKey> {
    let key = NewApiKey::generate();
    store_key(pool, &key, None, KeyScope::Operator, label, None).await?;
    Ok(key)
}

/// Stores the hash of a tenant's key made by [`NewApiKey::generate`], with its audit event.
pub async fn store_api_key(
    pool: &store::Db,
    key: &NewApiKey,
    tenant: &TenantId,
    scope: KeyScope,
    label: Option<&str>,
) -> anyhow::Result<()> {
    anyhow::ensure!(scope != KeyScope::Operator, "an operator key belongs to no tenant");
    store_key(pool, key, Some(tenant), scope, label, None).await
}

async fn store_key(
    pool: &store::Db,
    key: &NewApiKey,
    tenant: Option<&TenantId>,
    scope: KeyScope,
    label: Option<&str>,
    by: Option<&Caller>,
) -> anyhow::Result<()> {
    let secret = key.key.clone();
    let hash =
        tokio::task::spawn_blocking(move || hash_key(&secret)).await?.map_err(|e| anyhow::anyhow!("hashing: {e}"))?;
    let mut tx = pool.begin().await?;
    let verifier = crate::api_keys::verifier_of(secrecy::ExposeSecret::expose_secret(&key.key));
    store::api_keys::insert_api_key(&mut *tx, &key.id, tenant, scope, &hash, &verifier, label).await.map_err(
        |e| match (e.as_database_error().and_then(|d| d.code()).as_deref(), tenant) {
            (Some("23503"), Some(tenant)) => anyhow::anyhow!(
                "tenant {tenant} is not in the database: list it under [[tenants]] in the configuration and run \
                 `mcp-connect migrate` (or start `serve`), which writes the configured tenants"
            ),
            _ => e.into(),
        },
    )?;
    let mut ev = AuditEvent::new(AuditKind::ApiKeyCreated);
    ev.tenant_id = tenant.cloned();
    ev.api_key_id = Some(key.id.clone());
    ev.detail = match by {
        None => serde_json::json!({ "scope": scope.as_str() }),
        Some(by) => serde_json::json!({ "scope": scope.as_str(), "by": by.operator_text() }),
    };
    store::audit::insert_event(&mut *tx, &ev).await?;
    tx.commit().await?;
    Ok(())
}

/// Revokes an active key, with an audit event; every instance refuses it within the API-key
/// cache's bound (the change is announced from the database). `None`: no active key with
/// that id; `Some(None)`: an operator key.
pub async fn revoke_api_key(pool: &store::Db, id: &ApiKeyId) -> Result<Option<Option<TenantId>>, sqlx::Error> {
    let mut tx = store::begin(pool).await?;
    let Some(tenant) = store::api_keys::revoke_api_key(&mut *tx, id).await? else {
        return Ok(None);
    };
    let mut ev = AuditEvent::new(AuditKind::ApiKeyRevoked);
    ev.tenant_id = tenant.clone();
    ev.api_key_id = Some(id.clone());
    store::audit::insert_event(&mut *tx, &ev).await?;
    tx.commit().await?;
    Ok(Some(tenant))
}
