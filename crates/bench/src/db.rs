//! The bench database: created fresh on the local server (`mcpc_bench_<random>`), migrated
//! with the service's own migrations, seeded with sealed connections, dropped at the end.

use anyhow::Context;
use mcp_connect::config::TenantConfig;
use mcp_connect::domain::{ConnectionId, ProviderId, Subject, TenantId};
use mcp_connect::store::{self, PgPool};
use mcp_connect::vault::{Field, RowBinding, SealKey};
use secrecy::SecretString;
use sqlx::Connection;
use std::time::{Duration, Instant};
use time::OffsetDateTime;

pub const TENANT: &str = "bench";

pub struct BenchDb {
    server_url: String,
    pub name: String,
    pub url: String,
}

fn with_database(url: &str, db: &str) -> anyhow::Result<String> {
    let mut u = url::Url::parse(url).context("DATABASE_URL is not a URL")?;
    u.set_path(&format!("/{db}"));
    Ok(u.to_string())
}

impl BenchDb {
    pub async fn create(server_url: &str) -> anyhow::Result<Self> {
        let name = format!("mcpc_bench_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(server_url)
            .await
            .with_context(|| "cannot connect to PostgreSQL (is it running? bench/run.sh starts it)")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await?;
        conn.close().await?;
        Ok(Self { server_url: server_url.to_owned(), url: with_database(server_url, &name)?, name })
    }

    /// Drops the database, ending whatever is still connected to it.
    pub async fn drop_database(&self) -> anyhow::Result<()> {
        let mut conn = sqlx::PgConnection::connect(&self.server_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        Ok(())
    }
}

pub fn provider_names(n: usize) -> Vec<String> {
    (1..=n).map(crate::load::KeySpace::provider).collect()
}

/// Migrates and mirrors the bench tenant, as `mcp-connect serve` does at start-up.
/// `issuer`: the bench IdP's, the default.
pub async fn prepare(pool: &PgPool, providers: &[String], issuer: &str) -> anyhow::Result<()> {
    store::migrate(pool).await?;
    let tenant = TenantConfig {
        idp: None,
        hand_out: None,
        workload_issuers: None,
        id: TenantId::parse(TENANT)?,
        display_name: "Bench".to_owned(),
        providers: providers.iter().map(|p| ProviderId::parse(p)).collect::<Result<_, _>>()?,
        subject_token: Default::default(),
    };
    mcp_connect::startup::sync_tenants(&mcp_connect::store::Db::direct(pool.clone()), &[tenant], issuer).await?;
    Ok(())
}

/// The bench tenant's data key, as the service makes it (wrapped by the keyring, the local
/// key store), with data keys turned on: the rows are sealed as this release seals them.
pub async fn tenant_data_key(pool: &PgPool, keyring: mcp_connect::vault::Keyring) -> anyhow::Result<SealKey> {
    let db = mcp_connect::store::Db::direct(pool.clone());
    let clock = std::sync::Arc::new(mcp_connect::domain::SystemClock);
    let keys = mcp_connect::keys::Keys::local(db, keyring, clock, mcp_connect::keys::CacheBound::default());
    keys.switch_on().await?;
    let tenant = TenantId::parse(TENANT)?;
    Ok(keys.sealing(mcp_connect::keys::Scope::Tenant(&tenant)).await?)
}

/// One row to insert: ids and both ciphertexts, sealed as the callback would seal them.
struct Sealed {
    id: uuid::Uuid,
    subject: String,
    provider: String,
    access: Vec<u8>,
    refresh: Vec<u8>,
}

fn seal_row(
    vault: &SealKey,
    issuer: &str,
    subject: &str,
    provider: &str,
    access: &str,
    refresh: &str,
) -> anyhow::Result<Sealed> {
    let (t, s, p) = (TenantId::parse(TENANT)?, Subject::parse(subject)?, ProviderId::parse(provider)?);
    let id = ConnectionId::generate();
    // As the callback seals a new row: its first generation, the person's issuer bound, under
    // the tenant's data key.
    let generation = Some(mcp_connect::vault::FIRST_GENERATION);
    let row = RowBinding { tenant: &t, subject: &s, provider: &p, connection: id, generation, issuer: Some(issuer) };
    let access = vault.seal(&row, Field::AccessToken, &SecretString::from(access.to_owned()))?;
    let refresh = vault.seal(&row, Field::RefreshToken, &SecretString::from(refresh.to_owned()))?;
    Ok(Sealed { id: id.as_uuid(), subject: subject.to_owned(), provider: provider.to_owned(), access, refresh })
}

/// Multi-row insert through UNNEST: one statement per batch, the same columns
/// `store::connections::insert_connection` writes.
async fn insert_batch(
    pool: &PgPool,
    issuer: &str,
    key_id: &str,
    rows: Vec<Sealed>,
    expires_at: OffsetDateTime,
) -> anyhow::Result<()> {
    let n = rows.len();
    let mut ids = Vec::with_capacity(n);
    let mut subjects = Vec::with_capacity(n);
    let mut providers = Vec::with_capacity(n);
    let mut access = Vec::with_capacity(n);
    let mut refresh = Vec::with_capacity(n);
    for r in rows {
        ids.push(r.id);
        subjects.push(r.subject);
        providers.push(r.provider);
        access.push(r.access);
        refresh.push(r.refresh);
    }
    sqlx::query(
        r#"INSERT INTO connections (id, tenant_id, subject, provider, account_id, account_login, scopes, status,
                                    key_id, access_token_ct, refresh_token_ct, token_type, access_expires_at,
                                    refreshed_at, issuer, seal_version)
           SELECT u.id, $1, u.subject, u.provider, 'acct-' || u.subject, u.subject, ARRAY['read'], 'active',
                  $2, u.access, u.refresh, 'Bearer', $3, now(), $9, 1
           FROM UNNEST($4::uuid[], $5::text[], $6::text[], $7::bytea[], $8::bytea[])
                AS u(id, subject, provider, access, refresh)"#,
    )
    .bind(TENANT)
    .bind(key_id)
    .bind(expires_at)
    .bind(&ids)
    .bind(&subjects)
    .bind(&providers)
    .bind(&access)
    .bind(&refresh)
    .bind(issuer)
    .execute(pool)
    .await?;
    Ok(())
}

/// Seeds the subjects in `subjects` × `providers` as active connections with fresh tokens
/// (expiry a year away), then VACUUM ANALYZE so the floor and the service read the same
/// settled table. The scale run calls it again with the subjects after the first seeding.
///
/// Every ciphertext is sealed on its own: the vault's associated data names the row's id,
/// so one sealed token cannot stand for another row (the service would refuse to open it).
/// Sealing runs on a blocking thread while the previous batch is inserted, so that the
/// bench's CPU and Postgres's overlap (a million rows take about a minute rather than two).
/// `issuer`: the bench IdP's, whose subjects the connections are.
pub async fn seed(
    pool: &PgPool,
    issuer: &str,
    vault: &SealKey,
    subjects: std::ops::Range<usize>,
    providers: &[String],
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let expires_at = OffsetDateTime::now_utc() + time::Duration::days(365);
    const BATCH_SUBJECTS: usize = 1_250;
    let mut inserting: Option<tokio::task::JoinHandle<anyhow::Result<()>>> = None;
    let mut from = subjects.start;
    while from < subjects.end {
        let to = (from + BATCH_SUBJECTS).min(subjects.end);
        let (v, p, i) = (vault.clone(), providers.to_vec(), issuer.to_owned());
        let rows = tokio::task::spawn_blocking(move || seal_batch(&v, &i, from..to, &p)).await??;
        if let Some(previous) = inserting.take() {
            previous.await??;
        }
        let (pool, key_id, issuer) = (pool.clone(), vault.key_id().to_owned(), issuer.to_owned());
        inserting = Some(tokio::spawn(async move { insert_batch(&pool, &issuer, &key_id, rows, expires_at).await }));
        from = to;
    }
    if let Some(last) = inserting {
        last.await??;
    }
    sqlx::query("VACUUM ANALYZE connections").execute(pool).await?;
    Ok(started.elapsed())
}

fn seal_batch(
    vault: &SealKey,
    issuer: &str,
    subjects: std::ops::Range<usize>,
    providers: &[String],
) -> anyhow::Result<Vec<Sealed>> {
    let mut rows = Vec::with_capacity(subjects.len() * providers.len());
    for s in subjects {
        let subject = crate::load::KeySpace::subject(s);
        for p in providers {
            // Distinct opaque tokens of about 60 characters (GitHub's are 40; JWT access
            // tokens run to several hundred bytes and would cost more to open).
            let access = format!("bench-at-{subject}-{p}-{:040x}", s);
            let refresh = format!("bench-rt-{subject}-{p}-{:040x}", s);
            rows.push(seal_row(vault, issuer, &subject, p, &access, &refresh)?);
        }
    }
    Ok(rows)
}

/// A connection holding a real grant of the dev provider, whose access token expired an
/// hour ago, so the next lookup must refresh it.
pub async fn insert_expired(
    pool: &PgPool,
    issuer: &str,
    vault: &SealKey,
    subject: &str,
    provider: &str,
    access: &str,
    refresh: &str,
) -> anyhow::Result<uuid::Uuid> {
    let row = seal_row(vault, issuer, subject, provider, access, refresh)?;
    let id = row.id;
    let expired = OffsetDateTime::now_utc() - time::Duration::hours(1);
    insert_batch(pool, issuer, vault.key_id(), vec![row], expired).await?;
    Ok(id)
}

pub async fn connection_version(pool: &PgPool, id: uuid::Uuid) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT version FROM connections WHERE id = $1").bind(id).fetch_one(pool).await?)
}

/// Index scans of the (tenant_id, subject, provider) index: the service's lookups that
/// reached the database. A busy backend publishes its counters about once a second, and
/// the last second's only 10 s after it went idle (PostgreSQL's PGSTAT_IDLE_INTERVAL) or
/// when it exits: read after [`wait_for_service_sessions_to_end`].
pub async fn lookup_index_scans(pool: &PgPool) -> anyhow::Result<Option<i64>> {
    index_counter(pool, "idx_scan", "connections_tenant_id_subject_provider_key").await
}

/// Rows read by id through the primary key. The confirmer once re-read its entries this way;
/// since the change log (issue 26) it reads none, and what remains is the hand-out audit
/// writer's join (one per audit row of hand-outs not served from the cache) and the
/// toucher's marks.
pub async fn rows_read_by_id(pool: &PgPool) -> anyhow::Result<Option<i64>> {
    index_counter(pool, "idx_tup_read", "connections_pkey").await
}

/// One counter of one index of `connections` from `pg_stat_user_indexes`.
async fn index_counter(pool: &PgPool, counter: &'static str, index: &str) -> anyhow::Result<Option<i64>> {
    let sql = format!("SELECT {counter} FROM pg_stat_user_indexes WHERE relname = 'connections' AND indexrelname = $1");
    // The counter's name comes from this file, never from input.
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(index).fetch_optional(pool).await?)
}

/// Rows the hand-outs left in the audit table from `since` on (one per connection, API key
/// and minute).
pub async fn handout_rows(pool: &PgPool, since: OffsetDateTime) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE tenant_id = $1 AND kind = 'token_handed_out' AND at >= $2",
    )
    .bind(TENANT)
    .bind(since)
    .fetch_one(pool)
    .await?)
}

/// Hand-outs the audit table accounts for in rows from `since` on (each row counts those
/// of its minute, and its `at` is that minute). Bounded by time so that the index on
/// (tenant, kind, at) answers it: the table grows by a few hundred thousand rows per run.
pub async fn handout_events(pool: &PgPool, since: OffsetDateTime) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(sum(count), 0)::bigint FROM audit_events
         WHERE tenant_id = $1 AND kind = 'token_handed_out' AND at >= $2",
    )
    .bind(TENANT)
    .bind(since)
    .fetch_one(pool)
    .await?)
}

/// What the confirmer read from the change log (`cache_change_log`, issue 26) so far: rows
/// from the table (`seq_tup_read + idx_tup_fetch` of `pg_stat_user_tables`) and index
/// entries (`idx_tup_read` of its indexes; an index-only scan reads entries without
/// fetching rows, so the rows alone could show nothing). `None` when the table does not
/// exist (a service from before the change log).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ChangeLogReads {
    pub rows: i64,
    pub index_entries: i64,
}

pub async fn change_log_reads(pool: &PgPool) -> anyhow::Result<Option<ChangeLogReads>> {
    let row: Option<(i64, i64)> = sqlx::query_as(
        "SELECT t.seq_tup_read + coalesce(t.idx_tup_fetch, 0),
                coalesce((SELECT sum(i.idx_tup_read) FROM pg_stat_user_indexes i WHERE i.relid = t.relid), 0)::bigint
         FROM pg_stat_user_tables t WHERE t.relname = 'cache_change_log'",
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(rows, index_entries)| ChangeLogReads { rows, index_entries }))
}

/// Whether the server accepts TLS (`ssl = on`): the TLS floor is measured only then.
pub async fn server_has_ssl(pool: &PgPool) -> anyhow::Result<bool> {
    let ssl: String = sqlx::query_scalar("SHOW ssl").fetch_one(pool).await?;
    Ok(ssl == "on")
}

/// Waits until no session of the service (named by the service's default
/// `application_name`) is left on the bench database: an ending backend publishes its
/// counters.
pub async fn wait_for_service_sessions_to_end(pool: &PgPool) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
        )
        .bind(mcp_connect::store::APPLICATION_NAME)
        .fetch_one(pool)
        .await?;
        if left == 0 {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!("{left} service sessions still open 15 s after the service was stopped");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Readies PostgreSQL for a floor: vacuums and analyzes the bench database (so that
/// autovacuum finds nothing to start on mid-floor: the rows a service instance has just
/// written would otherwise draw a worker), waits (at most 2 minutes) until no autovacuum
/// worker and no other session is active on the server, then has dirty buffers written
/// (`CHECKPOINT`). A floor measured right after an instance stopped, without this, came
/// out 15 % below the first one in a run, which would flatter the ratios to it.
/// Vacuum and checkpoint need the bench's default role (`postgres`); without the rights
/// they are skipped, and another role may not see other roles' sessions as active. Returns
/// the seconds it took and whether the server was quiet at the end.
pub async fn quiet(pool: &PgPool) -> anyhow::Result<(f64, bool)> {
    let started = std::time::Instant::now();
    let _ = sqlx::query("VACUUM (ANALYZE)").execute(pool).await;
    let deadline = started + Duration::from_secs(120);
    let quiet = loop {
        let busy: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE pid <> pg_backend_pid()
               AND (backend_type = 'autovacuum worker' OR (backend_type = 'client backend' AND state = 'active'))",
        )
        .fetch_one(pool)
        .await?;
        if busy == 0 {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = sqlx::query("CHECKPOINT").execute(pool).await;
    Ok((started.elapsed().as_secs_f64(), quiet))
}

/// How a floor's wait for a quiet server went, for the progress lines.
pub fn quiet_note((seconds, quiet): (f64, bool)) -> String {
    if quiet {
        format!("{seconds:.0} s to a quiet server")
    } else {
        format!("the server still busy after {seconds:.0} s: this floor may be low")
    }
}

/// `url` with `application_name` set, so that the bench's own sessions are told apart.
pub fn with_application_name(url: &str, name: &str) -> anyhow::Result<String> {
    with_param(url, "application_name", name)
}

/// `url` with the connection parameter `name` set to `value` (replacing one already there),
/// e.g. `sslmode=disable`, which libpq (pgbench) and sqlx (the service) both read.
pub fn with_param(url: &str, name: &str, value: &str) -> anyhow::Result<String> {
    let mut u = url::Url::parse(url).context("not a URL")?;
    let kept: Vec<(String, String)> = u.query_pairs().into_owned().filter(|(k, _)| k != name).collect();
    u.query_pairs_mut().clear().extend_pairs(kept).append_pair(name, value);
    Ok(u.to_string())
}

pub async fn server_version(pool: &PgPool) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar("SHOW server_version").fetch_one(pool).await?)
}

pub async fn table_size(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT pg_total_relation_size('connections')").fetch_one(pool).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_is_set_once_and_others_are_kept() {
        let url = "postgres://u:p@127.0.0.1:5432/db?application_name=x&sslmode=prefer";
        let out = with_param(url, "sslmode", "disable").unwrap();
        assert_eq!(out, "postgres://u:p@127.0.0.1:5432/db?application_name=x&sslmode=disable");
        let plain = with_param("postgres://127.0.0.1/db", "sslmode", "require").unwrap();
        assert_eq!(plain, "postgres://127.0.0.1/db?sslmode=require");
    }
}
