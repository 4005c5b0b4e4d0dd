//! The change log (`cache_change_log`, migration 20261206000001): what changed since a
//! snapshot, read in one statement so that the snapshot and the rows agree.

use sqlx::PgExecutor;

/// One logged change: its scope (`connection`, `kill_switch`, `api_key`, `api_key_new`,
/// `tenant`) and the key within it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub scope: String,
    pub key: String,
}

/// A read of the log: the snapshot it was taken in (the next read starts from it, as text:
/// `xmin:xmax:xip,…`) and the changes committed since the previous snapshot.
#[derive(Debug)]
pub struct Round {
    pub snapshot: String,
    pub changes: Vec<Change>,
}

/// The snapshot of now, where the reading begins.
pub async fn snapshot(db: impl PgExecutor<'_>) -> Result<String, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_current_snapshot()::text AS "snapshot!""#).fetch_one(db).await
}

/// The changes committed after `since` (a snapshot from [`snapshot`] or an earlier round)
/// and visible now, at most `limit`, with the snapshot they were read in. A transaction not
/// visible in `since` either began after it (xid at or above its xmax) or was running then
/// (its xid is in its list): one range scan and a few lookups of the xid index find
/// exactly those, however long an old transaction elsewhere holds the cluster's xmin back.
/// Two index scans joined, not one `OR`: with an `OR` the prepared (generic) plan scanned
/// the whole table, which after a bulk change holds ten minutes of rows (the benchmark's
/// seeding left 100,000, read three times a second).
pub async fn since(db: impl PgExecutor<'_>, since: &str, limit: i64) -> Result<Round, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT pg_current_snapshot()::text AS "snapshot!",
                  ARRAY((SELECT scope || ':' || key FROM cache_change_log
                          WHERE xid >= pg_snapshot_xmax($1::text::pg_snapshot) ORDER BY xid LIMIT $2)
                        UNION ALL
                        (SELECT scope || ':' || key FROM cache_change_log
                          WHERE xid = ANY(ARRAY(SELECT pg_snapshot_xip($1::text::pg_snapshot))))) AS "changes!""#,
        since,
        limit
    )
    .fetch_one(db)
    .await?;
    let changes = row
        .changes
        .into_iter()
        .filter_map(|c| c.split_once(':').map(|(s, k)| Change { scope: s.to_owned(), key: k.to_owned() }))
        .collect();
    Ok(Round { snapshot: row.snapshot, changes })
}

/// Deletes the rows of transactions that had all ended when `old` was taken: a reader
/// whose own last snapshot is newer than `old` sees them as committed already and never
/// asks for them. Returns how many went.
pub async fn prune(db: impl PgExecutor<'_>, old: &str) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!("DELETE FROM cache_change_log WHERE xid < pg_snapshot_xmin($1::text::pg_snapshot)", old)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}
