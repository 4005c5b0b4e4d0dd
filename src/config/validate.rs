//! From raw settings to a checked `Config` of ready objects: every error names its field.

use super::raw::EnvSecrets;
use super::raw::{RawConfig, RawDatabase, RawIdp};
use super::{Config, ConfigError, LogFormat, TenantConfig, err};
use crate::domain::{DEFAULT_IDP, ProviderId, Scopes, TenantId};
use crate::net::urls;
use crate::oauth::resolve::IdpConfig;
use crate::providers::ProviderRegistry;
use crate::providers::settings::fields::{clock_skew, read_secret_file};
use crate::providers::settings::{RawProvider, validate_provider};
use crate::store::Pooler;
use crate::vault::Keyring;
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use url::Url;

/// A secret from the environment as the checks below read it (each ends in a `SecretString`
/// or the keyring again).
fn exposed(secret: Option<SecretString>) -> Option<String> {
    secret.map(|s| secrecy::ExposeSecret::expose_secret(&s).to_owned())
}

/// A name as it stands in a variable: capitals, `-` as `_`.
pub(super) fn upper(s: &str) -> String {
    s.to_ascii_uppercase().replace('-', "_")
}

fn listen(raw: Option<String>) -> Result<SocketAddr, ConfigError> {
    address("listen", &raw.unwrap_or_else(|| "127.0.0.1:8080".to_owned()))
}

fn address(field: &str, raw: &str) -> Result<SocketAddr, ConfigError> {
    raw.parse().map_err(|_| err(field, format!("{raw:?} is not an address like 127.0.0.1:8080")))
}

/// The metrics listener: an address of its own, never the public one. Empty means off (so
/// the environment can switch off what the file turns on).
fn metrics_listen(raw: Option<String>, public: SocketAddr) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(raw) = raw.filter(|s| !s.trim().is_empty()) else { return Ok(None) };
    let addr = address("metrics.listen", raw.trim())?;
    if addr == public && addr.port() != 0 {
        return Err(err(
            "metrics.listen",
            "must differ from `listen`: metrics are never served on the public listener",
        ));
    }
    Ok(Some(addr))
}

/// Where spans go (OTLP over HTTP): a URL of an OTLP/HTTP receiver. A URL without a path
/// gets the standard `/v1/traces`; empty means off. The URL is ours to name (an operator's
/// collector), so plain http is allowed; credentials in it are refused (they would show up
/// wherever the setting is shown).
fn otlp_endpoint(raw: Option<String>) -> Result<Option<Url>, ConfigError> {
    let Some(raw) = raw.filter(|s| !s.trim().is_empty()) else { return Ok(None) };
    let field = "tracing.otlp_endpoint";
    let mut url = Url::parse(raw.trim()).map_err(|e| err(field, format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(err(field, "must be an http(s) URL of an OTLP/HTTP receiver, e.g. http://collector:4318"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() {
        return Err(err(field, "must not carry credentials or a query"));
    }
    if url.path() == "/" || url.path().is_empty() {
        url.set_path("/v1/traces");
    }
    Ok(Some(url))
}

/// `[database]`, checked.
struct Database {
    /// The pool's URL (the environment laid over the file: `env::overlay`).
    url: String,
    max_connections: u32,
    /// Each HTTP worker's connections for the uncached lookup (`store::lookup`); none
    /// behind a transaction pooler, where lookups use the pool.
    lookup_connections_per_worker: u32,
    /// The change listener's own URL, if it has one.
    listen_url: Option<SecretString>,
    /// What is between the pool and PostgreSQL.
    pooler: Pooler,
}

fn database(raw: RawDatabase) -> Result<Database, ConfigError> {
    let url = database_url(raw.url)?;
    let listen_url = raw
        .listen_url
        .map(|u| database_url(Some(u)).map_err(|e| err("database.listen_url", e.message)))
        .transpose()?
        .map(SecretString::from);
    let pooler = match raw.pooler.as_deref() {
        None => Pooler::None,
        Some(p) => Pooler::parse(p).ok_or_else(|| err("database.pooler", "must be \"none\" or \"transaction\""))?,
    };
    if pooler == Pooler::Transaction && listen_url.is_none() {
        return Err(err(
            "database.pooler",
            "\"transaction\" needs database.listen_url: the change listener (LISTEN) and the migrations need a session of their own, which a transaction pooler does not keep; point it at PostgreSQL itself",
        ));
    }
    let lookup_connections_per_worker = match (pooler, raw.lookup_connections_per_worker) {
        (Pooler::Transaction, Some(_)) => {
            return Err(err(
                "database.lookup_connections_per_worker",
                "is not used with database.pooler = \"transaction\" (lookups go through the pool there, one statement each); remove it",
            ));
        }
        (Pooler::Transaction, None) => 0,
        (Pooler::None, n) => {
            let n = seconds("database.lookup_connections_per_worker", n.map(u64::from), 1, 1..=16, "")?;
            u32::try_from(n).unwrap_or(16)
        }
    };
    Ok(Database {
        url,
        max_connections: max_connections(raw.max_connections)?,
        lookup_connections_per_worker,
        listen_url,
        pooler,
    })
}

fn max_connections(raw: Option<u32>) -> Result<u32, ConfigError> {
    match raw.unwrap_or(16) {
        0 => Err(err("database.max_connections", "must be at least 1")),
        n => Ok(n),
    }
}

fn drain(raw: Option<u64>) -> Result<Duration, ConfigError> {
    Ok(Duration::from_secs(seconds("shutdown.drain_seconds", raw, 5, 0..=300, "")?))
}

fn log_format(raw: Option<String>) -> Result<LogFormat, ConfigError> {
    match raw.as_deref() {
        None | Some("json") => Ok(LogFormat::Json),
        Some("text") => Ok(LogFormat::Text),
        Some(other) => Err(err("log_format", format!("{other:?}: expected \"json\" or \"text\""))),
    }
}

pub(super) fn validate_for_command(
    raw: RawConfig,
    mut secrets: EnvSecrets,
    with_keyring: bool,
) -> Result<super::CommandConfig, ConfigError> {
    let Database { url: database_url, pooler: database_pooler, .. } = database(raw.database)?;
    let keyring = if with_keyring {
        Some(keyring(exposed(secrets.vault_keys.take()), raw.vault.keys_file.as_deref())?)
    } else {
        None
    };
    let vault = if with_keyring { Some(vault_settings(&raw.vault, &mut secrets)?) } else { None };
    Ok(super::CommandConfig {
        database_url: SecretString::from(database_url),
        database_pooler,
        audit_retention: audit_retention(raw.audit.retention_days)?,
        keyring,
        vault,
        listen: listen(raw.listen)?,
    })
}

fn audit_retention(days: Option<u64>) -> Result<Duration, ConfigError> {
    Ok(Duration::from_secs(seconds("audit.retention_days", days, 365, 1..=3650, "")? * 86_400))
}

/// The providers (each refused one an error in `errors`), and the tenants checked against
/// them. With a provider refused, tenants are not checked this time (each would add an
/// "unknown provider" for the same mistake).
fn providers_and_tenants(
    raw: std::collections::BTreeMap<String, RawProvider>,
    raw_tenants: Vec<super::raw::RawTenant>,
    secrets: &mut EnvSecrets,
    errors: &mut Vec<ConfigError>,
) -> (ProviderRegistry, Result<Vec<TenantConfig>, ConfigError>) {
    let mut providers = Vec::new();
    for (name, p) in raw {
        let secret = exposed(secrets.provider_client_secrets.remove(&name));
        match validate_provider(&name, p, secret) {
            Ok(p) => providers.push(p),
            Err(e) => errors.push(e.into()),
        }
    }
    let registry = ProviderRegistry::new(providers);
    let tenants = if errors.is_empty() { tenants(raw_tenants, &registry) } else { Ok(Vec::new()) };
    (registry, tenants)
}

/// Each named check runs whatever the others found, so one start reports every mistake of
/// the file at once; the values are used only when all of them passed.
macro_rules! all_checks {
    ($errors:ident; $($name:ident = $check:expr;)*) => {
        $( let $name = $check.map_err(|e| $errors.push(e)).ok(); )*
        $( let Some($name) = $name else { return Err(super::all_of($errors)) }; )*
        if !$errors.is_empty() {
            return Err(super::all_of($errors));
        }
    };
}

pub(super) fn validate(raw: RawConfig, mut secrets: EnvSecrets) -> Result<Config, ConfigError> {
    let mut errors = Vec::new();
    let (registry, tenants) = providers_and_tenants(raw.providers, raw.tenants, &mut secrets, &mut errors);
    let secs = |field: &str, value: Option<u64>, default: u64, range, why: &str| {
        seconds(field, value, default, range, why).map(Duration::from_secs)
    };
    all_checks! { errors;
        public_base_url = public_base_url(raw.public_base_url);
        listen = listen(raw.listen);
        drain = drain(raw.shutdown.drain_seconds);
        log_format = log_format(raw.log_format);
        database = database(raw.database);
        keyring = keyring(exposed(secrets.vault_keys.take()), raw.vault.keys_file.as_deref());
        idps = validate_idps(raw.idp, raw.idps, &mut secrets);
        tenants = tenants;
        cache_enabled = Ok::<_, ConfigError>(raw.cache.enabled.unwrap_or(true));
        cache_max_age = secs("cache.max_age_seconds", raw.cache.max_age_seconds, 5, 1..=60,
            " (a lost notification must not live long)");
        refresh_margin = secs("refresh.margin_seconds", raw.refresh.margin_seconds, 60, 0..=3600, "");
        unknown_expiry_refresh = secs("refresh.unknown_expiry_refresh_seconds",
            raw.refresh.unknown_expiry_refresh_seconds, 3600, 60..=86_400, "");
        cleanup_interval = secs("cleanup.interval_seconds", raw.cleanup.interval_seconds, 300, 1..=86_400, "");
        audit_retention = audit_retention(raw.audit.retention_days);
        session_ttl = secs("sessions.ttl_seconds", raw.sessions.ttl_seconds, 3600, 60..=86_400, "");
        outbound_timeout = secs("outbound.timeout_seconds", raw.outbound.timeout_seconds, 10, 1..=60, "");
        elicitation_ttl = secs("elicitations.ttl_seconds", raw.elicitations.ttl_seconds, 600, 30..=86_400, "");
        max_wait = secs("elicitations.max_wait_seconds", raw.elicitations.max_wait_seconds, 30, 0..=30,
            " (a load balancer's idle timeout should be longer)");
        api_key_cache_ttl = secs("api_keys.cache_seconds", raw.api_keys.cache_seconds, 5, 0..=60,
            " (revocation must take effect quickly)");
        otlp_endpoint = otlp_endpoint(raw.tracing.otlp_endpoint);
        webhooks = webhook_settings(&raw.webhooks);
        hsts_max_age = seconds("hsts.max_age_seconds", raw.hsts.max_age_seconds, 31_536_000, 0..=63_072_000, "");
        proxy_limits = proxy_limits(&raw.proxy);
        vault = vault_settings(&raw.vault, &mut secrets);
        operator = operator_settings(raw.operator);
    }
    tenant_idps_exist(&tenants, &idps)?;
    let (metrics_listen, outbound_cas) =
        (metrics_listen(raw.metrics.listen, listen)?, ca_bundle(raw.outbound.ca_file.as_deref())?);
    Ok(Config {
        cache_enabled,
        cache_max_age,
        cache_capacity: raw.cache.capacity.unwrap_or(200_000).max(1),
        refresh_margin,
        unknown_expiry_refresh,
        cleanup_interval,
        audit_retention,
        idps,
        session_ttl,
        outbound_timeout,
        outbound_cas,
        public_base_url,
        listen,
        log_format,
        database_url: SecretString::from(database.url),
        database_max_connections: database.max_connections,
        database_lookup_connections_per_worker: database.lookup_connections_per_worker,
        database_listen_url: database.listen_url,
        database_pooler: database.pooler,
        keyring,
        vault,
        elicitation_ttl,
        max_wait,
        api_key_cache_ttl,
        api_key_cache_capacity: raw.api_keys.cache_capacity.unwrap_or(10_000).max(1),
        api_key_hash_queue: raw.api_keys.hash_queue.unwrap_or(32),
        migrate_on_start: true,
        metrics_listen,
        otlp_endpoint,
        propagate_to_providers: raw.tracing.propagate_to_providers.unwrap_or(false),
        drain,
        hsts_max_age,
        operator,
        webhooks,
        proxy_limits,
        tenants,
        providers: registry,
    })
}

/// `[operator]`: the operator's trusted workload issuers grant the operator scope only.
fn operator_settings(raw: super::raw::RawOperator) -> Result<super::OperatorSettings, ConfigError> {
    let workload_issuers = raw.workload_issuers.unwrap_or_default();
    crate::domain::workload::check_issuers(&workload_issuers, crate::domain::workload::Truster::Operator)
        .map_err(|(f, why)| err(format!("operator.{f}"), why))?;
    Ok(super::OperatorSettings {
        allow_private_endpoints: raw.allow_private_endpoints.unwrap_or(false),
        workload_issuers,
    })
}

/// Every tenant's IdP is configured.
fn tenant_idps_exist(tenants: &[TenantConfig], idps: &crate::oauth::resolve::Idps) -> Result<(), ConfigError> {
    for (i, t) in tenants.iter().enumerate() {
        if let Some(name) = t.idp.as_ref().filter(|n| idps.by_name(n.as_str()).is_none()) {
            return Err(err(
                format!("tenants[{i}].idp"),
                format!("{:?} is not configured under [idps]", name.as_str()),
            ));
        }
    }
    Ok(())
}

/// `[webhooks]`.
fn webhook_settings(raw: &super::raw::RawWebhooks) -> Result<super::WebhookSettings, ConfigError> {
    let timeout = seconds("webhooks.timeout_seconds", raw.timeout_seconds, 5, 1..=30, "")?;
    let poll_interval = seconds("webhooks.poll_interval_ms", raw.poll_interval_ms, 1000, 50..=60_000, "")?;
    let max_pending_per_tenant =
        seconds("webhooks.max_pending_per_tenant", raw.max_pending_per_tenant, 10_000, 1..=1_000_000, "")?;
    Ok(super::WebhookSettings {
        allow_loopback: raw.allow_loopback.unwrap_or(false),
        allow_private: raw.allow_private.unwrap_or(false),
        timeout: Duration::from_secs(timeout),
        poll_interval: Duration::from_millis(poll_interval),
        max_pending_per_tenant,
    })
}

/// `[proxy]`: each rate and burst 0 (no limit) to 100000, a burst at least 1 where its
/// rate is set.
fn proxy_limits(raw: &super::raw::RawProxy) -> Result<super::ProxyLimitSettings, ConfigError> {
    let n = |field: &str, v: Option<u64>, default: u64| {
        seconds(&format!("proxy.{field}"), v, default, 0..=100_000, "").map(|v| u32::try_from(v).unwrap_or(u32::MAX))
    };
    let limits = super::ProxyLimitSettings {
        per_connection_per_second: n("per_connection_per_second", raw.per_connection_per_second, 10)?,
        per_connection_burst: n("per_connection_burst", raw.per_connection_burst, 20)?,
        per_tenant_per_second: n("per_tenant_per_second", raw.per_tenant_per_second, 200)?,
        per_tenant_burst: n("per_tenant_burst", raw.per_tenant_burst, 400)?,
    };
    for (rate, burst, field) in [
        (limits.per_connection_per_second, limits.per_connection_burst, "proxy.per_connection_burst"),
        (limits.per_tenant_per_second, limits.per_tenant_burst, "proxy.per_tenant_burst"),
    ] {
        if rate > 0 && burst == 0 {
            return Err(err(field, "must be at least 1 where its rate is set"));
        }
    }
    Ok(limits)
}

/// A number of seconds (or days) within `range`, `default` when unset.
fn seconds(
    field: &str,
    value: Option<u64>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    why: &str,
) -> Result<u64, ConfigError> {
    let v = value.unwrap_or(default);
    if !range.contains(&v) {
        return Err(err(field, format!("must be between {} and {}{why}", range.start(), range.end())));
    }
    Ok(v)
}

fn public_base_url(raw: Option<String>) -> Result<Url, ConfigError> {
    let base = raw.ok_or_else(|| err("public_base_url", "missing (or set MCP_CONNECT_PUBLIC_BASE_URL)"))?;
    let url = Url::parse(&base).map_err(|e| err("public_base_url", format!("not a URL: {e}")))?;
    if url.scheme() != "https" && !urls::is_loopback(&url) {
        return Err(err("public_base_url", "must use https (http only on loopback)"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(err("public_base_url", "must be an origin with no path, query or fragment"));
    }
    Ok(url)
}

fn database_url(raw: Option<String>) -> Result<String, ConfigError> {
    let url = raw.ok_or_else(|| {
        err("database.url", "missing (or set MCP_CONNECT_DATABASE_URL, MCP_CONNECT_DATABASE_URL_FILE or DATABASE_URL)")
    })?;
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(err("database.url", "must be a postgres:// URL"));
    }
    Ok(url)
}

/// `[vault]`: the key store, and how long and how many unwrapped data keys are held.
pub(super) fn vault_settings(
    vault: &super::raw::RawVault,
    secrets: &mut EnvSecrets,
) -> Result<super::VaultSettings, ConfigError> {
    let (pin, aws_secret) = (secrets.vault_pkcs11_pin.take(), secrets.vault_aws_secret_access_key.take());
    let why = " (an ended tenant's keys are held at most this long where the change is not heard)";
    let ttl = seconds("vault.data_key_cache_seconds", vault.data_key_cache_seconds, 300, 1..=3600, why)?;
    let data_key_cache = crate::keys::CacheBound {
        ttl: Duration::from_secs(ttl),
        capacity: vault.data_key_cache_capacity.unwrap_or(10_000).max(1),
    };
    let reseal = seconds("vault.reseal_interval_seconds", vault.reseal_interval_seconds, 60, 0..=86_400, " (0: off)")?;
    let store = vault.store.as_deref().unwrap_or("local");
    // A section for another store than the one named: its key would not wrap the data keys.
    for (section, name, present) in
        [("vault.pkcs11", "pkcs11", vault.pkcs11.is_some()), ("vault.aws_kms", "aws-kms", vault.aws_kms.is_some())]
    {
        if present && store != name {
            return Err(err(
                "vault.store",
                format!("a [{section}] section without store = \"{name}\": {store:?} would wrap the data keys"),
            ));
        }
    }
    let key_store = match (store, &vault.pkcs11, &vault.aws_kms) {
        ("local", _, _) => super::KeyStoreSettings::Local,
        ("pkcs11", Some(p), _) => super::KeyStoreSettings::Pkcs11(pkcs11_settings(p, pin)?),
        ("pkcs11", None, _) => return Err(err("vault.pkcs11", "store = \"pkcs11\" needs a [vault.pkcs11] section")),
        ("aws-kms", _, Some(a)) => super::KeyStoreSettings::AwsKms(aws_kms_settings(a, aws_secret)?),
        ("aws-kms", _, None) => {
            return Err(err("vault.aws_kms", "store = \"aws-kms\" needs a [vault.aws_kms] section"));
        }
        (other, _, _) => return Err(err("vault.store", format!("{other:?}: must be local, pkcs11 or aws-kms"))),
    };
    Ok(super::VaultSettings { data_key_cache, key_store, reseal_interval: Duration::from_secs(reseal) })
}

fn pkcs11_settings(
    p: &super::raw::RawPkcs11,
    pin: Option<SecretString>,
) -> Result<crate::vault::kek::pkcs11::Pkcs11Settings, ConfigError> {
    let required = |field: &str, v: &Option<String>| {
        v.clone().filter(|s| !s.is_empty()).ok_or_else(|| err(format!("vault.pkcs11.{field}"), "is required"))
    };
    let module =
        p.module.clone().ok_or_else(|| err("vault.pkcs11.module", "is required (the PKCS#11 module's path)"))?;
    let pin = match (pin, &p.pin_file) {
        (Some(pin), _) => pin,
        (None, Some(path)) => SecretString::from(read_secret_file("vault.pkcs11.pin_file", path)?),
        (None, None) => {
            return Err(err("vault.pkcs11", "no PIN: set MCP_CONNECT_VAULT_PKCS11_PIN or vault.pkcs11.pin_file"));
        }
    };
    Ok(crate::vault::kek::pkcs11::Pkcs11Settings {
        module,
        token_label: required("token_label", &p.token_label)?,
        key_label: required("key_label", &p.key_label)?,
        pin,
    })
}

fn aws_kms_settings(
    a: &super::raw::RawAwsKms,
    secret: Option<SecretString>,
) -> Result<crate::vault::kek::aws_kms::AwsKmsSettings, ConfigError> {
    use crate::vault::kek::aws_kms::{AwsKmsSettings, endpoint_allowed};
    let required = |field: &str, v: &Option<String>, what: &str| {
        v.clone().filter(|s| !s.is_empty()).ok_or_else(|| err(format!("vault.aws_kms.{field}"), what))
    };
    let endpoint = match &a.endpoint {
        None => None,
        Some(e) => {
            let url = url::Url::parse(e).map_err(|e| err("vault.aws_kms.endpoint", format!("not a URL: {e}")))?;
            if !endpoint_allowed(&url) {
                return Err(err(
                    "vault.aws_kms.endpoint",
                    "must be https (http only to a loopback address): KMS's answers carry data keys",
                ));
            }
            Some(url)
        }
    };
    let secret = match (secret, &a.secret_access_key_file) {
        (Some(s), _) => Some(s),
        (None, Some(path)) => Some(SecretString::from(read_secret_file("vault.aws_kms.secret_access_key_file", path)?)),
        (None, None) => None,
    };
    let credentials = match (&a.access_key_id, secret) {
        (Some(id), Some(secret)) => Some((id.clone(), secret)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(err(
                "vault.aws_kms",
                "access_key_id without its secret: set MCP_CONNECT_VAULT_AWS_SECRET_ACCESS_KEY or vault.aws_kms.secret_access_key_file",
            ));
        }
        (None, Some(_)) => return Err(err("vault.aws_kms.access_key_id", "a secret access key without its id")),
    };
    Ok(AwsKmsSettings {
        key_id: required("key_id", &a.key_id, "is required (a key id, ARN or alias/…)")?,
        region: required("region", &a.region, "is required (e.g. eu-central-1)")?,
        endpoint,
        credentials,
    })
}

fn keyring(spec: Option<String>, file: Option<&Path>) -> Result<Keyring, ConfigError> {
    let spec = match (spec, file) {
        (Some(spec), _) => spec,
        (None, Some(path)) => read_secret_file("vault.keys_file", path)?,
        (None, None) => {
            return Err(err(
                "vault",
                "no key: set MCP_CONNECT_VAULT_KEYS=<id>:<base64 32 bytes> or vault.keys_file (`mcp-connect genkey` makes one)",
            ));
        }
    };
    Keyring::parse(&spec).map_err(|e| err("vault keys", e.to_string()))
}

fn tenants(raw: Vec<super::raw::RawTenant>, registry: &ProviderRegistry) -> Result<Vec<TenantConfig>, ConfigError> {
    let mut tenants: Vec<TenantConfig> = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let field = format!("tenants[{i}]");
        let t = tenant(&field, t, registry).map_err(|e| e.error)?;
        if tenants.iter().any(|x| x.id == t.id) {
            return Err(err(format!("{field}.id"), format!("tenant {} is defined twice", t.id)));
        }
        tenants.push(t);
    }
    Ok(tenants)
}

/// `prefix.name`, or `name` without a prefix.
fn field_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_owned() } else { format!("{prefix}.{name}") }
}

/// What is wrong with a tenant: a provider that is not configured, or anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantProblem {
    UnknownProvider,
    Invalid,
}

/// A tenant refused, with the field (under the prefix given) and why.
#[derive(Debug)]
pub struct TenantInvalid {
    pub problem: TenantProblem,
    pub error: ConfigError,
}

fn invalid(field: String, message: impl Into<String>) -> TenantInvalid {
    TenantInvalid { problem: TenantProblem::Invalid, error: err(field, message) }
}

/// One tenant, checked as the file's `[[tenants]]` and the operator API both check it
/// (whether its IdP is configured is the caller's to check: the file checks it against
/// its own `[idps]`). `field` prefixes the field names in the errors.
pub fn tenant(
    field: &str,
    t: super::raw::RawTenant,
    registry: &ProviderRegistry,
) -> Result<TenantConfig, TenantInvalid> {
    let at = |name: &str| field_name(field, name);
    let id = TenantId::parse(&t.id).map_err(|e| invalid(at("id"), e.to_string()))?;
    let display_name = t.display_name.trim().to_owned();
    if !crate::domain::shown::is_display_name(&display_name, 100) {
        return Err(invalid(
            at("display_name"),
            "must be 1-100 printable characters, without control or invisible formatting ones",
        ));
    }
    let mut providers = Vec::new();
    for p in &t.providers {
        let pid = ProviderId::parse(p).map_err(|e| invalid(at("providers"), e.to_string()))?;
        if registry.get(&pid).is_none() {
            return Err(TenantInvalid {
                problem: TenantProblem::UnknownProvider,
                error: err(at("providers"), format!("provider {:?} is not configured under [providers]", pid.as_str())),
            });
        }
        if !providers.contains(&pid) {
            providers.push(pid);
        }
    }
    let subject_token = subject_token_policy(field, t.subject_token_audience, t.require_subject_token)
        .map_err(|error| TenantInvalid { problem: TenantProblem::Invalid, error })?;
    // `None`: the file leaves it out (a new tenant gets `default`, an existing one keeps
    // the database's).
    let idp = t
        .idp
        .as_deref()
        .map(|name| crate::domain::IdpName::parse(name).map_err(|e| invalid(at("idp"), e.to_string())))
        .transpose()?;
    let hand_out = match (t.hand_out, t.hand_out_providers) {
        (None, None) => None,
        (default, overrides) => {
            let overrides = overrides.unwrap_or_default();
            if let Some(p) = overrides.keys().find(|p| !providers.iter().any(|q| q.as_str() == p.as_str())) {
                return Err(invalid(at("hand_out_providers"), format!("{p:?} is not one of the tenant's providers")));
            }
            Some(crate::domain::HandOutPolicy { default: default.unwrap_or_default(), providers: overrides })
        }
    };
    if let Some(w) = &t.workload_issuers {
        crate::domain::workload::check_issuers(w, crate::domain::workload::Truster::Tenant)
            .map_err(|(f, why)| invalid(at(&f), why))?;
    }
    Ok(TenantConfig { id, display_name, providers, subject_token, idp, hand_out, workload_issuers: t.workload_issuers })
}

/// `outbound.ca_file`: a PEM file of one or more CA certificates (empty or unset: none).
fn ca_bundle(path: Option<&Path>) -> Result<Vec<reqwest::Certificate>, ConfigError> {
    let field = "outbound.ca_file";
    let Some(path) = path.filter(|p| !p.as_os_str().is_empty()) else { return Ok(Vec::new()) };
    let pem = std::fs::read(path).map_err(|e| err(field, format!("cannot read {}: {e}", path.display())))?;
    let cas = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| err(field, format!("{} is not a PEM certificate bundle: {e}", path.display())))?;
    if cas.is_empty() {
        return Err(err(field, format!("{} holds no PEM certificate", path.display())));
    }
    Ok(cas)
}

/// A tenant's `subject_token_audience` (its MCP server's resource URL, RFC 9728 §1.2: an
/// absolute https URL, http on loopback, no fragment) and `require_subject_token` (which
/// needs the audience).
fn subject_token_policy(
    field: &str,
    audience: Option<String>,
    required: Option<bool>,
) -> Result<crate::domain::SubjectTokenPolicy, ConfigError> {
    let audience = match audience {
        None => None,
        Some(a) => {
            Some(crate::domain::resource_url(&a).map_err(|e| err(field_name(field, "subject_token_audience"), e))?)
        }
    };
    if required == Some(true) && audience.is_none() {
        return Err(err(
            field_name(field, "require_subject_token"),
            "needs subject_token_audience (the MCP server's resource URL the tokens are meant for)",
        ));
    }
    Ok(crate::domain::SubjectTokenPolicy { audience, required })
}

/// The default IdP (`[idp]`) and the named ones (`[idps.<name>]`), each with its client
/// secret from the environment, else the file it names. Issuers are unique: a session
/// records only its issuer, which must lead back to one IdP.
fn validate_idps(
    default: Option<RawIdp>,
    named: BTreeMap<String, RawIdp>,
    secrets: &mut EnvSecrets,
) -> Result<crate::oauth::resolve::Idps, ConfigError> {
    let default = validate_idp(DEFAULT_IDP, "idp", default, exposed(secrets.idp_client_secret.take()))?;
    let mut idps = crate::oauth::resolve::Idps::new(default);
    for (name, raw) in named {
        let field = format!("idps.{name}");
        let parsed = crate::domain::IdpName::parse(&name).map_err(|e| err(&field, e.to_string()))?;
        if parsed.as_str() == DEFAULT_IDP {
            return Err(err(&field, format!("{DEFAULT_IDP:?} is the name of [idp]")));
        }
        // `a-b` and `a_b` would read one variable for their secrets.
        if let Some(other) = idps.named_names().find(|o| o.replace('-', "_") == name.replace('-', "_")) {
            return Err(err(&field, format!("its variables would be those of [idps.{other}]: rename one")));
        }
        let secret = exposed(secrets.idps_client_secrets.remove(&name));
        let idp = validate_idp(&name, &field, Some(raw), secret)?;
        if let Some(other) = idps.by_issuer(idp.issuer.as_str()) {
            return Err(err(
                format!("{field}.issuer"),
                format!("{:?} is also the issuer of {}: one IdP, one entry", idp.issuer.as_str(), other.field()),
            ));
        }
        idps.insert(idp);
    }
    Ok(idps)
}

/// One primary IdP; its client secret from the environment (`secret`), else the file named.
pub(super) fn validate_idp(
    name: &str,
    field: &str,
    raw: Option<RawIdp>,
    secret: Option<String>,
) -> Result<IdpConfig, ConfigError> {
    let f = |sub: &str| format!("{field}.{sub}");
    let var = |key: &str| {
        if name == DEFAULT_IDP {
            format!("MCP_CONNECT_IDP_{key}")
        } else {
            format!("MCP_CONNECT_IDPS_{}_{key}", name.to_uppercase().replace('-', "_"))
        }
    };
    let raw = raw.unwrap_or(RawIdp {
        issuer: None,
        client_id: None,
        client_secret_file: None,
        token_endpoint_auth_method: None,
        scopes: None,
        allow_idn_hosts: Vec::new(),
        clock_skew_seconds: None,
        allow_private_endpoints: false,
    });
    let clock_skew = clock_skew(&f("clock_skew_seconds"), raw.clock_skew_seconds)?;
    let issuer = raw.issuer.ok_or_else(|| {
        let how = if name == DEFAULT_IDP { " (or set MCP_CONNECT_IDP_ISSUER)" } else { "" };
        err(f("issuer"), format!("missing{how}: the OIDC IdP that issues the MCP access tokens"))
    })?;
    let issuer =
        urls::Issuer::parse(&issuer, &raw.allow_idn_hosts).map_err(|e| err(f("issuer"), format!("{issuer:?} {e}")))?;
    let client_id = raw.client_id.ok_or_else(|| {
        let how = if name == DEFAULT_IDP { " (or set MCP_CONNECT_IDP_CLIENT_ID)" } else { "" };
        err(f("client_id"), format!("missing{how}"))
    })?;
    let client_auth = raw.token_endpoint_auth_method;
    let client_secret = match (client_auth, secret, &raw.client_secret_file) {
        (Some(crate::providers::ClientAuth::Public), _, _) => {
            return Err(err(f("token_endpoint_auth_method"), "\"none\": the sign-in is a confidential client"));
        }
        (Some(crate::providers::ClientAuth::PrivateKeyJwt), None, None) => String::new(),
        (Some(crate::providers::ClientAuth::PrivateKeyJwt), _, _) => {
            return Err(err(
                f("token_endpoint_auth_method"),
                format!(
                    "\"private_key_jwt\" sends no client secret: remove {} and client_secret_file",
                    var("CLIENT_SECRET")
                ),
            ));
        }
        (_, Some(s), _) => s,
        (_, None, Some(path)) => read_secret_file(&f("client_secret_file"), path)?,
        (_, None, None) => {
            return Err(err(
                f("client_secret_file"),
                format!("no client secret: set {} or client_secret_file", var("CLIENT_SECRET")),
            ));
        }
    };
    let scopes = raw.scopes.unwrap_or_else(|| vec!["openid".to_owned()]);
    Scopes::parse(&scopes).map_err(|e| err(f("scopes"), e.to_string()))?;
    if !scopes.iter().any(|s| s == "openid") {
        return Err(err(f("scopes"), "must include \"openid\""));
    }
    Ok(IdpConfig {
        name: name.to_owned(),
        issuer,
        client_id,
        client_secret: SecretString::from(client_secret),
        client_auth,
        scopes,
        allow_idn_hosts: raw.allow_idn_hosts,
        clock_skew,
        allow_private_endpoints: raw.allow_private_endpoints,
    })
}
