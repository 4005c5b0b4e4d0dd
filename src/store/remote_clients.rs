//! `remote_mcp_clients`: the clients mcp-connect registered at remote MCP servers'
//! authorization servers (RFC 7591), sealed secrets and all.

use sqlx::PgExecutor;

/// One registration as stored.
#[derive(Debug)]
pub struct RemoteClientRow {
    pub client_id: String,
    pub key_id: Option<String>,
    pub secret_ct: Option<Vec<u8>>,
}

pub async fn find(
    db: impl PgExecutor<'_>,
    provider: &str,
    issuer: &str,
    redirect_uri: &str,
) -> Result<Option<RemoteClientRow>, sqlx::Error> {
    sqlx::query_as!(
        RemoteClientRow,
        "SELECT client_id, key_id, secret_ct FROM remote_mcp_clients
          WHERE provider_id = $1 AND issuer = $2 AND redirect_uri = $3",
        provider,
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
    provider: &str,
    issuer: &str,
    redirect_uri: &str,
    row: &RemoteClientRow,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO remote_mcp_clients (provider_id, issuer, redirect_uri, client_id, key_id, secret_ct)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        provider,
        issuer,
        redirect_uri,
        row.client_id,
        row.key_id,
        row.secret_ct
    )
    .execute(db)
    .await?;
    Ok(())
}
