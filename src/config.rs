//! Configuration: a TOML file plus `MCP_CONNECT_*` environment overrides, parsed into
//! raw serde structs (unknown fields refused) and then validated into a `Config` of ready
//! objects. Every error names the field. Secrets (vault keys, client secrets, the
//! database URL with its password) come from the environment or from files; they may
//! never be required inside the TOML.

use crate::domain::{ProviderId, Scopes, TenantId};
use crate::oauth::providers::{Provider, ProviderKind, ProviderRegistry};
use crate::oauth::resolve::IdpConfig;
use crate::oauth::urls;
use crate::vault::Keyring;
use secrecy::SecretString;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), message: message.into() }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    public_base_url: Option<String>,
    listen: Option<String>,
    #[serde(default)]
    log_format: Option<String>,
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    vault: RawVault,
    #[serde(default)]
    elicitations: RawElicitations,
    #[serde(default)]
    api_keys: RawApiKeys,
    idp: Option<RawIdp>,
    #[serde(default)]
    sessions: RawSessions,
    #[serde(default)]
    outbound: RawOutbound,
    #[serde(default)]
    refresh: RawRefresh,
    #[serde(default)]
    cleanup: RawCleanup,
    #[serde(default)]
    audit: RawAudit,
    #[serde(default)]
    cache: RawCache,
    #[serde(default)]
    tenants: Vec<RawTenant>,
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    url: Option<String>,
    max_connections: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVault {
    keys_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawElicitations {
    ttl_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApiKeys {
    cache_seconds: Option<u64>,
    cache_capacity: Option<usize>,
    hash_queue: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdp {
    issuer: Option<String>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    scopes: Option<Vec<String>>,
    #[serde(default)]
    allow_idn_hosts: Vec<String>,
    clock_skew_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSessions {
    ttl_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutbound {
    timeout_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRefresh {
    margin_seconds: Option<u64>,
    unknown_expiry_refresh_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCleanup {
    interval_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    enabled: Option<bool>,
    max_age_seconds: Option<u64>,
    capacity: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    retention_days: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    id: String,
    display_name: String,
    providers: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    template: ProviderKind,
    display_name: Option<String>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    authorize_url: Option<String>,
    token_url: Option<String>,
    userinfo_url: Option<String>,
    revocation_url: Option<String>,
    issuer: Option<String>,
    authorization_response_iss: Option<bool>,
    scopes: Option<Vec<String>>,
    scope_separator: Option<String>,
    #[serde(default)]
    extra_authorize_params: BTreeMap<String, String>,
    account_id_field: Option<String>,
    account_login_field: Option<String>,
    #[serde(default)]
    allow_account_change: bool,
    #[serde(default)]
    allow_idn_hosts: Vec<String>,
    clock_skew_seconds: Option<u64>,
}

pub use crate::domain::TenantConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// Validated configuration.
#[derive(Debug)]
pub struct Config {
    pub public_base_url: Url,
    pub listen: SocketAddr,
    pub log_format: LogFormat,
    pub database_url: SecretString,
    pub database_max_connections: u32,
    pub keyring: Keyring,
    pub elicitation_ttl: Duration,
    pub api_key_cache_ttl: Duration,
    pub api_key_cache_capacity: usize,
    /// Callers that may wait for an argon2 slot at once; more get 503.
    pub api_key_hash_queue: usize,
    pub tenants: Vec<TenantConfig>,
    pub providers: ProviderRegistry,
    pub idp: IdpConfig,
    pub session_ttl: Duration,
    pub outbound_timeout: Duration,
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
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let msg = e.message().to_owned();
            let span = e.span().map(|s| format!(" (at byte {})", s.start)).unwrap_or_default();
            err("toml", format!("{msg}{span}"))
        })?;
        validate(raw, env)
    }
}

fn env_key(suffix: &str) -> String {
    format!("MCP_CONNECT_{suffix}")
}

fn provider_env(id: &ProviderId, what: &str) -> String {
    env_key(&format!("PROVIDER_{}_{}", id.as_str().to_ascii_uppercase().replace('-', "_"), what))
}

/// A clock skew for ID tokens: the environment, else the file, else 60 s; at most 5 min.
fn clock_skew(field: &str, env_value: Option<String>, raw: Option<u64>) -> Result<time::Duration, ConfigError> {
    let secs = match env_value {
        Some(v) => v.trim().parse::<u64>().map_err(|_| err(field, format!("{v:?} is not a number of seconds")))?,
        None => raw.unwrap_or(60),
    };
    if secs > 300 {
        return Err(err(field, "must be at most 300 (a larger skew keeps expired ID tokens alive)"));
    }
    Ok(time::Duration::seconds(secs as i64))
}

fn read_secret_file(field: &str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| err(field, format!("cannot read {}: {e}", path.display())))
}

fn validate(raw: RawConfig, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
    let base = env(&env_key("PUBLIC_BASE_URL"))
        .or(raw.public_base_url)
        .ok_or_else(|| err("public_base_url", "missing (or set MCP_CONNECT_PUBLIC_BASE_URL)"))?;
    let public_base_url = Url::parse(&base).map_err(|e| err("public_base_url", format!("not a URL: {e}")))?;
    if public_base_url.scheme() != "https" && !urls::is_loopback(&public_base_url) {
        return Err(err("public_base_url", "must use https (http only on loopback)"));
    }
    if public_base_url.path() != "/" || public_base_url.query().is_some() || public_base_url.fragment().is_some() {
        return Err(err("public_base_url", "must be an origin with no path, query or fragment"));
    }

    let listen_raw = env(&env_key("LISTEN")).or(raw.listen).unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let listen: SocketAddr = listen_raw
        .parse()
        .map_err(|_| err("listen", format!("{listen_raw:?} is not an address like 127.0.0.1:8080")))?;

    let log_format = match env(&env_key("LOG_FORMAT")).or(raw.log_format).as_deref() {
        None | Some("json") => LogFormat::Json,
        Some("text") => LogFormat::Text,
        Some(other) => return Err(err("log_format", format!("{other:?}: expected \"json\" or \"text\""))),
    };

    let database_url = env(&env_key("DATABASE_URL"))
        .or_else(|| env("DATABASE_URL"))
        .or(raw.database.url)
        .ok_or_else(|| err("database.url", "missing (or set MCP_CONNECT_DATABASE_URL / DATABASE_URL)"))?;
    if !(database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")) {
        return Err(err("database.url", "must be a postgres:// URL"));
    }
    let database_max_connections = raw.database.max_connections.unwrap_or(16);
    if database_max_connections == 0 {
        return Err(err("database.max_connections", "must be at least 1"));
    }

    let keys_spec = match (
        env(&env_key("VAULT_KEYS")),
        env(&env_key("VAULT_KEYS_FILE")).map(PathBuf::from).or(raw.vault.keys_file),
    ) {
        (Some(spec), _) => spec,
        (None, Some(path)) => read_secret_file("vault.keys_file", &path)?,
        (None, None) => {
            return Err(err(
                "vault",
                "no key: set MCP_CONNECT_VAULT_KEYS=<id>:<base64 32 bytes> or vault.keys_file (`mcp-connect genkey` makes one)",
            ));
        }
    };
    let keyring = Keyring::parse(&keys_spec).map_err(|e| err("vault keys", e.to_string()))?;

    let ttl = raw.elicitations.ttl_seconds.unwrap_or(600);
    if !(30..=86_400).contains(&ttl) {
        return Err(err("elicitations.ttl_seconds", "must be between 30 and 86400"));
    }
    let key_cache = raw.api_keys.cache_seconds.unwrap_or(5);
    if key_cache > 60 {
        return Err(err("api_keys.cache_seconds", "must be at most 60 (revocation must take effect quickly)"));
    }

    let mut providers = Vec::new();
    for (name, p) in raw.providers {
        providers.push(validate_provider(&name, p, env)?);
    }
    let registry = ProviderRegistry::new(providers);

    let mut tenants: Vec<TenantConfig> = Vec::new();
    for (i, t) in raw.tenants.into_iter().enumerate() {
        let field = format!("tenants[{i}]");
        let id = TenantId::parse(&t.id).map_err(|e| err(format!("{field}.id"), e.to_string()))?;
        if tenants.iter().any(|x| x.id == id) {
            return Err(err(format!("{field}.id"), format!("tenant {id} is defined twice")));
        }
        let display_name = t.display_name.trim().to_owned();
        if display_name.is_empty() || display_name.len() > 100 || display_name.chars().any(char::is_control) {
            return Err(err(format!("{field}.display_name"), "must be 1-100 printable characters"));
        }
        let mut tp = Vec::new();
        for p in &t.providers {
            let pid = ProviderId::parse(p).map_err(|e| err(format!("{field}.providers"), e.to_string()))?;
            if registry.get(&pid).is_none() {
                return Err(err(
                    format!("{field}.providers"),
                    format!("provider {pid:?} is not configured under [providers]"),
                ));
            }
            tp.push(pid);
        }
        tenants.push(TenantConfig { id, display_name, providers: tp });
    }

    let idp = validate_idp(raw.idp, env)?;
    let session_ttl = raw.sessions.ttl_seconds.unwrap_or(3600);
    if !(60..=86_400).contains(&session_ttl) {
        return Err(err("sessions.ttl_seconds", "must be between 60 and 86400"));
    }
    let outbound_timeout = raw.outbound.timeout_seconds.unwrap_or(10);
    if !(1..=60).contains(&outbound_timeout) {
        return Err(err("outbound.timeout_seconds", "must be between 1 and 60"));
    }

    let refresh_margin = raw.refresh.margin_seconds.unwrap_or(60);
    if refresh_margin > 3600 {
        return Err(err("refresh.margin_seconds", "must be at most 3600"));
    }
    let unknown_expiry = raw.refresh.unknown_expiry_refresh_seconds.unwrap_or(3600);
    if !(60..=86_400).contains(&unknown_expiry) {
        return Err(err("refresh.unknown_expiry_refresh_seconds", "must be between 60 and 86400"));
    }
    let cleanup_interval = raw.cleanup.interval_seconds.unwrap_or(300);
    if !(1..=86_400).contains(&cleanup_interval) {
        return Err(err("cleanup.interval_seconds", "must be between 1 and 86400"));
    }
    let retention_days = raw.audit.retention_days.unwrap_or(365);
    if !(1..=3650).contains(&retention_days) {
        return Err(err("audit.retention_days", "must be between 1 and 3650"));
    }

    let cache_enabled = match env(&env_key("CACHE_ENABLED")).as_deref() {
        None => raw.cache.enabled.unwrap_or(true),
        Some("true" | "1") => true,
        Some("false" | "0") => false,
        Some(other) => {
            return Err(err("cache.enabled", format!("MCP_CONNECT_CACHE_ENABLED={other:?}: expected true or false")));
        }
    };
    let cache_max_age = raw.cache.max_age_seconds.unwrap_or(5);
    if !(1..=60).contains(&cache_max_age) {
        return Err(err("cache.max_age_seconds", "must be between 1 and 60 (a lost notification must not live long)"));
    }

    Ok(Config {
        cache_enabled,
        cache_max_age: Duration::from_secs(cache_max_age),
        cache_capacity: raw.cache.capacity.unwrap_or(200_000).max(1),
        refresh_margin: Duration::from_secs(refresh_margin),
        unknown_expiry_refresh: Duration::from_secs(unknown_expiry),
        cleanup_interval: Duration::from_secs(cleanup_interval),
        audit_retention: Duration::from_secs(retention_days * 86_400),
        idp,
        session_ttl: Duration::from_secs(session_ttl),
        outbound_timeout: Duration::from_secs(outbound_timeout),
        public_base_url,
        listen,
        log_format,
        database_url: SecretString::from(database_url),
        database_max_connections,
        keyring,
        elicitation_ttl: Duration::from_secs(ttl),
        api_key_cache_ttl: Duration::from_secs(key_cache),
        api_key_cache_capacity: raw.api_keys.cache_capacity.unwrap_or(10_000).max(1),
        api_key_hash_queue: raw.api_keys.hash_queue.unwrap_or(32),
        tenants,
        providers: registry,
    })
}

fn validate_idp(raw: Option<RawIdp>, env: EnvLookup<'_>) -> Result<IdpConfig, ConfigError> {
    let raw = raw.unwrap_or(RawIdp {
        issuer: None,
        client_id: None,
        client_secret_file: None,
        scopes: None,
        allow_idn_hosts: Vec::new(),
        clock_skew_seconds: None,
    });
    let clock_skew =
        clock_skew("idp.clock_skew_seconds", env(&env_key("IDP_CLOCK_SKEW_SECONDS")), raw.clock_skew_seconds)?;
    let issuer = env(&env_key("IDP_ISSUER")).or(raw.issuer).ok_or_else(|| {
        err("idp.issuer", "missing (or set MCP_CONNECT_IDP_ISSUER): the OIDC IdP that issues the MCP access tokens")
    })?;
    let issuer =
        urls::Issuer::parse(&issuer, &raw.allow_idn_hosts).map_err(|e| err("idp.issuer", format!("{issuer:?} {e}")))?;
    let client_id = env(&env_key("IDP_CLIENT_ID"))
        .or(raw.client_id)
        .ok_or_else(|| err("idp.client_id", "missing (or set MCP_CONNECT_IDP_CLIENT_ID)"))?;
    let client_secret = match (env(&env_key("IDP_CLIENT_SECRET")), &raw.client_secret_file) {
        (Some(s), _) => s,
        (None, Some(path)) => read_secret_file("idp.client_secret_file", path)?,
        (None, None) => {
            return Err(err(
                "idp.client_secret_file",
                "no client secret: set MCP_CONNECT_IDP_CLIENT_SECRET or client_secret_file",
            ));
        }
    };
    let scopes = raw.scopes.unwrap_or_else(|| vec!["openid".to_owned()]);
    Scopes::parse(&scopes).map_err(|e| err("idp.scopes", e.to_string()))?;
    if !scopes.iter().any(|s| s == "openid") {
        return Err(err("idp.scopes", "must include \"openid\""));
    }
    Ok(IdpConfig {
        issuer,
        client_id,
        client_secret: SecretString::from(client_secret),
        scopes,
        allow_idn_hosts: raw.allow_idn_hosts,
        clock_skew,
    })
}

fn validate_provider(name: &str, p: RawProvider, env: EnvLookup<'_>) -> Result<Provider, ConfigError> {
    let field = format!("providers.{name}");
    let f = |sub: &str| format!("{field}.{sub}");
    let id = ProviderId::parse(name).map_err(|e| err(&field, e.to_string()))?;
    let t = p.template.template();

    let client_id = env(&provider_env(&id, "CLIENT_ID"))
        .or(p.client_id)
        .ok_or_else(|| err(f("client_id"), format!("missing (or set {})", provider_env(&id, "CLIENT_ID"))))?;
    let client_secret = match (env(&provider_env(&id, "CLIENT_SECRET")), &p.client_secret_file) {
        (Some(s), _) => s,
        (None, Some(path)) => read_secret_file(&f("client_secret_file"), path)?,
        (None, None) => {
            return Err(err(
                f("client_secret_file"),
                format!("no client secret: set {} or client_secret_file", provider_env(&id, "CLIENT_SECRET")),
            ));
        }
    };

    let allow = &p.allow_idn_hosts;
    let url_field = |sub: &str, raw: Option<String>, default: Option<&str>| -> Result<Option<Url>, ConfigError> {
        match raw.as_deref().or(default) {
            None => Ok(None),
            Some(s) => urls::endpoint(s, allow).map(Some).map_err(|e| err(f(sub), format!("{s:?} {e}"))),
        }
    };
    let authorize_url = url_field("authorize_url", p.authorize_url, t.authorize_url)?;
    let token_url = url_field("token_url", p.token_url, t.token_url)?;
    let userinfo_url = url_field("userinfo_url", p.userinfo_url, t.userinfo_url)?;
    let revocation_url = url_field("revocation_url", p.revocation_url, t.revocation_url)?;
    let issuer = match p.issuer.as_deref().or(t.issuer) {
        None => None,
        Some(s) => Some(urls::Issuer::parse(s, allow).map_err(|e| err(f("issuer"), format!("{s:?} {e}")))?),
    };

    if p.template == ProviderKind::Oidc {
        if issuer.is_none() {
            return Err(err(f("issuer"), "required for the oidc template (endpoints come from discovery)"));
        }
    } else {
        if authorize_url.is_none() {
            return Err(err(f("authorize_url"), "required for the oauth2 template"));
        }
        if token_url.is_none() {
            return Err(err(f("token_url"), "required for the oauth2 template"));
        }
    }
    let authorization_response_iss = p.authorization_response_iss.unwrap_or(false);
    if authorization_response_iss && issuer.is_none() {
        return Err(err(f("authorization_response_iss"), "needs `issuer` to compare against"));
    }

    let default_scopes = match &p.scopes {
        Some(s) => Scopes::parse(s).map_err(|e| err(f("scopes"), e.to_string()))?,
        None => Scopes::parse(t.default_scopes).map_err(|e| err(f("scopes"), e.to_string()))?,
    };
    let scope_separator = p.scope_separator.unwrap_or_else(|| t.scope_separator.to_owned());
    if !matches!(scope_separator.as_str(), " " | ",") {
        return Err(err(f("scope_separator"), "must be \" \" or \",\""));
    }
    let reserved = [
        "state",
        "code_challenge",
        "code_challenge_method",
        "redirect_uri",
        "client_id",
        "response_type",
        "scope",
        "nonce",
    ];
    for k in p.extra_authorize_params.keys() {
        if reserved.contains(&k.as_str()) {
            return Err(err(f("extra_authorize_params"), format!("{k:?} is set by mcp-connect itself")));
        }
    }
    let mut extra: Vec<(String, String)> =
        t.extra_authorize_params.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    for (k, v) in p.extra_authorize_params {
        extra.retain(|(ek, _)| *ek != k);
        extra.push((k, v));
    }

    let clock_skew =
        clock_skew(&f("clock_skew_seconds"), env(&provider_env(&id, "CLOCK_SKEW_SECONDS")), p.clock_skew_seconds)?;
    let display_name = p
        .display_name
        .unwrap_or_else(|| if t.display_name.is_empty() { name.to_owned() } else { t.display_name.to_owned() });

    Ok(Provider {
        id,
        kind: p.template,
        display_name,
        client_id,
        client_secret: SecretString::from(client_secret),
        authorize_url,
        token_url,
        userinfo_url,
        revocation_url,
        issuer,
        authorization_response_iss,
        oidc: t.oidc,
        scope_separator,
        default_scopes,
        extra_authorize_params: extra,
        account_id_field: p.account_id_field.unwrap_or_else(|| t.account_id_field.to_owned()),
        account_login_field: p.account_login_field.unwrap_or_else(|| t.account_login_field.to_owned()),
        allow_account_change: p.allow_account_change,
        allow_idn_hosts: p.allow_idn_hosts,
        clock_skew,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(gh.authorize_url.as_ref().and_then(|u| u.host_str()), Some("github.com"));
        assert_eq!(gh.default_scopes.as_slice(), &["read:user".to_owned()]);
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
    fn start_up_refuses_a_malformed_vault_key() {
        assert_eq!(
            error_field(
                GOOD,
                &[("MCP_CONNECT_VAULT_KEYS", "k1:short"), ("MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET", "s")]
            ),
            "vault keys"
        );
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
    fn a_punycode_provider_host_is_refused_unless_allowed() {
        let t = format!("{GOOD}authorize_url = \"https://xn--gthub-n4a.com/login\"\n");
        assert_eq!(error_field(&t, &base_env()), "providers.github.authorize_url");
        let allowed = format!("{t}allow_idn_hosts = [\"xn--gthub-n4a.com\"]\n");
        assert!(Config::from_toml(&allowed, &env_of(&base_env())).is_ok());
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
        let gh = |c: &Config| c.providers.get(&ProviderId::parse("github").unwrap()).unwrap().clock_skew;
        let c = Config::from_toml(GOOD, &env_of(&base_env())).unwrap();
        assert_eq!((c.idp.clock_skew, gh(&c)), (time::Duration::seconds(60), time::Duration::seconds(60)));
        let file = GOOD.replace("client_id = \"mcp-connect\"", "client_id = \"mcp-connect\"\nclock_skew_seconds = 5");
        let file = format!("{file}clock_skew_seconds = 7\n");
        let c = Config::from_toml(&file, &env_of(&base_env())).unwrap();
        assert_eq!((c.idp.clock_skew, gh(&c)), (time::Duration::seconds(5), time::Duration::seconds(7)));
        let mut e = base_env();
        e.push(("MCP_CONNECT_IDP_CLOCK_SKEW_SECONDS", "0"));
        e.push(("MCP_CONNECT_PROVIDER_GITHUB_CLOCK_SKEW_SECONDS", "30"));
        let c = Config::from_toml(&file, &env_of(&e)).unwrap();
        assert_eq!((c.idp.clock_skew, gh(&c)), (time::Duration::ZERO, time::Duration::seconds(30)));
        let mut e = base_env();
        e.push(("MCP_CONNECT_IDP_CLOCK_SKEW_SECONDS", "soon"));
        assert_eq!(error_field(GOOD, &e), "idp.clock_skew_seconds");
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
        assert_eq!(c.idp.issuer.as_str(), "https://idp.example.com/");
        let c = Config::from_toml(GOOD, &env_of(&base_env())).unwrap();
        assert_eq!(c.idp.issuer.as_str(), "https://idp.example.com");
    }
}
