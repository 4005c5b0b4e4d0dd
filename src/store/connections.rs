//! `connections`: one sealed downstream grant per (tenant, subject, provider).

use sqlx::PgExecutor;
use time::OffsetDateTime;
use uuid::Uuid;

/// A connection row as stored: ciphertexts, not tokens.
#[derive(Debug, Clone)]
pub struct ConnectionRow {
    pub id: Uuid,
    pub tenant_id: String,
    pub subject: String,
    pub provider: String,
    pub account_id: Option<String>,
    pub account_login: Option<String>,
    pub scopes: Vec<String>,
    pub status: String,
    pub key_id: Option<String>,
    pub access_token_ct: Option<Vec<u8>>,
    pub refresh_token_ct: Option<Vec<u8>>,
    pub id_token_ct: Option<Vec<u8>>,
    pub token_type: String,
    pub access_expires_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub refreshed_at: Option<OffsetDateTime>,
    pub version: i64,
}

pub async fn find_connection(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    subject: &str,
    provider: &str,
) -> Result<Option<ConnectionRow>, sqlx::Error> {
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT id, tenant_id, subject, provider, account_id, account_login, scopes, status, key_id,
                  access_token_ct, refresh_token_ct, id_token_ct, token_type, access_expires_at,
                  created_at, refreshed_at, version
           FROM connections WHERE tenant_id = $1 AND subject = $2 AND provider = $3"#,
        tenant_id,
        subject,
        provider
    )
    .fetch_optional(db)
    .await
}

pub async fn find_connection_by_id(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    id: Uuid,
) -> Result<Option<ConnectionRow>, sqlx::Error> {
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT id, tenant_id, subject, provider, account_id, account_login, scopes, status, key_id,
                  access_token_ct, refresh_token_ct, id_token_ct, token_type, access_expires_at,
                  created_at, refreshed_at, version
           FROM connections WHERE tenant_id = $1 AND id = $2"#,
        tenant_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// The sealed fields of a grant, written together.
pub struct SealedGrant<'a> {
    pub key_id: &'a str,
    pub access_token_ct: &'a [u8],
    pub refresh_token_ct: Option<&'a [u8]>,
    pub id_token_ct: Option<&'a [u8]>,
    pub token_type: &'a str,
    pub access_expires_at: Option<OffsetDateTime>,
}

pub struct NewConnection<'a> {
    pub id: Uuid,
    pub tenant_id: &'a str,
    pub subject: &'a str,
    pub provider: &'a str,
    pub account_id: Option<&'a str>,
    pub account_login: Option<&'a str>,
    pub scopes: &'a [String],
    pub grant: SealedGrant<'a>,
}

/// Inserts a new active connection. The caller seals with `id` in the associated data, so
/// the id is chosen by the caller, and a connection for the same (tenant, subject,
/// provider) must not exist yet (the unique constraint refuses a second one).
pub async fn insert_connection(db: impl PgExecutor<'_>, c: &NewConnection<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"INSERT INTO connections (id, tenant_id, subject, provider, account_id, account_login, scopes, status,
                                    key_id, access_token_ct, refresh_token_ct, id_token_ct, token_type,
                                    access_expires_at, refreshed_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $9, $10, $11, $12, $13, now())"#,
        c.id,
        c.tenant_id,
        c.subject,
        c.provider,
        c.account_id,
        c.account_login,
        c.scopes,
        c.grant.key_id,
        c.grant.access_token_ct,
        c.grant.refresh_token_ct,
        c.grant.id_token_ct,
        c.grant.token_type,
        c.grant.access_expires_at
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Replaces the grant of an existing connection (re-connect), making it active again.
pub async fn replace_grant(
    db: impl PgExecutor<'_>,
    id: Uuid,
    account_id: Option<&str>,
    account_login: Option<&str>,
    scopes: &[String],
    grant: &SealedGrant<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"UPDATE connections
           SET account_id = $2, account_login = $3, scopes = $4, status = 'active', key_id = $5,
               access_token_ct = $6, refresh_token_ct = $7, id_token_ct = $8, token_type = $9,
               access_expires_at = $10, refreshed_at = now(), updated_at = now(), version = version + 1
           WHERE id = $1"#,
        id,
        account_id,
        account_login,
        scopes,
        grant.key_id,
        grant.access_token_ct,
        grant.refresh_token_ct,
        grant.id_token_ct,
        grant.token_type,
        grant.access_expires_at
    )
    .execute(db)
    .await?;
    Ok(())
}
