//! Signed webhooks (Standard Webhooks) to the endpoints tenants register: the events and
//! their payloads (`event`), recording an event in the transaction of the change it reports
//! ([`emit`]), the signing of a delivery (`sign`), and the worker that delivers (`worker`)
//! through the only HTTP client deliveries may use (`net::delivery`), which refuses
//! private, loopback, link-local and other internal addresses on the address it actually
//! connects to.

pub mod event;
pub mod sign;
pub mod worker;

pub use event::{Event, EventData, EventKind, Payload};

use crate::domain::WebhookId;
use crate::keys::{Keys, KeysError, Scope};
use crate::store::{self, webhooks::Claimed};
use crate::vault::{SealKey, VaultError};
use secrecy::SecretString;
use time::OffsetDateTime;
use uuid::Uuid;

/// The vault purpose signing secrets are sealed for (bound to the endpoint's id).
const SECRET_PURPOSE: &str = "webhook_secret";

/// Records `event` for every endpoint that asked for it, in the transaction `db` is in: the
/// event is delivered if and only if the change it reports commits. Returns the deliveries
/// written.
pub async fn emit(db: &mut crate::store::Conn, event: &Event) -> Result<u64, sqlx::Error> {
    let id = Uuid::new_v4();
    let body = serde_json::to_string(&event.payload(id, OffsetDateTime::now_utc()))
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    store::webhooks::enqueue(db, event.tenant.as_ref(), event.kind.as_str(), &event.stream, id, &body).await
}

/// Which of an endpoint's two secrets: the one in force, or the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Current,
    Previous,
}

/// The vault purpose and binding of a secret: the endpoint's id and the generation its
/// secrets are sealed at (`webhooks.secret_version`), and the slot, so that a secret rotated
/// away (even one dropped at once because it leaked) does not open if put back, in either
/// slot. Secrets sealed before generations (`None`) were bound to the id alone.
fn secret_binding(id: WebhookId, generation: Option<i64>, slot: Slot) -> (&'static str, Vec<u8>) {
    let id = id.as_uuid();
    let Some(g) = generation else { return (SECRET_PURPOSE, id.as_bytes().to_vec()) };
    let purpose = match slot {
        Slot::Current => "webhook_secret/current",
        Slot::Previous => "webhook_secret/previous",
    };
    let mut binding = id.as_bytes().to_vec();
    binding.extend_from_slice(&g.to_be_bytes());
    (purpose, binding)
}

/// Seals a signing secret for the endpoint `id`, in `slot`, at `generation`, with `key` (its
/// tenant's: the caller stores its `key_id`).
pub fn seal_secret(
    key: &SealKey,
    id: WebhookId,
    generation: i64,
    slot: Slot,
    secret: &SecretString,
) -> Result<Vec<u8>, VaultError> {
    let (purpose, binding) = secret_binding(id, Some(generation), slot);
    key.seal_aux(purpose, &binding, secrecy::ExposeSecret::expose_secret(secret).as_bytes())
}

/// Opens a signing secret with the key its row names.
pub fn open_secret(
    key: &SealKey,
    id: WebhookId,
    generation: Option<i64>,
    slot: Slot,
    sealed: &[u8],
) -> Result<SecretString, VaultError> {
    let (purpose, binding) = secret_binding(id, generation, slot);
    let pt = key.open_aux(purpose, &binding, sealed)?;
    String::from_utf8(pt.to_vec()).map(SecretString::from).map_err(|_| VaultError::Encoding)
}

/// The secrets a delivery is signed with at `at`: the current one, and the one before it
/// while its overlap lasts.
pub async fn open_secrets(keys: &Keys, c: &Claimed, at: OffsetDateTime) -> Result<Vec<SecretString>, KeysError> {
    let g = c.secret_version;
    let scope = Scope::Tenant(&c.tenant_id);
    let current = keys.opening(&c.key_id, scope).await?;
    let mut out = vec![open_secret(&current, c.webhook_id, g, Slot::Current, &c.secret_sealed)?];
    if let (Some(key), Some(sealed), Some(until)) = (&c.previous_key_id, &c.previous_secret_sealed, c.previous_until)
        && at < until
    {
        let key = keys.opening(key, scope).await?;
        out.push(open_secret(&key, c.webhook_id, g, Slot::Previous, sealed)?);
    }
    Ok(out)
}
