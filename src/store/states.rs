//! `oauth_states`: one-time provider authorizations in progress.

use crate::domain::{ElicitationId, ProviderId, Subject, TenantId};
use sqlx::PgExecutor;
use time::OffsetDateTime;

pub struct NewOauthState<'a> {
    pub state_hash: &'a [u8],
    pub elicitation_id: ElicitationId,
    pub session_hash: &'a [u8],
    pub tenant_id: &'a TenantId,
    pub subject: &'a Subject,
    pub provider: &'a ProviderId,
    pub redirect_uri: &'a str,
    pub key_id: &'a str,
    pub sealed: &'a [u8],
    pub expires_at: OffsetDateTime,
}

pub async fn insert_state(db: impl PgExecutor<'_>, s: &NewOauthState<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"INSERT INTO oauth_states (state_hash, elicitation_id, session_hash, tenant_id, subject, provider,
                                     redirect_uri, key_id, sealed, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"#,
        s.state_hash,
        s.elicitation_id.as_uuid(),
        s.session_hash,
        s.tenant_id.as_str(),
        s.subject.as_str(),
        s.provider.as_str(),
        s.redirect_uri,
        s.key_id,
        s.sealed,
        s.expires_at
    )
    .execute(db)
    .await?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct OauthStateRow {
    pub elicitation_id: ElicitationId,
    pub session_hash: Vec<u8>,
    pub tenant_id: TenantId,
    pub subject: Subject,
    pub provider: ProviderId,
    pub redirect_uri: String,
    pub key_id: String,
    pub sealed: Vec<u8>,
    pub expires_at: OffsetDateTime,
    pub used_at: Option<OffsetDateTime>,
}

/// Consumes a state in one statement: a second use, an expired state or an unknown one
/// finds nothing.
pub async fn consume_state(
    db: impl PgExecutor<'_>,
    state_hash: &[u8],
    now: OffsetDateTime,
) -> Result<Option<OauthStateRow>, sqlx::Error> {
    sqlx::query_as!(
        OauthStateRow,
        r#"UPDATE oauth_states SET used_at = $2
           WHERE state_hash = $1 AND used_at IS NULL AND expires_at > $2
           RETURNING elicitation_id AS "elicitation_id: ElicitationId", session_hash, tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject", provider AS "provider: ProviderId", redirect_uri, key_id, sealed,
                     expires_at, used_at"#,
        state_hash,
        now
    )
    .fetch_optional(db)
    .await
}

/// A state as stored, used or not: to tell a reload of a finished callback from an attack.
pub async fn find_state(db: impl PgExecutor<'_>, state_hash: &[u8]) -> Result<Option<OauthStateRow>, sqlx::Error> {
    sqlx::query_as!(
        OauthStateRow,
        r#"SELECT elicitation_id AS "elicitation_id: ElicitationId", session_hash, tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject", provider AS "provider: ProviderId", redirect_uri, key_id, sealed,
                  expires_at, used_at
           FROM oauth_states WHERE state_hash = $1"#,
        state_hash
    )
    .fetch_optional(db)
    .await
}

/// Clean-up: states that were used or have expired.
pub async fn delete_spent_states(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<u64, sqlx::Error> {
    let r =
        sqlx::query!("DELETE FROM oauth_states WHERE used_at IS NOT NULL OR expires_at <= $1", now).execute(db).await?;
    Ok(r.rows_affected())
}
