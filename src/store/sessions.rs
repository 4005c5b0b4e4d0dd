//! `browser_sessions` and `login_states_used`: who is at the keyboard, and the sign-ins that
//! were completed (a sign-in in progress lives in its browser's login cookie).

use crate::domain::Subject;
use sqlx::PgExecutor;
use time::OffsetDateTime;

#[derive(Debug, Clone)]
pub struct SessionRow {
    pub subject: Subject,
    pub issuer: String,
    pub expires_at: OffsetDateTime,
}

pub async fn insert_session(
    db: impl PgExecutor<'_>,
    id_hash: &[u8],
    subject: &Subject,
    issuer: &str,
    expires_at: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO browser_sessions (id_hash, subject, issuer, expires_at) VALUES ($1, $2, $3, $4)",
        id_hash,
        subject.as_str(),
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
        r#"SELECT subject AS "subject: Subject", issuer, expires_at FROM browser_sessions
           WHERE id_hash = $1 AND expires_at > $2"#,
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

/// A sign-in the IdP completed spends its state: `true` the first time, `false` when it was
/// spent before (the same answer used again). Kept until the state would have expired.
pub async fn spend_login_state(
    db: impl PgExecutor<'_>,
    state_hash: &[u8],
    expires_at: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "INSERT INTO login_states_used (state_hash, expires_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        state_hash,
        expires_at
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Clean-up: spent states past their expiry, and what the previous release left in
/// `login_states` (used or expired).
pub async fn delete_spent_login_states(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<u64, sqlx::Error> {
    let n = sqlx::query_scalar!(
        r#"WITH legacy AS (DELETE FROM login_states WHERE used_at IS NOT NULL OR expires_at <= $1 RETURNING 1),
                spent AS (DELETE FROM login_states_used WHERE expires_at <= $1 RETURNING 1)
           SELECT (SELECT count(*) FROM legacy) + (SELECT count(*) FROM spent) AS "n!""#,
        now
    )
    .fetch_one(db)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub async fn delete_expired_sessions(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!("DELETE FROM browser_sessions WHERE expires_at <= $1", now).execute(db).await?;
    Ok(r.rows_affected())
}
