//! The tenants and providers an instance serves.
//!
//! Tenants: every *active* tenant in the database, not only those in
//! its own configuration file, so instances with different files (a rolling deploy, `dev`
//! against a shared database) agree. Start-up inserts or updates the tenants of its file
//! and never deactivates one; only `mcp-connect tenant deactivate|activate` does. The copy
//! in memory is read anew when a tenant change is announced (`tenant:<id>` on the
//! `mcpc_api_keys` channel) and whenever the change listener (re)connects.

//!
//! The providers are read with the tenants, on the same notifications
//! (`providers::Providers`).

use crate::domain::workload::WorkloadIssuer;
use crate::domain::{ProviderId, SubjectTokenPolicy, TenantConfig, TenantId};
use crate::providers::Providers;
use crate::store::{self, Db};
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::Arc;

/// The active tenants by id. foldhash, not SipHash: the keys are the tenants the database
/// holds, and a lookup of a made-up id adds none, so no caller can grow a chain of
/// colliding keys; the map is looked up several times a request.
type ActiveTenants = hashbrown::HashMap<TenantId, TenantConfig>;

/// A snapshot of the active tenants, and the providers.
pub struct Tenants {
    active: ArcSwap<ActiveTenants>,
    /// The active tenants' workload issuers, and the operator's, by `iss`: who trusts each.
    workload_issuers: ArcSwap<WorkloadIssuers>,
    /// The operator's (`[[operator.workload_issuers]]`: from the file, for the instance's life).
    operator_issuers: Vec<Arc<WorkloadIssuer>>,
    providers: Arc<Providers>,
}

/// Each trusted `iss`, with who trusts it (a tenant; `None`: the operator) and how; in
/// that order (the operator first).
pub type WorkloadIssuers = HashMap<String, Vec<(Option<TenantId>, Arc<WorkloadIssuer>)>>;

impl Tenants {
    /// Reads the active tenants and the providers from the database; `operator_issuers`:
    /// the operator's trusted workload issuers.
    pub async fn load(
        pool: &Db,
        providers: Arc<Providers>,
        operator_issuers: &[WorkloadIssuer],
    ) -> Result<Self, sqlx::Error> {
        let t = Self {
            active: ArcSwap::default(),
            workload_issuers: ArcSwap::default(),
            operator_issuers: operator_issuers.iter().cloned().map(Arc::new).collect(),
            providers,
        };
        t.reload(pool).await?;
        Ok(t)
    }

    /// Reads both again (a tenant or a provider changed).
    pub async fn reload(&self, pool: &Db) -> Result<(), sqlx::Error> {
        self.providers.reload(pool).await?;
        let rows = store::tenants::active_tenants(pool).await?;
        let map = rows
            .into_iter()
            .filter_map(|r| {
                // Rows come from our own writes; a malformed one is skipped, not served.
                let id = TenantId::parse(&r.id).ok()?;
                let providers = r.allowed_providers.iter().filter_map(|p| ProviderId::parse(p).ok()).collect();
                let subject_token =
                    SubjectTokenPolicy { audience: r.subject_token_audience, required: Some(r.require_subject_token) };
                // A name that is not an IdP name cannot be an IdP of any instance: the
                // tenant is skipped, never handed to another IdP.
                let idp = Some(crate::domain::IdpName::parse(&r.idp).ok()?);
                let hand_out = Some(crate::domain::HandOutPolicy::from_stored(r.hand_out.as_ref()));
                let workload_issuers = Some(crate::domain::workload::issuers_from_stored(r.workload_issuers.as_ref()));
                let display_name = r.display_name;
                let t = TenantConfig { id, display_name, providers, subject_token, idp, hand_out, workload_issuers };
                Some((t.id.clone(), t))
            })
            .collect::<ActiveTenants>();
        // An issuer whose settings did not change keeps its `Arc`: the workload tokens
        // verified under it stay verified (`workload`), whatever other tenant changed.
        let before = self.workload_issuers();
        let kept = |t: &TenantId, w: &WorkloadIssuer| {
            before
                .get(&w.issuer)
                .and_then(|v| v.iter().find(|(bt, bw)| bt.as_ref() == Some(t) && **bw == *w))
                .map(|(_, bw)| bw.clone())
        };
        let mut by_issuer = WorkloadIssuers::new();
        for w in &self.operator_issuers {
            by_issuer.entry(w.issuer.clone()).or_default().push((None, w.clone()));
        }
        for t in map.values() {
            for w in t.workload_issuers.iter().flatten() {
                let w = kept(&t.id, w).unwrap_or_else(|| Arc::new(w.clone()));
                by_issuer.entry(w.issuer.clone()).or_default().push((Some(t.id.clone()), w));
            }
        }
        // In one order, whatever the map's: a verification is compared entry by entry.
        for v in by_issuer.values_mut() {
            v.sort_by(|a, b| a.0.cmp(&b.0));
        }
        self.active.store(Arc::new(map));
        self.workload_issuers.store(Arc::new(by_issuer));
        Ok(())
    }

    /// Whether an active tenant may use a provider (`None`: no such active tenant). On
    /// every `/v1/token`, so it copies nothing.
    pub fn allows(&self, id: &TenantId, provider: &ProviderId) -> Option<bool> {
        self.active.load().get(id).map(|t| t.providers.contains(provider))
    }

    /// How an active tenant's requests prove their subject (`None`: no such active tenant).
    pub fn subject_token_policy(&self, id: &TenantId) -> Option<SubjectTokenPolicy> {
        self.active.load().get(id).map(|t| t.subject_token.clone())
    }

    /// The IdP an active tenant names (`None`: no such active tenant).
    pub fn idp_of(&self, id: &TenantId) -> Option<Option<crate::domain::IdpName>> {
        self.active.load().get(id).map(|t| t.idp.clone())
    }

    /// Whether `/v1/token` hands out the credential of a tenant's connection to `provider`
    /// (`None`: no such active tenant).
    pub fn hand_out(&self, id: &TenantId, provider: &ProviderId) -> Option<crate::domain::HandOutMode> {
        self.active.load().get(id).map(|t| t.hand_out.as_ref().map(|h| h.for_provider(provider)).unwrap_or_default())
    }

    /// The active tenants' and the operator's trusted workload issuers, by `iss` (empty:
    /// no workload token is taken, and a bearer that is not an API key is refused as one).
    pub fn workload_issuers(&self) -> Arc<WorkloadIssuers> {
        self.workload_issuers.load_full()
    }

    /// The display name of an active tenant.
    pub fn display_name(&self, id: &TenantId) -> Option<String> {
        self.active.load().get(id).map(|t| t.display_name.clone())
    }
}
