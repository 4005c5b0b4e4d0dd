//! `webhooks`, `webhook_streams` and `webhook_deliveries`: a tenant's endpoints, and the
//! outbox the delivery workers of every instance drain.

use crate::domain::{TenantId, WebhookId};
use sqlx::PgExecutor;
use time::OffsetDateTime;
use uuid::Uuid;

/// An endpoint as stored (its secrets sealed).
#[derive(Debug, Clone)]
pub struct WebhookRow {
    pub id: WebhookId,
    pub tenant_id: TenantId,
    pub url: String,
    pub events: Vec<String>,
    pub description: String,
    pub key_id: String,
    pub secret_sealed: Vec<u8>,
    pub previous_key_id: Option<String>,
    pub previous_secret_sealed: Option<Vec<u8>>,
    pub previous_until: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub consecutive_failures: i32,
    pub paused_until: Option<OffsetDateTime>,
    /// The generation its secrets are sealed at (`None`: before generations; see `vault`).
    pub secret_version: Option<i64>,
}

pub struct NewWebhook<'a> {
    pub id: WebhookId,
    pub tenant_id: &'a TenantId,
    pub url: &'a str,
    pub events: &'a [String],
    pub description: &'a str,
    pub key_id: &'a str,
    pub secret_sealed: &'a [u8],
}

pub async fn insert_webhook(db: impl PgExecutor<'_>, w: &NewWebhook<'_>) -> Result<WebhookRow, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"INSERT INTO webhooks (id, tenant_id, url, events, description, key_id, secret_sealed, secret_version)
           VALUES ($1, $2, $3, $4, $5, $6, $7, 1)
           RETURNING id AS "id: WebhookId", tenant_id AS "tenant_id: TenantId", url, events, description, key_id, secret_sealed,
                     previous_key_id, previous_secret_sealed, previous_until, created_at,
                  consecutive_failures, paused_until, secret_version"#,
        w.id.as_uuid(),
        w.tenant_id.as_str(),
        w.url,
        w.events,
        w.description,
        w.key_id,
        w.secret_sealed
    )
    .fetch_one(db)
    .await
}

pub async fn count_webhooks(db: impl PgExecutor<'_>, tenant_id: &TenantId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM webhooks WHERE tenant_id = $1"#, tenant_id.as_str())
        .fetch_one(db)
        .await
}

pub async fn list_webhooks(db: impl PgExecutor<'_>, tenant_id: &TenantId) -> Result<Vec<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"SELECT id AS "id: WebhookId", tenant_id AS "tenant_id: TenantId", url, events, description, key_id, secret_sealed,
                  previous_key_id, previous_secret_sealed, previous_until, created_at,
                  consecutive_failures, paused_until, secret_version
           FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id"#,
        tenant_id.as_str()
    )
    .fetch_all(db)
    .await
}

pub async fn get_webhook(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    id: WebhookId,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"SELECT id AS "id: WebhookId", tenant_id AS "tenant_id: TenantId", url, events, description, key_id, secret_sealed,
                  previous_key_id, previous_secret_sealed, previous_until, created_at,
                  consecutive_failures, paused_until, secret_version
           FROM webhooks WHERE tenant_id = $1 AND id = $2"#,
        tenant_id.as_str(),
        id.as_uuid()
    )
    .fetch_optional(db)
    .await
}

/// Deletes an endpoint and its deliveries (pending ones are not sent).
pub async fn delete_webhook(db: impl PgExecutor<'_>, tenant_id: &TenantId, id: WebhookId) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!("DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2", tenant_id.as_str(), id.as_uuid())
        .execute(db)
        .await?;
    Ok(r.rows_affected() > 0)
}

/// An endpoint of the tenant, locked for a change of its secrets.
pub async fn lock_webhook(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    id: WebhookId,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"SELECT id AS "id: WebhookId", tenant_id AS "tenant_id: TenantId", url, events, description, key_id, secret_sealed,
                  previous_key_id, previous_secret_sealed, previous_until, created_at,
                  consecutive_failures, paused_until, secret_version
           FROM webhooks WHERE tenant_id = $1 AND id = $2 FOR UPDATE"#,
        tenant_id.as_str(),
        id.as_uuid()
    )
    .fetch_optional(db)
    .await
}

/// A new secret in force, sealed at generation `version`. The one before it, sealed anew
/// at the same generation (`previous_sealed`), keeps being signed with for `overlap_us`
/// microseconds by the database's clock (the one deliveries are scheduled by); with none,
/// it is dropped at once (a secret that leaked). A secret rotated out earlier, still in
/// its overlap, is dropped. Call with the row locked ([`lock_webhook`]).
#[expect(clippy::too_many_arguments, reason = "one statement's bind parameters, each named at the call")]
pub async fn rotate_secret(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    id: WebhookId,
    key_id: &str,
    secret_sealed: &[u8],
    previous_sealed: Option<&[u8]>,
    overlap_us: i64,
    version: i64,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"UPDATE webhooks
           SET previous_key_id = CASE WHEN $5::bytea IS NULL THEN NULL ELSE $3 END,
               previous_secret_sealed = $5,
               previous_until = CASE WHEN $5::bytea IS NULL THEN NULL ELSE now() + $6::bigint * interval '1 microsecond' END,
               key_id = $3, secret_sealed = $4, secret_version = $7
           WHERE tenant_id = $1 AND id = $2
           RETURNING id AS "id: WebhookId", tenant_id AS "tenant_id: TenantId", url, events, description, key_id, secret_sealed,
                     previous_key_id, previous_secret_sealed, previous_until, created_at,
                  consecutive_failures, paused_until, secret_version"#,
        tenant_id.as_str(),
        id.as_uuid(),
        key_id,
        secret_sealed,
        previous_sealed,
        overlap_us,
        version
    )
    .fetch_optional(db)
    .await
}

/// Writes one delivery of an event for every endpoint that asked for its kind: the tenant's
/// (`tenant_id: None`: every active tenant's). The event takes the next number of its stream under
/// a row lock held to the commit, so the events of one stream are numbered in commit order.
/// Nothing is written (and no lock taken) when no endpoint wants the event. Returns how many
/// deliveries were written.
pub async fn enqueue(
    db: &mut crate::store::Conn,
    tenant_id: Option<&TenantId>,
    kind: &str,
    stream: &str,
    event_id: Uuid,
    payload: &str,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!(
        r#"WITH hooks AS (
               SELECT w.id FROM webhooks w JOIN tenants t ON t.id = w.tenant_id
               WHERE ($1::text IS NULL OR w.tenant_id = $1) AND $2 = ANY (w.events) AND t.active
           ), numbered AS (
               INSERT INTO webhook_streams (stream, seq) SELECT $3, 1 WHERE EXISTS (SELECT 1 FROM hooks)
               ON CONFLICT (stream) DO UPDATE SET seq = webhook_streams.seq + 1
               RETURNING seq
           )
           INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, stream, seq, payload)
           SELECT hooks.id, $4, $2, $3, numbered.seq, $5 FROM hooks, numbered"#,
        tenant_id.map(TenantId::as_str),
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
    pub webhook_id: WebhookId,
    /// The endpoint's tenant (its secrets are sealed under the tenant's data key).
    pub tenant_id: TenantId,
    pub url: String,
    pub key_id: String,
    pub secret_sealed: Vec<u8>,
    pub previous_key_id: Option<String>,
    pub previous_secret_sealed: Option<Vec<u8>>,
    pub previous_until: Option<OffsetDateTime>,
    /// When it was claimed, by the database's clock (moved by the worker's skew).
    pub claimed_at: OffsetDateTime,
    /// The endpoint's failed attempts in a row, as claimed.
    pub consecutive_failures: i32,
    /// The generation its secrets are sealed at.
    pub secret_version: Option<i64>,
}

/// How many attempts may be out at once, across every instance: per endpoint and per
/// tenant (a claim counts the ones in flight). One tenant's slow or backlogged endpoints
/// hold at most a tenant's share of the workers' slots.
#[derive(Debug, Clone, Copy)]
pub struct Shares {
    pub per_endpoint: i64,
    pub per_tenant: i64,
}

/// Claims up to `limit` deliveries that are due, each the first pending one of its
/// endpoint's stream (a later event of a stream waits while an earlier one is retried), and
/// holds them for `lease_us` microseconds. Fair: no endpoint or tenant gets more than its
/// [`Shares`] of attempts in flight, and the claim takes round-robin, each tenant's first
/// (by its endpoints' first) before anyone's second, so one tenant's backlog does not
/// queue another's event behind it. A tenant switched off gets nothing (see
/// [`end_inactive`]). Claims of every instance take turns (a transaction-scoped advisory
/// lock), so each counts the attempts the others claimed before it and the shares hold
/// across instances. Time is the database's (every instance and the rows' own times agree on it), moved
/// forward by `skew_us` (tests move it; 0 otherwise). Rows another worker is claiming are
/// skipped (`FOR UPDATE SKIP LOCKED`); a claim whose worker died lapses.
pub async fn claim_due(
    pool: &crate::store::Db,
    skew_us: i64,
    lease_us: i64,
    limit: i64,
    shares: Shares,
) -> Result<Vec<Claimed>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock($1)", CLAIM_LOCK).execute(&mut *tx).await?;
    // FOR UPDATE cannot sit beside window functions: the fair order is chosen first
    // (`fair`), the rows are locked after (`due`), with their state checked again.
    let claimed = sqlx::query_as!(
        Claimed,
        r#"WITH t AS (SELECT now() + $1::bigint * interval '1 microsecond' AS now),
           busy AS (
               SELECT d.webhook_id, w.tenant_id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id, t
               WHERE d.status = 'pending' AND d.claimed_until > t.now
           ),
           hooks AS (
               SELECT w.id, w.tenant_id,
                      $4::bigint - (SELECT count(*) FROM busy b WHERE b.webhook_id = w.id) AS hook_room,
                      $5::bigint - (SELECT count(*) FROM busy b WHERE b.tenant_id = w.tenant_id) AS tenant_room
               FROM webhooks w JOIN tenants tn ON tn.id = w.tenant_id, t
               WHERE tn.active AND (w.paused_until IS NULL OR w.paused_until <= t.now)
           ),
           candidates AS (
               SELECT c.id, h.tenant_id, c.next_attempt_at, c.hook_rank, h.tenant_room
               FROM hooks h, t, LATERAL (
                   SELECT d.id, d.next_attempt_at, row_number() OVER (ORDER BY d.next_attempt_at, d.id) AS hook_rank
                   FROM webhook_deliveries d
                   WHERE d.webhook_id = h.id AND d.status = 'pending' AND d.next_attempt_at <= t.now
                     AND (d.claimed_until IS NULL OR d.claimed_until <= t.now)
                     AND NOT EXISTS (
                         SELECT 1 FROM webhook_deliveries e
                         WHERE e.webhook_id = d.webhook_id AND e.stream = d.stream AND e.seq < d.seq
                           AND e.status = 'pending')
                   ORDER BY d.next_attempt_at, d.id
                   LIMIT greatest(h.hook_room, 0)
               ) c
               WHERE h.hook_room > 0 AND h.tenant_room > 0
           ),
           fair AS (
               SELECT id, next_attempt_at, tenant_room,
                      row_number() OVER (PARTITION BY tenant_id ORDER BY hook_rank, next_attempt_at, id) AS tenant_rank
               FROM candidates
           ),
           due AS (
               SELECT d.id FROM webhook_deliveries d JOIN fair f ON f.id = d.id, t
               WHERE f.tenant_rank <= f.tenant_room AND d.status = 'pending'
                 AND (d.claimed_until IS NULL OR d.claimed_until <= t.now)
               ORDER BY f.tenant_rank, f.next_attempt_at, d.id
               LIMIT $3
               FOR UPDATE OF d SKIP LOCKED
           ), claimed AS (
               UPDATE webhook_deliveries d
               SET claimed_until = t.now + $2::bigint * interval '1 microsecond', attempts = d.attempts + 1
               FROM due, t WHERE d.id = due.id
               RETURNING d.id, d.event_id, d.payload, d.attempts, d.created_at, d.webhook_id, t.now
           )
           SELECT c.id AS "id!", c.event_id AS "event_id!", c.payload AS "payload!", c.attempts AS "attempts!",
                  c.created_at AS "created_at!", c.webhook_id AS "webhook_id!: WebhookId",
                  w.tenant_id AS "tenant_id: TenantId", w.url, w.key_id, w.secret_sealed,
                  w.previous_key_id, w.previous_secret_sealed, w.previous_until, c.now AS "claimed_at!",
                  w.consecutive_failures, w.secret_version
           FROM claimed c JOIN webhooks w ON w.id = c.webhook_id
           ORDER BY c.id"#,
        skew_us,
        lease_us,
        limit,
        shares.per_endpoint,
        shares.per_tenant
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(claimed)
}

/// The advisory lock the claims of every instance take turns on.
const CLAIM_LOCK: i64 = 0x6d63_7063_7768_6b01; // "mcpcwhk" + 1

/// Deliveries of a tenant that was switched off end as `failed` (`tenant_inactive`), so that
/// nothing of it goes out, now or when it is switched on again. Rows in flight or locked by a
/// claim are left to their attempt. Returns how many ended.
pub async fn end_inactive(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!(
        r#"UPDATE webhook_deliveries d
           SET status = 'failed', last_error = 'tenant_inactive', finished_at = now(), claimed_until = NULL
           WHERE d.id IN (
               SELECT p.id FROM webhook_deliveries p
               JOIN webhooks w ON w.id = p.webhook_id JOIN tenants tn ON tn.id = w.tenant_id
               WHERE p.status = 'pending' AND NOT tn.active
                 AND (p.claimed_until IS NULL OR p.claimed_until <= now())
               FOR UPDATE OF p SKIP LOCKED)"#
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Each tenant keeps at most `cap` pending deliveries: the oldest beyond it end as `failed`
/// (`backlog_dropped`); rows in flight or locked by a claim are left to their attempt.
/// Returns how many ended, by tenant.
pub async fn drop_beyond_cap(db: impl PgExecutor<'_>, cap: i64) -> Result<Vec<(TenantId, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"WITH ranked AS (
               SELECT d.id, w.tenant_id, row_number() OVER (PARTITION BY w.tenant_id ORDER BY d.id DESC) AS n
               FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
               WHERE d.status = 'pending'
           ), over_cap AS (
               SELECT d.id, r.tenant_id FROM webhook_deliveries d JOIN ranked r ON r.id = d.id
               WHERE r.n > $1 AND d.status = 'pending' AND (d.claimed_until IS NULL OR d.claimed_until <= now())
               FOR UPDATE OF d SKIP LOCKED
           ), dropped AS (
               UPDATE webhook_deliveries d
               SET status = 'failed', last_error = 'backlog_dropped', finished_at = now(), claimed_until = NULL
               FROM over_cap o WHERE d.id = o.id
               RETURNING o.tenant_id
           )
           SELECT tenant_id AS "tenant_id!: TenantId", count(*) AS "n!" FROM dropped GROUP BY tenant_id ORDER BY tenant_id"#,
        cap
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.tenant_id, r.n)).collect())
}

/// Deliveries waiting (`pending`) and the age of the oldest, in seconds, by the database's
/// clock moved by `skew_us`.
pub async fn backlog(db: impl PgExecutor<'_>, skew_us: i64) -> Result<(i64, f64), sqlx::Error> {
    let r = sqlx::query!(
        r#"SELECT count(*) AS "n!",
                  coalesce(extract(epoch FROM now() + $1::bigint * interval '1 microsecond' - min(created_at)), 0)::float8 AS "age!"
           FROM webhook_deliveries WHERE status = 'pending'"#,
        skew_us
    )
    .fetch_one(db)
    .await?;
    Ok((r.n, r.age.max(0.0)))
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

/// After an attempt to an endpoint: a success ends its failures; a failure sets them to
/// `failures` at least (the count as claimed, plus one: attempts claimed together and
/// failing together count once) and rests the endpoint until `pause_until` at least.
pub async fn record_endpoint(
    db: impl PgExecutor<'_>,
    id: WebhookId,
    failed: Option<(i32, OffsetDateTime)>,
) -> Result<(), sqlx::Error> {
    let (failures, pause_until) = failed.unzip();
    sqlx::query!(
        r#"UPDATE webhooks
           SET consecutive_failures = CASE WHEN $2::int IS NULL THEN 0 ELSE greatest(consecutive_failures, $2::int) END,
               paused_until = CASE WHEN $3::timestamptz IS NULL THEN NULL
                                   ELSE greatest(coalesce(paused_until, $3::timestamptz), $3::timestamptz) END
           WHERE id = $1"#,
        id.as_uuid(),
        failures,
        pause_until
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The later pending events of a delivery's stream wait at least until its next attempt
/// (so a claim does not look at them before then).
pub async fn hold_stream_until(db: impl PgExecutor<'_>, id: i64, until: OffsetDateTime) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"UPDATE webhook_deliveries l SET next_attempt_at = $2
           FROM webhook_deliveries h
           WHERE h.id = $1 AND l.webhook_id = h.webhook_id AND l.stream = h.stream AND l.seq > h.seq
             AND l.status = 'pending' AND l.next_attempt_at < $2"#,
        id,
        until
    )
    .execute(db)
    .await?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct DeliveryRow {
    /// The delivery's number (newest first; `before` pages on it).
    pub id: i64,
    /// The event's id: the `webhook-id` header and the payload's `id`.
    pub event_id: Uuid,
    pub event_type: String,
    /// `pending` (waiting or being retried), `delivered`, or `failed` (retried for 24 h).
    pub status: String,
    pub attempts: i32,
    pub created_at: OffsetDateTime,
    /// When the next attempt is due (pending deliveries).
    pub next_attempt_at: Option<OffsetDateTime>,
    pub last_attempt_at: Option<OffsetDateTime>,
    /// The receiver's status code at the last attempt, if it answered.
    pub last_status: Option<i32>,
    /// Why the last attempt did not count: `status` (not 2xx), `timeout`, `connect` (the
    /// address refused the connection), `request`, `address_refused` (the URL's name did
    /// not resolve, or resolved to no address that may be reached: one code, so that a
    /// tenant cannot learn which internal names exist), `secret_unreadable` (this instance
    /// lacks the vault key of the secret); on a delivery that ended without being
    /// delivered, `backlog_dropped` (the tenant had more pending deliveries than
    /// `webhooks.max_pending_per_tenant`, and this was among the oldest) or
    /// `tenant_inactive` (the tenant was switched off).
    pub last_error: Option<String>,
    /// At most 1 KB of the receiver's last answer.
    pub last_response: Option<String>,
    pub finished_at: Option<OffsetDateTime>,
}

/// An endpoint's deliveries, newest first, before the delivery `before` where given.
pub async fn list_deliveries(
    db: impl PgExecutor<'_>,
    webhook_id: WebhookId,
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
        webhook_id.as_uuid(),
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

/// Key rotation: endpoints with a secret sealed under another key than their tenant's
/// active data key, or before seal generations, locked (waiting for a rotation of their
/// secret in flight: there are few, and none is skipped).
pub async fn lock_secrets_not_under_active_key(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"SELECT id AS "id: WebhookId", tenant_id AS "tenant_id: TenantId", url, events, description, key_id, secret_sealed,
                  previous_key_id, previous_secret_sealed, previous_until, created_at,
                  consecutive_failures, paused_until, secret_version
           FROM webhooks
          WHERE NOT mcpc_tenant_ended(tenant_id)
            AND (key_id IS DISTINCT FROM mcpc_active_key_id(tenant_id)
                 OR (previous_key_id IS NOT NULL AND previous_key_id IS DISTINCT FROM mcpc_active_key_id(tenant_id))
                 OR secret_version IS NULL)
          ORDER BY id LIMIT $1 FOR UPDATE"#,
        limit
    )
    .fetch_all(db)
    .await
}

/// The database's time (the one deliveries and secret overlaps are kept by).
pub async fn database_now(db: impl PgExecutor<'_>) -> Result<OffsetDateTime, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT now() AS "now!""#).fetch_one(db).await
}

/// Key rotation: endpoints with a secret still sealed under another key than their
/// tenant's active data key.
pub async fn count_secrets_not_under_active_key(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM webhooks
            WHERE NOT mcpc_tenant_ended(tenant_id)
              AND (key_id IS DISTINCT FROM mcpc_active_key_id(tenant_id)
                   OR (previous_key_id IS NOT NULL AND previous_key_id IS DISTINCT FROM mcpc_active_key_id(tenant_id))
                   OR secret_version IS NULL)"#
    )
    .fetch_one(db)
    .await
}

/// Stores re-sealed secrets, sealed at generation `version`; `previous_secret_sealed: None`
/// drops the previous secret (one whose overlap is over is not re-sealed).
pub async fn store_resealed_secrets(
    db: impl PgExecutor<'_>,
    id: WebhookId,
    key_id: &str,
    secret_sealed: &[u8],
    previous_secret_sealed: Option<&[u8]>,
    version: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"UPDATE webhooks SET key_id = $2, secret_sealed = $3,
               previous_key_id = CASE WHEN $4::bytea IS NULL THEN NULL ELSE $2 END,
               previous_secret_sealed = $4,
               previous_until = CASE WHEN $4::bytea IS NULL THEN NULL ELSE previous_until END,
               secret_version = $5
           WHERE id = $1"#,
        id.as_uuid(),
        key_id,
        secret_sealed,
        previous_secret_sealed,
        version
    )
    .execute(db)
    .await?;
    Ok(())
}

/// One webhook endpoint as an operator lists it (`mcp-connect webhooks list`): the URL's
/// host only (a path may hold the receiver's own secret), and its backlog.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OperatorWebhookRow {
    pub id: WebhookId,
    pub tenant_id: TenantId,
    pub url: String,
    pub events: Vec<String>,
    pub consecutive_failures: i32,
    pub paused_until: Option<OffsetDateTime>,
    pub pending: i64,
    pub oldest_pending: Option<OffsetDateTime>,
}

/// Every tenant's endpoints (or one tenant's), with their pending deliveries.
pub async fn list_for_operator(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&TenantId>,
) -> Result<Vec<OperatorWebhookRow>, sqlx::Error> {
    sqlx::query_as::<_, OperatorWebhookRow>(
        "SELECT w.id, w.tenant_id, w.url, w.events, w.consecutive_failures, w.paused_until,
                count(d.id) AS pending, min(d.created_at) AS oldest_pending
         FROM webhooks w LEFT JOIN webhook_deliveries d ON d.webhook_id = w.id AND d.status = 'pending'
         WHERE ($1::text IS NULL OR w.tenant_id = $1)
         GROUP BY w.id ORDER BY w.tenant_id, w.created_at",
    )
    .bind(tenant_id)
    .fetch_all(db)
    .await
}
