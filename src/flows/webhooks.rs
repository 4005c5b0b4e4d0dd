//! An operator registers, lists, rotates and deletes a tenant's webhook endpoints, and reads
//! their deliveries. The signing secret is made here, sealed into the row, and shown once.

use crate::domain::{ApiKeyId, AuditKind, TenantId, WebhookId};
use crate::keys::{Keys, Scope};
use crate::net::ssrf;
use crate::store::{self, Db, audit::AuditEvent, webhooks::WebhookRow};
use crate::webhooks::{self, EventKind, Slot};
use secrecy::SecretString;
use time::OffsetDateTime;
use url::Url;
use uuid::Uuid;

/// Endpoints a tenant may have.
pub const MAX_WEBHOOKS: i64 = 16;
/// The longest endpoint URL.
pub const MAX_URL: usize = 2048;
/// The longest description, in characters.
pub const MAX_DESCRIPTION: usize = 200;
/// The most entries `events` may list (repeats included).
pub const MAX_EVENTS_LISTED: usize = 64;
/// How long a rotated-out secret is still signed with.
pub const ROTATION_OVERLAP: time::Duration = time::Duration::hours(24);

/// Why a registration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookRefusal {
    #[error("url is not an absolute URL of at most 2048 characters")]
    MalformedUrl,
    #[error("url has a fragment")]
    Fragment,
    #[error("url refused: {0}")]
    Address(ssrf::Refusal),
    #[error("events must name at least one event kind")]
    NoEvents,
    #[error("events may list at most 64 entries")]
    TooManyEvents,
    #[error("unknown event kind {0:?}")]
    UnknownEvent(String),
    #[error("description must be at most 200 printable characters")]
    BadDescription,
}

/// A registration as checked: the URL, the event kinds (each once, in the catalogue's
/// order) and the description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub url: Url,
    pub events: Vec<EventKind>,
    pub description: String,
}

/// Pure: checks a registration under the address policy (names are judged again on every
/// delivery, by the address they resolve to).
pub fn check_registration(
    url: &str,
    events: &[String],
    description: Option<&str>,
    policy: ssrf::AddressPolicy,
) -> Result<Registration, WebhookRefusal> {
    if url.chars().count() > MAX_URL {
        return Err(WebhookRefusal::MalformedUrl);
    }
    let parsed = Url::parse(url).map_err(|_| WebhookRefusal::MalformedUrl)?;
    if parsed.fragment().is_some() {
        return Err(WebhookRefusal::Fragment);
    }
    ssrf::check_url(&parsed, policy).map_err(WebhookRefusal::Address)?;
    if events.len() > MAX_EVENTS_LISTED {
        return Err(WebhookRefusal::TooManyEvents);
    }
    let mut kinds = Vec::new();
    for e in events {
        kinds.push(EventKind::parse(e).ok_or_else(|| WebhookRefusal::UnknownEvent(e.chars().take(64).collect()))?);
    }
    if kinds.is_empty() {
        return Err(WebhookRefusal::NoEvents);
    }
    let events = EventKind::ALL.iter().copied().filter(|k| kinds.contains(k)).collect();
    let description = description.unwrap_or_default();
    if description.chars().count() > MAX_DESCRIPTION || description.chars().any(char::is_control) {
        return Err(WebhookRefusal::BadDescription);
    }
    Ok(Registration { url: parsed, events, description: description.to_owned() })
}

/// An endpoint as the admin API shows it: never its secret.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Webhook {
    pub id: Uuid,
    #[schema(example = "https://hooks.example.com/mcp-connect")]
    pub url: String,
    pub events: Vec<EventKind>,
    pub description: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Until when the secret before the last rotation is still signed with (a second
    /// signature in `webhook-signature`); `null` when there is none.
    #[serde(with = "time::serde::rfc3339::option")]
    pub previous_secret_valid_until: Option<OffsetDateTime>,
    /// Attempts that failed in a row (0 once one succeeds).
    pub consecutive_failures: i32,
    /// While attempts fail, the endpoint rests until then (its deliveries wait; each keeps
    /// its own schedule and its 24 h); `null` when it does not.
    #[serde(with = "time::serde::rfc3339::option")]
    pub paused_until: Option<OffsetDateTime>,
}

impl Webhook {
    fn of(row: &WebhookRow, now: OffsetDateTime) -> Self {
        Self {
            id: row.id.as_uuid(),
            url: row.url.clone(),
            events: row.events.iter().filter_map(|e| EventKind::parse(e)).collect(),
            description: row.description.clone(),
            created_at: row.created_at,
            previous_secret_valid_until: row.previous_until.filter(|u| *u > now),
            consecutive_failures: row.consecutive_failures,
            paused_until: row.paused_until.filter(|u| *u > now),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Refused(#[from] WebhookRefusal),
    #[error("a tenant may have at most 16 endpoints")]
    TooMany,
    #[error(transparent)]
    Fault(#[from] super::Fault),
}
super::fault::wraps_fault!(WebhookError);

/// Registers an endpoint; returns it and its signing secret (shown this once).
pub async fn register(
    pool: &Db,
    keys: &Keys,
    tenant: &TenantId,
    r: &Registration,
    api_key_id: Option<&ApiKeyId>,
) -> Result<(Webhook, SecretString), WebhookError> {
    let id = WebhookId::generate();
    let secret = webhooks::sign::new_secret();
    let key = keys.sealing(Scope::Tenant(tenant)).await?;
    let sealed = webhooks::seal_secret(&key, id, crate::vault::FIRST_GENERATION, Slot::Current, &secret)?;
    let events: Vec<String> = r.events.iter().map(|e| e.as_str().to_owned()).collect();
    let mut tx = store::begin(pool).await?;
    // One registration at a time per tenant, so the limit holds under concurrent calls.
    store::tenants::lock_tenant(&mut *tx, tenant).await?;
    if store::webhooks::count_webhooks(&mut *tx, tenant).await? >= MAX_WEBHOOKS {
        return Err(WebhookError::TooMany);
    }
    let row = store::webhooks::insert_webhook(
        &mut *tx,
        &store::webhooks::NewWebhook {
            id,
            tenant_id: tenant,
            url: r.url.as_str(),
            events: &events,
            description: &r.description,
            key_id: key.key_id(),
            secret_sealed: &sealed,
        },
    )
    .await?;
    audit(&mut tx, AuditKind::WebhookCreated, tenant, id, api_key_id, serde_json::json!({ "host": r.url.host_str() }))
        .await?;
    tx.commit().await?;
    Ok((Webhook::of(&row, OffsetDateTime::now_utc()), secret))
}

pub async fn list(pool: &Db, tenant: &TenantId) -> Result<Vec<Webhook>, sqlx::Error> {
    let now = OffsetDateTime::now_utc();
    Ok(store::webhooks::list_webhooks(pool, tenant).await?.iter().map(|r| Webhook::of(r, now)).collect())
}

pub async fn get(pool: &Db, tenant: &TenantId, id: WebhookId) -> Result<Option<Webhook>, sqlx::Error> {
    let row = store::webhooks::get_webhook(pool, tenant, id).await?;
    Ok(row.map(|r| Webhook::of(&r, OffsetDateTime::now_utc())))
}

/// Deletes an endpoint and its deliveries (pending ones are not sent). Whether it existed.
pub async fn delete(pool: &Db, tenant: &TenantId, id: WebhookId, api_key_id: &ApiKeyId) -> Result<bool, sqlx::Error> {
    let mut tx = store::begin(pool).await?;
    if !store::webhooks::delete_webhook(&mut *tx, tenant, id).await? {
        return Ok(false);
    }
    audit(&mut tx, AuditKind::WebhookDeleted, tenant, id, Some(api_key_id), serde_json::json!({ "host": null }))
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// A new secret for an endpoint; the current one is still signed with for 24 hours, unless
/// `keep_previous` is false (a leaked secret stops at once). `None`: no such endpoint in
/// this tenant.
pub async fn rotate_secret(
    pool: &Db,
    keys: &Keys,
    tenant: &TenantId,
    id: WebhookId,
    keep_previous: bool,
    api_key_id: &ApiKeyId,
) -> Result<Option<(Webhook, SecretString)>, WebhookError> {
    let now = OffsetDateTime::now_utc();
    let mut tx = store::begin(pool).await?;
    let Some(old) = store::webhooks::lock_webhook(&mut *tx, tenant, id).await? else { return Ok(None) };
    // Both secrets are sealed at the endpoint's next generation: the one in force now, kept
    // as the previous one, is sealed anew, and every ciphertext of the generations before
    // (a secret dropped because it leaked) no longer opens if put back.
    let next = crate::vault::next_generation(old.secret_version);
    let v = keys.sealing(Scope::Tenant(tenant)).await?;
    let secret = webhooks::sign::new_secret();
    let sealed = webhooks::seal_secret(&v, id, next, Slot::Current, &secret)?;
    let previous = if keep_previous {
        let opening = keys.opening(&old.key_id, Scope::Tenant(tenant)).await?;
        let current = webhooks::open_secret(&opening, id, old.secret_version, Slot::Current, &old.secret_sealed)?;
        Some(webhooks::seal_secret(&v, id, next, Slot::Previous, &current)?)
    } else {
        None
    };
    let key = v.key_id();
    let overlap = i64::try_from(ROTATION_OVERLAP.whole_microseconds()).unwrap_or(i64::MAX);
    let Some(row) =
        store::webhooks::rotate_secret(&mut *tx, tenant, id, key, &sealed, previous.as_deref(), overlap, next).await?
    else {
        return Ok(None);
    };
    let detail = serde_json::json!({ "previous_kept": keep_previous });
    audit(&mut tx, AuditKind::WebhookSecretRotated, tenant, id, Some(api_key_id), detail).await?;
    tx.commit().await?;
    Ok(Some((Webhook::of(&row, now), secret)))
}

/// An endpoint's deliveries, newest first. `None`: no such endpoint in this tenant.
pub async fn deliveries(
    pool: &Db,
    tenant: &TenantId,
    id: WebhookId,
    before: Option<i64>,
    limit: i64,
) -> Result<Option<Vec<store::webhooks::DeliveryRow>>, sqlx::Error> {
    if store::webhooks::get_webhook(pool, tenant, id).await?.is_none() {
        return Ok(None);
    }
    Ok(Some(store::webhooks::list_deliveries(pool, id, before, limit).await?))
}

/// The audit event of a change to an endpoint: its id and `detail` (never the URL whole:
/// a path or query may hold the receiver's own secret).
async fn audit(
    tx: &mut store::Tx,
    kind: AuditKind,
    tenant: &TenantId,
    id: WebhookId,
    api_key_id: Option<&ApiKeyId>,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error> {
    let mut ev = AuditEvent::new(kind);
    ev.tenant_id = Some(tenant.clone());
    ev.api_key_id = api_key_id.cloned();
    ev.detail = serde_json::json!({ "webhook_id": id });
    if let (Some(d), serde_json::Value::Object(extra)) = (ev.detail.as_object_mut(), detail) {
        d.extend(extra);
    }
    store::audit::insert_event(&mut **tx, &ev).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_are_checked() {
        let strict = ssrf::AddressPolicy::default();
        let all = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let ok = check_registration(
            "https://hooks.example.com/in?x=1",
            &all(&["connection.revoked", "connection.created", "connection.revoked"]),
            Some("ops"),
            strict,
        )
        .unwrap();
        assert_eq!(
            ok.events,
            vec![EventKind::ConnectionCreated, EventKind::ConnectionRevoked],
            "deduplicated, in order"
        );
        let long_url = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL));
        let long_text = "d".repeat(MAX_DESCRIPTION + 1);
        let cases: &[(&str, Vec<String>, Option<&str>, WebhookRefusal)] = &[
            ("hooks.example.com/in", all(&["connection.created"]), None, WebhookRefusal::MalformedUrl),
            (&long_url, all(&["connection.created"]), None, WebhookRefusal::MalformedUrl),
            ("https://hooks.example.com/in#x", all(&["connection.created"]), None, WebhookRefusal::Fragment),
            (
                "http://hooks.example.com/in",
                all(&["connection.created"]),
                None,
                WebhookRefusal::Address(ssrf::Refusal::NotHttps),
            ),
            (
                "https://169.254.169.254/latest",
                all(&["connection.created"]),
                None,
                WebhookRefusal::Address(ssrf::Refusal::LinkLocal),
            ),
            ("https://hooks.example.com/in", vec![], None, WebhookRefusal::NoEvents),
            (
                "https://hooks.example.com/in",
                vec!["elicitation.expired".to_owned(); 65],
                None,
                WebhookRefusal::TooManyEvents,
            ),
            (
                "https://hooks.example.com/in",
                all(&["connection.*"]),
                None,
                WebhookRefusal::UnknownEvent("connection.*".to_owned()),
            ),
            (
                "https://hooks.example.com/in",
                all(&["connection.created"]),
                Some(&long_text),
                WebhookRefusal::BadDescription,
            ),
            (
                "https://hooks.example.com/in",
                all(&["connection.created"]),
                Some("a\nb"),
                WebhookRefusal::BadDescription,
            ),
        ];
        for (url, events, description, want) in cases {
            assert_eq!(check_registration(url, events, *description, strict), Err(want.clone()), "{url}");
        }
    }
}
