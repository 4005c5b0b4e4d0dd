//! The day after the grant: refresh (fenced across instances), revocation, key rotation,
//! clean-up, and the batched audit of token hand-outs.

pub mod audit_batch;
pub mod cleanup;
pub mod refresh;
pub mod revoke;
pub mod rotate;

use crate::domain::{ConnectionId, ProviderId, Subject, TenantId};
use crate::store::connections::ConnectionRow;
use crate::vault::RowBinding;

/// The typed identity of a stored row, for the vault's associated data.
pub struct RowIds {
    pub tenant: TenantId,
    pub subject: Subject,
    pub provider: ProviderId,
    pub connection: ConnectionId,
}

impl RowIds {
    pub fn of(row: &ConnectionRow) -> Option<Self> {
        Some(Self {
            tenant: TenantId::parse(&row.tenant_id).ok()?,
            subject: Subject::parse(&row.subject).ok()?,
            provider: ProviderId::parse(&row.provider).ok()?,
            connection: ConnectionId::from_uuid(row.id),
        })
    }

    pub fn binding(&self) -> RowBinding<'_> {
        RowBinding {
            tenant: &self.tenant,
            subject: &self.subject,
            provider: &self.provider,
            connection: self.connection,
        }
    }
}
