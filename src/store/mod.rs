//! SQL, one named function per query, each taking an executor so callers choose the
//! transaction. Queries are compile-checked (`sqlx::query!`) against the offline data in
//! `.sqlx/`. A database error is always an error, never "not found".

pub mod api_keys;
pub mod audit;
pub mod connections;
pub mod elicitations;
pub mod handouts;
pub mod kill_switches;
pub mod lookup;
pub mod sessions;
pub mod states;
pub mod tenants;

pub use sqlx::PgPool;

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

/// Connects a pool (one connection made now, to fail early).
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    pool_options(max_connections).connect_with(connect_options(url)?).await
}

/// A pool that connects on first use, from the runtime that uses it: an HTTP worker's
/// own pool keeps its sockets on that worker's event loop, so a query's answer wakes the
/// worker directly instead of going through another thread.
pub fn connect_lazy(options: sqlx::postgres::PgConnectOptions, max_connections: u32) -> PgPool {
    pool_options(max_connections).connect_lazy_with(options)
}

pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    sqlx::migrate!("./migrations").run(pool).await
}

/// Whether every migration this binary knows has been applied (for `/readyz`).
pub async fn migrations_applied(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let migrator = sqlx::migrate!("./migrations");
    let latest = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success").fetch_one(pool).await?;
    Ok(applied.unwrap_or(0) >= latest)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sessions_are_named_mcp_connect_unless_the_url_names_them() {
        let named = |url: &str| super::connect_options(url).map(|o| o.get_application_name().map(str::to_owned));
        assert_eq!(named("postgres://u@127.0.0.1/db").ok().flatten().as_deref(), Some("mcp-connect"));
        assert_eq!(named("postgres://u@127.0.0.1/db?application_name=ops").ok().flatten().as_deref(), Some("ops"));
        assert!(named("not a url").is_err());
    }
}
