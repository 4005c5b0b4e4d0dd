//! Providers made and changed over the operator API: checked as a file's
//! `[providers.<id>]` is, the client secret sealed by the vault (write-only: it is never
//! shown again), audited without any secret. Every instance serves the change within the
//! cache bound (the row announces it); this one at once. A provider is switched off, never
//! deleted: its grants stay revocable at the provider, and nothing new starts.

use crate::config::RawProvider;
use crate::domain::{ApiKeyId, AuditKind, ProviderId};
use crate::oauth::Provider;
use crate::store::{self, PgPool, audit::AuditEvent};
use crate::tenants::{Providers, seal_client_secret};
use crate::vault::Vault;
use secrecy::SecretString;
use std::sync::Arc;

/// Why the operator API refused a provider change.
#[derive(Debug, thiserror::Error)]
pub enum ProviderRefusal {
    #[error("no provider {0} made over the operator API")]
    NotFound(String),
    #[error("provider {0} exists already")]
    Exists(String),
    #[error("provider {0} is kept by a configuration file: change it there")]
    KeptByFile(String),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("sealing the client secret: {0}")]
    Vault(#[from] crate::vault::VaultError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// A provider's settings as given (every field a file's `[providers.<id>]` has, but
/// `client_secret_file`), as a JSON object of the fields given.
pub type Settings = serde_json::Map<String, serde_json::Value>;

/// The settings checked as a file's are, with the secret: the provider they make, and
/// what is stored of them.
fn checked(
    id: &str,
    settings: Settings,
    secret: &SecretString,
) -> Result<(Provider, serde_json::Value), ProviderRefusal> {
    let invalid = |field: String, message: String| ProviderRefusal::Invalid { field, message };
    let mut raw: RawProvider = serde_json::from_value(serde_json::Value::Object(settings))
        .map_err(|e| invalid("settings".to_owned(), e.to_string()))?;
    // Never a file on this host: the secret is the one given.
    raw.client_secret_file = None;
    let stored = serde_json::to_value(&raw).map_err(|e| invalid("settings".to_owned(), e.to_string()))?;
    let p = crate::config::validate_provider(id, raw, Some(secrecy::ExposeSecret::expose_secret(secret).to_owned()))
        .map_err(|e| {
            // `providers.<id>.token_url` as the file names it; the API names the field.
            let prefix = format!("providers.{id}.");
            let field = e.field.strip_prefix(&prefix).unwrap_or(&e.field).to_owned();
            invalid(field, e.message)
        })?;
    Ok((p, stored))
}

/// Who did it, as the trail says.
fn by_text(key: &ApiKeyId) -> String {
    format!("operator key {key}")
}

fn event(kind: AuditKind, id: &str, by: &ApiKeyId, detail: serde_json::Value) -> AuditEvent {
    let mut ev = AuditEvent::new(kind);
    ev.provider = Some(id.to_owned());
    ev.api_key_id = Some(by.to_string());
    ev.detail = detail;
    ev
}

/// Makes a provider, active, and serves it here at once.
pub async fn create_provider(
    pool: &PgPool,
    vault: &Vault,
    providers: &Providers,
    id: &str,
    settings: Settings,
    secret: SecretString,
    by: &ApiKeyId,
) -> Result<Arc<Provider>, ProviderRefusal> {
    let pid = ProviderId::parse(id)
        .map_err(|e| ProviderRefusal::Invalid { field: "id".to_owned(), message: e.to_string() })?;
    if providers.in_file(&pid) {
        return Err(ProviderRefusal::KeptByFile(id.to_owned()));
    }
    let (_, stored) = checked(id, settings, &secret)?;
    let sealed = seal_client_secret(vault, id, 1, &secret)?;
    let mut tx = store::begin(pool).await?;
    if !store::providers::insert(&mut *tx, id, &stored, &sealed, vault.current_key_id().as_str()).await? {
        return Err(ProviderRefusal::Exists(id.to_owned()));
    }
    let detail = serde_json::json!({ "by": by_text(by), "settings": stored });
    store::audit::insert_event(&mut *tx, &event(AuditKind::ProviderCreated, id, by, detail)).await?;
    tx.commit().await?;
    served(pool, providers, &pid).await
}

/// What a change sets: settings given replace those stored; a new secret is sealed at the
/// row's next generation; `active` switches it off or on.
pub struct ProviderChange {
    pub settings: Settings,
    pub client_secret: Option<SecretString>,
    pub active: Option<bool>,
}

/// Changes a provider made over the API, and serves the change here at once.
pub async fn change_provider(
    pool: &PgPool,
    vault: &Vault,
    providers: &Providers,
    id: &ProviderId,
    change: ProviderChange,
    by: &ApiKeyId,
) -> Result<Arc<Provider>, ProviderRefusal> {
    if providers.in_file(id) {
        return Err(ProviderRefusal::KeptByFile(id.to_string()));
    }
    let mut tx = store::begin(pool).await?;
    let row = store::providers::one(&mut *tx, id.as_str(), true)
        .await?
        .ok_or_else(|| ProviderRefusal::NotFound(id.to_string()))?;
    let secret = match &change.client_secret {
        Some(s) => s.clone(),
        None => crate::tenants::open_client_secret(
            vault,
            &row.id,
            row.secret_version,
            &row.key_id,
            &row.client_secret_sealed,
        )?,
    };
    let mut merged = row.settings.as_object().cloned().unwrap_or_default();
    let settings_changed = !change.settings.is_empty();
    merged.extend(change.settings);
    let (_, stored) = checked(id.as_str(), merged, &secret)?;
    let next = row.secret_version + 1;
    let sealed = match &change.client_secret {
        Some(s) => Some(seal_client_secret(vault, &row.id, next, s)?),
        None => None,
    };
    let active = change.active.unwrap_or(row.active);
    store::providers::update(
        &mut *tx,
        &row.id,
        &stored,
        sealed.as_deref().map(|s| (s, vault.current_key_id().as_str(), next)),
        active,
    )
    .await?;
    if settings_changed || sealed.is_some() {
        let detail = serde_json::json!({
            "by": by_text(by), "settings": stored, "client_secret_replaced": sealed.is_some(),
        });
        store::audit::insert_event(&mut *tx, &event(AuditKind::ProviderChanged, &row.id, by, detail)).await?;
    }
    if active != row.active {
        let kind = if active { AuditKind::ProviderActivated } else { AuditKind::ProviderDeactivated };
        store::audit::insert_event(&mut *tx, &event(kind, &row.id, by, serde_json::json!({ "by": by_text(by) })))
            .await?;
    }
    tx.commit().await?;
    served(pool, providers, id).await
}

/// Reads the providers again here (the others hear of it) and returns the one served.
async fn served(pool: &PgPool, providers: &Providers, id: &ProviderId) -> Result<Arc<Provider>, ProviderRefusal> {
    providers.reload(pool).await?;
    providers.get(id).ok_or_else(|| ProviderRefusal::NotFound(id.to_string()))
}
