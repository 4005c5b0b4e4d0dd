//! `data_keys`: the vault's data keys, stored wrapped by a key store's key (see `keys`), and
//! the switch that turns their use on (`vault_state.data_keys_on`).

use crate::domain::TenantId;
use sqlx::PgExecutor;

#[derive(Clone)]
pub struct DataKeyRow {
    pub id: uuid::Uuid,
    /// `None`: the service's own scope.
    pub tenant_id: Option<String>,
    pub state: String,
    pub kek_store: String,
    pub kek_id: String,
    /// `None` once destroyed.
    pub wrapped: Option<Vec<u8>>,
    pub wrap_version: i64,
}

/// Never the wrapped bytes (with the local key store, the keyring and these open the key).
impl std::fmt::Debug for DataKeyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataKeyRow")
            .field("id", &self.id)
            .field("tenant_id", &self.tenant_id)
            .field("state", &self.state)
            .field("kek_store", &self.kek_store)
            .field("kek_id", &self.kek_id)
            .finish_non_exhaustive()
    }
}

impl DataKeyRow {
    pub fn is_destroyed(&self) -> bool {
        self.state == "destroyed"
    }
}

/// The scope's active data key.
pub async fn active(db: impl PgExecutor<'_>, tenant: Option<&TenantId>) -> Result<Option<DataKeyRow>, sqlx::Error> {
    sqlx::query_as!(
        DataKeyRow,
        "SELECT id, tenant_id, state, kek_store, kek_id, wrapped, wrap_version FROM data_keys
          WHERE state = 'active' AND COALESCE(tenant_id, '') = COALESCE($1, '')",
        tenant.map(TenantId::as_str)
    )
    .fetch_optional(db)
    .await
}

pub async fn get(db: impl PgExecutor<'_>, id: uuid::Uuid) -> Result<Option<DataKeyRow>, sqlx::Error> {
    sqlx::query_as!(
        DataKeyRow,
        "SELECT id, tenant_id, state, kek_store, kek_id, wrapped, wrap_version FROM data_keys WHERE id = $1",
        id
    )
    .fetch_optional(db)
    .await
}

/// Stores a new active data key for the scope at its next generation, unless the scope has
/// an active one already (another instance made it first: then the caller uses that one).
/// Whether this one was stored.
pub async fn insert_active(
    db: impl PgExecutor<'_>,
    id: uuid::Uuid,
    tenant: Option<&TenantId>,
    kek_store: &str,
    kek_id: &str,
    wrapped: &[u8],
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "INSERT INTO data_keys (id, tenant_id, generation, state, kek_store, kek_id, wrapped)
         SELECT $1, $2, COALESCE(max(generation), 0) + 1, 'active', $3, $4, $5
           FROM data_keys WHERE COALESCE(tenant_id, '') = COALESCE($2, '')
         ON CONFLICT DO NOTHING",
        id,
        tenant.map(TenantId::as_str),
        kek_store,
        kek_id,
        wrapped
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Whether writes seal under data keys (once on, on for good).
/// Whether a retired data key is still there (a tenant's rotated key not yet destroyed):
/// the background re-seal has work only then.
pub async fn any_retired(db: impl PgExecutor<'_>) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM data_keys WHERE state = 'retired') AS "any!""#)
        .fetch_one(db)
        .await
}

pub async fn data_keys_on(db: impl PgExecutor<'_>) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!("SELECT data_keys_on FROM vault_state").fetch_one(db).await
}

/// Turns data keys on, and raises the oldest binary the schema admits to `level` (binaries
/// before it cannot open what data keys seal). `only_if_empty`: only where nothing is sealed
/// yet (a new database). Whether they are on now.
pub async fn switch_on(db: impl PgExecutor<'_>, level: i32, only_if_empty: bool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"WITH flipped AS (
             UPDATE vault_state SET data_keys_on = true
              WHERE NOT data_keys_on
                AND (NOT $2
                     OR (NOT EXISTS (SELECT 1 FROM connections WHERE key_id IS NOT NULL)
                         AND NOT EXISTS (SELECT 1 FROM webhooks)
                         AND NOT EXISTS (SELECT 1 FROM providers)
                         AND NOT EXISTS (SELECT 1 FROM remote_mcp_clients WHERE key_id IS NOT NULL)
                         AND NOT EXISTS (SELECT 1 FROM oauth_states)))
             RETURNING 1
           ), raised AS (
             UPDATE schema_compat SET oldest_binary_level = $1
              WHERE oldest_binary_level < $1 AND EXISTS (SELECT 1 FROM flipped)
             RETURNING 1
           )
           SELECT (EXISTS (SELECT 1 FROM flipped) OR (SELECT data_keys_on FROM vault_state)) AS "on!""#,
        level,
        only_if_empty
    )
    .fetch_one(db)
    .await
}

/// Data keys not wrapped under `kek_id` of `kek_store`, by id after `after`, for a
/// re-wrap (not locked: the key store is called between this read and the write, which
/// stores only over the wrap version read).
pub async fn not_under_kek(
    db: impl PgExecutor<'_>,
    kek_store: &str,
    kek_id: &str,
    after: uuid::Uuid,
    limit: i64,
) -> Result<Vec<DataKeyRow>, sqlx::Error> {
    sqlx::query_as!(
        DataKeyRow,
        "SELECT id, tenant_id, state, kek_store, kek_id, wrapped, wrap_version FROM data_keys
          WHERE state <> 'destroyed' AND (kek_store <> $1 OR kek_id <> $2) AND id > $3
          ORDER BY id LIMIT $4",
        kek_store,
        kek_id,
        after,
        limit
    )
    .fetch_all(db)
    .await
}

pub async fn count_not_under_kek(db: impl PgExecutor<'_>, kek_store: &str, kek_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM data_keys WHERE state <> 'destroyed' AND (kek_store <> $1 OR kek_id <> $2)"#,
        kek_store,
        kek_id
    )
    .fetch_one(db)
    .await
}

/// The same data key wrapped anew (at its next wrap version: a re-wrap that lost to another
/// changes nothing). Whether it was stored.
pub async fn store_rewrapped(
    db: impl PgExecutor<'_>,
    row: &DataKeyRow,
    kek_store: &str,
    kek_id: &str,
    wrapped: &[u8],
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE data_keys SET kek_store = $2, kek_id = $3, wrapped = $4, wrap_version = wrap_version + 1
          WHERE id = $1 AND wrap_version = $5 AND state <> 'destroyed'",
        row.id,
        kek_store,
        kek_id,
        wrapped,
        row.wrap_version
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Destroys every data key of the tenant: what they sealed opens nowhere from now on. How
/// many were destroyed.
pub async fn destroy_tenant(db: impl PgExecutor<'_>, tenant: &TenantId) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE data_keys SET state = 'destroyed', wrapped = NULL, destroyed_at = now()
          WHERE tenant_id = $1 AND state <> 'destroyed'",
        tenant.as_str()
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// The tenant's sealed values that no data key of its own seals (sealed before data keys,
/// under the keyring): destroying its data keys would leave these readable.
pub async fn count_tenant_values_outside_data_keys(
    db: impl PgExecutor<'_>,
    tenant: &TenantId,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT (SELECT count(*) FROM connections WHERE tenant_id = $1 AND key_id NOT LIKE 'dk:%')
                + (SELECT count(*) FROM webhooks
                    WHERE tenant_id = $1 AND (key_id NOT LIKE 'dk:%' OR previous_key_id NOT LIKE 'dk:%'))
                + (SELECT count(*) FROM oauth_states WHERE tenant_id = $1 AND key_id NOT LIKE 'dk:%') AS "n!""#,
        tenant.as_str()
    )
    .fetch_one(db)
    .await
}

/// The tenant's connections that hold sealed tokens.
pub async fn count_tenant_sealed_connections(db: impl PgExecutor<'_>, tenant: &TenantId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM connections WHERE tenant_id = $1 AND key_id IS NOT NULL"#,
        tenant.as_str()
    )
    .fetch_one(db)
    .await
}

/// Retires the scope's active data key (it still opens what it sealed; nothing new is sealed
/// under it) and tells every instance (`tenant:<id>`: they read the tenant's keys again).
/// Whether there was one.
pub async fn retire_active(db: &mut crate::store::Conn, tenant: &TenantId) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE data_keys SET state = 'retired', retired_at = now() WHERE tenant_id = $1 AND state = 'active'",
        tenant.as_str()
    )
    .execute(&mut *db)
    .await?;
    sqlx::query!("SELECT pg_notify('mcpc_api_keys', 'tenant:' || $1::text)", tenant.as_str()).execute(&mut *db).await?;
    Ok(r.rows_affected() == 1)
}

/// Destroys the retired data keys nothing names any more (no connection, webhook secret or
/// pending state) that were retired more than `kept_seconds` ago (longer than any
/// instance's cache holds the key as its tenant's active one, and any write begun with it
/// takes): how many.
pub async fn destroy_unused_retired(db: impl PgExecutor<'_>, kept_seconds: i64) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE data_keys d SET state = 'destroyed', wrapped = NULL, destroyed_at = now()
          WHERE d.state = 'retired' AND d.retired_at < now() - make_interval(secs => $1)
            AND NOT EXISTS (SELECT 1 FROM connections WHERE key_id = 'dk:' || replace(d.id::text, '-', '')
                              AND COALESCE(access_token_ct, refresh_token_ct, id_token_ct) IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM webhooks
                             WHERE key_id = 'dk:' || replace(d.id::text, '-', '')
                                OR previous_key_id = 'dk:' || replace(d.id::text, '-', ''))
            AND NOT EXISTS (SELECT 1 FROM oauth_states WHERE key_id = 'dk:' || replace(d.id::text, '-', ''))",
        kept_seconds as f64
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}
