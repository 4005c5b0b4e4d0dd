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
