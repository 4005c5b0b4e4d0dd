//! The use cases, one file each, named after what a caller does: ask for a token, open a
//! connect link, come back from the provider, sign in, refresh, revoke, rotate the vault
//! key, clean up; and the policy (provider allowed, kill switches) they share. Handlers in
//! `http` parse, call one of these, and render.

pub mod api_keys;
pub mod callback;
pub mod cancel;
pub mod cleanup;
pub mod connect;
pub mod events;
pub mod fault;
pub mod held;
pub mod login;
pub mod policy;
pub mod refresh;
pub mod revoke;
pub mod rotate;
pub mod token;
pub mod wait;
pub mod webhooks;

pub use fault::Fault;

use crate::domain::{ConnectionId, ProviderId, Subject, TenantId};
use crate::store::connections::ConnectionRow;
use crate::vault::RowBinding;

/// The typed identity of a stored row, for the vault's associated data.
pub struct RowIds {
    pub tenant: TenantId,
    pub subject: Subject,
    pub provider: ProviderId,
    pub connection: ConnectionId,
    /// The generation the row's ciphertexts are sealed at.
    pub generation: Option<i64>,
}

impl RowIds {
    pub fn of(row: &ConnectionRow) -> Option<Self> {
        Some(Self {
            tenant: TenantId::parse(&row.tenant_id).ok()?,
            subject: Subject::parse(&row.subject).ok()?,
            provider: ProviderId::parse(&row.provider).ok()?,
            connection: ConnectionId::from_uuid(row.id),
            generation: row.seal_version,
        })
    }

    /// To open the row's ciphertexts.
    pub fn binding(&self) -> RowBinding<'_> {
        RowBinding {
            tenant: &self.tenant,
            subject: &self.subject,
            provider: &self.provider,
            connection: self.connection,
            generation: self.generation,
        }
    }

    /// The row's next seal generation: what a write of new ciphertexts seals at.
    pub fn next_generation(&self) -> i64 {
        crate::vault::next_generation(self.generation)
    }

    /// To seal the row's next ciphertexts (see [`Self::next_generation`]).
    pub fn next_binding(&self) -> RowBinding<'_> {
        RowBinding { generation: Some(self.next_generation()), ..self.binding() }
    }
}
