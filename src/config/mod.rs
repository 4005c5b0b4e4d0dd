//! Configuration: a TOML file plus `MCP_CONNECT_*` environment overrides, parsed into
//! raw serde structs (unknown fields refused) and then validated into a `Config` of ready
//! objects. Every error names the field. Secrets (vault keys, client secrets, the
//! database URL with its password) come from the environment or from files; they may
//! never be required inside the TOML.

mod env;
mod raw;
mod validate;

use crate::oauth::resolve::Idps;
use crate::providers::ProviderRegistry;
use crate::vault::Keyring;
use secrecy::SecretString;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use url::Url;

/// Reads an environment variable; tests pass a map instead of the process environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[derive(Debug, thiserror::Error)]
#[error("configuration: {field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

pub(crate) fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), message: message.into() }
}

pub use crate::domain::TenantConfig;
pub use raw::RawTenant;
pub use validate::{TenantInvalid, TenantProblem, tenant};

/// A provider's setting is a setting of the file like any other.
impl From<crate::providers::settings::SettingError> for ConfigError {
    fn from(e: crate::providers::settings::SettingError) -> Self {
        ConfigError { field: e.field, message: e.message }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// `[proxy]`: the rate limits of `/v1/proxy` (token buckets, on each instance): a rate per
/// second and a burst, per connection and per tenant; a rate of 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimitSettings {
    pub per_connection_per_second: u32,
    pub per_connection_burst: u32,
    pub per_tenant_per_second: u32,
    pub per_tenant_burst: u32,
}

/// `[operator]`: the operator API's reach, and who else is the operator.
#[derive(Debug, Clone, Default)]
pub struct OperatorSettings {
    /// Providers made over the operator API may be reached on private and loopback
    /// addresses (`allow_private_endpoints`; for an internal IdP, or a test). Off: each of
    /// their endpoints, configured or discovered, only over https to public addresses.
    pub allow_private_endpoints: bool,
    /// Issuers whose workload tokens get the operator scope (`[[operator.workload_issuers]]`;
    /// file only: the operator API cannot widen who the operator is).
    pub workload_issuers: Vec<crate::domain::workload::WorkloadIssuer>,
}

/// `[webhooks]`: where deliveries may go and how they are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookSettings {
    /// `http://` to loopback addresses, and loopback addresses at all (`dev` sets it).
    pub allow_loopback: bool,
    /// Private, unique-local and shared (CGNAT) addresses.
    pub allow_private: bool,
    /// One delivery attempt's bound (connect and answer).
    pub timeout: Duration,
    /// How often each instance looks for due deliveries.
    pub poll_interval: Duration,
    /// Pending deliveries a tenant may have (the oldest beyond it are dropped).
    pub max_pending_per_tenant: u64,
}

/// Validated configuration.
#[derive(Debug)]
pub struct Config {
    pub public_base_url: Url,
    pub listen: SocketAddr,
    pub log_format: LogFormat,
    pub database_url: SecretString,
    pub database_max_connections: u32,
    /// Each HTTP worker's connections for the uncached lookup, apart from the pool
    /// (`store::lookup`); 0 behind a transaction pooler (lookups use the pool).
    pub database_lookup_connections_per_worker: u32,
    /// The change listener's own connection (`LISTEN` needs a session: behind PgBouncer in
    /// transaction mode, point this at Postgres or a session-mode pool). Default: the pool's.
    pub database_listen_url: Option<SecretString>,
    /// What is between `database_url` and PostgreSQL (`database.pooler`; see `store::db`).
    pub database_pooler: crate::store::Pooler,
    pub keyring: Keyring,
    /// The key store and the data-key cache (`[vault]`).
    pub vault: VaultSettings,
    pub elicitation_ttl: Duration,
    /// The longest a request is held by `wait_seconds` (a larger ask is held this long).
    pub max_wait: Duration,
    pub api_key_cache_ttl: Duration,
    pub api_key_cache_capacity: usize,
    /// Callers that may wait for an argon2 slot at once; more get 503.
    pub api_key_hash_queue: usize,
    pub tenants: Vec<TenantConfig>,
    pub providers: ProviderRegistry,
    /// The default `[idp]` and the named `[idps.<name>]`.
    pub idps: Idps,
    pub session_ttl: Duration,
    pub outbound_timeout: Duration,
    /// Certificate authorities trusted for outbound HTTPS besides the system's store and
    /// the built-in Mozilla roots (`outbound.ca_file`: a PEM bundle), e.g. the private CA
    /// of an internal IdP or webhook receiver.
    pub outbound_cas: Vec<reqwest::Certificate>,
    /// Refresh a token this long before it expires.
    pub refresh_margin: Duration,
    /// Refresh a token of unknown expiry this long after it was obtained.
    pub unknown_expiry_refresh: Duration,
    pub cleanup_interval: Duration,
    pub audit_retention: Duration,
    /// The lookup cache (see `cache`): on by default.
    pub cache_enabled: bool,
    pub cache_max_age: Duration,
    pub cache_capacity: usize,
    /// Where `GET /metrics` is served; `None`: no metrics.
    pub metrics_listen: Option<SocketAddr>,
    /// Where spans are exported (OTLP/HTTP); `None`: no traces.
    pub otlp_endpoint: Option<Url>,
    /// Send `traceparent` on to providers and the IdP (off: a third party should not see
    /// our trace ids).
    pub propagate_to_providers: bool,
    /// How long `/readyz` answers 503 while requests are still served, after SIGTERM.
    pub drain: Duration,
    /// `Strict-Transport-Security: max-age=` on every answer when `public_base_url` is
    /// https (`[hsts] max_age_seconds`, default a year; 0: not sent).
    pub hsts_max_age: u64,
    /// `[operator]`.
    pub operator: OperatorSettings,
    /// Webhook deliveries (`[webhooks]`).
    pub webhooks: WebhookSettings,
    pub proxy_limits: ProxyLimitSettings,
    /// `serve` applies migrations at start (not from the file: `serve --no-migrate` turns
    /// it off, and the schema must then already be this binary's).
    pub migrate_on_start: bool,
}

impl Config {
    /// Reads the file at `path` and applies the process environment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("--config", format!("cannot read {}: {e}", path.display())))?;
        Self::from_toml(&text, &process_env)
    }

    /// Parses TOML text and applies overrides from `env`.
    pub fn from_toml(text: &str, env: EnvLookup<'_>) -> Result<Self, ConfigError> {
        let (raw, secrets) = read_raw(text, env)?;
        validate::validate(raw, secrets)
    }
}

/// What the commands that work on the database alone need: no IdP, provider or tenant
/// settings, so `apikey create` runs without their secrets.
#[derive(Debug)]
pub struct CommandConfig {
    pub database_url: SecretString,
    pub database_pooler: crate::store::Pooler,
    pub audit_retention: Duration,
    /// Only where asked for (`rotate-key`, `keystore`).
    pub keyring: Option<Keyring>,
    /// The key store, where the keyring was asked for.
    pub vault: Option<VaultSettings>,
    pub listen: SocketAddr,
}

/// `[vault]`: where the key-encryption key lives, and the data-key cache.
#[derive(Debug, Clone)]
pub struct VaultSettings {
    /// How long and how many unwrapped data keys are held (`data_key_cache_*`).
    pub data_key_cache: crate::keys::CacheBound,
    pub key_store: KeyStoreSettings,
    /// How often each instance re-seals values not under their scope's active data key
    /// (`reseal_interval_seconds`; zero: never, `rotate-key` only).
    pub reseal_interval: Duration,
}

/// `[vault] store`: `local` (the keyring), `pkcs11` (`[vault.pkcs11]`) or `aws-kms`
/// (`[vault.aws_kms]`).
#[derive(Debug, Clone)]
pub enum KeyStoreSettings {
    Local,
    Pkcs11(crate::vault::kek::pkcs11::Pkcs11Settings),
    AwsKms(crate::vault::kek::aws_kms::AwsKmsSettings),
}

impl CommandConfig {
    /// Reads the file at `path` with the process environment; checks only the database
    /// settings, the listen address and the audit retention, and the vault keys when
    /// `keyring` is set.
    pub fn load(path: &Path, keyring: bool) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("--config", format!("cannot read {}: {e}", path.display())))?;
        Self::from_toml(&text, &process_env, keyring)
    }

    pub fn from_toml(text: &str, env: EnvLookup<'_>, keyring: bool) -> Result<Self, ConfigError> {
        let (raw, secrets) = read_raw(text, env)?;
        validate::validate_for_command(raw, secrets, keyring)
    }
}

/// The file, parsed, with the environment laid over it, and the secrets the environment
/// gives.
fn read_raw(text: &str, env: EnvLookup<'_>) -> Result<(raw::RawConfig, raw::EnvSecrets), ConfigError> {
    let toml_error = |e: toml::de::Error| {
        let at = e.span().map(|s| line_col(text, s.start)).map(|(l, c)| format!("line {l}, column {c}: "));
        err("toml", format!("{}{}", at.unwrap_or_default(), e.message()))
    };
    let mut table: toml::Table = toml::from_str(text).map_err(toml_error)?;
    let secrets = env::overlay(&mut table, env).map_err(all_of)?;
    Ok((toml::Value::Table(table).try_into().map_err(toml_error)?, secrets))
}

/// One error for several: each named on a line of its own.
pub(super) fn all_of(mut errors: Vec<ConfigError>) -> ConfigError {
    if errors.len() == 1 {
        return errors.remove(0);
    }
    let lines: Vec<String> = errors.iter().map(|e| format!("\n  {}: {}", e.field, e.message)).collect();
    err(format!("{} settings", errors.len()), lines.concat())
}

/// 1-based line and column (in characters) of a byte offset in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toml_error_names_its_line_and_column() {
        let e = Config::from_toml("public_base_url = \"https://x.example\"\n[cache]\nenabled = maybe\n", &|_| None)
            .unwrap_err();
        assert_eq!(e.field, "toml");
        assert!(e.message.starts_with("line 3, column 11: "), "{}", e.message);
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 0), (1, 1));
    }
    use crate::domain::ProviderId;
    use std::collections::HashMap;

    const KEY: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| m.get(k).cloned()
    }

    const GOOD: &str = r#"
public_base_url = "https://connect.example.com"
[idp]
issuer = "https://idp.example.com"
client_id = "mcp-connect"
[database]
url = "postgres://localhost/x"
[[tenants]]
id = "acme"
display_name = "Acme Assistant"
providers = ["github"]
[providers.github]
template = "github"
client_id = "abc"
"#;

    fn base_env() -> Vec<(&'static str, &'static str)> {
        vec![
            ("MCP_CONNECT_VAULT_KEYS", KEY),
            ("MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET", "s3cret"),
            ("MCP_CONNECT_IDP_CLIENT_SECRET", "idp-secret"),
        ]
    }

    #[test]
    fn a_good_config_loads_with_template_endpoints() {
        let c = Config::from_toml(GOOD, &env_of(&base_env())).unwrap();
        let gh = c.providers.get(&ProviderId::parse("github").unwrap()).unwrap();
        let authorize_url = gh.endpoints().and_then(|e| e.authorize_url.as_ref());
        assert_eq!(authorize_url.and_then(|u| u.host_str()), Some("github.com"));
        assert_eq!(gh.default_scopes().as_slice(), &["read:user".to_owned()]);
        assert_eq!(c.tenants[0].display_name, "Acme Assistant");
    }

    fn error_field(toml: &str, env: &[(&str, &str)]) -> String {
        Config::from_toml(toml, &env_of(env)).unwrap_err().field
    }

    #[test]
    fn start_up_refuses_a_missing_vault_key() {
        assert_eq!(
            error_field(
                GOOD,
                &[("MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET", "s"), ("MCP_CONNECT_IDP_CLIENT_SECRET", "s")]
            ),
            "vault"
        );
    }

    #[test]
    fn a_key_store_is_local_by_default_and_pkcs11_needs_its_settings_and_a_pin() {
        let c = Config::from_toml(GOOD, &env_of(&base_env())).unwrap();
        assert!(matches!(c.vault.key_store, KeyStoreSettings::Local));
        assert_eq!(c.vault.data_key_cache.ttl, Duration::from_secs(300));
        let with = |vault: &str| format!("{GOOD}\n{vault}");
        assert_eq!(error_field(&with("[vault]\nstore = \"kms\"\n"), &base_env()), "vault.store");
        assert_eq!(error_field(&with("[vault]\nstore = \"pkcs11\"\n"), &base_env()), "vault.pkcs11");
        let pkcs11 =
            "[vault]\nstore = \"pkcs11\"\n[vault.pkcs11]\nmodule = \"/m.so\"\ntoken_label = \"t\"\nkey_label = \"k\"\n";
        assert_eq!(error_field(&with(pkcs11), &base_env()), "vault.pkcs11", "no PIN");
        let mut env = base_env();
        env.push(("MCP_CONNECT_VAULT_PKCS11_PIN", "1234"));
        let c = Config::from_toml(&with(pkcs11), &env_of(&env)).unwrap();
        let KeyStoreSettings::Pkcs11(s) = c.vault.key_store else { panic!("pkcs11") };
        assert_eq!((s.token_label.as_str(), s.key_label.as_str()), ("t", "k"));
        assert!(!format!("{s:?}").contains("1234"), "the PIN is not in Debug");
        let unused = pkcs11.replace("store = \"pkcs11\"\n", "");
        assert_eq!(error_field(&with(&unused), &env), "vault.store", "an HSM configured but not used");
        let no_label = pkcs11.replace("key_label = \"k\"\n", "");
        assert_eq!(error_field(&with(&no_label), &env), "vault.pkcs11.key_label");
    }

    #[test]
    fn private_key_jwt_takes_no_client_secret_at_a_provider_or_the_idp() {
        use crate::providers::ClientAuth;
        let jwt = GOOD.replace(
            "client_id = \"abc\"\n",
            "client_id = \"abc\"\ntoken_endpoint_auth_method = \"private_key_jwt\"\n",
        );
        let no_provider_secret: Vec<_> =
            base_env().into_iter().filter(|(k, _)| *k != "MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET").collect();
        assert!(Config::from_toml(&jwt, &env_of(&no_provider_secret)).is_ok());
        assert_eq!(error_field(&jwt, &base_env()), "providers.github.token_endpoint_auth_method", "a secret beside it");

        let idp_jwt = GOOD.replace(
            "client_id = \"mcp-connect\"\n",
            "client_id = \"mcp-connect\"\ntoken_endpoint_auth_method = \"private_key_jwt\"\n",
        );
        let no_idp_secret: Vec<_> =
            base_env().into_iter().filter(|(k, _)| *k != "MCP_CONNECT_IDP_CLIENT_SECRET").collect();
        let c = Config::from_toml(&idp_jwt, &env_of(&no_idp_secret)).unwrap();
        assert_eq!(c.idps.default().client_auth, Some(ClientAuth::PrivateKeyJwt));
        assert_eq!(error_field(&idp_jwt, &base_env()), "idp.token_endpoint_auth_method", "a secret beside it");
        let idp_none = idp_jwt.replace("private_key_jwt", "none");
        assert_eq!(error_field(&idp_none, &base_env()), "idp.token_endpoint_auth_method");
        let shared_key = idp_jwt.replace("private_key_jwt", "client_secret_jwt");
        assert!(Config::from_toml(&shared_key, &env_of(&no_idp_secret)).is_err(), "client_secret_jwt is not taken");
    }

    #[test]
    fn aws_kms_needs_a_key_and_region_refuses_plain_http_off_loopback_and_never_half_credentials() {
        let with = |vault: &str| format!("{GOOD}\n{vault}");
        let kms = "[vault]\nstore = \"aws-kms\"\n[vault.aws_kms]\nkey_id = \"alias/k\"\nregion = \"eu-central-1\"\n";
        let c = Config::from_toml(&with(kms), &env_of(&base_env())).unwrap();
        let KeyStoreSettings::AwsKms(s) = c.vault.key_store else { panic!("aws-kms") };
        assert!((s.key_id.as_str(), s.region.as_str(), s.credentials.is_none()) == ("alias/k", "eu-central-1", true));
        assert_eq!(error_field(&with("[vault]\nstore = \"aws-kms\"\n"), &base_env()), "vault.aws_kms");
        assert_eq!(
            error_field(&with(&kms.replace("region = \"eu-central-1\"\n", "")), &base_env()),
            "vault.aws_kms.region"
        );
        let unused = kms.replace("store = \"aws-kms\"\n", "");
        assert_eq!(error_field(&with(&unused), &base_env()), "vault.store", "a KMS configured but not used");
        let plain = format!("{kms}endpoint = \"http://kms.internal:4566\"\n");
        assert_eq!(error_field(&with(&plain), &base_env()), "vault.aws_kms.endpoint");
        let local = format!("{kms}endpoint = \"http://127.0.0.1:4566\"\n");
        assert!(Config::from_toml(&with(&local), &env_of(&base_env())).is_ok());
        let half = format!("{kms}access_key_id = \"AKID\"\n");
        assert_eq!(error_field(&with(&half), &base_env()), "vault.aws_kms", "an id without its secret");
        let mut env = base_env();
        env.push(("MCP_CONNECT_VAULT_AWS_SECRET_ACCESS_KEY", "s3cr3t-value"));
        let c = Config::from_toml(&with(&half), &env_of(&env)).unwrap();
        let KeyStoreSettings::AwsKms(s) = c.vault.key_store else { panic!("aws-kms") };
        assert!(!format!("{s:?}").contains("s3cr3t"), "the secret is not in Debug");
        assert_eq!(error_field(&with(kms), &env), "vault.aws_kms.access_key_id", "a secret without its id");
    }

    #[test]
    fn start_up_refuses_a_malformed_vault_key() {
        assert_eq!(
            error_field(
                GOOD,
                &[
                    ("MCP_CONNECT_VAULT_KEYS", "k1:short"),
                    ("MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET", "s"),
                    ("MCP_CONNECT_IDP_CLIENT_SECRET", "s")
                ]
            ),
            "vault keys"
        );
    }

    #[test]
    fn every_mistake_of_a_file_is_reported_at_once() {
        let file = GOOD
            .replace("https://connect.example.com", "http://connect.example.com")
            .replace("https://idp.example.com", "ftp://idp.example.com")
            .replace("[database]", "[outbound]\ntimeout_seconds = 0\n[database]");
        let mut env = base_env();
        env.retain(|(k, _)| *k != "MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET");
        let e = Config::from_toml(&file, &env_of(&env)).unwrap_err();
        assert_eq!(e.field, "4 settings", "{}", e.message);
        for field in
            ["public_base_url", "idp.issuer", "outbound.timeout_seconds", "providers.github.client_secret_file"]
        {
            assert!(e.message.contains(&format!("\n  {field}: ")), "{field} in {}", e.message);
        }
    }

    #[test]
    fn operator_workload_issuers_grant_the_operator_scope_only() {
        let with = |scope: &str| {
            format!(
                "{GOOD}[[operator.workload_issuers]]\nname = \"cluster\"\nissuer = \"https://k8s.example\"\n\
                 [[operator.workload_issuers.rules]]\nclaims = {{ sub = \"system:serviceaccount:platform:admin\" }}\n\
                 scope = \"{scope}\"\n"
            )
        };
        let c = Config::from_toml(&with("operator"), &env_of(&base_env())).unwrap();
        assert_eq!(c.operator.workload_issuers.len(), 1);
        assert!(Config::from_toml(GOOD, &env_of(&base_env())).unwrap().operator.workload_issuers.is_empty());
        for scope in ["server", "admin"] {
            assert_eq!(error_field(&with(scope), &base_env()), "operator.workload_issuers[0].rules[0].scope");
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            error_field(&GOOD.replace("https://connect.example.com", "http://connect.example.com"), &base_env()),
            "public_base_url"
        );
        assert_eq!(
            error_field(&GOOD.replace("providers = [\"github\"]", "providers = [\"gitlab\"]"), &base_env()),
            "tenants[0].providers"
        );
        assert_eq!(
            error_field(GOOD, &[("MCP_CONNECT_VAULT_KEYS", KEY), ("MCP_CONNECT_IDP_CLIENT_SECRET", "s")]),
            "providers.github.client_secret_file"
        );
        assert_eq!(
            error_field(&GOOD.replace("https://idp.example.com", "http://idp.example.com"), &base_env()),
            "idp.issuer"
        );
        assert_eq!(
            error_field(&format!("{GOOD}authorize_url = \"http://github.com/x\"\n"), &base_env()),
            "providers.github.authorize_url"
        );
        assert_eq!(error_field(&format!("{GOOD}bogus = 1\n"), &base_env()), "toml");
        assert_eq!(error_field(&GOOD.replace("id = \"acme\"", "id = \"Acme Corp\""), &base_env()), "tenants[0].id");
    }

    #[test]
    fn a_tenant_takes_subject_tokens_for_a_resource_url_and_may_require_them() {
        let tenant =
            |extra: &str| GOOD.replace("providers = [\"github\"]", &format!("providers = [\"github\"]\n{extra}"));
        let c = Config::from_toml(&tenant(""), &env_of(&base_env())).unwrap();
        assert_eq!(c.tenants[0].subject_token, crate::domain::SubjectTokenPolicy::default());
        let ok = tenant("subject_token_audience = \"https://mcp.acme.example/mcp\"\nrequire_subject_token = true");
        let c = Config::from_toml(&ok, &env_of(&base_env())).unwrap();
        assert_eq!(c.tenants[0].subject_token.audience.as_deref(), Some("https://mcp.acme.example/mcp"));
        assert_eq!(c.tenants[0].subject_token.required, Some(true));
        for (bad, field) in [
            ("require_subject_token = true", "tenants[0].require_subject_token"),
            ("subject_token_audience = \"mcp-server\"", "tenants[0].subject_token_audience"),
            ("subject_token_audience = \"http://mcp.acme.example/mcp\"", "tenants[0].subject_token_audience"),
        ] {
            assert_eq!(error_field(&tenant(bad), &base_env()), field, "{bad}");
        }
    }

    #[test]
    fn a_tenant_may_hand_out_no_credential_with_overrides_for_its_own_providers() {
        use crate::domain::{HandOutMode, ProviderId};
        let tenant =
            |extra: &str| GOOD.replace("providers = [\"github\"]", &format!("providers = [\"github\"]\n{extra}"));
        let c = Config::from_toml(&tenant(""), &env_of(&base_env())).unwrap();
        assert_eq!(c.tenants[0].hand_out, None, "left out: the database's stands");
        let c = Config::from_toml(&tenant("hand_out = \"none\""), &env_of(&base_env())).unwrap();
        let github = ProviderId::parse("github").unwrap();
        assert_eq!(c.tenants[0].hand_out.as_ref().map(|h| h.for_provider(&github)), Some(HandOutMode::None));
        let over = tenant("hand_out = \"none\"\nhand_out_providers = { github = \"credentials\" }");
        let c = Config::from_toml(&over, &env_of(&base_env())).unwrap();
        assert_eq!(c.tenants[0].hand_out.as_ref().map(|h| h.for_provider(&github)), Some(HandOutMode::Credentials));
        for (bad, field) in [
            ("hand_out_providers = { gitlab = \"none\" }", "tenants[0].hand_out_providers"),
            ("hand_out = \"token\"", "toml"),
        ] {
            assert_eq!(error_field(&tenant(bad), &base_env()), field, "{bad}");
        }
    }

    #[test]
    fn an_unreadable_stored_hand_out_hands_out_nothing() {
        use crate::domain::{HandOutMode, HandOutPolicy, ProviderId};
        let p = ProviderId::parse("github").unwrap();
        assert_eq!(HandOutPolicy::from_stored(None).for_provider(&p), HandOutMode::Credentials);
        let broken = serde_json::json!({"default": "maybe"});
        assert_eq!(HandOutPolicy::from_stored(Some(&broken)).for_provider(&p), HandOutMode::None);
    }

    #[test]
    fn a_punycode_provider_host_is_refused_unless_allowed() {
        let t = format!("{GOOD}authorize_url = \"https://xn--gthub-n4a.com/login\"\n");
        assert_eq!(error_field(&t, &base_env()), "providers.github.authorize_url");
        let allowed = format!("{t}allow_idn_hosts = [\"xn--gthub-n4a.com\"]\n");
        assert!(Config::from_toml(&allowed, &env_of(&base_env())).is_ok());
    }

    #[test]
    fn a_transaction_pooler_needs_a_listen_url_and_an_unknown_pooler_is_refused() {
        let with = |extra: &str| GOOD.replace("[database]", &format!("[database]\n{extra}"));
        let e = Config::from_toml(&with("pooler = \"transaction\""), &env_of(&base_env())).unwrap_err();
        assert!(e.message.contains("needs database.listen_url"), "{}", e.message);
        assert_eq!(error_field(&with("pooler = \"transaction\""), &base_env()), "database.pooler");
        assert_eq!(error_field(&with("pooler = \"statement\""), &base_env()), "database.pooler");
        let ok = with("pooler = \"transaction\"\nlisten_url = \"postgres://db-direct/mcp\"");
        let c = Config::from_toml(&ok, &env_of(&base_env())).unwrap();
        assert_eq!(c.database_pooler, crate::store::Pooler::Transaction);
        assert_eq!(Config::from_toml(GOOD, &env_of(&base_env())).unwrap().database_pooler, crate::store::Pooler::None);
        let mut e = base_env();
        e.push(("MCP_CONNECT_DATABASE_POOLER", "transaction"));
        e.push(("MCP_CONNECT_DATABASE_LISTEN_URL", "postgres://db-direct/mcp"));
        assert_eq!(Config::from_toml(GOOD, &env_of(&e)).unwrap().database_pooler, crate::store::Pooler::Transaction);
    }

    #[test]
    fn lookup_connections_default_to_one_per_worker_are_bounded_and_refused_behind_a_transaction_pooler() {
        let with = |extra: &str| GOOD.replace("[database]", &format!("[database]\n{extra}"));
        let c = Config::from_toml(GOOD, &env_of(&base_env())).unwrap();
        assert_eq!(c.database_lookup_connections_per_worker, 1);
        let c = Config::from_toml(&with("lookup_connections_per_worker = 3"), &env_of(&base_env())).unwrap();
        assert_eq!(c.database_lookup_connections_per_worker, 3);
        for bad in ["lookup_connections_per_worker = 0", "lookup_connections_per_worker = 17"] {
            let e = Config::from_toml(&with(bad), &env_of(&base_env())).unwrap_err();
            assert_eq!(
                (e.field.as_str(), e.message.as_str()),
                ("database.lookup_connections_per_worker", "must be between 1 and 16")
            );
        }
        let mut e = base_env();
        e.push(("MCP_CONNECT_DATABASE_LOOKUP_CONNECTIONS_PER_WORKER", "4"));
        assert_eq!(Config::from_toml(GOOD, &env_of(&e)).unwrap().database_lookup_connections_per_worker, 4);
        // Behind a transaction pooler lookups go through the pool: a size for a set that
        // is not made is a mistake said at start, not a setting quietly ignored.
        let pooled = "pooler = \"transaction\"\nlisten_url = \"postgres://db-direct/mcp\"";
        let c = Config::from_toml(&with(pooled), &env_of(&base_env())).unwrap();
        assert_eq!(c.database_lookup_connections_per_worker, 0);
        let e = Config::from_toml(&with(&format!("{pooled}\nlookup_connections_per_worker = 1")), &env_of(&base_env()))
            .unwrap_err();
        assert_eq!(e.field, "database.lookup_connections_per_worker");
        assert!(e.message.contains("not used with database.pooler = \"transaction\""), "{}", e.message);
        let mut e = base_env();
        e.push(("MCP_CONNECT_DATABASE_POOLER", "transaction"));
        e.push(("MCP_CONNECT_DATABASE_LISTEN_URL", "postgres://db-direct/mcp"));
        e.push(("MCP_CONNECT_DATABASE_LOOKUP_CONNECTIONS_PER_WORKER", "2"));
        assert_eq!(error_field(GOOD, &e), "database.lookup_connections_per_worker");
        let mut e = base_env();
        e.push(("MCP_CONNECT_DATABASE_LOOKUP_CONNECTIONS_PER_WORKER", "two"));
        let e = Config::from_toml(GOOD, &env_of(&e)).unwrap_err();
        assert_eq!(e.field, "MCP_CONNECT_DATABASE_LOOKUP_CONNECTIONS_PER_WORKER", "{}", e.message);
    }

    #[test]
    fn environment_overrides_the_file() {
        let mut e = base_env();
        e.push(("MCP_CONNECT_PUBLIC_BASE_URL", "https://other.example.com"));
        e.push(("DATABASE_URL", "postgres://db/other"));
        let c = Config::from_toml(GOOD, &env_of(&e)).unwrap();
        assert_eq!(c.public_base_url.as_str(), "https://other.example.com/");
        assert_eq!(secrecy::ExposeSecret::expose_secret(&c.database_url), "postgres://db/other");
    }

    #[test]
    fn the_id_token_clock_skew_defaults_to_a_minute_and_comes_from_the_file_or_the_environment() {
        let gh = |c: &Config| c.providers.get(&ProviderId::parse("github").unwrap()).unwrap().policy.clock_skew;
        let c = Config::from_toml(GOOD, &env_of(&base_env())).unwrap();
        assert_eq!((c.idps.default().clock_skew, gh(&c)), (time::Duration::seconds(60), time::Duration::seconds(60)));
        let file = GOOD.replace("client_id = \"mcp-connect\"", "client_id = \"mcp-connect\"\nclock_skew_seconds = 5");
        let file = format!("{file}clock_skew_seconds = 7\n");
        let c = Config::from_toml(&file, &env_of(&base_env())).unwrap();
        assert_eq!((c.idps.default().clock_skew, gh(&c)), (time::Duration::seconds(5), time::Duration::seconds(7)));
        let mut e = base_env();
        e.push(("MCP_CONNECT_IDP_CLOCK_SKEW_SECONDS", "0"));
        e.push(("MCP_CONNECT_PROVIDER_GITHUB_CLOCK_SKEW_SECONDS", "30"));
        let c = Config::from_toml(&file, &env_of(&e)).unwrap();
        assert_eq!((c.idps.default().clock_skew, gh(&c)), (time::Duration::ZERO, time::Duration::seconds(30)));
        let mut e = base_env();
        e.push(("MCP_CONNECT_IDP_CLOCK_SKEW_SECONDS", "soon"));
        // Named where the bad value is: the variable.
        assert_eq!(error_field(GOOD, &e), "MCP_CONNECT_IDP_CLOCK_SKEW_SECONDS");
        assert_eq!(
            error_field(&format!("{GOOD}clock_skew_seconds = 301\n"), &base_env()),
            "providers.github.clock_skew_seconds"
        );
    }

    #[test]
    fn a_configured_issuer_is_kept_exactly_as_written() {
        let c = Config::from_toml(
            &GOOD.replace("https://idp.example.com", "https://idp.example.com/"),
            &env_of(&base_env()),
        )
        .unwrap();
        assert_eq!(c.idps.default().issuer.as_str(), "https://idp.example.com/");
        let c = Config::from_toml(GOOD, &env_of(&base_env())).unwrap();
        assert_eq!(c.idps.default().issuer.as_str(), "https://idp.example.com");
    }

    #[test]
    fn a_tenant_names_one_of_the_configured_idps_each_with_its_own_issuer() {
        let second = "[idps.second]\nissuer = \"https://idp-b.example.com\"\nclient_id = \"b\"\n";
        let named =
            |idp: &str| GOOD.replace("providers = [\"github\"]", &format!("providers = [\"github\"]\nidp = \"{idp}\""));
        let mut env = base_env();
        env.push(("MCP_CONNECT_IDPS_SECOND_CLIENT_SECRET", "b-secret"));
        env.push(("MCP_CONNECT_IDPS_A_B_CLIENT_SECRET", "ab-secret"));
        let c = Config::from_toml(&format!("{}{second}", named("second")), &env_of(&env)).unwrap();
        let idp = c.idps.of_tenant(c.tenants[0].idp.as_ref()).unwrap();
        assert_eq!((idp.name.as_str(), idp.issuer.as_str()), ("second", "https://idp-b.example.com"));
        assert_eq!(c.idps.by_issuer("https://idp-b.example.com").unwrap().name, "second");
        // `default` is `[idp]`, written out; left out, the database's value stands.
        let c = Config::from_toml(&named("default"), &env_of(&base_env())).unwrap();
        assert_eq!(c.tenants[0].idp.as_ref().map(|n| n.as_str()), Some("default"));
        assert_eq!(c.idps.of_tenant(c.tenants[0].idp.as_ref()).unwrap().name, "default");
        assert_eq!(Config::from_toml(GOOD, &env_of(&base_env())).unwrap().tenants[0].idp, None);

        for (toml, env, field) in [
            // A tenant naming an IdP that is not configured.
            (named("third"), &env, "tenants[0].idp"),
            (named("Not A Name"), &env, "tenants[0].idp"),
            // The secret of a named IdP comes from its own variable or file.
            (format!("{GOOD}{second}"), &base_env(), "idps.second.client_secret_file"),
            // Two entries with one issuer: a session's issuer must lead to one IdP.
            (format!("{GOOD}{}", second.replace("idp-b.example.com", "idp.example.com")), &env, "idps.second.issuer"),
            // `a-b` and `a_b` would read one secret variable.
            (
                format!(
                    "{GOOD}{}{}",
                    second.replace("idps.second", "idps.a-b"),
                    second.replace("idps.second", "idps.a_b").replace("idp-b.example.com", "idp-c.example.com")
                ),
                &env,
                "idps.a_b",
            ),
            // `default` is the name of `[idp]`.
            (format!("{GOOD}{}", second.replace("idps.second", "idps.default")), &env, "idps.default"),
        ] {
            assert_eq!(error_field(&toml, env), field, "{toml}");
        }
    }
}
