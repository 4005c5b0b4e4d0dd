//! SQL, one named function per query, each taking an executor so callers choose the
//! transaction. Queries are compile-checked (`sqlx::query!`) against the offline data in
//! `.sqlx/`. A database error is always an error, never "not found".

pub mod api_keys;
pub mod audit;
pub mod changes;
pub mod client_keys;
pub mod connections;
pub mod credential_checks;
pub mod data_keys;
pub mod elicitations;
pub mod handouts;
pub mod kill_switches;
pub mod lookup;
pub mod providers;
pub mod remote_clients;
pub mod sessions;
pub mod states;
pub mod tenants;
pub mod webhooks;
pub mod workload;

pub mod db;

pub use db::{Conn, Db, Pooler, Tx};
pub use sqlx::PgPool;

/// Metric (catalogue: `telemetry::metrics`): time to get a database connection, by `pool`
/// (`main`: a transaction's connection and its `BEGIN`; `lookup`: the uncached lookup's).
pub const POOL_WAIT: &str = "mcp_connect_db_pool_wait_seconds";

/// Holds a lock named `name` until the transaction ends (a transaction-scoped advisory
/// lock): work that must not run twice at once across instances, e.g. a creation under a
/// count limit.
pub async fn lock_named(db: impl sqlx::PgExecutor<'_>, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext($1))", name).execute(db).await?;
    Ok(())
}

/// `BEGIN` on `db`, timed into [`POOL_WAIT`].
pub async fn begin(db: &Db) -> Result<Tx, sqlx::Error> {
    let span = tracing::info_span!("db.transaction", otel.kind = "client", db.system = "postgresql");
    let started = std::time::Instant::now();
    let tx = db.sqlx_pool().begin().await;
    metrics::histogram!(POOL_WAIT, "pool" => "main").record(started.elapsed().as_secs_f64());
    Ok(Tx::new(tx?, db.pooler(), span))
}

fn pool_options(max_connections: u32) -> sqlx::postgres::PgPoolOptions {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        // A pooled connection that died is found by the query that uses it; a ping before
        // every acquire would cost a round trip on the hot path.
        .test_before_acquire(false)
        .acquire_timeout(std::time::Duration::from_secs(5))
}

/// The `application_name` of the service's database sessions unless the URL names one.
pub const APPLICATION_NAME: &str = "mcp-connect";

/// The options in `url`, with `application_name` [`APPLICATION_NAME`] unless the URL names
/// one: operators see the service's sessions as such in `pg_stat_activity`.
pub fn connect_options(url: &str) -> Result<sqlx::postgres::PgConnectOptions, sqlx::Error> {
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    Ok(if options.get_application_name().is_some() { options } else { options.application_name(APPLICATION_NAME) })
}

/// Connects the service's pool through `pooler` (see [`db`]) and checks the schema, or
/// first migrates it (`migrate_on_start`). Migrations take a session-level lock, which a
/// transaction pooler does not keep, so behind one ([`Pooler::Transaction`]) they run over
/// `session_url` (`database.listen_url`, PostgreSQL itself), on a connection closed after
/// them. Otherwise over `url`: the listener's URL may be another role's.
pub async fn open(
    url: &str,
    max_connections: u32,
    pooler: Pooler,
    session_url: Option<&str>,
    migrate_on_start: bool,
) -> Result<Db, OpenError> {
    let db = Db::new(connect(url, max_connections).await?, pooler);
    if migrate_on_start {
        match session_url.filter(|_| pooler == Pooler::Transaction) {
            Some(session) => {
                let direct = connect(session, 1).await?;
                let migrated = migrate(&direct).await;
                direct.close().await;
                migrated?;
            }
            None => migrate(db.sqlx_pool()).await?,
        }
    } else {
        check_schema(&db).await?;
    }
    Ok(db)
}

/// Why [`open`] did not give a pool.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    #[error(transparent)]
    Schema(#[from] SchemaMismatch),
}

/// What to change when a failure is a transaction pooler's doing (said after the error
/// when a command fails): a prepared statement
/// that another client's session already has or this one's lost (SQLSTATE 42P05, 26000),
/// or a notification arriving on a connection that did not listen.
pub fn pooler_hint(e: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut source = Some(e);
    while let Some(e) = source {
        if let Some(e) = e.downcast_ref::<sqlx::Error>() {
            let code = e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned());
            if matches!(code.as_deref(), Some("42P05" | "26000")) {
                return POOLER_HINT;
            }
            if matches!(e, sqlx::Error::Protocol(m) if m.contains("NotificationResponse")) {
                return LISTENER_HINT;
            }
        }
        source = e.source();
    }
    ""
}

const POOLER_HINT: &str = " (a transaction pooler is between this service and PostgreSQL: set database.pooler = \"transaction\", \
     with database.listen_url reaching PostgreSQL itself; or, with PgBouncer 1.21+, max_prepared_statements)";
const LISTENER_HINT: &str = " (a notification reached a connection that does not listen: a LISTEN went through a \
     transaction pooler; database.listen_url must reach PostgreSQL itself)";

/// Connects a pool (one connection made now, to fail early). A database that cannot be
/// reached is a [`Unreachable`] naming where and what to do.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, Unreachable> {
    let options =
        connect_options(url).map_err(|e| Unreachable { what: format!("the database URL: {e}"), source: e })?;
    pool_options(max_connections).connect_with(options.clone()).await.map_err(|e| Unreachable::of(&options, e))
}

/// The database could not be reached: which one (host, port, database, user; never the
/// password) and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct Unreachable {
    pub what: String,
    #[source]
    pub source: sqlx::Error,
}

impl Unreachable {
    fn of(o: &sqlx::postgres::PgConnectOptions, source: sqlx::Error) -> Self {
        let (host, port, user) = (o.get_host(), o.get_port(), o.get_username());
        let db = o.get_database().unwrap_or(user);
        let code = source.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned());
        let what = match code.as_deref() {
            Some("3D000") => format!(
                "database \"{db}\" does not exist on {host}:{port}: create it (createdb -h {host} -p {port} -U {user} {db}) or fix the database URL"
            ),
            Some("28P01" | "28000") => {
                format!(
                    "PostgreSQL at {host}:{port} refused user \"{user}\" for database \"{db}\": check the user and password in the database URL"
                )
            }
            Some("53300") => format!("PostgreSQL at {host}:{port} has no free connection slots (too many clients)"),
            // PgBouncer's answer to a startup parameter it does not pass on (the driver
            // sends `extra_float_digits`): a server answered, and it is a pooler's setting.
            Some("08P01") if source.to_string().contains("unsupported startup parameter") => format!(
                "the connection pooler at {host}:{port} refused a startup parameter the database driver sends \
                 ({source}): add `ignore_startup_parameters = extra_float_digits` to its [pgbouncer] section \
                 (docs/operations.md, \"PgBouncer\")"
            ),
            _ => format!(
                "no PostgreSQL answers at {host}:{port} (database \"{db}\"): start it, or point MCP_CONNECT_DATABASE_URL at one ({source})"
            ),
        };
        Self { what, source }
    }
}

/// This binary's schema compatibility level: it runs on a schema whose
/// `schema_compat.oldest_binary_level` is at most this, also with migrations it does not
/// know (a newer release's, which only expand). The rule (docs/development.md, "Changing
/// the schema"): the release that stops using a table or column raises this; the later
/// release whose migration removes it sets `oldest_binary_level` to that raised level, so
/// every binary that still uses it refuses that schema.
pub const SCHEMA_LEVEL: i32 = 2;

/// The schema is not one this binary can run on.
#[derive(Debug, thiserror::Error)]
pub enum SchemaMismatch {
    #[error(
        "the database schema is behind this binary (migration {missing} is not applied; applied up to {applied}): run `mcp-connect migrate` first"
    )]
    Behind { missing: i64, applied: i64 },
    #[error(
        "the database schema is newer than this binary (applied {applied}, this binary knows up to {known}) and records no compatibility level: use the mcp-connect version that migrated it"
    )]
    Ahead { applied: i64, known: i64 },
    #[error(
        "the database schema was migrated by a newer release that needs binaries of compatibility level {oldest} or later; this binary is level {SCHEMA_LEVEL}: use a newer mcp-connect"
    )]
    TooNew { oldest: i32 },
    #[error("migrating: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("reading the schema version: {0}")]
    Database(#[from] sqlx::Error),
}

/// Refuses to go on with a schema this binary cannot run on: one that lacks any of its
/// migrations, or one with migrations it does not know whose `schema_compat` says it is
/// too old. Commands other than `serve`, `migrate` and `dev` never migrate.
pub async fn check_schema(pool: &Db) -> Result<(), SchemaMismatch> {
    let applied: Vec<i64> =
        match sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await
        {
            Ok(v) => v,
            // No migrations table: nothing applied yet.
            Err(e) if is_undefined_table(&e) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
    let migrator = sqlx::migrate!("./migrations");
    let known: Vec<i64> = migrator.iter().map(|m| m.version).collect();
    if let Some(missing) = known.iter().find(|v| !applied.contains(v)) {
        return Err(SchemaMismatch::Behind { missing: *missing, applied: applied.last().copied().unwrap_or(0) });
    }
    if applied.iter().any(|v| !known.contains(v)) {
        compatible(pool, applied.last().copied().unwrap_or(0), known.last().copied().unwrap_or(0)).await?;
    }
    Ok(())
}

/// A schema with migrations this binary does not know: fine while its
/// `oldest_binary_level` admits this binary.
async fn compatible(pool: &Db, applied: i64, known: i64) -> Result<(), SchemaMismatch> {
    let oldest: i32 = match sqlx::query_scalar("SELECT oldest_binary_level FROM schema_compat").fetch_one(pool).await {
        Ok(level) => level,
        Err(e) if is_undefined_table(&e) || matches!(e, sqlx::Error::RowNotFound) => {
            return Err(SchemaMismatch::Ahead { applied, known });
        }
        Err(e) => return Err(e.into()),
    };
    if oldest > SCHEMA_LEVEL {
        return Err(SchemaMismatch::TooNew { oldest });
    }
    tracing::info!(
        applied,
        known,
        "the schema has migrations of a newer release; this binary runs on it (expand/contract)"
    );
    Ok(())
}

fn is_undefined_table(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).as_deref() == Some("42P01")
}

/// A pool that connects on first use, from the runtime that uses it: an HTTP worker's
/// own pool keeps its sockets on that worker's event loop, so a query's answer wakes the
/// worker directly instead of going through another thread.
pub fn connect_lazy(options: sqlx::postgres::PgConnectOptions, max_connections: u32) -> PgPool {
    pool_options(max_connections).connect_lazy_with(options)
}

/// Applies this binary's migrations that are not applied yet. A schema a newer release
/// migrated further is left as it is, when it admits this binary ([`check_schema`]). A
/// schema that needs nothing is not locked (the migrator's lock is a session's).
pub async fn migrate(pool: &PgPool) -> Result<(), SchemaMismatch> {
    // The checks keep nothing on the session (statements unnamed, each in a transaction):
    // they pass on any connection, and where that is wrongly a transaction pooler the
    // migrator's own error names it (`OpenError`).
    let direct = Db::new(pool.clone(), Pooler::Transaction);
    // A schema that does not admit this binary is refused before anything is applied.
    match check_schema(&direct).await {
        Ok(()) => return Ok(()),
        Err(SchemaMismatch::Behind { .. }) => {}
        Err(e) => return Err(e),
    }
    let mut migrator = sqlx::migrate!("./migrations");
    // Migrations of a newer release are not an error here: whether this binary may run on
    // them is `schema_compat`'s to say, below.
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
    check_schema(&direct).await
}

/// Whether every migration this binary knows has been applied (for `/readyz`).
pub async fn migrations_applied(pool: &Db) -> Result<bool, sqlx::Error> {
    Ok(applied_version(pool).await? >= known_version())
}

/// The newest migration this binary has.
fn known_version() -> i64 {
    sqlx::migrate!("./migrations").iter().map(|m| m.version).max().unwrap_or(0)
}

/// The newest migration applied to the database (0: none).
async fn applied_version(pool: &Db) -> Result<i64, sqlx::Error> {
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success").fetch_one(pool).await?;
    Ok(applied.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    /// A peer that answers every startup as PgBouncer does when the client sends a startup
    /// parameter it does not know (SSL refused first, then an `ErrorResponse`, 08P01).
    async fn pooler_refusing_a_startup_parameter() -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    loop {
                        let mut len = [0u8; 4];
                        if s.read_exact(&mut len).await.is_err() {
                            return;
                        }
                        let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
                        if s.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        // SSLRequest (80877103): no.
                        if body.len() == 4 && body == 80_877_103u32.to_be_bytes() {
                            let _ = s.write_all(b"N").await;
                            continue;
                        }
                        let mut fields = Vec::new();
                        for (t, v) in [
                            (b'S', "FATAL"),
                            (b'C', "08P01"),
                            (b'M', "unsupported startup parameter: extra_float_digits"),
                        ] {
                            fields.push(t);
                            fields.extend_from_slice(v.as_bytes());
                            fields.push(0);
                        }
                        fields.push(0);
                        let mut msg = vec![b'E'];
                        msg.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
                        msg.extend_from_slice(&fields);
                        let _ = s.write_all(&msg).await;
                        return;
                    }
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn a_pooler_that_refuses_a_startup_parameter_is_named_with_the_setting_that_fixes_it() {
        let port = pooler_refusing_a_startup_parameter().await;
        let e = super::connect(&format!("postgres://u@127.0.0.1:{port}/db"), 1).await.unwrap_err().to_string();
        assert!(e.contains("ignore_startup_parameters = extra_float_digits"), "{e}");
        assert!(e.contains("connection pooler"), "{e}");
        assert!(!e.contains("no PostgreSQL answers"), "a server answered: {e}");
    }

    #[test]
    fn sessions_are_named_mcp_connect_unless_the_url_names_them() {
        let named = |url: &str| super::connect_options(url).map(|o| o.get_application_name().map(str::to_owned));
        assert_eq!(named("postgres://u@127.0.0.1/db").ok().flatten().as_deref(), Some("mcp-connect"));
        assert_eq!(named("postgres://u@127.0.0.1/db?application_name=ops").ok().flatten().as_deref(), Some("ops"));
        assert!(named("not a url").is_err());
    }
}
