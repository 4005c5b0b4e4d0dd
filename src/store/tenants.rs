//! `tenants`: inserted or updated from each instance's configuration at start-up, never
//! deactivated by it; `mcp-connect tenant deactivate|activate` switches one off and on.
//! The operator API (`/operator/v1/tenants`) makes and changes tenants of its own
//! (`managed_by = 'api'`); a file that names one takes it over at its next start.

use crate::domain::{IdpName, TenantConfig, TenantId};
use sqlx::PgExecutor;

pub async fn upsert_tenant(db: impl PgExecutor<'_>, t: &TenantConfig) -> Result<(), sqlx::Error> {
    let providers: Vec<String> = t.providers.iter().map(|p| p.as_str().to_owned()).collect();
    sqlx::query!(
        // The subject-token settings a file leaves out ($4, $5 NULL) keep the database's
        // values: an instance started with an older or shorter file never lowers them.
        // The IdP ($6) likewise: a file that leaves it out keeps the database's (`default`
        // for a new tenant), so an instance with an older file never moves a tenant.
        // The hand-out ($7) likewise: left out, the database's stands. Not the workload
        // issuers ($8): a trust the file no longer names ends (left out: none).
        r#"INSERT INTO tenants
               (id, display_name, allowed_providers, subject_token_audience, require_subject_token, idp, hand_out,
                workload_issuers, active, managed_by, updated_at)
           VALUES ($1, $2, $3, $4, COALESCE($5, false), COALESCE($6, 'default'), $7, $8, true, 'file', now())
           ON CONFLICT (id) DO UPDATE
           SET display_name = EXCLUDED.display_name, allowed_providers = EXCLUDED.allowed_providers,
               subject_token_audience = COALESCE($4, tenants.subject_token_audience),
               require_subject_token = COALESCE($5, tenants.require_subject_token),
               idp = COALESCE($6, tenants.idp), hand_out = COALESCE($7, tenants.hand_out),
               workload_issuers = $8,
               managed_by = 'file', updated_at = now()
           WHERE tenants.managed_by <> 'file'
              OR tenants.display_name IS DISTINCT FROM EXCLUDED.display_name
              OR tenants.allowed_providers IS DISTINCT FROM EXCLUDED.allowed_providers
              OR ($6::text IS NOT NULL AND tenants.idp IS DISTINCT FROM $6)
              OR ($4::text IS NOT NULL AND tenants.subject_token_audience IS DISTINCT FROM $4)
              OR ($5::bool IS NOT NULL AND tenants.require_subject_token IS DISTINCT FROM $5)
              OR ($7::jsonb IS NOT NULL AND tenants.hand_out IS DISTINCT FROM $7)
              OR tenants.workload_issuers IS DISTINCT FROM $8"#,
        t.id.as_str(),
        t.display_name,
        &providers,
        t.subject_token.audience,
        t.subject_token.required,
        t.idp.as_ref().map(IdpName::as_str),
        hand_out(t),
        workload_issuers(t)
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The tenant's hand-out as stored (`None`: not said).
fn hand_out(t: &TenantConfig) -> Option<serde_json::Value> {
    t.hand_out.as_ref().and_then(|h| serde_json::to_value(h).ok())
}

/// The tenant's workload issuers as stored (`None`: none).
fn workload_issuers(t: &TenantConfig) -> Option<serde_json::Value> {
    t.workload_issuers.as_ref().filter(|w| !w.is_empty()).and_then(|w| serde_json::to_value(w).ok())
}

/// Switches a tenant on or off (its keys and links stop or start working). Returns false
/// for an unknown tenant; a tenant already in that state is left as it is.
pub async fn set_tenant_active(
    db: impl PgExecutor<'_>,
    id: &TenantId,
    active: bool,
) -> Result<Option<bool>, sqlx::Error> {
    // The old value, so the caller can tell "changed" from "already so".
    sqlx::query_scalar!(
        r#"UPDATE tenants t SET active = $2, updated_at = now()
           FROM (SELECT id, active FROM tenants WHERE id = $1 FOR UPDATE) old
           WHERE t.id = old.id
           RETURNING old.active AS "was!""#,
        id.as_str(),
        active
    )
    .fetch_optional(db)
    .await
}

/// Ends a tenant: off for good (the database keeps an ended tenant off). `None`: no such
/// tenant; `Some(true)`: ended now; `Some(false)`: it had ended before.
pub async fn end_tenant(db: impl PgExecutor<'_>, id: &TenantId) -> Result<Option<bool>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"UPDATE tenants t SET active = false, ended_at = COALESCE(t.ended_at, now()), updated_at = now()
           FROM (SELECT id, ended_at FROM tenants WHERE id = $1 FOR UPDATE) old
           WHERE t.id = old.id
           RETURNING old.ended_at IS NULL AS "ended_now!""#,
        id.as_str()
    )
    .fetch_optional(db)
    .await
}

/// Whether the tenant was ended (`None`: no such tenant).
pub async fn is_ended(db: impl PgExecutor<'_>, id: &TenantId) -> Result<Option<bool>, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT ended_at IS NOT NULL AS "ended!" FROM tenants WHERE id = $1"#, id.as_str())
        .fetch_optional(db)
        .await
}

/// A tenant as stored. Its ids stay text here: `tenants::Tenants::reload` parses them and
/// skips a malformed row rather than failing every tenant's read over one.
#[derive(Debug, Clone)]
pub struct TenantRow {
    pub id: String,
    pub display_name: String,
    pub allowed_providers: Vec<String>,
    pub active: bool,
    pub subject_token_audience: Option<String>,
    pub require_subject_token: bool,
    /// The name of the tenant's IdP (`default`: `[idp]`).
    pub idp: String,
    /// `file` (a configuration file writes it at every start) or `api` (the operator API).
    pub managed_by: String,
    /// `HandOutPolicy` as JSON; `None`: credentials.
    pub hand_out: Option<serde_json::Value>,
    /// `domain::workload::WorkloadIssuer`s as JSON; `None`: none.
    pub workload_issuers: Option<serde_json::Value>,
}

/// Every active tenant.
pub async fn active_tenants(db: impl PgExecutor<'_>) -> Result<Vec<TenantRow>, sqlx::Error> {
    sqlx::query_as!(
        TenantRow,
        "SELECT id, display_name, allowed_providers, active, subject_token_audience, require_subject_token, idp,
                managed_by, hand_out, workload_issuers
         FROM tenants WHERE active ORDER BY id"
    )
    .fetch_all(db)
    .await
}

/// Every tenant, active or not (for operators).
pub async fn all_tenants(db: impl PgExecutor<'_>) -> Result<Vec<TenantRow>, sqlx::Error> {
    sqlx::query_as!(
        TenantRow,
        "SELECT id, display_name, allowed_providers, active, subject_token_audience, require_subject_token, idp,
                managed_by, hand_out, workload_issuers
         FROM tenants ORDER BY id"
    )
    .fetch_all(db)
    .await
}

pub async fn tenant_exists(db: impl PgExecutor<'_>, id: &TenantId) -> Result<bool, sqlx::Error> {
    let r =
        sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1 AND active) AS "e!""#, id.as_str())
            .fetch_one(db)
            .await?;
    Ok(r)
}

/// Locks a tenant's row to the end of the transaction (changes that must not race each
/// other within a tenant, e.g. the webhook limit). Whether the tenant exists.
pub async fn lock_tenant(db: impl PgExecutor<'_>, id: &TenantId) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query_scalar!("SELECT id FROM tenants WHERE id = $1 FOR NO KEY UPDATE", id.as_str())
        .fetch_optional(db)
        .await?
        .is_some())
}

/// One tenant, active or not; with `lock`, locked to the end of the transaction.
pub async fn tenant(db: impl PgExecutor<'_>, id: &TenantId, lock: bool) -> Result<Option<TenantRow>, sqlx::Error> {
    if lock {
        sqlx::query_as!(
            TenantRow,
            "SELECT id, display_name, allowed_providers, active, subject_token_audience, require_subject_token, idp,
                    managed_by, hand_out, workload_issuers
             FROM tenants WHERE id = $1 FOR NO KEY UPDATE",
            id.as_str()
        )
        .fetch_optional(db)
        .await
    } else {
        sqlx::query_as!(
            TenantRow,
            "SELECT id, display_name, allowed_providers, active, subject_token_audience, require_subject_token, idp,
                    managed_by, hand_out, workload_issuers
             FROM tenants WHERE id = $1",
            id.as_str()
        )
        .fetch_optional(db)
        .await
    }
}

/// A file takes over a tenant the operator API made: every setting becomes the file's,
/// those it leaves out the defaults (no subject-token audience, not required, the default
/// IdP), not the operator's (whose keys the caller revokes). `false`: not an API tenant.
pub async fn take_over(db: impl PgExecutor<'_>, t: &TenantConfig) -> Result<bool, sqlx::Error> {
    write_api_tenant(db, t, "file").await
}

/// How many tenants the operator API keeps.
pub async fn count_managed(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM tenants WHERE managed_by = 'api'"#).fetch_one(db).await
}

/// Inserts a tenant the operator API makes (active, `managed_by = 'api'`). `false`: a
/// tenant with that id exists already (it is left as it is).
pub async fn insert_managed_tenant(db: impl PgExecutor<'_>, t: &TenantConfig) -> Result<bool, sqlx::Error> {
    let providers: Vec<String> = t.providers.iter().map(|p| p.as_str().to_owned()).collect();
    let r = sqlx::query!(
        r#"INSERT INTO tenants
               (id, display_name, allowed_providers, subject_token_audience, require_subject_token, idp, hand_out,
                workload_issuers, active, managed_by, updated_at)
           VALUES ($1, $2, $3, $4, COALESCE($5, false), COALESCE($6, 'default'), $7, $8, true, 'api', now())
           ON CONFLICT (id) DO NOTHING"#,
        t.id.as_str(),
        t.display_name,
        &providers,
        t.subject_token.audience,
        t.subject_token.required,
        t.idp.as_ref().map(IdpName::as_str),
        hand_out(t),
        workload_issuers(t)
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Writes what the operator API keeps of a tenant it made (every setting but `active`).
/// `false`: no such tenant of the API's (a file took it over meanwhile, or it is gone).
pub async fn update_managed_tenant(db: impl PgExecutor<'_>, t: &TenantConfig) -> Result<bool, sqlx::Error> {
    write_api_tenant(db, t, "api").await
}

/// Every setting but `active` of a tenant the API keeps, written as `t` says, and who keeps
/// it from now on (`managed_by`: `api` for a change, `file` for a takeover).
async fn write_api_tenant(db: impl PgExecutor<'_>, t: &TenantConfig, kept_by: &str) -> Result<bool, sqlx::Error> {
    let providers: Vec<String> = t.providers.iter().map(|p| p.as_str().to_owned()).collect();
    let r = sqlx::query!(
        r#"UPDATE tenants
           SET display_name = $2, allowed_providers = $3, subject_token_audience = $4,
               require_subject_token = COALESCE($5, false), idp = COALESCE($6, 'default'), managed_by = $7,
               hand_out = COALESCE($8, hand_out), workload_issuers = $9,
               updated_at = now()
           WHERE id = $1 AND managed_by = 'api'"#,
        t.id.as_str(),
        t.display_name,
        &providers,
        t.subject_token.audience,
        t.subject_token.required,
        t.idp.as_ref().map(IdpName::as_str),
        kept_by,
        hand_out(t),
        workload_issuers(t)
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}
