//! Tenants changed while the service runs: an operator switches one off or on
//! (`mcp-connect tenant`, or `active` over the operator API), and the operator API makes
//! and changes tenants of its own. Every instance follows within the cache bound: a
//! tenant's row announces each change (`tenant:<id>`). Start-up never deactivates one.

use crate::config::{RawTenant, TenantProblem};
use crate::domain::{AuditKind, Caller, TenantConfig, TenantId};
use crate::oauth::resolve::Idps;
use crate::providers::ProviderRegistry;
use crate::store::{self, Db, audit::AuditEvent, tenants::TenantRow};

/// Switches a tenant on or off, with an audit event when it changed. `None`: no such
/// tenant; `Some(changed)`. An ended tenant is not switched on.
pub async fn set_tenant_active(
    pool: &Db,
    tenant: &TenantId,
    active: bool,
    by: &str,
) -> Result<Option<bool>, TenantRefusal> {
    let mut tx = store::begin(pool).await?;
    let changed = set_active(&mut tx, tenant, active, by).await?;
    tx.commit().await?;
    Ok(changed)
}

async fn set_active(
    tx: &mut crate::store::Conn,
    tenant: &TenantId,
    active: bool,
    by: &str,
) -> Result<Option<bool>, TenantRefusal> {
    // An ended tenant stays off (the database refuses it too).
    if active && store::tenants::is_ended(&mut *tx, tenant).await? == Some(true) {
        return Err(TenantRefusal::Ended(tenant.to_string()));
    }
    let Some(was) = store::tenants::set_tenant_active(&mut *tx, tenant, active).await? else {
        return Ok(None);
    };
    if was != active {
        let mut ev = AuditEvent::new(if active { AuditKind::TenantActivated } else { AuditKind::TenantDeactivated });
        ev.tenant_id = Some(tenant.clone());
        ev.detail = serde_json::json!({ "by": by });
        store::audit::insert_event(&mut *tx, &ev).await?;
    }
    Ok(Some(was != active))
}

/// Why the operator API refused a tenant change.
#[derive(Debug, thiserror::Error)]
pub enum TenantRefusal {
    #[error("no tenant {0}")]
    NotFound(String),
    #[error("tenant {0} exists already")]
    Exists(String),
    #[error("the operator API has made {MAX_API_TENANTS} tenants, as many as it may")]
    TooMany,
    /// Only `active` of a tenant a configuration file keeps may change here: the file
    /// would undo anything else at the next start.
    #[error("tenant {0} is kept by a configuration file: change it there (only `active` may be changed here)")]
    KeptByFile(String),
    #[error("{field}: {message}")]
    UnknownProvider { field: String, message: String },
    #[error("idp: {0:?} is not configured under [idps]")]
    UnknownIdp(String),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("tenant {0} was ended: it stays off, and nothing it held opens again")]
    Ended(String),
    #[error(
        "tenant {tenant} has {values} sealed values of the releases before data keys: run `mcp-connect rotate-key` (it moves them under the tenant's data key), then end it"
    )]
    NotUnderDataKeys { tenant: String, values: i64 },
    #[error("confirm: send the tenant's id to end it")]
    Unconfirmed,
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// What ending a tenant did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Ended {
    /// `false`: it had ended before (nothing more was done).
    pub ended_now: bool,
    pub data_keys_destroyed: u64,
    /// Its connections that held tokens: none of them opens any more.
    pub connections: i64,
}

/// Ends a tenant (off-boarding, docs/keys.md): in one transaction it is switched off for
/// good and its data keys are destroyed, so every token, credential and webhook secret it
/// held opens on no instance from then on (at once on every instance that hears the change,
/// `Keys::forget_tenant`; within the data-key cache bound on the others), before any row is
/// deleted.
/// Refused while it holds values sealed before data keys (they would stay readable).
/// `confirm` must be its id. Revoke its grants at the providers first where that matters:
/// afterwards nothing can (`mcp-connect connections revoke --tenant`).
pub async fn end_tenant(pool: &Db, tenant: &TenantId, confirm: &str, by: &str) -> Result<Ended, TenantRefusal> {
    if confirm != tenant.as_str() {
        return Err(TenantRefusal::Unconfirmed);
    }
    let mut tx = store::begin(pool).await?;
    let Some(ended_now) = store::tenants::end_tenant(&mut *tx, tenant).await? else {
        return Err(TenantRefusal::NotFound(tenant.to_string()));
    };
    if !ended_now {
        return Ok(Ended { ended_now, data_keys_destroyed: 0, connections: 0 });
    }
    let values = store::data_keys::count_tenant_values_outside_data_keys(&mut *tx, tenant).await?;
    if values > 0 {
        return Err(TenantRefusal::NotUnderDataKeys { tenant: tenant.to_string(), values });
    }
    let data_keys_destroyed = store::data_keys::destroy_tenant(&mut *tx, tenant).await?;
    let connections = store::data_keys::count_tenant_sealed_connections(&mut *tx, tenant).await?;
    let mut ev = AuditEvent::new(AuditKind::TenantEnded);
    ev.tenant_id = Some(tenant.clone());
    ev.detail = serde_json::json!({ "by": by, "data_keys_destroyed": data_keys_destroyed, "connections": connections });
    store::audit::insert_event(&mut *tx, &ev).await?;
    tx.commit().await?;
    Ok(Ended { ended_now, data_keys_destroyed, connections })
}

/// What a tenant change sets; `None`: left as it is.
#[derive(Debug, Default)]
pub struct TenantChange {
    pub display_name: Option<String>,
    pub providers: Option<Vec<String>>,
    pub idp: Option<String>,
    /// `Some(None)`: remove the audience.
    pub subject_token_audience: Option<Option<String>>,
    pub require_subject_token: Option<bool>,
    pub hand_out: Option<crate::domain::HandOutMode>,
    /// Replaces the overrides whole.
    pub hand_out_providers: Option<std::collections::BTreeMap<String, crate::domain::HandOutMode>>,
    /// Replaces the trusted workload issuers whole (`Some(vec![])`: none).
    pub workload_issuers: Option<Vec<crate::domain::workload::WorkloadIssuer>>,
    pub active: Option<bool>,
}

impl TenantChange {
    /// Whether it changes more than `active`.
    fn changes_settings(&self) -> bool {
        self.display_name.is_some()
            || self.providers.is_some()
            || self.idp.is_some()
            || self.subject_token_audience.is_some()
            || self.require_subject_token.is_some()
            || self.hand_out.is_some()
            || self.hand_out_providers.is_some()
            || self.workload_issuers.is_some()
    }
}

/// What the checks need to know of this deployment.
pub struct Known<'a> {
    /// Every provider now (a tenant may name one that is switched off).
    pub providers: ProviderRegistry,
    pub idps: &'a Idps,
}

/// A tenant checked as a file's `[[tenants]]` is, and its IdP among the configured ones.
fn checked(spec: RawTenant, known: &Known<'_>) -> Result<TenantConfig, TenantRefusal> {
    let t = crate::config::tenant("", spec, &known.providers).map_err(|e| match e.problem {
        TenantProblem::UnknownProvider => {
            TenantRefusal::UnknownProvider { field: e.error.field, message: e.error.message }
        }
        TenantProblem::Invalid => TenantRefusal::Invalid { field: e.error.field, message: e.error.message },
    })?;
    if let Some(idp) = t.idp.as_ref().filter(|n| known.idps.by_name(n.as_str()).is_none()) {
        return Err(TenantRefusal::UnknownIdp(idp.as_str().to_owned()));
    }
    Ok(t)
}

/// At most this many tenants of the operator API: every instance holds every tenant in
/// memory and reads them all on a change, so an operator key cannot grow that without end.
pub const MAX_API_TENANTS: i64 = 10_000;

/// Makes a tenant the operator API keeps, active, with its audit event.
pub async fn create_tenant(
    pool: &Db,
    known: &Known<'_>,
    spec: RawTenant,
    by: &Caller,
) -> Result<TenantRow, TenantRefusal> {
    let t = checked(spec, known)?;
    let mut tx = store::begin(pool).await?;
    // One creation at a time, so that the limit holds under concurrent calls.
    store::lock_named(&mut *tx, "operator_tenants").await?;
    if store::tenants::count_managed(&mut *tx).await? >= MAX_API_TENANTS {
        return Err(TenantRefusal::TooMany);
    }
    if !store::tenants::insert_managed_tenant(&mut *tx, &t).await? {
        return Err(TenantRefusal::Exists(t.id.to_string()));
    }
    let row = store::tenants::tenant(&mut *tx, &t.id, false)
        .await?
        .ok_or_else(|| TenantRefusal::NotFound(t.id.to_string()))?;
    let mut ev = AuditEvent::new(AuditKind::TenantCreated);
    ev.tenant_id = Some(t.id.clone());
    ev.api_key_id = Some(by.id.clone());
    ev.detail = settings_detail(&row, by);
    store::audit::insert_event(&mut *tx, &ev).await?;
    tx.commit().await?;
    Ok(row)
}

/// Changes a tenant: `active` of any, the rest only of one the operator API keeps. Each
/// change is audited with the key that made it.
pub async fn change_tenant(
    pool: &Db,
    known: &Known<'_>,
    id: &TenantId,
    change: TenantChange,
    by: &Caller,
) -> Result<TenantRow, TenantRefusal> {
    let mut tx = store::begin(pool).await?;
    let before =
        store::tenants::tenant(&mut *tx, id, true).await?.ok_or_else(|| TenantRefusal::NotFound(id.to_string()))?;
    if change.changes_settings() {
        if before.managed_by != "api" {
            return Err(TenantRefusal::KeptByFile(id.to_string()));
        }
        let before_hand_out = crate::domain::HandOutPolicy::from_stored(before.hand_out.as_ref());
        let spec = RawTenant {
            id: before.id.clone(),
            display_name: change.display_name.clone().unwrap_or_else(|| before.display_name.clone()),
            providers: change.providers.clone().unwrap_or_else(|| before.allowed_providers.clone()),
            subject_token_audience: change
                .subject_token_audience
                .clone()
                .unwrap_or_else(|| before.subject_token_audience.clone()),
            require_subject_token: Some(change.require_subject_token.unwrap_or(before.require_subject_token)),
            idp: Some(change.idp.clone().unwrap_or_else(|| before.idp.clone())),
            hand_out: Some(change.hand_out.unwrap_or(before_hand_out.default)),
            hand_out_providers: Some(change.hand_out_providers.clone().unwrap_or(before_hand_out.providers)),
            // Kept as they are, unless this release cannot read them: then the change
            // must send them whole, rather than write none over them.
            workload_issuers: Some(match change.workload_issuers.clone() {
                Some(w) => w,
                None => crate::domain::workload::parse_stored(before.workload_issuers.as_ref()).map_err(|why| {
                    TenantRefusal::Invalid {
                        field: "workload_issuers".to_owned(),
                        message: format!("the stored value is unreadable here ({why}); send workload_issuers whole"),
                    }
                })?,
            }),
        };
        let t = checked(spec, known)?;
        store::tenants::update_managed_tenant(&mut *tx, &t).await?;
        let after = store::tenants::tenant(&mut *tx, id, false)
            .await?
            .ok_or_else(|| TenantRefusal::NotFound(id.to_string()))?;
        let mut ev = AuditEvent::new(AuditKind::TenantChanged);
        ev.tenant_id = Some(id.clone());
        ev.api_key_id = Some(by.id.clone());
        ev.detail = settings_detail(&after, by);
        store::audit::insert_event(&mut *tx, &ev).await?;
        if after.idp != before.idp {
            // As a file's move is: the trail says the tenant's people are others now.
            let mut ev = AuditEvent::new(AuditKind::TenantIdpChanged);
            ev.tenant_id = Some(id.clone());
            ev.api_key_id = Some(by.id.clone());
            ev.detail = serde_json::json!({ "from": before.idp, "to": after.idp, "by": by.operator_text() });
            store::audit::insert_event(&mut *tx, &ev).await?;
        }
    }
    if let Some(active) = change.active {
        set_active(&mut tx, id, active, &by.operator_text()).await?;
    }
    let row =
        store::tenants::tenant(&mut *tx, id, false).await?.ok_or_else(|| TenantRefusal::NotFound(id.to_string()))?;
    tx.commit().await?;
    Ok(row)
}

/// A tenant's settings as its audit event records them (none is a secret).
fn settings_detail(t: &TenantRow, by: &Caller) -> serde_json::Value {
    serde_json::json!({
        "by": by.operator_text(),
        "display_name": t.display_name,
        "providers": t.allowed_providers,
        "idp": t.idp,
        "subject_token_audience": t.subject_token_audience,
        "require_subject_token": t.require_subject_token,
        "hand_out": t.hand_out,
        "workload_issuers": t.workload_issuers,
    })
}
