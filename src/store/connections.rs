//! `connections`: one sealed downstream grant per (tenant, subject, provider).

use crate::domain::{
    ConnectionFacts, ConnectionId, ConnectionKey, ConnectionStatus, ProviderId, Scopes, Subject, TenantId,
};
use crate::vault::RowBinding;
use sqlx::PgExecutor;
use time::OffsetDateTime;

pub mod packed;

/// A connection row as stored: ciphertexts, not tokens.
#[derive(Debug, Clone)]
pub struct ConnectionRow {
    pub id: ConnectionId,
    pub tenant_id: TenantId,
    pub subject: Subject,
    pub provider: ProviderId,
    pub account_id: Option<String>,
    pub account_login: Option<String>,
    pub scopes: Scopes,
    pub status: ConnectionStatus,
    pub key_id: Option<String>,
    pub access_token_ct: Option<Vec<u8>>,
    pub refresh_token_ct: Option<Vec<u8>>,
    pub id_token_ct: Option<Vec<u8>>,
    pub token_type: String,
    pub access_expires_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub refreshed_at: Option<OffsetDateTime>,
    pub version: i64,
    /// The seal generation its ciphertexts are bound to (`None`: sealed before generations;
    /// see `vault`). Each write of new ciphertexts raises it.
    pub seal_version: Option<i64>,
    /// The row version PostgreSQL gave it (`xmin`), as read: any write to the row changes
    /// it. A row changed in memory after the read carries 0, which no stored row has.
    pub xmin: i64,
    /// The issuer of the IdP whose `subject` holds it (`None`: written before issuers were
    /// recorded and not yet backfilled; never taken for a match).
    pub issuer: Option<String>,
}

impl ConnectionRow {
    pub fn key(&self) -> ConnectionKey {
        ConnectionKey { tenant: self.tenant_id.clone(), subject: self.subject.clone(), provider: self.provider.clone() }
    }

    /// What the hand-out decides on (`domain::check_handout`).
    pub fn facts(&self) -> ConnectionFacts<'_> {
        ConnectionFacts {
            status: self.status,
            issuer: self.issuer.as_deref(),
            scopes: &self.scopes,
            access_expires_at: self.access_expires_at,
            has_refresh_token: self.refresh_token_ct.is_some(),
            refreshed_at: self.refreshed_at,
        }
    }

    /// To open the row's ciphertexts: the vault's associated data.
    pub fn binding(&self) -> RowBinding<'_> {
        RowBinding {
            tenant: &self.tenant_id,
            subject: &self.subject,
            provider: &self.provider,
            connection: self.id,
            generation: self.seal_version,
            issuer: self.issuer.as_deref(),
        }
    }

    /// The row's next seal generation: what a write of new ciphertexts seals at.
    pub fn next_generation(&self) -> i64 {
        crate::vault::next_generation(self.seal_version)
    }

    /// To seal the row's next ciphertexts (see [`Self::next_generation`]).
    pub fn next_binding(&self) -> RowBinding<'_> {
        RowBinding { generation: Some(self.next_generation()), ..self.binding() }
    }
}

pub async fn find_connection(
    db: impl PgExecutor<'_>,
    key: &ConnectionKey,
) -> Result<Option<ConnectionRow>, sqlx::Error> {
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT id AS "id: ConnectionId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject",
                  provider AS "provider: ProviderId", account_id, account_login, scopes AS "scopes: Scopes",
                  status AS "status: ConnectionStatus", key_id, access_token_ct, refresh_token_ct, id_token_ct,
                  token_type, access_expires_at, created_at, refreshed_at, version, seal_version,
                  xmin::text::bigint AS "xmin!", issuer
           FROM connections WHERE tenant_id = $1 AND subject = $2 AND provider = $3"#,
        key.tenant.as_str(),
        key.subject.as_str(),
        key.provider.as_str()
    )
    .fetch_optional(db)
    .await
}

/// [`find_connection`] for several keys in one statement (the uncached lookups that
/// waited together, `store::lookup`): the rows found, in no particular order; a key with
/// none has no row here. The caller matches rows to keys by all three columns.
///
/// The keys go as one JSON array, not as three text arrays: PostgreSQL estimates a
/// function over `jsonb` at a fixed number of rows whatever its argument, so after five
/// executions it keeps the statement's generic plan. Over arrays each execution's own
/// plan, made for that array's length, looked cheaper, and it planned the statement anew
/// nearly every time (88 µs each in issue 46's bench, more than the statement ran). The
/// `LIMIT 1` keeps it from flattening the lateral subquery into a join it may run as a
/// hash join over the whole table: each key stays one index probe, as alone.
pub async fn find_connections(
    db: impl PgExecutor<'_>,
    keys: &[&ConnectionKey],
) -> Result<Vec<ConnectionRow>, sqlx::Error> {
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| serde_json::json!({ "t": k.tenant.as_str(), "s": k.subject.as_str(), "p": k.provider.as_str() }))
        .collect();
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT c.id AS "id!: ConnectionId", c.tenant_id AS "tenant_id!: TenantId", c.subject AS "subject!: Subject",
                  c.provider AS "provider!: ProviderId", c.account_id, c.account_login, c.scopes AS "scopes!: Scopes",
                  c.status AS "status!: ConnectionStatus", c.key_id, c.access_token_ct, c.refresh_token_ct,
                  c.id_token_ct, c.token_type AS "token_type!", c.access_expires_at, c.created_at AS "created_at!",
                  c.refreshed_at, c.version AS "version!", c.seal_version, c.xmin AS "xmin!", c.issuer
           FROM jsonb_to_recordset($1::jsonb) AS k (t text, s text, p text)
           CROSS JOIN LATERAL (
               SELECT id, tenant_id, subject, provider, account_id, account_login, scopes, status, key_id,
                      access_token_ct, refresh_token_ct, id_token_ct, token_type, access_expires_at, created_at,
                      refreshed_at, version, seal_version, xmin::text::bigint AS xmin, issuer
               FROM connections
               WHERE tenant_id = k.t AND subject = k.s AND provider = k.p
               LIMIT 1
           ) AS c"#,
        serde_json::Value::Array(keys)
    )
    .fetch_all(db)
    .await
}

/// The sealed fields of a grant, written together.
pub struct SealedGrant<'a> {
    /// The seal generation they were sealed at (a new row's is 1; see `vault`).
    pub generation: i64,
    pub key_id: &'a str,
    pub access_token_ct: &'a [u8],
    pub refresh_token_ct: Option<&'a [u8]>,
    pub id_token_ct: Option<&'a [u8]>,
    pub token_type: &'a str,
    pub access_expires_at: Option<OffsetDateTime>,
}

pub struct NewConnection<'a> {
    pub id: ConnectionId,
    /// Whose connection it is: tenant, subject and provider.
    pub key: &'a ConnectionKey,
    /// The issuer of the IdP whose subject it is.
    pub issuer: Option<&'a str>,
    pub account_id: Option<&'a str>,
    pub account_login: Option<&'a str>,
    pub scopes: &'a Scopes,
    pub grant: SealedGrant<'a>,
}

/// Inserts a new active connection. The caller seals with `id` and
/// `vault::FIRST_GENERATION` in the associated data, so the id is chosen by the caller. Returns false, inserting nothing, when a connection for
/// the same (tenant, subject, provider) exists already (one committed meanwhile by a
/// concurrent callback: the caller decides what becomes of its grant).
pub async fn insert_connection(db: impl PgExecutor<'_>, c: &NewConnection<'_>) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"INSERT INTO connections (id, tenant_id, subject, provider, account_id, account_login, scopes, status,
                                    key_id, access_token_ct, refresh_token_ct, id_token_ct, token_type,
                                    access_expires_at, refreshed_at, seal_version, issuer)
           VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $9, $10, $11, $12, $13, now(), 1, $14)
           ON CONFLICT (tenant_id, subject, provider) DO NOTHING"#,
        c.id.as_uuid(),
        c.key.tenant.as_str(),
        c.key.subject.as_str(),
        c.key.provider.as_str(),
        c.account_id,
        c.account_login,
        c.scopes.as_slice(),
        c.grant.key_id,
        c.grant.access_token_ct,
        c.grant.refresh_token_ct,
        c.grant.id_token_ct,
        c.grant.token_type,
        c.grant.access_expires_at,
        c.issuer
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Replaces the grant of an existing connection (re-connect), making it active again, as
/// `issuer`'s subject's (the tenant's IdP may have changed since the row was made).
pub async fn replace_grant(
    db: impl PgExecutor<'_>,
    id: ConnectionId,
    issuer: Option<&str>,
    account_id: Option<&str>,
    account_login: Option<&str>,
    scopes: &Scopes,
    grant: &SealedGrant<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"UPDATE connections
           SET account_id = $2, account_login = $3, scopes = $4, status = 'active', key_id = $5,
               access_token_ct = $6, refresh_token_ct = $7, id_token_ct = $8, token_type = $9,
               access_expires_at = $10, refreshed_at = now(), granted_at = now(), updated_at = now(),
               version = version + 1, seal_version = $11, issuer = COALESCE($12, issuer)
           WHERE id = $1"#,
        id.as_uuid(),
        account_id,
        account_login,
        scopes.as_slice(),
        grant.key_id,
        grant.access_token_ct,
        grant.refresh_token_ct,
        grant.id_token_ct,
        grant.token_type,
        grant.access_expires_at,
        grant.generation,
        issuer
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Locks a connection row for a refresh or a revocation (cross-instance fence).
pub async fn lock_connection(db: impl PgExecutor<'_>, id: ConnectionId) -> Result<Option<ConnectionRow>, sqlx::Error> {
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT id AS "id: ConnectionId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject",
                  provider AS "provider: ProviderId", account_id, account_login, scopes AS "scopes: Scopes",
                  status AS "status: ConnectionStatus", key_id, access_token_ct, refresh_token_ct, id_token_ct,
                  token_type, access_expires_at, created_at, refreshed_at, version, seal_version,
                  xmin::text::bigint AS "xmin!", issuer
           FROM connections WHERE id = $1 FOR UPDATE"#,
        id.as_uuid()
    )
    .fetch_optional(db)
    .await
}

/// Writes a refreshed grant if the row is still at `expected_version` (compare-and-swap on
/// the generation counter). Returns whether it was written.
pub async fn store_refreshed(
    db: impl PgExecutor<'_>,
    id: ConnectionId,
    expected_version: i64,
    grant: &SealedGrant<'_>,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"UPDATE connections
           SET key_id = $3, access_token_ct = $4, refresh_token_ct = $5, id_token_ct = $6, token_type = $7,
               access_expires_at = $8, refreshed_at = now(), updated_at = now(), version = version + 1,
               seal_version = $9
           WHERE id = $1 AND version = $2 AND status = 'active'"#,
        id.as_uuid(),
        expected_version,
        grant.key_id,
        grant.access_token_ct,
        grant.refresh_token_ct,
        grant.id_token_ct,
        grant.token_type,
        grant.access_expires_at,
        grant.generation
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// The grant is dead at the provider: keep the row (and its account pin), drop the tokens.
/// Only if the row is still at `expected_version`, the one the decision was made on: a
/// grant stored since (a reconnect) is not wiped. Returns whether the row was marked.
pub async fn mark_needs_reauth(
    db: impl PgExecutor<'_>,
    id: ConnectionId,
    expected_version: i64,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"UPDATE connections
           SET status = 'needs_reauth', access_token_ct = NULL, refresh_token_ct = NULL, id_token_ct = NULL,
               updated_at = now(), version = version + 1
           WHERE id = $1 AND version = $2"#,
        id.as_uuid(),
        expected_version
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Revoked: a tombstone without ciphertexts, kept for the audit trail.
pub async fn mark_revoked(db: impl PgExecutor<'_>, id: ConnectionId) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"UPDATE connections
           SET status = 'revoked', access_token_ct = NULL, refresh_token_ct = NULL, id_token_ct = NULL,
               updated_at = now(), version = version + 1
           WHERE id = $1"#,
        id.as_uuid()
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Connection metadata for operators: never a ciphertext.
#[derive(Debug, Clone)]
pub struct ConnectionMeta {
    pub id: ConnectionId,
    pub subject: Subject,
    pub provider: ProviderId,
    pub account_id: Option<String>,
    pub account_login: Option<String>,
    pub scopes: Scopes,
    pub status: ConnectionStatus,
    /// When the row was first made (its first connect).
    pub created_at: OffsetDateTime,
    /// When the grant in force was made: the last connect (a reconnect after a revocation
    /// is a new grant on the same row).
    pub granted_at: OffsetDateTime,
    pub refreshed_at: Option<OffsetDateTime>,
    pub last_used_at: Option<OffsetDateTime>,
    pub access_expires_at: Option<OffsetDateTime>,
    /// The issuer of the IdP whose subject holds it.
    pub issuer: Option<String>,
}

/// What the admin API lists connections by; `None` matches all.
#[derive(Debug, Default)]
pub struct ConnectionFilter<'a> {
    pub id: Option<ConnectionId>,
    pub subject: Option<&'a Subject>,
    pub provider: Option<&'a ProviderId>,
    pub status: Option<ConnectionStatus>,
    /// The (subject, provider) of the last row of the page before, as an opaque cursor
    /// gave it back (compared as text, never parsed).
    pub after: Option<(&'a str, &'a str)>,
}

/// One page of a tenant's connections, ordered by (subject, provider), after the cursor.
pub async fn list_connections(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    filter: &ConnectionFilter<'_>,
    limit: i64,
) -> Result<Vec<ConnectionMeta>, sqlx::Error> {
    let (after_subject, after_provider) = filter.after.map_or((None, None), |(s, p)| (Some(s), Some(p)));
    sqlx::query_as!(
        ConnectionMeta,
        r#"SELECT c.id AS "id: ConnectionId", c.subject AS "subject: Subject", c.provider AS "provider: ProviderId",
                  c.account_id, c.account_login, c.scopes AS "scopes: Scopes",
                  c.status AS "status: ConnectionStatus", c.created_at, c.granted_at,
                  c.refreshed_at,
                  connection_last_used(c.id, c.tenant_id, c.subject, u.last_used_at) AS "last_used_at?",
                  c.access_expires_at, c.issuer
           FROM connections c LEFT JOIN connection_usage u ON u.connection_id = c.id
           WHERE c.tenant_id = $1
             AND ($2::text IS NULL OR c.subject = $2)
             AND ($3::text IS NULL OR c.provider = $3)
             AND ($4::text IS NULL OR c.status = $4)
             AND ($5::text IS NULL OR (c.subject, c.provider) > ($5, $6::text))
             AND ($8::uuid IS NULL OR c.id = $8)
           ORDER BY c.subject, c.provider
           LIMIT $7"#,
        tenant_id.as_str(),
        filter.subject.map(Subject::as_str),
        filter.provider.map(ProviderId::as_str),
        filter.status.map(ConnectionStatus::as_str),
        after_subject,
        after_provider,
        limit,
        filter.id.map(|id| id.as_uuid()),
    )
    .fetch_all(db)
    .await
}

/// One of a tenant's connections, as listed.
pub async fn connection_meta(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    id: ConnectionId,
) -> Result<Option<ConnectionMeta>, sqlx::Error> {
    let filter = ConnectionFilter { id: Some(id), ..ConnectionFilter::default() };
    Ok(list_connections(db, tenant_id, &filter, 1).await?.pop())
}

/// A connection as its owner sees it on "Your connections", with its tenant.
#[derive(Debug, Clone)]
pub struct HeldRow {
    pub tenant_id: TenantId,
    pub meta: ConnectionMeta,
}

/// Every connection of a person that is not revoked, in every tenant, by tenant and
/// provider. The person is the pair (`issuer`, `subject`): the `sub` at one IdP, the same
/// in each tenant of that IdP; another IdP's subject of the same name is someone else.
pub async fn held_by_subject(
    db: impl PgExecutor<'_>,
    issuer: &str,
    subject: &Subject,
) -> Result<Vec<HeldRow>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT c.tenant_id AS "tenant_id: TenantId", c.id AS "id: ConnectionId", c.subject AS "subject: Subject",
                  c.provider AS "provider: ProviderId", c.account_id, c.account_login, c.scopes AS "scopes: Scopes",
                  c.status AS "status: ConnectionStatus", c.created_at, c.granted_at,
                  c.refreshed_at,
                  connection_last_used(c.id, c.tenant_id, c.subject, u.last_used_at) AS "last_used_at?",
                  c.access_expires_at, c.issuer
           FROM connections c LEFT JOIN connection_usage u ON u.connection_id = c.id
           WHERE c.subject = $1 AND c.issuer = $2 AND c.status <> 'revoked'
           ORDER BY c.tenant_id, c.provider"#,
        subject.as_str(),
        issuer
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| HeldRow {
            tenant_id: r.tenant_id,
            meta: ConnectionMeta {
                id: r.id,
                subject: r.subject,
                provider: r.provider,
                account_id: r.account_id,
                account_login: r.account_login,
                scopes: r.scopes,
                status: r.status,
                created_at: r.created_at,
                granted_at: r.granted_at,
                refreshed_at: r.refreshed_at,
                last_used_at: r.last_used_at,
                access_expires_at: r.access_expires_at,
                issuer: r.issuer,
            },
        })
        .collect())
}

/// Who holds a connection: its tenant, and the person (issuer, subject).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub tenant_id: TenantId,
    pub issuer: Option<String>,
    pub subject: Subject,
}

/// The tenant and person a connection belongs to, whatever its tenant.
pub async fn owner_of(db: impl PgExecutor<'_>, id: ConnectionId) -> Result<Option<Owner>, sqlx::Error> {
    sqlx::query_as!(
        Owner,
        r#"SELECT tenant_id AS "tenant_id: TenantId", issuer, subject AS "subject: Subject"
           FROM connections WHERE id = $1"#,
        id.as_uuid()
    )
    .fetch_optional(db)
    .await
}

/// Records the default IdP's issuer: the one a row inserted without an issuer (by a binary
/// of the release before, during a rolling deploy) gets (`default_idp`, its trigger).
pub async fn set_default_issuer(db: impl PgExecutor<'_>, issuer: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO default_idp (one, issuer) VALUES (true, $1)
         ON CONFLICT (one) DO UPDATE SET issuer = EXCLUDED.issuer WHERE default_idp.issuer <> EXCLUDED.issuer",
        issuer
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Sets the issuer of rows made before issuers were recorded (or by a binary of the release
/// before) to `issuer`: the default IdP's, the only one those binaries knew.
/// At most `batch` rows a call (each call its own short statement: a large table is never
/// locked whole); returns how many it set.
pub async fn backfill_issuer(db: impl PgExecutor<'_>, issuer: &str, batch: i64) -> Result<u64, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE connections SET issuer = $1 WHERE id IN (SELECT id FROM connections WHERE issuer IS NULL LIMIT $2)",
        issuer,
        batch
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Ids of a subject's connections that still hold a grant (off-boarding).
pub async fn live_connection_ids(
    db: impl PgExecutor<'_>,
    tenant_id: &TenantId,
    subject: &Subject,
    provider: Option<&ProviderId>,
) -> Result<Vec<ConnectionId>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id: ConnectionId" FROM connections
           WHERE tenant_id = $1 AND subject = $2 AND ($3::text IS NULL OR provider = $3) AND status <> 'revoked'
           ORDER BY provider"#,
        tenant_id.as_str(),
        subject.as_str(),
        provider.map(ProviderId::as_str)
    )
    .fetch_all(db)
    .await
}

/// A batch of rows sealed under another key than their tenant's active data key, or before
/// seal generations or issuer binding, by id after `after`, locked for re-sealing; rows
/// another instance is working on are skipped, not waited for.
pub async fn lock_rows_not_under_active_key(
    db: impl PgExecutor<'_>,
    after: uuid::Uuid,
    limit: i64,
) -> Result<Vec<ConnectionRow>, sqlx::Error> {
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT id AS "id: ConnectionId", tenant_id AS "tenant_id: TenantId", subject AS "subject: Subject",
                  provider AS "provider: ProviderId", account_id, account_login, scopes AS "scopes: Scopes",
                  status AS "status: ConnectionStatus", key_id, access_token_ct, refresh_token_ct, id_token_ct,
                  token_type, access_expires_at, created_at, refreshed_at, version, seal_version,
                  xmin::text::bigint AS "xmin!", issuer
           FROM connections
           WHERE key_id IS NOT NULL
             AND NOT mcpc_tenant_ended(tenant_id)
             AND (key_id IS DISTINCT FROM mcpc_active_key_id(tenant_id) OR seal_version IS NULL
                  OR (issuer IS NOT NULL AND mcpc_unbound_seal(access_token_ct, refresh_token_ct, id_token_ct)))
             AND (access_token_ct IS NOT NULL OR refresh_token_ct IS NOT NULL OR id_token_ct IS NOT NULL)
             AND id > $2
           ORDER BY id
           LIMIT $1
           FOR UPDATE SKIP LOCKED"#,
        limit,
        after
    )
    .fetch_all(db)
    .await
}

pub async fn count_rows_not_under_active_key(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    let n = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM connections
           WHERE key_id IS NOT NULL
             AND NOT mcpc_tenant_ended(tenant_id)
             AND (key_id IS DISTINCT FROM mcpc_active_key_id(tenant_id) OR seal_version IS NULL
                  OR (issuer IS NOT NULL AND mcpc_unbound_seal(access_token_ct, refresh_token_ct, id_token_ct)))
             AND (access_token_ct IS NOT NULL OR refresh_token_ct IS NOT NULL OR id_token_ct IS NOT NULL)"#
    )
    .fetch_one(db)
    .await?;
    Ok(n)
}

/// Closes legacy writes (`vault_state`) when no sealed value without a seal generation is
/// left (checked in the same statement): such values are refused from now on, by the
/// database's triggers. Whether it closed them now.
pub async fn close_legacy_writes(db: impl PgExecutor<'_>) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"UPDATE vault_state SET legacy_open = false
           WHERE legacy_open
             AND NOT EXISTS (SELECT 1 FROM connections WHERE seal_version IS NULL
                             AND COALESCE(access_token_ct, refresh_token_ct, id_token_ct) IS NOT NULL)
             AND NOT EXISTS (SELECT 1 FROM webhooks WHERE secret_version IS NULL)"#
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// Closes unbound writes (`vault_state.unbound_open`) when no row that names an issuer
/// holds a sealed value without it bound (checked in the same statement): the database
/// refuses such values from now on. Whether it closed them now.
pub async fn close_unbound_writes(db: impl PgExecutor<'_>) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        r#"UPDATE vault_state SET unbound_open = false
           WHERE unbound_open
             AND NOT EXISTS (SELECT 1 FROM connections
                              WHERE issuer IS NOT NULL
                                AND mcpc_unbound_seal(access_token_ct, refresh_token_ct, id_token_ct))"#
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// Re-sealed ciphertexts of the same tokens under the current key, at seal generation
/// `generation` (the row's next).
pub async fn store_resealed(
    db: impl PgExecutor<'_>,
    id: ConnectionId,
    key_id: &str,
    generation: i64,
    access_token_ct: Option<&[u8]>,
    refresh_token_ct: Option<&[u8]>,
    id_token_ct: Option<&[u8]>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"UPDATE connections SET key_id = $2, access_token_ct = $3, refresh_token_ct = $4, id_token_ct = $5,
                                  seal_version = $6, updated_at = now()
           WHERE id = $1"#,
        id.as_uuid(),
        key_id,
        access_token_ct,
        refresh_token_ct,
        id_token_ct,
        generation
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Marks use from the batched hand-out audit: a connection already marked within the last
/// ten minutes is not written again (a hot connection costs one write in ten minutes;
/// between marks its last use is read from the audit rows). Ids of connections deleted
/// meanwhile are skipped.
pub async fn touch_connections(db: impl PgExecutor<'_>, ids: &[uuid::Uuid]) -> Result<(), sqlx::Error> {
    // A mark at most every ten minutes: between marks the last use is read from the
    // audit rows (`connection_last_used`). Rows marked within them (by any instance) are
    // left out before the insert: an upsert that then changes nothing still locks the row
    // it conflicts with, and a new instance, or every instance of several, would otherwise
    // lock each row in use for nothing.
    sqlx::query!(
        r#"INSERT INTO connection_usage (connection_id, last_used_at)
           SELECT c.id, now() FROM connections c
           LEFT JOIN connection_usage u ON u.connection_id = c.id
           WHERE c.id = ANY($1) AND (u.last_used_at IS NULL OR u.last_used_at < now() - interval '10 minutes')
           ON CONFLICT (connection_id) DO UPDATE SET last_used_at = EXCLUDED.last_used_at
           WHERE connection_usage.last_used_at < EXCLUDED.last_used_at - interval '10 minutes'"#,
        ids
    )
    .execute(db)
    .await?;
    Ok(())
}

/// One connection as an operator lists it (`mcp-connect connections list`): no ciphertext.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct OperatorRow {
    pub id: ConnectionId,
    pub tenant_id: TenantId,
    pub subject: Subject,
    pub issuer: Option<String>,
    pub provider: ProviderId,
    pub status: ConnectionStatus,
    pub account_login: Option<String>,
    pub scopes: Scopes,
    #[serde(with = "time::serde::rfc3339")]
    pub granted_at: OffsetDateTime,
}

/// Connections across tenants, optionally of one tenant and one subject, by tenant,
/// subject and provider (at most `limit`).
pub async fn list_for_operator(
    db: impl PgExecutor<'_>,
    tenant_id: Option<&TenantId>,
    subject: Option<&Subject>,
    limit: i64,
) -> Result<Vec<OperatorRow>, sqlx::Error> {
    sqlx::query_as::<_, OperatorRow>(
        "SELECT id, tenant_id, subject, issuer, provider, status, account_login, scopes, granted_at
         FROM connections
         WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR subject = $2)
         ORDER BY tenant_id, subject, provider LIMIT $3",
    )
    .bind(tenant_id)
    .bind(subject)
    .bind(limit)
    .fetch_all(db)
    .await
}
