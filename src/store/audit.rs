//! `audit_events`: who did what to which grant. Details hold ids and reason codes only.

use crate::domain::{ApiKeyId, AuditKind, ConnectionId, ElicitationId, ProviderId, Subject, TenantId};
use sqlx::PgExecutor;
use uuid::Uuid;

/// One audit event. Build with `AuditEvent::new(kind)` and the setters you need.
#[derive(Debug, Clone)]
pub struct AuditEvent {
    pub kind: AuditKind,
    pub tenant_id: Option<TenantId>,
    pub subject: Option<Subject>,
    /// The issuer of the IdP whose `sub` `subject` is (the person is the pair).
    pub issuer: Option<String>,
    pub provider: Option<ProviderId>,
    pub elicitation_id: Option<ElicitationId>,
    pub connection_id: Option<ConnectionId>,
    pub api_key_id: Option<ApiKeyId>,
    pub detail: serde_json::Value,
}

impl AuditEvent {
    pub fn new(kind: AuditKind) -> Self {
        Self {
            kind,
            tenant_id: None,
            subject: None,
            issuer: None,
            provider: None,
            elicitation_id: None,
            connection_id: None,
            api_key_id: None,
            detail: serde_json::json!({}),
        }
    }

    /// An event about a connection: its tenant, subject, provider and id.
    pub fn for_connection(kind: AuditKind, row: &super::connections::ConnectionRow) -> Self {
        Self {
            tenant_id: Some(row.tenant_id.clone()),
            subject: Some(row.subject.clone()),
            issuer: row.issuer.clone(),
            provider: Some(row.provider.clone()),
            connection_id: Some(row.id),
            ..Self::new(kind)
        }
    }

    /// An event about an elicitation: its tenant, subject, provider and id.
    pub fn for_elicitation(kind: AuditKind, e: &super::elicitations::ElicitationRow) -> Self {
        Self {
            tenant_id: Some(e.tenant_id.clone()),
            subject: Some(e.subject.clone()),
            issuer: e.issuer.clone(),
            provider: Some(e.provider.clone()),
            elicitation_id: Some(e.id),
            ..Self::new(kind)
        }
    }
}

/// Writes an event. One that names no issuer but a link or a connection gets theirs (an
/// event about a subject always names one of them, and they hold the subject's issuer).
pub async fn insert_event(db: impl PgExecutor<'_>, e: &AuditEvent) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"INSERT INTO audit_events
               (tenant_id, subject, provider, kind, elicitation_id, connection_id, api_key_id, detail, issuer)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                   COALESCE($9, (SELECT issuer FROM elicitations WHERE id = $5),
                            (SELECT issuer FROM connections WHERE id = $6)))"#,
        e.tenant_id.as_ref().map(TenantId::as_str),
        e.subject.as_ref().map(Subject::as_str),
        e.provider.as_ref().map(ProviderId::as_str),
        e.kind as AuditKind,
        e.elicitation_id.map(|id| id.as_uuid()),
        e.connection_id.map(|id| id.as_uuid()),
        e.api_key_id.as_ref().map(ApiKeyId::as_str),
        e.detail,
        e.issuer
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Token hand-outs of one instance, connection and API key within one minute: the row the
/// hand-out audit (`store::handouts`) writes once that minute has closed. The tenant,
/// subject, provider and issuer are the connection's: from the lookup cache's entry the
/// row holds, else from its row when written (connections are never deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoutRow {
    /// The minute (UTC, seconds and below zero).
    pub minute: time::OffsetDateTime,
    pub connection_id: Uuid,
    pub api_key_id: ApiKeyId,
    /// `None`: token hand-outs (`token_handed_out`); else calls through the proxy of this
    /// class (`proxied_calls`).
    pub proxied: Option<crate::domain::ProxiedCall>,
    pub count: i32,
    pub first_at: time::OffsetDateTime,
    pub last_at: time::OffsetDateTime,
    /// The connection as the lookup cache held it for every use the row counts: it names
    /// who held the connection then (a re-connect through another IdP keeps the id but
    /// changes the issuer). `None`: named from the connection's row when written.
    pub holder: Option<crate::store::connections::packed::PackedConnection>,
}

/// The kind of the hand-out rows.
pub const HANDED_OUT: AuditKind = AuditKind::TokenHandedOut;
/// The kind of the proxied-call rows.
pub const PROXIED: AuditKind = AuditKind::ProxiedCalls;

/// Rows per statement of [`insert_handouts_paced`]: about 1-2 ms of the backend's work.
pub const CHUNK: usize = 64;

/// Writes hand-out rows of `instance` in one transaction (one WAL flush), [`CHUNK`] rows
/// per statement, awaiting `pause` between statements. A backend inserting thousands of
/// rows in one statement holds a core for 50-100 ms; on two cores a request thread queued
/// behind it waits that long (the benchmark's half-rate p99 went to 113 ms when a minute's
/// rows went out 2,000 at a time). In short stretches it gives the core back in between.
///
/// Written once: `batch` names these rows (the writer keeps it across its retries) and is
/// recorded in the same transaction; a batch already recorded (its commit went through
/// but the reply was lost) writes nothing and is `Ok`. A unique index over each row's key
/// did this before, at a quarter of a row's cost (migration 20261218000001).
pub async fn insert_handouts_paced<P, F>(
    pool: &crate::store::Db,
    instance: &str,
    batch: Uuid,
    rows: &[HandoutRow],
    mut pause: P,
) -> Result<(), sqlx::Error>
where
    P: FnMut() -> F,
    F: std::future::Future<Output = ()>,
{
    let mut tx = pool.begin().await?;
    let first = sqlx::query!("INSERT INTO audit_handout_batches (id) VALUES ($1) ON CONFLICT DO NOTHING", batch)
        .execute(&mut *tx)
        .await?;
    if first.rows_affected() == 0 {
        // Written before: rolled back as it is dropped, having written nothing.
        return Ok(());
    }
    for (i, chunk) in rows.chunks(CHUNK).enumerate() {
        if i > 0 {
            pause().await;
        }
        insert_handouts(&mut *tx, instance, batch, chunk).await?;
    }
    tx.commit().await
}

/// Clean-up: the batch ids recorded before `cutoff` (a retry comes within seconds).
pub async fn delete_handout_batches_before(
    db: impl PgExecutor<'_>,
    cutoff: time::OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!("DELETE FROM audit_handout_batches WHERE written_at < $1", cutoff).execute(db).await?;
    Ok(r.rows_affected())
}

/// Writes hand-out (and proxied-call) rows of `instance` in one statement, as rows of
/// `batch`. Only [`insert_handouts_paced`] makes them written once.
pub async fn insert_handouts(
    db: impl PgExecutor<'_>,
    instance: &str,
    batch: Uuid,
    rows: &[HandoutRow],
) -> Result<(), sqlx::Error> {
    let mut cols: (Vec<_>, Vec<_>, Vec<_>, Vec<_>, Vec<_>, Vec<_>) = Default::default();
    let mut class: (Vec<Option<&str>>, Vec<Option<&str>>) = Default::default();
    // Tenant, subject, provider and issuer of the rows that name their holder.
    let mut held: [Vec<Option<&str>>; 4] = Default::default();
    for r in rows {
        // Only the row's own connection's entry names it.
        let holder = r.holder.as_ref().filter(|h| h.id().as_uuid() == r.connection_id).and_then(|h| h.holder());
        held[0].push(holder.map(|h| h.0));
        held[1].push(holder.map(|h| h.1));
        held[2].push(holder.map(|h| h.2));
        held[3].push(holder.map(|h| h.3));
        cols.0.push(r.minute);
        cols.1.push(r.connection_id);
        cols.2.push(r.api_key_id.to_string());
        cols.3.push(r.count);
        cols.4.push(r.first_at);
        cols.5.push(r.last_at);
        class.0.push(r.proxied.map(|c| c.method.as_str()));
        class.1.push(r.proxied.map(|c| c.status.as_str()));
    }
    sqlx::query!(
        r#"INSERT INTO audit_events
               (at, tenant_id, subject, issuer, provider, kind, connection_id, api_key_id, instance, count, first_at,
                last_at, detail, batch)
           SELECT u.at, COALESCE(u.tenant, c.tenant_id), COALESCE(u.subject, c.subject),
                  COALESCE(u.issuer, c.issuer), COALESCE(u.provider, c.provider),
                  CASE WHEN u.method IS NULL THEN $1 ELSE $2 END,
                  u.id, u.key, $3, u.n, u.first_at, u.last_at,
                  CASE WHEN u.method IS NULL THEN '{}'::jsonb
                       ELSE jsonb_build_object('method', u.method, 'status', u.status) END, $12
           FROM unnest($4::timestamptz[], $5::uuid[], $6::text[], $7::int[], $8::timestamptz[], $9::timestamptz[],
                       $10::text[], $11::text[], $13::text[], $14::text[], $15::text[], $16::text[])
                AS u(at, id, key, n, first_at, last_at, method, status, tenant, subject, provider, issuer)
           -- Only rows that name no holder read the connection's row (at a million
           -- connections a random heap page each: about half a row's cost). OFFSET 0 keeps
           -- the subquery apart, so that its filter on `u` skips the read.
           LEFT JOIN LATERAL (SELECT c.tenant_id, c.subject, c.issuer, c.provider FROM connections c
                              WHERE u.tenant IS NULL AND c.id = u.id OFFSET 0) c ON true"#,
        HANDED_OUT as AuditKind,
        PROXIED as AuditKind,
        instance,
        &cols.0,
        &cols.1,
        &cols.2,
        &cols.3,
        &cols.4,
        &cols.5,
        &class.0 as &[Option<&str>],
        &class.1 as &[Option<&str>],
        batch,
        &held[0] as &[Option<&str>],
        &held[1] as &[Option<&str>],
        &held[2] as &[Option<&str>],
        &held[3] as &[Option<&str>],
    )
    .execute(db)
    .await?;
    Ok(())
}

/// An event as the trail holds it. Its ids stay text: the trail outlives the rules of the
/// release that wrote a row, and one row that no longer parses must not hide the others.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub recorded: i64,
    /// `None`: an event of no tenant (`login_failed`).
    pub tenant_id: Option<String>,
    pub at: time::OffsetDateTime,
    pub subject: Option<String>,
    /// The issuer of the IdP whose `sub` `subject` is.
    pub issuer: Option<String>,
    pub provider: Option<String>,
    pub kind: String,
    pub elicitation_id: Option<Uuid>,
    pub connection_id: Option<Uuid>,
    pub api_key_id: Option<String>,
    /// Where `api_key_id` is a workload's caller id: its issuer, key source and subject
    /// (`workload_callers`), as JSON.
    pub workload: Option<serde_json::Value>,
    /// What else the event carries (a reason, the actor); never a token, code or secret.
    pub detail: serde_json::Value,
    /// Events this row stands for: the hand-outs of its minute, 1 for every other kind.
    pub count: i32,
    pub first_at: Option<time::OffsetDateTime>,
    pub last_at: Option<time::OffsetDateTime>,
    pub instance: Option<String>,
}

impl AuditRow {
    pub fn cursor(&self) -> Cursor {
        Cursor { recorded: self.recorded, id: self.id }
    }
}

/// A place in the trail's order: the writing transaction's id, then the row's id. A row that
/// commits later than another has a greater transaction id than every row already
/// listable when the other committed (see [`list_events`]), so paging by this key skips
/// nothing, whichever way it goes. Shown as `<recorded>-<id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    recorded: i64,
    id: i64,
}

impl Cursor {
    /// Before every row: where a reader that follows the trail from its start begins.
    pub const START: Cursor = Cursor { recorded: 0, id: 0 };

    pub fn parse(s: &str) -> Option<Cursor> {
        let (r, i) = s.split_once('-')?;
        let digits = |v: &str| !v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit());
        if !digits(r) || !digits(i) {
            return None;
        }
        Some(Cursor { recorded: r.parse().ok()?, id: i.parse().ok()? })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.recorded, self.id)
    }
}

/// Which way a page goes from its cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// Newest first, from the newest or from before a cursor.
    Before(Option<Cursor>),
    /// Oldest first, after a cursor: how a reader follows the trail.
    After(Cursor),
}

/// Filters for reading the trail.
#[derive(Debug)]
pub struct AuditFilter<'a> {
    pub subject: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub since: Option<time::OffsetDateTime>,
    pub until: Option<time::OffsetDateTime>,
    pub page: Page,
    pub limit: i64,
}

/// A page of the trail. Only rows whose transaction is older than every transaction still
/// running anywhere in the cluster (`pg_snapshot_xmin`) are listed: a row of a transaction
/// that is still open, or of one that began after it, shows once they have all ended,
/// which is usually milliseconds. Any row that commits later gets a place after every row
/// listed now, so a reader following with `after` sees each row once, and `before` pages
/// never lose one to a late commit. sqlx has no `xid8` type: it travels as text.
///
/// So that a reader sees what was committed before it asked (an operator's revoke, then
/// the trail), the listing first waits until every transaction begun before the request
/// has ended, for at most [`SETTLE`]; past that it answers with what is listable.
pub async fn list_events(
    db: &crate::store::Db,
    tenant_id: &TenantId,
    f: &AuditFilter<'_>,
) -> Result<Vec<AuditRow>, sqlx::Error> {
    list(db, Whose::Tenant(tenant_id), f).await
}

/// Whose events an operator reads ([`list_operator_events`]).
#[derive(Debug, Clone, Copy)]
pub enum Whose<'a> {
    /// One tenant's.
    Tenant(&'a TenantId),
    /// Every tenant's and those of no tenant.
    Everyone,
    /// Only those of no tenant (`login_failed`).
    NoTenant,
}

/// The trail across tenants, for operators (`mcp-connect audit list`): the same rules as
/// [`list_events`], and the events of no tenant, which no tenant's admin API shows.
pub async fn list_operator_events(
    db: &crate::store::Db,
    whose: Whose<'_>,
    f: &AuditFilter<'_>,
) -> Result<Vec<AuditRow>, sqlx::Error> {
    list(db, whose, f).await
}

async fn list(db: &crate::store::Db, whose: Whose<'_>, f: &AuditFilter<'_>) -> Result<Vec<AuditRow>, sqlx::Error> {
    settle(db).await?;
    // One statement text per scope and order (a `CASE` in `ORDER BY`, or an `OR` on the
    // tenant, would defeat the index).
    macro_rules! select {
        ($tenant:literal) => {
            concat!(
                "SELECT id, recorded::text::bigint AS recorded, tenant_id, at, subject, issuer, provider, kind,
                    elicitation_id, connection_id, api_key_id, detail, count, first_at, last_at, instance,
                    (SELECT jsonb_build_object('issuer', w.issuer, 'key_source', w.key_source, 'subject', w.subject)
                     FROM workload_callers w WHERE w.id = api_key_id) AS workload
             FROM audit_events
             WHERE ",
                $tenant,
                "
               AND recorded < pg_snapshot_xmin(pg_current_snapshot())
               AND ($2::text IS NULL OR subject = $2)
               AND ($3::text IS NULL OR provider = $3)
               AND ($4::text IS NULL OR kind = $4)
               AND ($5::timestamptz IS NULL OR at >= $5)
               AND ($6::timestamptz IS NULL OR at < $6)"
            )
        };
    }
    macro_rules! ordered {
        ($tenant:literal) => {
            (
                concat!(
                    select!($tenant),
                    " AND ($7::text IS NULL OR (recorded, id) < ($7::xid8, $8::bigint))
                                 ORDER BY recorded DESC, id DESC LIMIT $9"
                ),
                concat!(
                    select!($tenant),
                    " AND ($7::text IS NULL OR (recorded, id) > ($7::xid8, $8::bigint))
                                 ORDER BY recorded, id LIMIT $9"
                ),
            )
        };
    }
    let (tenant, (before, after)) = match whose {
        Whose::Tenant(t) => (Some(t.as_str()), ordered!("tenant_id = $1")),
        Whose::Everyone => (None, ordered!("$1::text IS NULL")),
        Whose::NoTenant => (None, ordered!("tenant_id IS NULL AND $1::text IS NULL")),
    };
    let (sql, cursor) = match f.page {
        Page::Before(c) => (before, c),
        Page::After(c) => (after, Some(c)),
    };
    sqlx::query_as::<_, AuditRow>(sql)
        .bind(tenant)
        .bind(f.subject)
        .bind(f.provider)
        .bind(f.kind)
        .bind(f.since)
        .bind(f.until)
        .bind(cursor.map(|c| c.recorded.to_string()))
        .bind(cursor.map(|c| c.id))
        .bind(f.limit)
        .fetch_all(db)
        .await
}

/// The longest [`list_events`] waits for older transactions to end.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits until no transaction that began before this call is still running (10 ms polls,
/// a pooled connection per poll: none is held while waiting).
async fn settle(db: &crate::store::Db) -> Result<(), sqlx::Error> {
    let deadline = std::time::Instant::now() + SETTLE;
    let next: String = sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetch_one(db).await?;
    loop {
        let settled: bool = sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::xid8")
            .bind(&next)
            .fetch_one(db)
            .await?;
        if settled || std::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Makes the audit partitions of this month and the next two (UTC), those missing; returns
/// how many it made. Every instance's clean-up runs it. A lock not had within 5 s fails
/// it, to be retried next time (`audit_partition_ensure`).
pub async fn ensure_partitions(db: &crate::store::Db, now: time::OffsetDateTime) -> Result<u64, sqlx::Error> {
    let made: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) FILTER (WHERE audit_partition_ensure($1::timestamptz + make_interval(months => n))) AS "made!"
           FROM generate_series(0, 2) AS n"#,
        now
    )
    .fetch_one(db)
    .await?;
    Ok(made as u64)
}

/// Retention: drops the partitions of months that ended at or before `cutoff` and deletes
/// the default partition's rows before it; returns the partitions dropped. A drop briefly
/// locks the whole table; a lock not had within 5 s fails it, to be retried by the next
/// clean-up (`audit_partitions_drop_before`).
pub async fn drop_partitions_before(db: &crate::store::Db, cutoff: time::OffsetDateTime) -> Result<u64, sqlx::Error> {
    let dropped: Option<i32> =
        sqlx::query_scalar!("SELECT audit_partitions_drop_before($1)", cutoff).fetch_one(db).await?;
    Ok(dropped.unwrap_or(0) as u64)
}
