//! `remote_mcp_clients`: the clients mcp-connect registered at remote MCP servers'
//! authorization servers (RFC 7591), sealed secrets and all.

use crate::domain::ProviderId;
use sqlx::PgExecutor;

/// One registration as stored.
#[derive(Debug)]
pub struct RemoteClientRow {
    pub client_id: String,
    pub key_id: Option<String>,
    pub secret_ct: Option<Vec<u8>>,
    /// As registered (RFC 7591 name); `None` for a row of a release that did not store it.
    pub token_endpoint_auth_method: Option<String>,
}

pub async fn find(
    db: impl PgExecutor<'_>,
    provider: &ProviderId,
    issuer: &str,
    redirect_uri: &str,
) -> Result<Option<RemoteClientRow>, sqlx::Error> {
    sqlx::query_as!(
        RemoteClientRow,
        "SELECT client_id, key_id, secret_ct, token_endpoint_auth_method FROM remote_mcp_clients
          WHERE provider_id = $1 AND issuer = $2 AND redirect_uri = $3",
        provider.as_str(),
        issuer,
        redirect_uri
    )
    .fetch_optional(db)
    .await
}

/// Stores a registration unless one is stored already (the first one stays: every
/// instance then uses it).
pub async fn insert(
    db: impl PgExecutor<'_>,
    provider: &ProviderId,
    issuer: &str,
    redirect_uri: &str,
    row: &RemoteClientRow,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO remote_mcp_clients
                (provider_id, issuer, redirect_uri, client_id, key_id, secret_ct, token_endpoint_auth_method)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        provider.as_str(),
        issuer,
        redirect_uri,
        row.client_id,
        row.key_id,
        row.secret_ct,
        row.token_endpoint_auth_method
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A registration with its key, as key rotation reads it.
#[derive(Debug)]
pub struct SealedClientRow {
    pub provider_id: ProviderId,
    pub issuer: String,
    pub redirect_uri: String,
    pub client_id: String,
    pub key_id: String,
    pub secret_ct: Vec<u8>,
}

/// Registrations whose secret is sealed under another key than the service scope's active
/// data key, locked.
pub async fn lock_not_under_active_key(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<SealedClientRow>, sqlx::Error> {
    sqlx::query_as!(
        SealedClientRow,
        r#"SELECT provider_id AS "provider_id: ProviderId", issuer, redirect_uri, client_id, key_id AS "key_id!", secret_ct AS "secret_ct!"
             FROM remote_mcp_clients WHERE key_id IS NOT NULL AND key_id IS DISTINCT FROM mcpc_active_key_id(NULL)
            ORDER BY provider_id, issuer, redirect_uri LIMIT $1 FOR UPDATE"#,
        limit
    )
    .fetch_all(db)
    .await
}

pub async fn count_not_under_active_key(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    let n = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM remote_mcp_clients
            WHERE key_id IS NOT NULL AND key_id IS DISTINCT FROM mcpc_active_key_id(NULL)"#
    )
    .fetch_one(db)
    .await?;
    Ok(n)
}

pub async fn store_resealed(
    db: impl PgExecutor<'_>,
    row: &SealedClientRow,
    key_id: &str,
    secret_ct: &[u8],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE remote_mcp_clients SET key_id = $4, secret_ct = $5
          WHERE provider_id = $1 AND issuer = $2 AND redirect_uri = $3",
        row.provider_id.as_str(),
        row.issuer,
        row.redirect_uri,
        key_id,
        secret_ct
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The authorization server pinned for a provider, if any.
pub async fn pinned_issuer(db: impl PgExecutor<'_>, provider: &ProviderId) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT issuer FROM remote_mcp_issuers WHERE provider_id = $1", provider.as_str())
        .fetch_optional(db)
        .await
}

/// Pins `issuer` unless one is pinned (`replace`: the configuration names it, and wins).
pub async fn pin_issuer(
    db: impl PgExecutor<'_>,
    provider: &ProviderId,
    issuer: &str,
    replace: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO remote_mcp_issuers (provider_id, issuer) VALUES ($1, $2)
         ON CONFLICT (provider_id) DO UPDATE SET issuer = EXCLUDED.issuer, pinned_at = now()
          WHERE $3 AND remote_mcp_issuers.issuer <> EXCLUDED.issuer",
        provider.as_str(),
        issuer,
        replace
    )
    .execute(db)
    .await?;
    Ok(())
}
