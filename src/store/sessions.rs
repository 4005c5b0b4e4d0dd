//! `browser_sessions` and `login_states`: who is at the keyboard, and logins in progress.

use sqlx::PgExecutor;
use time::OffsetDateTime;

#[derive(Debug, Clone)]
pub struct SessionRow {
    pub subject: String,
    pub issuer: String,
    pub expires_at: OffsetDateTime,
}

pub async fn insert_session(
    db: impl PgExecutor<'_>,
    id_hash: &[u8],
    subject: &str,
    issuer: &str,
    expires_at: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO browser_sessions (id_hash, subject, issuer, expires_at) VALUES ($1, $2, $3, $4)",
        id_hash,
        subject,
        issuer,
        expires_at
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A live session by the hash of its id; expired sessions are not found.
pub async fn find_session(
    db: impl PgExecutor<'_>,
    id_hash: &[u8],
    now: OffsetDateTime,
) -> Result<Option<SessionRow>, sqlx::Error> {
    sqlx::query_as!(
        SessionRow,
        "SELECT subject, issuer, expires_at FROM browser_sessions WHERE id_hash = $1 AND expires_at > $2",
        id_hash,
        now
    )
    .fetch_optional(db)
    .await
}

pub async fn delete_session(db: impl PgExecutor<'_>, id_hash: &[u8]) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM browser_sessions WHERE id_hash = $1", id_hash).execute(db).await?;
    Ok(())
}

pub struct NewLoginState<'a> {
    pub state_hash: &'a [u8],
    pub binding_hash: &'a [u8],
    pub key_id: &'a str,
    pub sealed: &'a [u8],
    pub return_to: &'a str,
    pub expires_at: OffsetDateTime,
}

pub async fn insert_login_state(db: impl PgExecutor<'_>, s: &NewLoginState<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"INSERT INTO login_states (state_hash, binding_hash, key_id, sealed, return_to, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6)"#,
        s.state_hash,
        s.binding_hash,
        s.key_id,
        s.sealed,
        s.return_to,
        s.expires_at
    )
    .execute(db)
    .await?;
    Ok(())
}

#[derive(Debug)]
pub struct LoginStateRow {
    pub key_id: String,
    pub sealed: Vec<u8>,
    pub return_to: String,
}

/// Consumes a login state in one statement: only an unused, unexpired state started by
/// this browser is returned, and only once.
pub async fn consume_login_state(
    db: impl PgExecutor<'_>,
    state_hash: &[u8],
    binding_hash: &[u8],
    now: OffsetDateTime,
) -> Result<Option<LoginStateRow>, sqlx::Error> {
    sqlx::query_as!(
        LoginStateRow,
        r#"UPDATE login_states SET used_at = $3
           WHERE state_hash = $1 AND binding_hash = $2 AND used_at IS NULL AND expires_at > $3
           RETURNING key_id, sealed, return_to"#,
        state_hash,
        binding_hash,
        now
    )
    .fetch_optional(db)
    .await
}

/// Clean-up: login states used or expired, and expired sessions.
pub async fn delete_spent_login_states(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<u64, sqlx::Error> {
    let r =
        sqlx::query!("DELETE FROM login_states WHERE used_at IS NOT NULL OR expires_at <= $1", now).execute(db).await?;
    Ok(r.rows_affected())
}

pub async fn delete_expired_sessions(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!("DELETE FROM browser_sessions WHERE expires_at <= $1", now).execute(db).await?;
    Ok(r.rows_affected())
}
