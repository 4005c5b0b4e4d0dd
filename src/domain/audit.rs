//! The kinds of audit event, declared once: the enum, the text each is stored as, and the
//! list docs/api.md documents.

/// Declares every kind with the text it is stored and listed as.
macro_rules! audit_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident = $text:literal,)*) => {
        /// What an audit event records. Stored as its text in `audit_events.kind`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum AuditKind {
            $($(#[doc = $doc])* $variant,)*
        }

        impl AuditKind {
            /// Every kind, for documentation and tests.
            pub const ALL: &[AuditKind] = &[$(AuditKind::$variant,)*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(AuditKind::$variant => $text,)*
                }
            }
        }
    };
}

audit_kinds! {
    ElicitationCreated = "elicitation_created",
    /// The browser's person is not the subject the link was made for.
    IdentityMismatch = "identity_mismatch",
    ConnectStarted = "connect_started",
    ConsentDeclined = "consent_declined",
    ConnectCompleted = "connect_completed",
    ConnectFailed = "connect_failed",
    AccountMismatch = "account_mismatch",
    RefreshSucceeded = "refresh_succeeded",
    RefreshFailed = "refresh_failed",
    ReauthNeeded = "reauth_needed",
    /// One row per instance, connection, API key and minute.
    TokenHandedOut = "token_handed_out",
    ConnectionRevoked = "connection_revoked",
    /// The MCP client closed one link (`cancel` or `decline`).
    ElicitationCancelled = "elicitation_cancelled",
    /// A revocation or kill switch closed the pending links it made useless.
    ElicitationsCancelled = "elicitations_cancelled",
    KillSwitchChanged = "kill_switch_changed",
    ApiKeyCreated = "api_key_created",
    ApiKeyRevoked = "api_key_revoked",
    WebhookCreated = "webhook_created",
    WebhookDeleted = "webhook_deleted",
    WebhookSecretRotated = "webhook_secret_rotated",
    /// The operator API made a tenant.
    TenantCreated = "tenant_created",
    /// The operator API changed a tenant's settings (its `detail`: the settings after).
    TenantChanged = "tenant_changed",
    /// The operator API made a provider (its settings, never its secret).
    ProviderCreated = "provider_created",
    /// The operator API changed a provider's settings or replaced its client secret.
    ProviderChanged = "provider_changed",
    ProviderDeactivated = "provider_deactivated",
    ProviderActivated = "provider_activated",
    TenantDeactivated = "tenant_deactivated",
    TenantActivated = "tenant_activated",
    TenantIdpChanged = "tenant_idp_changed",
    /// A configuration file took over a tenant the operator API made: its settings became
    /// the file's and the keys it had were revoked.
    TenantTakenOver = "tenant_taken_over",
    LoginFailed = "login_failed",
}

// Written as its text. Not decoded: the trail is read as text, so that a kind written by
// a newer release (during a rolling upgrade or after a rollback) still lists.
impl sqlx::Type<sqlx::Postgres> for AuditKind {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <str as sqlx::Type<sqlx::Postgres>>::type_info()
    }
    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for AuditKind {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
    }
}

#[cfg(test)]
mod tests {
    use super::AuditKind;

    #[test]
    fn every_audit_kind_is_documented() {
        let docs = include_str!("../../docs/api.md");
        for k in AuditKind::ALL {
            assert!(docs.contains(&format!("`{}`", k.as_str())), "docs/api.md does not list {}", k.as_str());
        }
    }

    #[test]
    fn audit_kinds_are_distinct_snake_case_words() {
        let mut seen = std::collections::HashSet::new();
        for k in AuditKind::ALL {
            let s = k.as_str();
            assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{s}");
            assert!(seen.insert(s), "{s} twice");
        }
    }
}
