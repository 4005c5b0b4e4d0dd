//! `elicitations`: the records connect URLs point to.

use crate::domain::{ConnectionId, ElicitationId, ElicitationStatus, ProviderId, Scopes, Subject, TenantId};
use sqlx::PgExecutor;
use time::OffsetDateTime;

#[derive(Debug, Clone)]
pub struct ElicitationRow {
    pub id: ElicitationId,
    pub tenant_id: TenantId,
    pub subject: Subject,
    pub provider: ProviderId,
    pub scopes: Scopes,
    pub status: ElicitationStatus,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub completed_at: Option<OffsetDateTime>,
    pub connection_id: Option<ConnectionId>,
    /// For a `cancelled` one closed by the MCP client: `cancel` or `decline`.
    pub cancel_reason: Option<String>,
    /// The issuer of the IdP whose `subject` this is (`None`: made before issuers were
    /// recorded and not yet backfilled; never taken for a match).
    pub issuer: Option<String>,
}

pub struct NewElicitation<'a> {
    pub id: ElicitationId,
    pub tenant_id: &'a TenantId,
    pub subject: &'a Subject,
    /// The issuer of the tenant's IdP.
    pub issuer: &'a str,
    pub provider: &'a ProviderId,
    pub scopes: &'a Scopes,
    pub mcp_context: serde_json::Value,
    pub expires_at: OffsetDateTime,
}

/// Inserts a pending elicitation unless one is already pending for the same tenant,
/// subject, provider and scopes (the partial unique index decides, so two concurrent
/// callers cannot both insert). Returns whether this call inserted.
pub async fn insert_pending(db: impl PgExecutor<'_>, e: &NewElicitation<'_>) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"INSERT INTO elicitations (id, tenant_id, subject, provider, scopes, mcp_context, status, expires_at, issuer)
           VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8)
           ON CONFLICT (tenant_id, subject, provider, scopes) WHERE status = 'pending' DO NOTHING"#,
        e.id.as_uuid(),
        e.tenant_id.as_str(),
        e.subject.as_str(),
        e.provider.as_str(),
        e.scopes.as_slice(),
        e.mcp_context,
        e.expires_at,
        e.issuer
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// The pending elicitation for this tenant, subject (of `issuer`), provider and scopes, if
/// any.
pub async fn find_pending(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    subject: &Subject,
    issuer: &str,
    provider: &ProviderId,
    scopes: &Scopes,
) -> Result<Option<ElicitationRow>, sqlx::Error> {
    sqlx::query_as!(
        ElicitationRow,
        r#"SELECT id AS "id: ElicitationId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject",
                  provider AS "provider: ProviderId", scopes AS "scopes: Scopes", status AS "status: ElicitationStatus",
                  created_at, expires_at, completed_at, connection_id AS "connection_id: ConnectionId", cancel_reason,
                  issuer
           FROM elicitations
           WHERE tenant_id = $1 AND subject = $2 AND provider = $3 AND scopes = $4 AND status = 'pending'
             AND issuer = $5"#,
        tenant_id.as_str(),
        subject.as_str(),
        provider.as_str(),
        scopes.as_slice(),
        issuer
    )
    .fetch_optional(db)
    .await
}

/// One elicitation of one tenant. Another tenant's id finds nothing.
pub async fn find_for_tenant(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    id: ElicitationId,
) -> Result<Option<ElicitationRow>, sqlx::Error> {
    sqlx::query_as!(
        ElicitationRow,
        r#"SELECT id AS "id: ElicitationId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject",
                  provider AS "provider: ProviderId", scopes AS "scopes: Scopes", status AS "status: ElicitationStatus",
                  created_at, expires_at, completed_at, connection_id AS "connection_id: ConnectionId", cancel_reason,
                  issuer
           FROM elicitations WHERE id = $1 AND tenant_id = $2"#,
        id.as_uuid(),
        tenant_id.as_str()
    )
    .fetch_optional(db)
    .await
}

/// Marks pending elicitations `expired` for one (tenant, subject, provider) that are past
/// their deadline or were made for another IdP's subject (`issuer`: the tenant's IdP now;
/// it changed since), so the one-pending index lets a fresh one in.
pub async fn expire_overdue_for(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    subject: &Subject,
    provider: &ProviderId,
    issuer: &str,
    now: OffsetDateTime,
) -> Result<Vec<Closed>, sqlx::Error> {
    sqlx::query_as!(
        Closed,
        r#"UPDATE elicitations SET status = 'expired'
           WHERE tenant_id = $1 AND subject = $2 AND provider = $3 AND status = 'pending'
             AND (expires_at <= $4 OR issuer IS DISTINCT FROM $5)
           RETURNING id AS "id: ElicitationId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject", provider AS "provider: ProviderId",
                     issuer"#,
        tenant_id.as_str(),
        subject.as_str(),
        provider.as_str(),
        now,
        issuer
    )
    .fetch_all(db)
    .await
}

/// Locks a pending elicitation for the completion transaction; `None` when it is no longer
/// pending (completed, declined, cancelled by someone else meanwhile).
pub async fn lock_pending(
    db: impl PgExecutor<'_>,
    id: ElicitationId,
    now: OffsetDateTime,
) -> Result<Option<ElicitationRow>, sqlx::Error> {
    sqlx::query_as!(
        ElicitationRow,
        r#"SELECT id AS "id: ElicitationId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject",
                  provider AS "provider: ProviderId", scopes AS "scopes: Scopes", status AS "status: ElicitationStatus",
                  created_at, expires_at, completed_at, connection_id AS "connection_id: ConnectionId", cancel_reason,
                  issuer
           FROM elicitations WHERE id = $1 AND status = 'pending' AND expires_at > $2
           FOR UPDATE"#,
        id.as_uuid(),
        now
    )
    .fetch_optional(db)
    .await
}

/// An elicitation by id alone: for the browser pages, which re-check its binding against
/// the session themselves.
pub async fn find_by_id(db: impl PgExecutor<'_>, id: ElicitationId) -> Result<Option<ElicitationRow>, sqlx::Error> {
    sqlx::query_as!(
        ElicitationRow,
        r#"SELECT id AS "id: ElicitationId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject",
                  provider AS "provider: ProviderId", scopes AS "scopes: Scopes", status AS "status: ElicitationStatus",
                  created_at, expires_at, completed_at, connection_id AS "connection_id: ConnectionId", cancel_reason,
                  issuer
           FROM elicitations WHERE id = $1"#,
        id.as_uuid()
    )
    .fetch_optional(db)
    .await
}

pub async fn mark_completed(
    db: impl PgExecutor<'_>,
    id: ElicitationId,
    connection_id: ConnectionId,
    now: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"UPDATE elicitations SET status = 'completed', connection_id = $2, completed_at = $3
           WHERE id = $1 AND status = 'pending'"#,
        id.as_uuid(),
        connection_id.as_uuid(),
        now
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Declines a pending elicitation of exactly this subject.
pub async fn mark_declined(
    db: impl PgExecutor<'_>,
    id: ElicitationId,
    subject: &Subject,
    now: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"UPDATE elicitations SET status = 'declined', completed_at = $3
           WHERE id = $1 AND subject = $2 AND status = 'pending'"#,
        id.as_uuid(),
        subject.as_str(),
        now
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Cancels pending elicitations of a tenant (optionally one subject, of one issuer, and/or
/// provider) and spends their open states, so a callback in flight finds nothing to
/// complete.
pub async fn cancel_pending(
    db: &mut crate::store::Conn,
    tenant_id: &TenantId,
    subject: Option<&Subject>,
    issuer: Option<&str>,
    provider: Option<&ProviderId>,
    now: OffsetDateTime,
) -> Result<Vec<Closed>, sqlx::Error> {
    let closed = sqlx::query_as!(
        Closed,
        r#"UPDATE elicitations SET status = 'cancelled', completed_at = $4
           WHERE tenant_id = $1 AND status = 'pending'
             AND ($2::text IS NULL OR subject = $2) AND ($3::text IS NULL OR provider = $3)
             AND ($5::text IS NULL OR issuer = $5)
           RETURNING id AS "id: ElicitationId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject", provider AS "provider: ProviderId",
                     issuer"#,
        tenant_id.as_str(),
        subject.map(Subject::as_str),
        provider.map(ProviderId::as_str),
        now,
        issuer
    )
    .fetch_all(&mut *db)
    .await?;
    let ids: Vec<uuid::Uuid> = closed.iter().map(|c| c.id.as_uuid()).collect();
    sqlx::query!("UPDATE oauth_states SET used_at = $2 WHERE elicitation_id = ANY($1) AND used_at IS NULL", &ids, now)
        .execute(&mut *db)
        .await?;
    Ok(closed)
}

/// An elicitation a bulk change closed (cancelled or expired).
#[derive(Debug, Clone)]
pub struct Closed {
    pub id: ElicitationId,
    pub tenant_id: TenantId,
    pub subject: Subject,
    pub provider: ProviderId,
    /// The issuer of the IdP whose `subject` this is (`None`: written before issuers).
    pub issuer: Option<String>,
}

/// Clean-up: every pending elicitation past its deadline becomes `expired`.
pub async fn expire_overdue(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<Vec<Closed>, sqlx::Error> {
    sqlx::query_as!(
        Closed,
        r#"UPDATE elicitations SET status = 'expired'
           WHERE status = 'pending' AND expires_at <= $1
           RETURNING id AS "id: ElicitationId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject", provider AS "provider: ProviderId",
                     issuer"#,
        now
    )
    .fetch_all(db)
    .await
}

/// Cancels one pending elicitation of a tenant (the MCP client said cancel or decline) and
/// spends its open states. Returns whether this call cancelled it and the row as it now is,
/// or `None` for another tenant's id.
pub async fn cancel_one(
    db: &mut crate::store::Conn,
    tenant_id: &TenantId,
    id: ElicitationId,
    reason: Option<&str>,
    now: OffsetDateTime,
) -> Result<Option<(bool, ElicitationRow)>, sqlx::Error> {
    let changed = sqlx::query!(
        r#"UPDATE elicitations SET status = 'cancelled', completed_at = $3, cancel_reason = $4
           WHERE id = $1 AND tenant_id = $2 AND status = 'pending'"#,
        id.as_uuid(),
        tenant_id.as_str(),
        now,
        reason
    )
    .execute(&mut *db)
    .await?
    .rows_affected()
        == 1;
    if changed {
        sqlx::query!(
            "UPDATE oauth_states SET used_at = $2 WHERE elicitation_id = $1 AND used_at IS NULL",
            id.as_uuid(),
            now
        )
        .execute(&mut *db)
        .await?;
    }
    Ok(find_for_tenant(&mut *db, tenant_id, id).await?.map(|row| (changed, row)))
}

/// Sets the issuer of rows made before issuers were recorded (or by a binary of the release
/// before, during a rolling deploy) to `issuer`: the default IdP's, the only one those
/// binaries knew. Returns how many rows it set.
/// At most `batch` rows a call (each call its own short statement: a large table is never
/// locked whole); returns how many it set.
pub async fn backfill_issuer(db: impl PgExecutor<'_>, issuer: &str, batch: i64) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE elicitations SET issuer = $1 WHERE id IN (SELECT id FROM elicitations WHERE issuer IS NULL LIMIT $2)",
        issuer,
        batch
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}
