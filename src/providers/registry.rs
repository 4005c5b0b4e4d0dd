//! The providers served: this instance's configuration file's, and beside them those made
//! over the operator API (rows of `providers`, read again with the tenants on the same
//! notifications); the file's win where both name one id.

use super::client_secret::{identity_of, open_client_secret};
use super::settings::{RawProvider, SettingError, validate_provider};
use super::{Origin, Provider};
use crate::domain::ProviderId;
use crate::keys::{Keys, KeysError};
use crate::net::http::Reach;
use crate::store::{self, Db};
use crate::vault::SealKey;
use arc_swap::ArcSwap;
use secrecy::ExposeSecret;
use std::collections::BTreeMap;
use std::sync::Arc;

/// All configured providers by id.
#[derive(Debug, Clone, Default)]
pub struct ProviderRegistry {
    providers: Arc<BTreeMap<ProviderId, Arc<Provider>>>,
}

impl ProviderRegistry {
    pub fn new(providers: Vec<Provider>) -> Self {
        Self { providers: Arc::new(providers.into_iter().map(|p| (p.id.clone(), Arc::new(p))).collect()) }
    }

    /// These providers, and beside them `more` whose ids these do not have (the file's win).
    pub fn with(&self, more: Vec<Provider>) -> Self {
        let mut all = (*self.providers).clone();
        for p in more {
            all.entry(p.id.clone()).or_insert_with(|| Arc::new(p));
        }
        Self { providers: Arc::new(all) }
    }

    pub fn get(&self, id: &ProviderId) -> Option<&Arc<Provider>> {
        self.providers.get(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Provider>> {
        self.providers.values()
    }
}

/// The providers: the file's, and those of the operator API.
pub struct Providers {
    file: ProviderRegistry,
    keys: Arc<Keys>,
    /// How the operator API's providers are reached (`[operator] allow_private_endpoints`).
    reach: Reach,
    /// Read on every request: a snapshot swapped whole (see `Tenants`).
    all: ArcSwap<ProviderRegistry>,
}

impl Providers {
    /// The file's providers alone, until [`Self::reload`] reads the others.
    pub fn new(file: ProviderRegistry, keys: Arc<Keys>, allow_private_endpoints: bool) -> Self {
        let reach = if allow_private_endpoints { Reach::Private } else { Reach::Public };
        Self { all: ArcSwap::from_pointee(file.clone()), file, keys, reach }
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
            let served = match self.keys.opening(&row.key_id, crate::keys::Scope::Service).await {
                Ok(key) => provider_of(&key, &row, self.reach),
                // The database failed, not the row: the reload fails, the last one stands.
                Err(KeysError::Database(e)) => return Err(e),
                Err(e) => Err(e.into()),
            };
            match served {
                Ok(p) => more.push(p),
                Err(e) => {
                    tracing::error!(provider = %row.id, error = %e, "a provider of the operator API is not served")
                }
            }
        }
        self.all.store(Arc::new(self.file.with(more)));
        Ok(())
    }

    /// A provider by id, active or not ([`Provider::active`]).
    pub fn get(&self, id: &ProviderId) -> Option<Arc<Provider>> {
        self.all.load().get(id).cloned()
    }

    /// Whether the configuration file names it (then the operator API may not change it).
    pub fn in_file(&self, id: &ProviderId) -> bool {
        self.file.get(id).is_some()
    }

    /// Every provider now, active or not.
    pub fn snapshot(&self) -> ProviderRegistry {
        ProviderRegistry::clone(&self.all.load())
    }
}

/// Why a provider row is not served.
#[derive(Debug, thiserror::Error)]
pub enum ProviderRowError {
    #[error("its client secret does not open: {0}")]
    Secret(#[from] KeysError),
    #[error("its settings do not parse: {0}")]
    Settings(#[from] serde_json::Error),
    #[error("{0}")]
    Invalid(SettingError),
}

/// A row as the provider it describes, checked as a file's provider is.
pub fn provider_of(
    key: &SealKey,
    row: &store::providers::ProviderRow,
    reach: Reach,
) -> Result<Provider, ProviderRowError> {
    let mut raw: RawProvider = serde_json::from_value(row.settings.clone())?;
    // Never a file on this host, nor the file's own SSRF and homograph exceptions: a row
    // is not the configuration file.
    raw.client_secret_file = None;
    raw.allow_private_endpoints = false;
    raw.allow_idn_hosts = Vec::new();
    let secret = open_client_secret(key, row, &identity_of(&raw)).map_err(KeysError::from)?;
    let mut p =
        validate_provider(&row.id, raw, Some(secret.expose_secret().to_owned())).map_err(ProviderRowError::Invalid)?;
    p.origin = Origin::Operator { revision: row.revision, reach, active: row.active };
    Ok(p)
}
