//! Providers made and changed over the operator API: checked as a file's
//! `[providers.<id>]` is, and more (their endpoints reached only through the SSRF guard,
//! no `allow_private_endpoints` or `allow_idn_hosts`, a display name fit for a page), the
//! client secret sealed by the vault (write-only: never shown again), audited without any
//! secret. A provider's identity (template, client, endpoints) is fixed once it is made:
//! its grants and links were made with that client at those endpoints, and a refresh or a
//! revocation must never carry them elsewhere; a new identity is a new provider. Every
//! instance serves a change within the cache bound (the row announces it); this one at
//! once. A provider is switched off, never deleted: its grants stay revocable at the
//! provider, and nothing new starts.

use crate::domain::{AuditKind, Caller, ProviderId};
use crate::keys::{Keys, Scope};
use crate::providers::Provider;
use crate::providers::Providers;
use crate::providers::client_secret::{IDENTITY, identity_of, open_client_secret, seal_client_secret};
use crate::providers::settings::RawProvider;
use crate::store::{self, Db, audit::AuditEvent};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;

/// Why the operator API refused a provider change.
#[derive(Debug, thiserror::Error)]
pub enum ProviderRefusal {
    #[error("no provider {0} made over the operator API")]
    NotFound(String),
    #[error("provider {0} exists already, or grants or links of that id do")]
    Exists(String),
    #[error("the operator API has made {MAX_API_PROVIDERS} providers, as many as it may")]
    TooMany,
    #[error("provider {0} is named by a configuration file (of this or another instance): change it there")]
    KeptByFile(String),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// Its sealed secret does not open (a key gone from the keyring, or a row changed
    /// outside the API): only a new `client_secret` (or switching it off) helps.
    #[error("provider {0}'s client secret does not open with the keyring: send a new client_secret")]
    Unopenable(String),
    #[error("sealing the client secret: {0}")]
    Vault(#[from] crate::vault::VaultError),
    #[error(transparent)]
    Keys(#[from] crate::keys::KeysError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// A provider's settings as given (every field a file's `[providers.<id>]` has, but
/// `client_secret_file`, `allow_private_endpoints` and `allow_idn_hosts`), as a JSON object
/// of the fields given.
pub type Settings = serde_json::Map<String, serde_json::Value>;

fn invalid(field: &str, message: impl Into<String>) -> ProviderRefusal {
    ProviderRefusal::Invalid { field: field.to_owned(), message: message.into() }
}

/// The settings checked as a file's are, and as the API adds: the raw settings stored.
fn checked(
    id: &str,
    settings: Settings,
    secret: &SecretString,
    providers: &Providers,
) -> Result<RawProvider, ProviderRefusal> {
    let raw: RawProvider =
        serde_json::from_value(serde_json::Value::Object(settings)).map_err(|e| invalid("settings", e.to_string()))?;
    // Their fields and check request are the file's for now (the check URL would need the
    // SSRF guard and a place in the fixed identity first).
    if raw.template.is_credential() || raw.template == crate::providers::ProviderKind::Mcp {
        return Err(invalid(
            "template",
            "api_key, basic and mcp providers are configured in the file; this API makes OAuth ones",
        ));
    }
    let s = secret.expose_secret();
    if s.is_empty() || s.chars().count() > 4096 {
        return Err(invalid("client_secret", "must be 1-4096 characters"));
    }
    if raw
        .client_id
        .as_ref()
        .is_some_and(|c| c.is_empty() || c.chars().count() > 1000 || c.chars().any(char::is_control))
    {
        return Err(invalid("client_id", "must be 1-1000 printable characters"));
    }
    // Shown on our pages and in the message the MCP client shows the person (and the model).
    if raw.display_name.as_ref().is_some_and(|d| !crate::domain::shown::is_display_name(d, 100)) {
        return Err(invalid(
            "display_name",
            "must be 1-100 printable characters, without control or invisible formatting ones",
        ));
    }
    let p = crate::providers::settings::validate_provider(id, raw.clone(), Some(s.to_owned())).map_err(|e| {
        // `providers.<id>.token_url` as the file names it; the API names the field.
        let prefix = format!("providers.{id}.");
        ProviderRefusal::Invalid {
            field: e.field.strip_prefix(&prefix).unwrap_or(&e.field).to_owned(),
            message: e.message,
        }
    })?;
    // An address that may not be reached is refused now (a name is judged again on every
    // connection, by the guard).
    let policy = providers.reach().policy();
    for (field, url) in p.configured_urls() {
        if let Some(url) = url {
            crate::net::ssrf::check_url(url, policy).map_err(|r| {
                invalid(field, format!("{r} (a provider of the operator API reaches only public https addresses unless [operator] allow_private_endpoints is set)"))
            })?;
        }
    }
    Ok(raw)
}

/// `KeptByFile` for an id this instance's file, or any instance's (`configured_providers`),
/// names.
async fn refuse_if_a_files(pool: &Db, providers: &Providers, id: &ProviderId) -> Result<(), ProviderRefusal> {
    if providers.in_file(id) || store::providers::is_configured(pool, id.as_str()).await? {
        return Err(ProviderRefusal::KeptByFile(id.to_string()));
    }
    Ok(())
}

fn event(kind: AuditKind, id: &ProviderId, by: &Caller, detail: serde_json::Value) -> AuditEvent {
    let mut ev = AuditEvent::new(kind);
    ev.provider = Some(id.clone());
    ev.api_key_id = Some(by.id.clone());
    ev.detail = detail;
    ev
}

fn stored(raw: &RawProvider) -> Result<serde_json::Value, ProviderRefusal> {
    serde_json::to_value(raw).map_err(|e| invalid("settings", e.to_string()))
}

/// At most this many providers of the operator API: every instance holds and resolves each
/// of them, so an operator key cannot grow that without end.
pub const MAX_API_PROVIDERS: i64 = 1_000;

/// Makes a provider, active, and serves it here at once. An id of grants or links made
/// before (a provider a file had) is refused: they were made with another client.
pub async fn create_provider(
    pool: &Db,
    keys: &Keys,
    providers: &Providers,
    id: &str,
    settings: Settings,
    secret: SecretString,
    by: &Caller,
) -> Result<Arc<Provider>, ProviderRefusal> {
    let pid = ProviderId::parse(id).map_err(|e| invalid("id", e.to_string()))?;
    refuse_if_a_files(pool, providers, &pid).await?;
    let raw = checked(id, settings, &secret, providers)?;
    let key = keys.sealing(Scope::Service).await?;
    let sealed = seal_client_secret(&key, id, 1, &identity_of(&raw), &secret)?;
    let mut tx = store::begin(pool).await?;
    // One creation at a time, so that the limit holds under concurrent calls.
    store::lock_named(&mut *tx, "operator_providers").await?;
    if store::providers::count(&mut *tx).await? >= MAX_API_PROVIDERS {
        return Err(ProviderRefusal::TooMany);
    }
    if store::providers::id_has_history(&mut *tx, id).await?
        || !store::providers::insert(&mut *tx, id, &stored(&raw)?, &sealed, key.key_id()).await?
    {
        return Err(ProviderRefusal::Exists(id.to_owned()));
    }
    let detail = serde_json::json!({ "by": by.operator_text(), "settings": stored(&raw)? });
    store::audit::insert_event(&mut *tx, &event(AuditKind::ProviderCreated, &pid, by, detail)).await?;
    tx.commit().await?;
    served(pool, providers, &pid).await
}

/// What a change sets: settings given replace those stored (but the identity, which is
/// fixed); a new secret is sealed at the row's next generation; `active` switches it off
/// or on.
pub struct ProviderChange {
    pub settings: Settings,
    pub client_secret: Option<SecretString>,
    pub active: Option<bool>,
}

/// Changes a provider made over the API, and serves the change here at once.
pub async fn change_provider(
    pool: &Db,
    keys: &Keys,
    providers: &Providers,
    id: &ProviderId,
    change: ProviderChange,
    by: &Caller,
) -> Result<Arc<Provider>, ProviderRefusal> {
    refuse_if_a_files(pool, providers, id).await?;
    let mut tx = store::begin(pool).await?;
    let row = store::providers::one(&mut *tx, id.as_str(), true)
        .await?
        .ok_or_else(|| ProviderRefusal::NotFound(id.to_string()))?;
    let current = row.settings.as_object().cloned().unwrap_or_default();
    for field in IDENTITY {
        if change.settings.get(field).is_some_and(|v| current.get(field).unwrap_or(&serde_json::Value::Null) != v) {
            return Err(invalid(
                field,
                "is fixed once the provider is made (its grants and links were made with that client at those \
                 endpoints): make a new provider",
            ));
        }
    }
    let settings_changed = change.settings.iter().any(|(k, v)| current.get(k) != Some(v));
    let next = row.secret_version + 1;
    let mut sealed = None;
    let mut settings = row.settings.clone();
    if settings_changed || change.client_secret.is_some() {
        let identity = crate::providers::client_secret::row_identity(&row);
        let secret = match &change.client_secret {
            Some(s) => s.clone(),
            None => {
                let key = keys.opening(&row.key_id, Scope::Service).await.map_err(|e| match e {
                    crate::keys::KeysError::Vault(_) => ProviderRefusal::Unopenable(row.id.clone()),
                    e => e.into(),
                })?;
                open_client_secret(&key, &row, &identity).map_err(|_| ProviderRefusal::Unopenable(row.id.clone()))?
            }
        };
        let mut merged = current.clone();
        merged.extend(change.settings);
        let raw = checked(id.as_str(), merged, &secret, providers)?;
        settings = stored(&raw)?;
        if let Some(s) = &change.client_secret {
            let key = keys.sealing(Scope::Service).await?;
            sealed = Some((seal_client_secret(&key, &row.id, next, &identity, s)?, key));
        }
    }
    let active = change.active.unwrap_or(row.active);
    let secret = sealed.as_ref().map(|(s, key)| (s.as_slice(), key.key_id(), next));
    store::providers::update(&mut *tx, &row.id, &settings, secret, active).await?;
    if settings_changed || sealed.is_some() {
        let detail = serde_json::json!({
            "by": by.operator_text(), "settings": settings, "client_secret_replaced": sealed.is_some(),
        });
        store::audit::insert_event(&mut *tx, &event(AuditKind::ProviderChanged, id, by, detail)).await?;
    }
    if active != row.active {
        let kind = if active { AuditKind::ProviderActivated } else { AuditKind::ProviderDeactivated };
        store::audit::insert_event(&mut *tx, &event(kind, id, by, serde_json::json!({ "by": by.operator_text() })))
            .await?;
    }
    tx.commit().await?;
    served(pool, providers, id).await
}

/// Reads the providers again here (the others hear of it) and returns the one served
/// (`Unopenable`: its row is not served, its secret does not open).
async fn served(pool: &Db, providers: &Providers, id: &ProviderId) -> Result<Arc<Provider>, ProviderRefusal> {
    providers.reload(pool).await?;
    providers.get(id).ok_or_else(|| ProviderRefusal::Unopenable(id.to_string()))
}
