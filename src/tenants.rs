//! The tenants and providers an instance serves.
//!
//! Tenants: every *active* tenant in the database, not only those in
//! its own configuration file, so instances with different files (a rolling deploy, `dev`
//! against a shared database) agree. Start-up inserts or updates the tenants of its file
//! and never deactivates one; only `mcp-connect tenant deactivate|activate` does. The copy
//! in memory is read anew when a tenant change is announced (`tenant:<id>` on the
//! `mcpc_api_keys` channel) and whenever the change listener (re)connects.

//!
//! Providers: those of this instance's configuration file, and beside them those made over
//! the operator API (`providers`, read with the tenants, on the same notifications); the
//! file's win where both name one id.

use crate::domain::{ProviderId, SubjectTokenPolicy, TenantConfig, TenantId};
use crate::net::http::Reach;
use crate::providers::{Origin, Provider, ProviderRegistry};
use crate::store::{self, Db};
use crate::vault::{Vault, VaultError};
use secrecy::{ExposeSecret, SecretString};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// A snapshot of the active tenants, and the providers.
pub struct Tenants {
    active: RwLock<Arc<HashMap<TenantId, TenantConfig>>>,
    providers: Arc<Providers>,
}

impl Tenants {
    /// Reads the active tenants and the providers from the database.
    pub async fn load(pool: &Db, providers: Arc<Providers>) -> Result<Self, sqlx::Error> {
        let t = Self { active: RwLock::default(), providers };
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
                Some((id.clone(), TenantConfig { id, display_name: r.display_name, providers, subject_token, idp }))
            })
            .collect();
        if let Ok(mut a) = self.active.write() {
            *a = Arc::new(map);
        }
        Ok(())
    }

    /// Whether an active tenant may use a provider (`None`: no such active tenant). On
    /// every `/v1/token`, so it copies nothing.
    pub fn allows(&self, id: &TenantId, provider: &ProviderId) -> Option<bool> {
        self.active.read().ok().and_then(|a| a.get(id).map(|t| t.providers.contains(provider)))
    }

    /// How an active tenant's requests prove their subject (`None`: no such active tenant).
    pub fn subject_token_policy(&self, id: &TenantId) -> Option<SubjectTokenPolicy> {
        self.active.read().ok().and_then(|a| a.get(id).map(|t| t.subject_token.clone()))
    }

    /// The IdP an active tenant names (`None`: no such active tenant).
    pub fn idp_of(&self, id: &TenantId) -> Option<Option<crate::domain::IdpName>> {
        self.active.read().ok().and_then(|a| a.get(id).map(|t| t.idp.clone()))
    }

    /// The display name of an active tenant.
    pub fn display_name(&self, id: &TenantId) -> Option<String> {
        self.active.read().ok().and_then(|a| a.get(id).map(|t| t.display_name.clone()))
    }
}

/// The providers: the file's, and those of the operator API.
pub struct Providers {
    file: ProviderRegistry,
    vault: Arc<Vault>,
    /// How the operator API's providers are reached (`[operator] allow_private_endpoints`).
    reach: Reach,
    all: RwLock<ProviderRegistry>,
}

impl Providers {
    /// The file's providers alone, until [`Self::reload`] reads the others.
    pub fn new(file: ProviderRegistry, vault: Arc<Vault>, allow_private_endpoints: bool) -> Self {
        let reach = if allow_private_endpoints { Reach::Private } else { Reach::Public };
        Self { all: RwLock::new(file.clone()), file, vault, reach }
    }

    /// How the operator API's providers are reached.
    pub fn reach(&self) -> Reach {
        self.reach
    }

    /// Reads the providers made over the operator API. One that does not open or check
    /// (a key gone from the keyring, settings of a newer release) is left out, said in
    /// the log by id only.
    pub async fn reload(&self, pool: &Db) -> Result<(), sqlx::Error> {
        let rows = store::providers::all(pool).await?;
        // An id some instance's file names is the files' everywhere (an instance whose file
        // lacks it serves none under it, never the API's).
        let configured: std::collections::HashSet<String> =
            store::providers::configured_ids(pool).await?.into_iter().collect();
        let mut more = Vec::new();
        for row in rows {
            if configured.contains(&row.id) {
                continue;
            }
            match provider_of(&self.vault, &row, self.reach) {
                Ok(p) => more.push(p),
                Err(e) => {
                    tracing::error!(provider = %row.id, error = %e, "a provider of the operator API is not served")
                }
            }
        }
        if let Ok(mut all) = self.all.write() {
            *all = self.file.with(more);
        }
        Ok(())
    }

    /// A provider by id, active or not ([`Provider::active`]).
    pub fn get(&self, id: &ProviderId) -> Option<Arc<Provider>> {
        self.all.read().ok().and_then(|a| a.get(id).cloned())
    }

    /// Whether the configuration file names it (then the operator API may not change it).
    pub fn in_file(&self, id: &ProviderId) -> bool {
        self.file.get(id).is_some()
    }

    /// Every provider now, active or not.
    pub fn snapshot(&self) -> ProviderRegistry {
        self.all.read().map(|a| a.clone()).unwrap_or_else(|_| self.file.clone())
    }
}

/// Why a provider row is not served.
#[derive(Debug, thiserror::Error)]
pub enum ProviderRowError {
    #[error("its client secret does not open: {0}")]
    Secret(#[from] VaultError),
    #[error("its settings do not parse: {0}")]
    Settings(#[from] serde_json::Error),
    #[error("{0}")]
    Invalid(crate::config::ConfigError),
}

/// A row as the provider it describes, checked as a file's provider is.
pub fn provider_of(
    vault: &Vault,
    row: &store::providers::ProviderRow,
    reach: Reach,
) -> Result<Provider, ProviderRowError> {
    let mut raw: crate::config::RawProvider = serde_json::from_value(row.settings.clone())?;
    // Never a file on this host, nor the file's own SSRF and homograph exceptions: a row
    // is not the configuration file.
    raw.client_secret_file = None;
    raw.allow_private_endpoints = false;
    raw.allow_idn_hosts = Vec::new();
    let secret = open_client_secret(vault, row, &identity_of(&raw))?;
    let mut p = crate::config::validate_provider(&row.id, raw, Some(secret.expose_secret().to_owned()))
        .map_err(ProviderRowError::Invalid)?;
    p.origin = Origin::Operator { revision: row.revision, reach, active: row.active };
    Ok(p)
}

const CLIENT_SECRET_PURPOSE: &str = "provider_client_secret";

/// The settings a provider's grants and links are bound to, fixed once it is made: its
/// template, client and every endpoint (`flows::providers` refuses to change them). Their
/// hash is bound into the sealed secret, so a row whose endpoints were changed in the
/// database, not through the API, no longer opens: the secret is never sent elsewhere.
pub const IDENTITY: [&str; 7] =
    ["template", "client_id", "issuer", "authorize_url", "token_url", "userinfo_url", "revocation_url"];

/// The identity a row's stored settings say (as bound into its sealed secret): read from
/// the JSON as stored, so that settings of a newer release still yield it.
pub fn row_identity(row: &store::providers::ProviderRow) -> [u8; 32] {
    identity_of_settings(&row.settings)
}

/// The identity of a provider's settings, as bound into its sealed secret.
pub fn identity_of(raw: &crate::config::RawProvider) -> [u8; 32] {
    identity_of_settings(&serde_json::to_value(raw).unwrap_or_default())
}

/// The identity of settings as stored (`RawProvider` as JSON).
fn identity_of_settings(v: &serde_json::Value) -> [u8; 32] {
    let fixed: Vec<&serde_json::Value> =
        IDENTITY.iter().map(|k| v.get(*k).unwrap_or(&serde_json::Value::Null)).collect();
    crate::crypto::lookup_hash(CLIENT_SECRET_PURPOSE, &serde_json::to_string(&fixed).unwrap_or_default())
}

/// What a provider's sealed client secret is bound to: its id, generation and identity.
fn binding(id: &str, version: i64, identity: &[u8; 32]) -> Vec<u8> {
    let mut b = id.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(identity);
    b
}

/// Seals a provider's client secret for its row at generation `version`.
pub fn seal_client_secret(
    vault: &Vault,
    id: &str,
    version: i64,
    identity: &[u8; 32],
    secret: &SecretString,
) -> Result<Vec<u8>, VaultError> {
    vault.seal_aux(CLIENT_SECRET_PURPOSE, &binding(id, version, identity), secret.expose_secret().as_bytes())
}

/// Opens a row's client secret (sealed for its id, generation and `identity`).
pub fn open_client_secret(
    vault: &Vault,
    row: &store::providers::ProviderRow,
    identity: &[u8; 32],
) -> Result<SecretString, VaultError> {
    let binding = binding(&row.id, row.secret_version, identity);
    let pt = vault.open_aux(&row.key_id, CLIENT_SECRET_PURPOSE, &binding, &row.client_secret_sealed)?;
    String::from_utf8(pt.to_vec()).map(SecretString::from).map_err(|_| VaultError::Encoding)
}
