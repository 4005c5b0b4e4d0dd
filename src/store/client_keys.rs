//! `client_signing_keys`: the keys mcp-connect signs its client assertions with (RFC 7523
//! `private_key_jwt`; see `keys::client_keys`), the private half sealed.

use super::Db;
use sqlx::PgExecutor;
use time::OffsetDateTime;

/// The signing key: its kid and its private half as sealed.
pub struct SigningKeyRow {
    pub kid: String,
    pub key_id: String,
    pub private_sealed: Vec<u8>,
}

/// Never the sealed bytes.
impl std::fmt::Debug for SigningKeyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKeyRow").field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// A key as the operator lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClientKeyInfo {
    pub kid: String,
    pub alg: String,
    #[serde(with = "time::serde::rfc3339")]
    pub sign_from: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub unpublish_at: Option<OffsetDateTime>,
}

/// A new key to store.
pub struct NewKey<'a> {
    pub kid: &'a str,
    pub public_jwk: &'a serde_json::Value,
    pub key_id: &'a str,
    pub private_sealed: &'a [u8],
    pub sign_from: OffsetDateTime,
}

/// The key that signs at `now`, among those published: the one made last whose `sign_from`
/// has come (a rotation made later wins over an earlier one still pending); where none has
/// come yet (every key made ahead, or this clock behind the one that made them), the one
/// whose `sign_from` comes first.
pub async fn signing(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<Option<SigningKeyRow>, sqlx::Error> {
    sqlx::query_as!(
        SigningKeyRow,
        "SELECT kid, key_id, private_sealed FROM client_signing_keys
          WHERE unpublish_at IS NULL OR unpublish_at > $1
          ORDER BY (sign_from <= $1) DESC, CASE WHEN sign_from <= $1 THEN created_at END DESC NULLS LAST,
                   sign_from, kid
          LIMIT 1",
        now
    )
    .fetch_optional(db)
    .await
}

/// The keys whose private half is not sealed under the service's active data key.
pub async fn not_under_active_key(db: impl PgExecutor<'_>) -> Result<Vec<SigningKeyRow>, sqlx::Error> {
    sqlx::query_as!(
        SigningKeyRow,
        "SELECT kid, key_id, private_sealed FROM client_signing_keys
          WHERE key_id IS DISTINCT FROM mcpc_active_key_id(NULL) ORDER BY kid"
    )
    .fetch_all(db)
    .await
}

pub async fn count_not_under_active_key(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM client_signing_keys WHERE key_id IS DISTINCT FROM mcpc_active_key_id(NULL)"#
    )
    .fetch_one(db)
    .await
}

/// Writes `row` re-sealed, unless it changed since it was read. Whether it was written.
pub async fn store_resealed(
    db: impl PgExecutor<'_>,
    row: &SigningKeyRow,
    key_id: &str,
    sealed: &[u8],
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE client_signing_keys SET key_id = $3, private_sealed = $4 WHERE kid = $1 AND key_id = $2",
        row.kid,
        row.key_id,
        key_id,
        sealed
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The public keys published at `now` (JWK objects), the oldest first.
pub async fn published(db: impl PgExecutor<'_>, now: OffsetDateTime) -> Result<Vec<serde_json::Value>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT public_jwk AS "jwk!" FROM client_signing_keys
            WHERE unpublish_at IS NULL OR unpublish_at > $1 ORDER BY sign_from, kid"#,
        now
    )
    .fetch_all(db)
    .await
}

pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<ClientKeyInfo>, sqlx::Error> {
    sqlx::query_as!(
        ClientKeyInfo,
        "SELECT kid, alg, sign_from, unpublish_at FROM client_signing_keys ORDER BY sign_from, kid"
    )
    .fetch_all(db)
    .await
}

/// Instances making the first key at once, or rotating at once, take turns.
const LOCK: &str = "mcp-connect client_signing_keys";

/// Stores `key` as the first one, unless there is a key already. Whether it was stored.
pub async fn insert_first(db: &Db, key: &NewKey<'_>) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin().await?;
    super::lock_named(&mut *tx, LOCK).await?;
    let stored = insert(&mut *tx, key, true).await?;
    tx.commit().await?;
    Ok(stored)
}

/// Stores `key` and ends the publication of every key published for good so far at
/// `unpublish_old_at`.
pub async fn rotate(db: &Db, key: &NewKey<'_>, unpublish_old_at: OffsetDateTime) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    super::lock_named(&mut *tx, LOCK).await?;
    // A key made ahead that never signed is unpublished no earlier than it would have
    // signed (it never will: the new key is made later).
    sqlx::query!(
        "UPDATE client_signing_keys SET unpublish_at = GREATEST($1, sign_from)
          WHERE unpublish_at IS NULL OR unpublish_at > $1",
        unpublish_old_at
    )
    .execute(&mut *tx)
    .await?;
    insert(&mut *tx, key, false).await?;
    tx.commit().await?;
    Ok(())
}

async fn insert(db: impl PgExecutor<'_>, key: &NewKey<'_>, only_first: bool) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "INSERT INTO client_signing_keys (kid, alg, public_jwk, key_id, private_sealed, sign_from)
         SELECT $1, 'ES256', $2, $3, $4, $5
          WHERE NOT $6 OR NOT EXISTS (SELECT 1 FROM client_signing_keys)",
        key.kid,
        key.public_jwk,
        key.key_id,
        key.private_sealed,
        key.sign_from,
        only_first
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}
