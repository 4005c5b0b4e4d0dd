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

    /// An event about a connection: its tenant, subject, provider and id.
    pub fn for_connection(kind: &'static str, row: &super::connections::ConnectionRow) -> Self {
        Self {
            tenant_id: Some(row.tenant_id.clone()),
            subject: Some(row.subject.clone()),
            provider: Some(row.provider.clone()),
            connection_id: Some(row.id),
            ..Self::new(kind)
        }
    }

    /// An event about an elicitation: its tenant, subject, provider and id.
    pub fn for_elicitation(kind: &'static str, e: &super::elicitations::ElicitationRow) -> Self {
        Self {
            tenant_id: Some(e.tenant_id.clone()),
            subject: Some(e.subject.clone()),
            provider: Some(e.provider.clone()),
            elicitation_id: Some(e.id),
            ..Self::new(kind)
        }
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

/// Writes a batch in one statement (the batched hand-out events); `at` is when each event
/// happened, not when the batch was written. The statement is a binary `COPY`: in the
/// benchmark 2,000 events took 19-22 ms instead of 35-45 ms with `INSERT … SELECT FROM
/// UNNEST(…)`, and the hand-out events are the largest database cost of a cached lookup.
pub async fn insert_events(
    pool: &sqlx::PgPool,
    events: &[(time::OffsetDateTime, AuditEvent)],
) -> Result<(), sqlx::Error> {
    insert_events_paced(pool, events, || std::future::ready(())).await
}

/// Rows per `CopyData` message of [`insert_events_paced`]: about 1 ms of the backend's work.
pub const COPY_CHUNK: usize = 64;

/// [`insert_events`], sending the rows [`COPY_CHUNK`] at a time and awaiting `pause` between
/// them, so that the backend runs in short stretches and gives its CPU back in between.
/// On two cores a request thread queued behind a backend waits as long as that stretch
/// (`perf sched` in the benchmark's half-rate phase).
///
/// The `WHERE` clause (PostgreSQL 12 and later) is always true. Being volatile, it makes
/// PostgreSQL insert each row as it arrives; without one, `COPY` collects 1,000 rows and
/// inserts them at once (3-23 ms at a stretch, however the data is split). It costs no
/// more in all: 2,000 CSV rows through psql took 22-29 ms with and without it, and the
/// bench's binary batch of 2,000 takes 17-19 ms with it.
pub async fn insert_events_paced<P, F>(
    pool: &sqlx::PgPool,
    events: &[(time::OffsetDateTime, AuditEvent)],
    mut pause: P,
) -> Result<(), sqlx::Error>
where
    P: FnMut() -> F,
    F: std::future::Future<Output = ()>,
{
    let (data, ends) = copy_rows(events)?;
    let mut conn = pool.acquire().await?;
    let mut copy = conn
        .copy_in_raw(
            "COPY audit_events (at, tenant_id, subject, provider, kind, elicitation_id, connection_id, api_key_id, detail)
             FROM STDIN (FORMAT binary) WHERE random() >= 0",
        )
        .await?;
    let mut start = 0;
    for (i, end) in ends.into_iter().enumerate() {
        if i > 0 {
            pause().await;
        }
        copy.send(&data[start..end]).await?;
        start = end;
    }
    copy.finish().await?;
    Ok(())
}

/// The rows in PostgreSQL's binary `COPY` format: a header, per row the field count and each
/// field as its length and its bytes (-1 for NULL), a trailer. Each value's bytes are
/// sqlx's own encoding of it for a bound parameter, which is what that format carries.
/// Also the offsets where each chunk of [`COPY_CHUNK`] rows ends (the last one at the end of
/// the trailer); the format may be split anywhere, so each chunk can be its own message.
fn copy_rows(events: &[(time::OffsetDateTime, AuditEvent)]) -> Result<(Vec<u8>, Vec<usize>), sqlx::Error> {
    const FIELDS: i16 = 9;
    let mut out = Vec::with_capacity(19 + events.len() * 192);
    let mut ends = Vec::with_capacity(events.len() / COPY_CHUNK + 1);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&0i32.to_be_bytes()); // flags: no OIDs
    out.extend_from_slice(&0i32.to_be_bytes()); // no header extension
    let mut value = sqlx::postgres::PgArgumentBuffer::default();
    for (i, (at, e)) in events.iter().enumerate() {
        if i > 0 && i % COPY_CHUNK == 0 {
            ends.push(out.len());
        }
        out.extend_from_slice(&FIELDS.to_be_bytes());
        copy_field(&mut out, &mut value, at)?;
        copy_field(&mut out, &mut value, &e.tenant_id)?;
        copy_field(&mut out, &mut value, &e.subject)?;
        copy_field(&mut out, &mut value, &e.provider)?;
        copy_field(&mut out, &mut value, &e.kind)?;
        copy_field(&mut out, &mut value, &e.elicitation_id)?;
        copy_field(&mut out, &mut value, &e.connection_id)?;
        copy_field(&mut out, &mut value, &e.api_key_id)?;
        copy_field(&mut out, &mut value, &e.detail)?;
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    ends.push(out.len());
    Ok((out, ends))
}

fn copy_field<'q, T: sqlx::Encode<'q, sqlx::Postgres>>(
    out: &mut Vec<u8>,
    value: &mut sqlx::postgres::PgArgumentBuffer,
    v: &T,
) -> Result<(), sqlx::Error> {
    value.clear();
    if let sqlx::encode::IsNull::Yes = v.encode_by_ref(value).map_err(sqlx::Error::Encode)? {
        out.extend_from_slice(&(-1i32).to_be_bytes());
        return Ok(());
    }
    let len = i32::try_from(value.len()).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value);
    Ok(())
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
