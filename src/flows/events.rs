//! The webhook events of the use cases, built from the rows they change and recorded in
//! the same transaction (`webhooks::emit`): an event goes out if and only if its change
//! commits.

use crate::store::{connections::ConnectionRow, elicitations::Closed, elicitations::ElicitationRow};
use crate::webhooks::{self, Event, EventData, EventKind};

/// An event of a connection: its ids, account login and scopes, `by` and `reason`.
pub async fn connection(
    db: &mut crate::store::Conn,
    kind: EventKind,
    row: &ConnectionRow,
    by: &str,
    reason: &str,
    provider_result: Option<&str>,
) -> Result<(), sqlx::Error> {
    let data = EventData {
        issuer: row.issuer.clone(),
        connection_id: Some(row.id.as_uuid()),
        account_login: row.account_login.clone(),
        scopes: Some(row.scopes.as_slice().to_vec()),
        by: Some(by.to_owned()),
        reason: reason.to_owned(),
        provider_result: provider_result.map(str::to_owned),
        ..EventData::default()
    };
    webhooks::emit(db, &Event::connection(kind, &row.tenant_id, &row.subject, &row.provider, data)).await?;
    Ok(())
}

/// An event of one link.
pub async fn elicitation(
    db: &mut crate::store::Conn,
    kind: EventKind,
    e: &ElicitationRow,
    by: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    let data = EventData {
        issuer: e.issuer.clone(),
        elicitation_id: Some(e.id.as_uuid()),
        connection_id: e.connection_id.map(|id| id.as_uuid()),
        by: Some(by.to_owned()),
        reason: reason.to_owned(),
        ..EventData::default()
    };
    webhooks::emit(db, &Event::connection(kind, &e.tenant_id, &e.subject, &e.provider, data)).await?;
    Ok(())
}

/// One event for each link a bulk change closed (cancelled or expired).
pub async fn links_closed(
    db: &mut crate::store::Conn,
    kind: EventKind,
    closed: &[Closed],
    by: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    // In one order (every transaction takes the stream locks it needs in this order).
    let mut closed: Vec<&Closed> = closed.iter().collect();
    closed.sort_by(|a, b| {
        (&a.tenant_id, &a.provider, &a.subject, a.id.as_uuid()).cmp(&(
            &b.tenant_id,
            &b.provider,
            &b.subject,
            b.id.as_uuid(),
        ))
    });
    for c in closed {
        let data = EventData {
            issuer: c.issuer.clone(),
            elicitation_id: Some(c.id.as_uuid()),
            by: Some(by.to_owned()),
            reason: reason.to_owned(),
            ..EventData::default()
        };
        webhooks::emit(&mut *db, &Event::connection(kind, &c.tenant_id, &c.subject, &c.provider, data)).await?;
    }
    Ok(())
}

/// A link completed: `connection.created`, or `connection.reconnected` where a connection
/// was held (`active` or `needs_reauth`) and its grant was replaced.
pub async fn connected(
    db: &mut crate::store::Conn,
    e: &ElicitationRow,
    connection_id: crate::domain::ConnectionId,
    account_login: Option<&str>,
    scopes: &crate::domain::Scopes,
    replaced: Option<crate::domain::ConnectionStatus>,
) -> Result<(), sqlx::Error> {
    let (kind, reason) = match replaced {
        Some(s) if s != crate::domain::ConnectionStatus::Revoked => (EventKind::ConnectionReconnected, "reconnected"),
        _ => (EventKind::ConnectionCreated, "connected"),
    };
    let data = EventData {
        issuer: e.issuer.clone(),
        connection_id: Some(connection_id.as_uuid()),
        elicitation_id: Some(e.id.as_uuid()),
        account_login: account_login.map(str::to_owned),
        scopes: Some(scopes.as_slice().to_vec()),
        by: Some("subject".to_owned()),
        reason: reason.to_owned(),
        ..EventData::default()
    };
    webhooks::emit(db, &Event::connection(kind, &e.tenant_id, &e.subject, &e.provider, data)).await?;
    Ok(())
}
