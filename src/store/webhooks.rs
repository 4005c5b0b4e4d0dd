//! `webhooks`, `webhook_streams` and `webhook_deliveries`: a tenant's endpoints, and the
//! outbox the delivery workers of every instance drain.

use sqlx::PgExecutor;
use time::OffsetDateTime;
use uuid::Uuid;

/// An endpoint as stored (its secrets sealed).
#[derive(Debug, Clone)]
pub struct WebhookRow {
    pub id: Uuid,
    pub tenant_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub description: String,
    pub key_id: String,
    pub secret_sealed: Vec<u8>,
    pub previous_key_id: Option<String>,
    pub previous_secret_sealed: Option<Vec<u8>>,
    pub previous_until: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
}

pub struct NewWebhook<'a> {
    pub id: Uuid,
    pub tenant_id: &'a str,
    pub url: &'a str,
    pub events: &'a [String],
    pub description: &'a str,
    pub key_id: &'a str,
    pub secret_sealed: &'a [u8],
}

pub async fn insert_webhook(db: impl PgExecutor<'_>, w: &NewWebhook<'_>) -> Result<WebhookRow, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"INSERT INTO webhooks (id, tenant_id, url, events, description, key_id, secret_sealed)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           RETURNING id, tenant_id, url, events, description, key_id, secret_sealed,
                     previous_key_id, previous_secret_sealed, previous_until, created_at"#,
        w.id,
        w.tenant_id,
        w.url,
        w.events,
        w.description,
        w.key_id,
        w.secret_sealed
    )
    .fetch_one(db)
    .await
}

pub async fn count_webhooks(db: impl PgExecutor<'_>, tenant_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM webhooks WHERE tenant_id = $1"#, tenant_id).fetch_one(db).await
}

pub async fn list_webhooks(db: impl PgExecutor<'_>, tenant_id: &str) -> Result<Vec<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"SELECT id, tenant_id, url, events, description, key_id, secret_sealed,
                  previous_key_id, previous_secret_sealed, previous_until, created_at
           FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id"#,
        tenant_id
    )
    .fetch_all(db)
    .await
}

pub async fn get_webhook(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    id: Uuid,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"SELECT id, tenant_id, url, events, description, key_id, secret_sealed,
                  previous_key_id, previous_secret_sealed, previous_until, created_at
           FROM webhooks WHERE tenant_id = $1 AND id = $2"#,
        tenant_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// Deletes an endpoint and its deliveries (pending ones are not sent).
pub async fn delete_webhook(db: impl PgExecutor<'_>, tenant_id: &str, id: Uuid) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!("DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2", tenant_id, id).execute(db).await?;
    Ok(r.rows_affected() > 0)
}

/// A new secret in force; the one before it keeps being signed with until `previous_until`
/// (a secret rotated out earlier, still in its overlap, is dropped).
pub async fn rotate_secret(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    id: Uuid,
    key_id: &str,
    secret_sealed: &[u8],
    previous_until: OffsetDateTime,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"UPDATE webhooks SET previous_key_id = key_id, previous_secret_sealed = secret_sealed,
                               previous_until = $5, key_id = $3, secret_sealed = $4
           WHERE tenant_id = $1 AND id = $2
           RETURNING id, tenant_id, url, events, description, key_id, secret_sealed,
                     previous_key_id, previous_secret_sealed, previous_until, created_at"#,
        tenant_id,
        id,
        key_id,
        secret_sealed,
        previous_until
    )
    .fetch_optional(db)
    .await
}

/// Writes one delivery of an event for every endpoint that asked for its kind: the tenant's
/// (`tenant_id: None`: every tenant's). The event takes the next number of its stream under
/// a row lock held to the commit, so the events of one stream are numbered in commit order.
/// Nothing is written (and no lock taken) when no endpoint wants the event. Returns how many
/// deliveries were written.
pub async fn enqueue(
    db: &mut sqlx::PgConnection,
    tenant_id: Option<&str>,
    kind: &str,
    stream: &str,
    event_id: Uuid,
    payload: &str,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!(
        r#"WITH hooks AS (
               SELECT id FROM webhooks WHERE ($1::text IS NULL OR tenant_id = $1) AND $2 = ANY (events)
           ), numbered AS (
               INSERT INTO webhook_streams (stream, seq) SELECT $3, 1 WHERE EXISTS (SELECT 1 FROM hooks)
               ON CONFLICT (stream) DO UPDATE SET seq = webhook_streams.seq + 1
               RETURNING seq
           )
           INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, stream, seq, payload)
           SELECT hooks.id, $4, $2, $3, numbered.seq, $5 FROM hooks, numbered"#,
        tenant_id,
        kind,
        stream,
        event_id,
        payload
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// A delivery a worker claimed, with what it needs to send it.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub event_id: Uuid,
    pub payload: String,
    /// This attempt's number (1 for the first): the claim's fencing token.
    pub attempts: i32,
    pub created_at: OffsetDateTime,
    pub webhook_id: Uuid,
    pub url: String,
    pub key_id: String,
    pub secret_sealed: Vec<u8>,
    pub previous_key_id: Option<String>,
    pub previous_secret_sealed: Option<Vec<u8>>,
    pub previous_until: Option<OffsetDateTime>,
}

/// Claims up to `limit` deliveries that are due at `now`, each the first pending one of its
/// endpoint's stream (a later event of a stream waits while an earlier one is retried), and
/// holds them until `until`. Rows another worker is claiming are skipped
/// (`FOR UPDATE SKIP LOCKED`); a claim whose worker died lapses at its `until`.
pub async fn claim_due(
    db: impl PgExecutor<'_>,
    now: OffsetDateTime,
    until: OffsetDateTime,
    limit: i64,
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as!(
        Claimed,
        r#"WITH due AS (
               SELECT d.id FROM webhook_deliveries d
               WHERE d.status = 'pending' AND d.next_attempt_at <= $1
                 AND (d.claimed_until IS NULL OR d.claimed_until <= $1)
                 AND NOT EXISTS (
                     SELECT 1 FROM webhook_deliveries e
                     WHERE e.webhook_id = d.webhook_id AND e.stream = d.stream AND e.seq < d.seq
                       AND e.status = 'pending')
               ORDER BY d.next_attempt_at, d.id
               LIMIT $3
               FOR UPDATE SKIP LOCKED
           ), claimed AS (
               UPDATE webhook_deliveries d SET claimed_until = $2, attempts = d.attempts + 1
               FROM due WHERE d.id = due.id
               RETURNING d.id, d.event_id, d.payload, d.attempts, d.created_at, d.webhook_id
           )
           SELECT c.id AS "id!", c.event_id AS "event_id!", c.payload AS "payload!", c.attempts AS "attempts!",
                  c.created_at AS "created_at!", c.webhook_id AS "webhook_id!", w.url, w.key_id, w.secret_sealed,
                  w.previous_key_id, w.previous_secret_sealed, w.previous_until
           FROM claimed c JOIN webhooks w ON w.id = c.webhook_id
           ORDER BY c.id"#,
        now,
        until,
        limit
    )
    .fetch_all(db)
    .await
}

/// What came of one attempt.
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    pub at: OffsetDateTime,
    /// The receiver's status code, if it answered.
    pub status: Option<i32>,
    /// Why it did not count: a refusal code, `timeout`, `connect`, `status`.
    pub error: Option<&'a str>,
    /// At most 1 KB of the answer.
    pub response: Option<&'a str>,
}

/// Records an attempt of the claim `(id, attempts)`: `next` is the time of the next one
/// (`None`: none, the delivery is `delivered` when the attempt succeeded, else `failed`).
/// A claim that lapsed and was taken again (the attempts moved on) records nothing.
pub async fn record_attempt(
    db: impl PgExecutor<'_>,
    id: i64,
    attempts: i32,
    attempt: &Attempt<'_>,
    delivered: bool,
    next: Option<OffsetDateTime>,
) -> Result<bool, sqlx::Error> {
    let status = match (delivered, next) {
        (true, _) => "delivered",
        (false, Some(_)) => "pending",
        (false, None) => "failed",
    };
    let r = sqlx::query!(
        r#"UPDATE webhook_deliveries
           SET status = $3::text, claimed_until = NULL, last_attempt_at = $4::timestamptz, last_status = $5,
               last_error = $6, last_response = $7, next_attempt_at = coalesce($8, next_attempt_at),
               finished_at = CASE WHEN $3::text = 'pending' THEN NULL ELSE $4::timestamptz END
           WHERE id = $1 AND attempts = $2 AND status = 'pending'"#,
        id,
        attempts,
        status,
        attempt.at,
        attempt.status,
        attempt.error,
        attempt.response,
        next
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() > 0)
}

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct DeliveryRow {
    /// The delivery's number (newest first; `before` pages on it).
    pub id: i64,
    /// The event's id: the `webhook-id` header and the payload's `id`.
    #[serde(serialize_with = "event_id")]
    #[schema(value_type = String, example = "evt_0193a0c4e1b27c5e8f0a1b2c3d4e5f60")]
    pub event_id: Uuid,
    #[schema(example = "connection.revoked")]
    pub event_type: String,
    /// `pending` (waiting or being retried), `delivered`, or `failed` (retried for 24 h).
    #[schema(example = "delivered")]
    pub status: String,
    pub attempts: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When the next attempt is due (pending deliveries).
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_attempt_at: Option<OffsetDateTime>,
    /// The receiver's status code at the last attempt, if it answered.
    pub last_status: Option<i32>,
    /// Why the last attempt did not count: `status` (not 2xx), `timeout`, `connect`,
    /// `request`, or an address refusal (`loopback_address`, `private_address`, …).
    pub last_error: Option<String>,
    /// At most 1 KB of the receiver's last answer.
    pub last_response: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
}

fn event_id<S: serde::Serializer>(id: &Uuid, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("evt_{}", id.simple()))
}

/// An endpoint's deliveries, newest first, before the delivery `before` where given.
pub async fn list_deliveries(
    db: impl PgExecutor<'_>,
    webhook_id: Uuid,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    sqlx::query_as!(
        DeliveryRow,
        r#"SELECT id, event_id, event_type, status, attempts, created_at,
                  CASE WHEN status = 'pending' THEN next_attempt_at END AS next_attempt_at,
                  last_attempt_at, last_status, last_error, last_response, finished_at
           FROM webhook_deliveries
           WHERE webhook_id = $1 AND ($2::bigint IS NULL OR id < $2)
           ORDER BY id DESC LIMIT $3"#,
        webhook_id,
        before,
        limit
    )
    .fetch_all(db)
    .await
}

/// Clean-up: deliveries finished (delivered or failed) before `before` go.
pub async fn delete_finished_before(db: impl PgExecutor<'_>, before: OffsetDateTime) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!("DELETE FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < $1", before)
        .execute(db)
        .await?;
    Ok(r.rows_affected())
}

/// Key rotation: endpoints with a secret sealed under another key than `key_id`, locked.
pub async fn lock_secrets_not_under_key(
    db: impl PgExecutor<'_>,
    key_id: &str,
    limit: i64,
) -> Result<Vec<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"SELECT id, tenant_id, url, events, description, key_id, secret_sealed,
                  previous_key_id, previous_secret_sealed, previous_until, created_at
           FROM webhooks WHERE key_id <> $1 OR previous_key_id <> $1
           ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED"#,
        key_id,
        limit
    )
    .fetch_all(db)
    .await
}

pub async fn store_resealed_secrets(
    db: impl PgExecutor<'_>,
    id: Uuid,
    key_id: &str,
    secret_sealed: &[u8],
    previous_secret_sealed: Option<&[u8]>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"UPDATE webhooks SET key_id = $2, secret_sealed = $3,
               previous_key_id = CASE WHEN previous_secret_sealed IS NULL THEN NULL ELSE $2 END,
               previous_secret_sealed = $4
           WHERE id = $1"#,
        id,
        key_id,
        secret_sealed,
        previous_secret_sealed
    )
    .execute(db)
    .await?;
    Ok(())
}
