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
    /// Calls through the proxy: one row per instance, connection, API key, minute, method
    /// class and status class (its `detail`: `method` and `status`, see [`ProxiedCall`]).
    ProxiedCalls = "proxied_calls",
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
    /// An operator ended a tenant: its data keys destroyed (crypto-shredding), off for good.
    TenantEnded = "tenant_ended",
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

/// A call through the proxy as the audit trail counts it: the class of its method and of
/// the provider's answer, never its path, query or body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProxiedCall {
    pub method: MethodClass,
    pub status: StatusClass,
}

/// `read` for GET, HEAD and OPTIONS, `write` for every other method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MethodClass {
    Read,
    Write,
}

impl MethodClass {
    pub fn of(method: &str) -> Self {
        match method {
            "GET" | "HEAD" | "OPTIONS" => MethodClass::Read,
            _ => MethodClass::Write,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            MethodClass::Read => "read",
            MethodClass::Write => "write",
        }
    }
}

/// The provider's answer by its hundreds (`2xx`…), or `none` when no answer came through
/// (unreachable, timed out, cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusClass {
    Informational,
    Success,
    Redirection,
    ClientError,
    ServerError,
    NoAnswer,
}

impl StatusClass {
    pub const ALL: [StatusClass; 6] = [
        StatusClass::Informational,
        StatusClass::Success,
        StatusClass::Redirection,
        StatusClass::ClientError,
        StatusClass::ServerError,
        StatusClass::NoAnswer,
    ];

    pub fn of(status: u16) -> Self {
        match status {
            100..=199 => StatusClass::Informational,
            200..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirection,
            400..=499 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
            StatusClass::NoAnswer => "none",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AuditKind, MethodClass, StatusClass};

    #[test]
    fn methods_and_answers_are_classed_as_documented() {
        assert_eq!(MethodClass::of("GET").as_str(), "read");
        assert_eq!(MethodClass::of("OPTIONS").as_str(), "read");
        assert_eq!(MethodClass::of("POST").as_str(), "write");
        assert_eq!(MethodClass::of("PROPFIND").as_str(), "write");
        let classes: Vec<&str> = [101, 204, 302, 429, 503, 999].map(|s| StatusClass::of(s).as_str()).to_vec();
        assert_eq!(classes, ["1xx", "2xx", "3xx", "4xx", "5xx", "5xx"]);
    }

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
