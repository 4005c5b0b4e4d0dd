//! Closing links before they are used: by an operator (admin API), as part of a revocation
//! or off-boarding (invariant 12), or by the MCP client that answered `cancel`/`decline`.
//! Their in-flight states are spent in the same transaction, so a callback that arrives
//! later finds nothing to complete.

use crate::domain::{ApiKeyId, AuditKind, ElicitationId, ProviderId, Subject, TenantId};
use crate::store::{self, Db, audit::AuditEvent, elicitations::ElicitationRow};
use crate::webhooks::EventKind;
use time::OffsetDateTime;

/// Who closed the links, for the audit event.
pub struct Closer<'a> {
    /// `api_key:<id>`, `cli`, ...
    pub actor: &'a str,
    /// The API key behind the request, where there is one.
    pub api_key_id: Option<&'a ApiKeyId>,
    pub because: Because,
    /// Who, in the webhook events: `admin`, `subject`, `offboarding`, `cli`.
    pub by: &'a str,
}

/// Why links are closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Because {
    /// An operator asked (recorded even when nothing was pending: the request itself is
    /// worth the trail).
    Operator,
    /// Part of revoking a connection or off-boarding a subject.
    Revocation,
}

impl Because {
    fn as_str(self) -> &'static str {
        match self {
            Because::Operator => "operator",
            Because::Revocation => "revocation",
        }
    }
}

/// Cancels a tenant's pending links (of one subject and/or provider), with one audit event.
/// Returns their ids.
pub async fn cancel_pending(
    pool: &Db,
    tenant: &TenantId,
    subject: Option<(&Subject, Option<&str>)>,
    provider: Option<&ProviderId>,
    by: &Closer<'_>,
) -> Result<Vec<ElicitationId>, sqlx::Error> {
    let (subject, issuer) = subject.map_or((None, None), |(s, i)| (Some(s), i));
    let mut tx = store::begin(pool).await?;
    let now = OffsetDateTime::now_utc();
    let closed = store::elicitations::cancel_pending(&mut tx, tenant, subject, issuer, provider, now).await?;
    let ids: Vec<ElicitationId> = closed.iter().map(|c| c.id).collect();
    super::events::links_closed(&mut tx, EventKind::ElicitationCancelled, &closed, by.by, by.because.as_str()).await?;
    crate::telemetry::metrics::elicitations_finished(crate::domain::ElicitationStatus::Cancelled, ids.len() as u64);
    if !ids.is_empty() || by.because == Because::Operator {
        let mut ev = AuditEvent::new(AuditKind::ElicitationsCancelled);
        ev.tenant_id = Some(tenant.clone());
        ev.subject = subject.cloned();
        ev.issuer = issuer.map(str::to_owned);
        ev.provider = provider.cloned();
        ev.api_key_id = by.api_key_id.cloned();
        ev.detail = serde_json::json!({
            "count": ids.len(),
            "elicitation_ids": ids,
            "by": by.actor,
            "because": by.because.as_str(),
        });
        store::audit::insert_event(&mut *tx, &ev).await?;
    }
    tx.commit().await?;
    Ok(ids)
}

/// The MCP client answered the URL elicitation with `cancel` or `decline`: the link is
/// closed and the answer kept as `cancel_reason`. Returns the row as it is afterwards
/// (`None`: not this tenant's); a repeat changes nothing and writes no second event.
pub async fn cancel_by_client(
    pool: &Db,
    tenant: &TenantId,
    id: ElicitationId,
    reason: Option<&str>,
    api_key_id: &ApiKeyId,
) -> Result<Option<ElicitationRow>, sqlx::Error> {
    let mut tx = store::begin(pool).await?;
    let Some((changed, e)) =
        store::elicitations::cancel_one(&mut tx, tenant, id, reason, OffsetDateTime::now_utc()).await?
    else {
        return Ok(None);
    };
    if changed {
        crate::telemetry::metrics::elicitations_finished(crate::domain::ElicitationStatus::Cancelled, 1);
        let mut ev = AuditEvent::for_elicitation(AuditKind::ElicitationCancelled, &e);
        ev.api_key_id = Some(api_key_id.clone());
        ev.detail = serde_json::json!({ "client_answer": reason });
        store::audit::insert_event(&mut *tx, &ev).await?;
        let why = reason.unwrap_or("cancel");
        super::events::elicitation(&mut tx, EventKind::ElicitationCancelled, &e, "mcp_client", why).await?;
    }
    tx.commit().await?;
    Ok(Some(e))
}
