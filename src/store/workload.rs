//! The workloads that signed in (`workload_callers`) and the `jti`s their tokens carried
//! (`workload_jtis`): see `crate::workload`. An issuer is named with its key source (its
//! `jwks_uri`, or `discovery`): two clusters may share an issuer URL.

use sqlx::PgExecutor;

/// Whether the token whose SHA-256 is `token` may carry `jti` from `issuer`: the first
/// token with it claims it until `expires_at`; that same token again (another instance, a
/// cache that forgot it) still may; another token may not (a replay of the identifier).
pub async fn claim_jti(
    db: &mut crate::store::Conn,
    issuer: &str,
    source: &str,
    jti: &str,
    token: &[u8; 32],
    expires_at: time::OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    // A row whose token has expired is taken over: that token can never verify again.
    let holder = sqlx::query_scalar!(
        r#"INSERT INTO workload_jtis (issuer, key_source, jti, token_sha256, expires_at) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (issuer, key_source, jti) DO UPDATE
           SET token_sha256 = EXCLUDED.token_sha256, expires_at = EXCLUDED.expires_at
           WHERE workload_jtis.expires_at < now()
           RETURNING token_sha256"#,
        issuer,
        source,
        jti,
        &token[..],
        expires_at
    )
    .fetch_optional(&mut *db)
    .await?;
    if holder.is_some() {
        return Ok(true);
    }
    // Claimed before: by this token (another instance, a cache that forgot it) or not.
    let held = sqlx::query_scalar!(
        "SELECT token_sha256 FROM workload_jtis WHERE issuer = $1 AND key_source = $2 AND jti = $3",
        issuer,
        source,
        jti
    )
    .fetch_optional(&mut *db)
    .await?;
    Ok(held.is_some_and(|h| h == token[..]))
}

/// Forgets `jti`s whose tokens expired before `before` (the cleanup's sweep).
pub async fn purge_jtis(db: impl PgExecutor<'_>, before: time::OffsetDateTime) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!("DELETE FROM workload_jtis WHERE expires_at < $1", before).execute(db).await?.rows_affected())
}

/// Records that the workload `issuer`/`source`/`subject` signed in as caller `id`.
pub async fn record_caller(
    db: impl PgExecutor<'_>,
    id: &str,
    issuer: &str,
    source: &str,
    subject: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO workload_callers (id, issuer, key_source, subject) VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO UPDATE SET last_seen = now()",
        id,
        issuer,
        source,
        subject
    )
    .execute(db)
    .await?;
    Ok(())
}
