//! `providers`: the providers made over the operator API (those of configuration files are
//! never written here). Each row's client secret is sealed by the vault under `key_id`,
//! bound to its id and `secret_version`; rows are deactivated, never deleted.

use sqlx::PgExecutor;
use time::OffsetDateTime;

#[derive(Debug, Clone)]
pub struct ProviderRow {
    pub id: String,
    /// What a file's `[providers.<id>]` would say (`providers::settings::RawProvider`), no secret.
    pub settings: serde_json::Value,
    pub client_secret_sealed: Vec<u8>,
    pub key_id: String,
    pub secret_version: i64,
    pub revision: i64,
    pub active: bool,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// Every provider made over the API, active or not.
pub async fn all(db: impl PgExecutor<'_>) -> Result<Vec<ProviderRow>, sqlx::Error> {
    sqlx::query_as!(
        ProviderRow,
        "SELECT id, settings, client_secret_sealed, key_id, secret_version, revision, active, created_at, updated_at
         FROM providers ORDER BY id"
    )
    .fetch_all(db)
    .await
}

/// One; with `lock`, locked to the end of the transaction.
pub async fn one(db: impl PgExecutor<'_>, id: &str, lock: bool) -> Result<Option<ProviderRow>, sqlx::Error> {
    if lock {
        sqlx::query_as!(
            ProviderRow,
            "SELECT id, settings, client_secret_sealed, key_id, secret_version, revision, active, created_at,
                    updated_at
             FROM providers WHERE id = $1 FOR UPDATE",
            id
        )
        .fetch_optional(db)
        .await
    } else {
        sqlx::query_as!(
            ProviderRow,
            "SELECT id, settings, client_secret_sealed, key_id, secret_version, revision, active, created_at,
                    updated_at
             FROM providers WHERE id = $1",
            id
        )
        .fetch_optional(db)
        .await
    }
}

/// How many providers the operator API made.
pub async fn count(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM providers"#).fetch_one(db).await
}

/// Whether grants or links of that provider id exist (of a provider a file had).
pub async fn id_has_history(db: impl PgExecutor<'_>, id: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM connections WHERE provider = $1)
               OR EXISTS (SELECT 1 FROM elicitations WHERE provider = $1) AS "e!""#,
        id
    )
    .fetch_one(db)
    .await
}

/// Inserts a new provider (active, generation 1). `false`: the id is taken.
pub async fn insert(
    db: impl PgExecutor<'_>,
    id: &str,
    settings: &serde_json::Value,
    sealed: &[u8],
    key_id: &str,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "INSERT INTO providers (id, settings, client_secret_sealed, key_id, secret_version)
         VALUES ($1, $2, $3, $4, 1) ON CONFLICT (id) DO NOTHING",
        id,
        settings,
        sealed,
        key_id
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Writes a provider's settings, and with `secret` a new sealed secret at `secret_version`
/// (its next generation); raises the revision.
pub async fn update(
    db: impl PgExecutor<'_>,
    id: &str,
    settings: &serde_json::Value,
    secret: Option<(&[u8], &str, i64)>,
    active: bool,
) -> Result<(), sqlx::Error> {
    let (sealed, key_id, version) = match secret {
        Some((s, k, v)) => (Some(s), Some(k), Some(v)),
        None => (None, None, None),
    };
    sqlx::query!(
        "UPDATE providers
         SET settings = $2, client_secret_sealed = COALESCE($3, client_secret_sealed),
             key_id = COALESCE($4, key_id), secret_version = COALESCE($5, secret_version),
             active = $6, revision = revision + 1, updated_at = now()
         WHERE id = $1",
        id,
        settings,
        sealed,
        key_id,
        version,
        active
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Up to `limit` providers whose secret is sealed under another key than the service
/// scope's active data key, locked (skipping those another transaction holds), for
/// `rotate-key`.
pub async fn lock_not_under_active_key(db: impl PgExecutor<'_>, limit: i64) -> Result<Vec<ProviderRow>, sqlx::Error> {
    sqlx::query_as!(
        ProviderRow,
        "SELECT id, settings, client_secret_sealed, key_id, secret_version, revision, active, created_at, updated_at
         FROM providers WHERE key_id IS DISTINCT FROM mcpc_active_key_id(NULL)
         ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
        limit
    )
    .fetch_all(db)
    .await
}

pub async fn count_not_under_active_key(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM providers WHERE key_id IS DISTINCT FROM mcpc_active_key_id(NULL)"#
    )
    .fetch_one(db)
    .await
}

/// Stores a secret re-sealed under `key_id` at the next generation (the settings are
/// unchanged; the revision stays, as nothing a discovery depends on changed).
pub async fn store_resealed(
    db: impl PgExecutor<'_>,
    id: &str,
    key_id: &str,
    sealed: &[u8],
    secret_version: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE providers SET client_secret_sealed = $3, key_id = $2, secret_version = $4 WHERE id = $1",
        id,
        key_id,
        sealed,
        secret_version
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Records the provider ids a configuration file names (see `configured_providers`).
pub async fn record_configured(db: impl PgExecutor<'_>, ids: &[String]) -> Result<(), sqlx::Error> {
    sqlx::query!("INSERT INTO configured_providers (id) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", ids)
        .execute(db)
        .await?;
    Ok(())
}

/// Which of these ids are providers made over the operator API.
pub async fn made_over_the_api(db: impl PgExecutor<'_>, ids: &[String]) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT id FROM providers WHERE id = ANY($1) ORDER BY id", ids).fetch_all(db).await
}

/// Every provider id a configuration file has named.
pub async fn configured_ids(db: impl PgExecutor<'_>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT id FROM configured_providers").fetch_all(db).await
}

/// Whether a configuration file has named this provider id.
pub async fn is_configured(db: impl PgExecutor<'_>, id: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM configured_providers WHERE id = $1) AS "e!""#, id)
        .fetch_one(db)
        .await
}
