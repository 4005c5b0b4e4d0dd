//! A provider's client secret as the operator API stores it: sealed by the vault, bound to
//! the provider's id, generation and the settings that say where the secret is sent.

use super::settings::RawProvider;
use crate::store;
use crate::vault::{SealKey, VaultError};
use secrecy::{ExposeSecret, SecretString};

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
pub fn identity_of(raw: &RawProvider) -> [u8; 32] {
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

/// Seals a provider's client secret for its row at generation `version` (with the service
/// scope's key: the caller stores its `key_id`).
pub fn seal_client_secret(
    key: &SealKey,
    id: &str,
    version: i64,
    identity: &[u8; 32],
    secret: &SecretString,
) -> Result<Vec<u8>, VaultError> {
    key.seal_aux(CLIENT_SECRET_PURPOSE, &binding(id, version, identity), secret.expose_secret().as_bytes())
}

/// Opens a row's client secret (sealed for its id, generation and `identity`) with the key
/// its `key_id` names.
pub fn open_client_secret(
    key: &SealKey,
    row: &store::providers::ProviderRow,
    identity: &[u8; 32],
) -> Result<SecretString, VaultError> {
    let binding = binding(&row.id, row.secret_version, identity);
    let pt = key.open_aux(CLIENT_SECRET_PURPOSE, &binding, &row.client_secret_sealed)?;
    String::from_utf8(pt.to_vec()).map(SecretString::from).map_err(|_| VaultError::Encoding)
}
