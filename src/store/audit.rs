//! `audit_events`: who did what to which grant. Details hold ids and reason codes only.

use sqlx::PgExecutor;
use uuid::Uuid;

/// One audit event. Build with `AuditEvent::new(kind)` and the setters you need.
#[derive(Debug, Clone, Default)]
pub struct AuditEvent {
    pub kind: &'static str,
    pub tenant_id: Option<String>,
    pub subject: Option<String>,
    pub provider: Option<String>,
    pub elicitation_id: Option<Uuid>,
    pub connection_id: Option<Uuid>,
    pub api_key_id: Option<String>,
    pub detail: serde_json::Value,
}

impl AuditEvent {
    pub fn new(kind: &'static str) -> Self {
        Self { kind, detail: serde_json::json!({}), ..Self::default() }
    }
}

pub async fn insert_event(db: impl PgExecutor<'_>, e: &AuditEvent) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"INSERT INTO audit_events (tenant_id, subject, provider, kind, elicitation_id, connection_id, api_key_id, detail)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"#,
        e.tenant_id,
        e.subject,
        e.provider,
        e.kind,
        e.elicitation_id,
        e.connection_id,
        e.api_key_id,
        e.detail
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Writes a batch in one transaction (the batched hand-out events).
pub async fn insert_events(db: &sqlx::PgPool, events: &[AuditEvent]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    for e in events {
        insert_event(&mut *tx, e).await?;
    }
    tx.commit().await
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditRow {
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: time::OffsetDateTime,
    pub subject: Option<String>,
    pub provider: Option<String>,
    pub kind: String,
    pub elicitation_id: Option<Uuid>,
    pub connection_id: Option<Uuid>,
    pub api_key_id: Option<String>,
    pub detail: serde_json::Value,
}

/// Filters for reading the trail; `before_id` pages backwards from the newest.
#[derive(Debug, Default)]
pub struct AuditFilter<'a> {
    pub subject: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub since: Option<time::OffsetDateTime>,
    pub until: Option<time::OffsetDateTime>,
    pub before_id: Option<i64>,
    pub limit: i64,
}

pub async fn list_events(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    f: &AuditFilter<'_>,
) -> Result<Vec<AuditRow>, sqlx::Error> {
    sqlx::query_as!(
        AuditRow,
        r#"SELECT id, at, subject, provider, kind, elicitation_id, connection_id, api_key_id, detail
           FROM audit_events
           WHERE tenant_id = $1
             AND ($2::text IS NULL OR subject = $2)
             AND ($3::text IS NULL OR provider = $3)
             AND ($4::text IS NULL OR kind = $4)
             AND ($5::timestamptz IS NULL OR at >= $5)
             AND ($6::timestamptz IS NULL OR at < $6)
             AND ($7::bigint IS NULL OR id < $7)
           ORDER BY id DESC
           LIMIT $8"#,
        tenant_id,
        f.subject,
        f.provider,
        f.kind,
        f.since,
        f.until,
        f.before_id,
        f.limit
    )
    .fetch_all(db)
    .await
}

pub async fn delete_events_before(db: impl PgExecutor<'_>, cutoff: time::OffsetDateTime) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!("DELETE FROM audit_events WHERE at < $1", cutoff).execute(db).await?;
    Ok(r.rows_affected())
}
