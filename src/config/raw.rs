//! The configuration file as written: serde structs that refuse unknown fields, so a
//! misspelt setting is an error and not silently ignored.

use crate::providers::settings::RawProvider;
use secrecy::SecretString;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) public_base_url: Option<String>,
    pub(super) listen: Option<String>,
    #[serde(default)]
    pub(super) log_format: Option<String>,
    #[serde(default)]
    pub(super) database: RawDatabase,
    #[serde(default)]
    pub(super) vault: RawVault,
    #[serde(default)]
    pub(super) elicitations: RawElicitations,
    #[serde(default)]
    pub(super) api_keys: RawApiKeys,
    pub(super) idp: Option<RawIdp>,
    /// More identity providers, by name, for tenants that name one (`tenants[].idp`).
    #[serde(default)]
    pub(super) idps: BTreeMap<String, RawIdp>,
    #[serde(default)]
    pub(super) sessions: RawSessions,
    #[serde(default)]
    pub(super) outbound: RawOutbound,
    #[serde(default)]
    pub(super) refresh: RawRefresh,
    #[serde(default)]
    pub(super) cleanup: RawCleanup,
    #[serde(default)]
    pub(super) audit: RawAudit,
    #[serde(default)]
    pub(super) cache: RawCache,
    #[serde(default)]
    pub(super) metrics: RawMetrics,
    #[serde(default)]
    pub(super) shutdown: RawShutdown,
    #[serde(default)]
    pub(super) tracing: RawTracing,
    #[serde(default)]
    pub(super) webhooks: RawWebhooks,
    #[serde(default)]
    pub(super) proxy: RawProxy,
    #[serde(default)]
    pub(super) hsts: RawHsts,
    #[serde(default)]
    pub(super) operator: RawOperator,
    #[serde(default)]
    pub(super) tenants: Vec<RawTenant>,
    #[serde(default)]
    pub(super) providers: BTreeMap<String, RawProvider>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub(super) url: Option<String>,
    pub(super) listen_url: Option<String>,
    pub(super) max_connections: Option<u32>,
    pub(super) lookup_connections_per_worker: Option<u32>,
    pub(super) pooler: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTracing {
    pub(super) otlp_endpoint: Option<String>,
    pub(super) propagate_to_providers: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShutdown {
    pub(super) drain_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVault {
    pub(super) keys_file: Option<PathBuf>,
    pub(super) data_key_cache_seconds: Option<u64>,
    pub(super) data_key_cache_capacity: Option<usize>,
    pub(super) reseal_interval_seconds: Option<u64>,
    /// `local` (default), `pkcs11` or `aws-kms`.
    pub(super) store: Option<String>,
    pub(super) pkcs11: Option<RawPkcs11>,
    pub(super) aws_kms: Option<RawAwsKms>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAwsKms {
    pub(super) key_id: Option<String>,
    pub(super) region: Option<String>,
    pub(super) endpoint: Option<String>,
    pub(super) access_key_id: Option<String>,
    pub(super) secret_access_key_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPkcs11 {
    pub(super) module: Option<PathBuf>,
    pub(super) token_label: Option<String>,
    pub(super) key_label: Option<String>,
    pub(super) pin_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawElicitations {
    pub(super) ttl_seconds: Option<u64>,
    pub(super) max_wait_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApiKeys {
    pub(super) cache_seconds: Option<u64>,
    pub(super) cache_capacity: Option<usize>,
    pub(super) hash_queue: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdp {
    pub(super) issuer: Option<String>,
    pub(super) client_id: Option<String>,
    pub(super) client_secret_file: Option<PathBuf>,
    /// `client_secret_basic` (default where the IdP lists it), `client_secret_post`, or
    /// `private_key_jwt` (no secret).
    pub(super) token_endpoint_auth_method: Option<crate::providers::client_auth::ClientAuth>,
    pub(super) scopes: Option<Vec<String>>,
    #[serde(default)]
    pub(super) allow_idn_hosts: Vec<String>,
    pub(super) clock_skew_seconds: Option<u64>,
    #[serde(default)]
    pub(super) allow_private_endpoints: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSessions {
    pub(super) ttl_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutbound {
    pub(super) timeout_seconds: Option<u64>,
    pub(super) ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRefresh {
    pub(super) margin_seconds: Option<u64>,
    pub(super) unknown_expiry_refresh_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCleanup {
    pub(super) interval_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub(super) enabled: Option<bool>,
    pub(super) max_age_seconds: Option<u64>,
    pub(super) capacity: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOperator {
    pub(super) allow_private_endpoints: Option<bool>,
    /// Issuers whose workload tokens the operator's tools may present on `/operator/v1`
    /// (`[[operator.workload_issuers]]`, rules of scope `operator`); left out: none.
    pub(super) workload_issuers: Option<Vec<crate::domain::workload::WorkloadIssuer>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProxy {
    pub(super) per_connection_per_second: Option<u64>,
    pub(super) per_connection_burst: Option<u64>,
    pub(super) per_tenant_per_second: Option<u64>,
    pub(super) per_tenant_burst: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhooks {
    pub(super) allow_loopback: Option<bool>,
    pub(super) allow_private: Option<bool>,
    pub(super) timeout_seconds: Option<u64>,
    pub(super) poll_interval_ms: Option<u64>,
    pub(super) max_pending_per_tenant: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHsts {
    pub(super) max_age_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub(super) retention_days: Option<u64>,
}

/// A tenant as a file's `[[tenants]]` (or the operator API) writes it, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTenant {
    pub id: String,
    pub display_name: String,
    pub providers: Vec<String>,
    pub subject_token_audience: Option<String>,
    pub require_subject_token: Option<bool>,
    /// The name of one of `[idps.<name>]`; unset: the default `[idp]`.
    pub idp: Option<String>,
    /// `credentials` (default) or `none`: `/v1/token` then hands out no credential, and the
    /// grant is used only through `/v1/proxy`.
    pub hand_out: Option<crate::domain::HandOutMode>,
    /// Per provider, the other of the two (`{ github = "credentials" }`).
    pub hand_out_providers: Option<std::collections::BTreeMap<String, crate::domain::HandOutMode>>,
    /// Issuers whose workload tokens its MCP servers may present instead of an API key
    /// (`[[tenants.workload_issuers]]`); left out: none.
    pub workload_issuers: Option<Vec<crate::domain::workload::WorkloadIssuer>>,
}

/// The secrets only the environment gives (they have no place in the file, only their
/// `…_file` settings do), read by `env::overlay` with every other variable.
/// `SecretString`s, so that a `{:?}` of them shows none.
#[derive(Debug, Default)]
pub(super) struct EnvSecrets {
    /// `MCP_CONNECT_VAULT_KEYS`.
    pub vault_keys: Option<SecretString>,
    /// `MCP_CONNECT_VAULT_PKCS11_PIN`.
    pub vault_pkcs11_pin: Option<SecretString>,
    pub vault_aws_secret_access_key: Option<SecretString>,
    /// `MCP_CONNECT_IDP_CLIENT_SECRET`.
    pub idp_client_secret: Option<SecretString>,
    /// `MCP_CONNECT_PROVIDER_<NAME>_CLIENT_SECRET`, by the provider's name in the file.
    pub provider_client_secrets: BTreeMap<String, SecretString>,
    /// `MCP_CONNECT_IDPS_<NAME>_CLIENT_SECRET`, by the name of an `[idps.<name>]`.
    pub idps_client_secrets: BTreeMap<String, SecretString>,
}
