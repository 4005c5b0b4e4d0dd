//! Settings from the environment, laid over the file before it is read:
//! - every scalar setting as `MCP_CONNECT_<SECTION>_<KEY>` (`MCP_CONNECT_<KEY>` at the top
//!   level), e.g. `MCP_CONNECT_CACHE_MAX_AGE_SECONDS`;
//! - provider settings as `MCP_CONNECT_PROVIDER_<NAME>_<KEY>` for providers the file names;
//! - the database URLs also from a file: `MCP_CONNECT_DATABASE_URL_FILE`,
//!   `MCP_CONNECT_DATABASE_LISTEN_URL_FILE` (the variable itself wins over its file), and
//!   the pool's from `DATABASE_URL`, which wins over `MCP_CONNECT_DATABASE_URL_FILE` (as it
//!   always has);
//! - the secrets that have no place in the file: `MCP_CONNECT_VAULT_KEYS`,
//!   `MCP_CONNECT_IDP_CLIENT_SECRET`, `MCP_CONNECT_PROVIDER_<NAME>_CLIENT_SECRET`,
//!   `MCP_CONNECT_IDPS_<NAME>_CLIENT_SECRET` (for an `[idps.<name>]` the file names).
//!
//! This is the one place settings are read from the environment: validation sees the file
//! with the variables laid over it, and the secrets. (The log filter `MCP_CONNECT_LOG`, the
//! configuration file's path and `dev`'s own variables are not settings of the file.)
//!
//! The other secrets have their own `…_FILE` settings, which this table covers as
//! ordinary keys: `vault.keys_file`, `idp.client_secret_file` and
//! `providers.<name>.client_secret_file`. Tenants and lists stay in the file. The
//! environment wins. A value that is not of its setting's type is an error naming the
//! variable.
//!
//! Written by hand: the set of settings is this service's own, and the names follow the
//! convention the project already had. Generic layered-config crates map
//! `SECTION_KEY` ambiguously when keys themselves contain `_`.

use super::raw::EnvSecrets;
use super::validate::upper;
use super::{ConfigError, EnvLookup, err};
use crate::providers::settings::fields::read_secret_file;
use secrecy::SecretString;

#[derive(Clone, Copy)]
enum Kind {
    Text,
    Number,
    Switch,
}
use Kind::{Number, Switch, Text};

const TOP: &[(&str, Kind)] = &[("public_base_url", Text), ("listen", Text), ("log_format", Text)];

/// Every section's scalar settings (docs/configuration.md lists the same).
const SECTIONS: &[(&str, &[(&str, Kind)])] = &[
    (
        "database",
        &[
            ("url", Text),
            ("listen_url", Text),
            ("max_connections", Number),
            ("lookup_connections_per_worker", Number),
            ("pooler", Text),
        ],
    ),
    (
        "vault",
        &[
            ("keys_file", Text),
            ("data_key_cache_seconds", Number),
            ("data_key_cache_capacity", Number),
            ("reseal_interval_seconds", Number),
            ("store", Text),
        ],
    ),
    ("elicitations", &[("ttl_seconds", Number), ("max_wait_seconds", Number)]),
    ("api_keys", &[("cache_seconds", Number), ("cache_capacity", Number), ("hash_queue", Number)]),
    ("idp", &[("issuer", Text), ("client_id", Text), ("client_secret_file", Text), ("clock_skew_seconds", Number)]),
    ("sessions", &[("ttl_seconds", Number)]),
    ("outbound", &[("timeout_seconds", Number), ("ca_file", Text)]),
    ("refresh", &[("margin_seconds", Number), ("unknown_expiry_refresh_seconds", Number)]),
    ("cleanup", &[("interval_seconds", Number)]),
    ("audit", &[("retention_days", Number)]),
    ("cache", &[("enabled", Switch), ("max_age_seconds", Number), ("capacity", Number)]),
    ("metrics", &[("listen", Text)]),
    ("shutdown", &[("drain_seconds", Number)]),
    ("tracing", &[("otlp_endpoint", Text), ("propagate_to_providers", Switch)]),
];

const PROVIDER: &[(&str, Kind)] = &[
    ("template", Text),
    ("display_name", Text),
    ("client_id", Text),
    ("client_secret_file", Text),
    ("authorize_url", Text),
    ("token_url", Text),
    ("userinfo_url", Text),
    ("revocation_url", Text),
    ("issuer", Text),
    ("authorization_response_iss", Switch),
    ("scope_separator", Text),
    ("account_id_field", Text),
    ("account_login_field", Text),
    ("allow_account_change", Switch),
    ("clock_skew_seconds", Number),
];

/// Secrets read from the file a `…_FILE` variable names (trimmed).
const SECRET_FILES: &[(&str, &str, &str)] =
    &[("DATABASE_URL_FILE", "database", "url"), ("DATABASE_LISTEN_URL_FILE", "database", "listen_url")];

fn value(var: &str, raw: &str, kind: Kind) -> Result<toml::Value, ConfigError> {
    match kind {
        Text => Ok(toml::Value::String(raw.to_owned())),
        Number => raw
            .trim()
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| err(var, format!("{raw:?} is not a whole number"))),
        Switch => match raw.trim() {
            "true" | "1" | "yes" | "on" => Ok(toml::Value::Boolean(true)),
            "false" | "0" | "no" | "off" => Ok(toml::Value::Boolean(false)),
            other => Err(err(var, format!("{other:?} is not true or false"))),
        },
    }
}

fn section<'a>(table: &'a mut toml::Table, name: &str) -> Result<&'a mut toml::Table, ConfigError> {
    table
        .entry(name)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or_else(|| err(name, "must be a table"))
}

/// Sets `key` in `t` from the variable `var`, if it is set.
fn set(t: &mut toml::Table, key: &str, var: &str, kind: Kind, env: EnvLookup<'_>, errors: &mut Vec<ConfigError>) {
    if let Some(raw) = env(var) {
        match value(var, &raw, kind) {
            Ok(v) => {
                t.insert(key.to_owned(), v);
            }
            Err(e) => errors.push(e),
        }
    }
}

/// Lays the environment over the parsed file and returns the secrets it gives. Returns the
/// errors of every variable that does not fit, all at once.
pub(super) fn overlay(table: &mut toml::Table, env: EnvLookup<'_>) -> Result<EnvSecrets, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let mut secrets = EnvSecrets {
        vault_keys: env("MCP_CONNECT_VAULT_KEYS").map(SecretString::from),
        vault_pkcs11_pin: env("MCP_CONNECT_VAULT_PKCS11_PIN").map(SecretString::from),
        vault_aws_secret_access_key: env("MCP_CONNECT_VAULT_AWS_SECRET_ACCESS_KEY").map(SecretString::from),
        idp_client_secret: env("MCP_CONNECT_IDP_CLIENT_SECRET").map(SecretString::from),
        provider_client_secrets: Default::default(),
        idps_client_secrets: Default::default(),
    };
    for (key, kind) in TOP {
        set(table, key, &format!("MCP_CONNECT_{}", upper(key)), *kind, env, &mut errors);
    }
    for (name, keys) in SECTIONS {
        let var = |key: &str| format!("MCP_CONNECT_{}_{}", upper(name), upper(key));
        if !keys.iter().any(|(k, _)| env(&var(k)).is_some()) {
            continue;
        }
        match section(table, name) {
            Ok(t) => {
                for (key, kind) in *keys {
                    set(t, key, &var(key), *kind, env, &mut errors);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if let Some(providers) = table.get_mut("providers").and_then(toml::Value::as_table_mut) {
        for (name, p) in providers.iter_mut() {
            if let Some(t) = p.as_table_mut() {
                for (key, kind) in PROVIDER {
                    let var = format!("MCP_CONNECT_PROVIDER_{}_{}", upper(name), upper(key));
                    set(t, key, &var, *kind, env, &mut errors);
                }
                if let Some(secret) = env(&format!("MCP_CONNECT_PROVIDER_{}_CLIENT_SECRET", upper(name))) {
                    secrets.provider_client_secrets.insert(name.clone(), SecretString::from(secret));
                }
            }
        }
    }
    if let Some(idps) = table.get("idps").and_then(toml::Value::as_table) {
        for name in idps.keys() {
            if let Some(secret) = env(&format!("MCP_CONNECT_IDPS_{}_CLIENT_SECRET", upper(name))) {
                secrets.idps_client_secrets.insert(name.clone(), SecretString::from(secret));
            }
        }
    }
    for (var, sec, key) in SECRET_FILES {
        let var = format!("MCP_CONNECT_{var}");
        let Some(path) = env(&var) else { continue };
        // Read even when the variable itself wins, so that a wrong path is still an error.
        let read = read_secret_file(&var, std::path::Path::new(&path)).map_err(ConfigError::from);
        let own_variable_set = env(var.trim_end_matches("_FILE")).is_some();
        match read.and_then(|v| Ok((v, section(table, sec)?))) {
            Ok((secret, t)) if !own_variable_set => {
                t.insert((*key).to_owned(), toml::Value::String(secret));
            }
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    if let Some(url) = env("DATABASE_URL").filter(|_| env("MCP_CONNECT_DATABASE_URL").is_none()) {
        match section(table, "database") {
            Ok(t) => {
                t.insert("url".to_owned(), toml::Value::String(url));
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(secrets) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn over(text: &str, vars: &[(&str, &str)]) -> Result<toml::Table, Vec<ConfigError>> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let mut t: toml::Table = toml::from_str(text).unwrap();
        overlay(&mut t, &|k| m.get(k).cloned())?;
        Ok(t)
    }

    #[test]
    fn every_scalar_setting_comes_from_its_variable_and_a_bad_one_is_named() {
        let t = over(
            "[cache]\nenabled = true\n[providers.my-gh]\ntemplate = \"github\"\n",
            &[
                ("MCP_CONNECT_CACHE_ENABLED", "false"),
                ("MCP_CONNECT_CACHE_MAX_AGE_SECONDS", "7"),
                ("MCP_CONNECT_SHUTDOWN_DRAIN_SECONDS", "9"),
                ("MCP_CONNECT_API_KEYS_HASH_QUEUE", "4"),
                ("MCP_CONNECT_PROVIDER_MY_GH_DISPLAY_NAME", "GitHub Enterprise"),
                ("MCP_CONNECT_LOG_FORMAT", "text"),
            ],
        )
        .unwrap();
        assert_eq!(t["cache"]["enabled"].as_bool(), Some(false), "the environment wins");
        assert_eq!(t["cache"]["max_age_seconds"].as_integer(), Some(7));
        assert_eq!(t["shutdown"]["drain_seconds"].as_integer(), Some(9));
        assert_eq!(t["api_keys"]["hash_queue"].as_integer(), Some(4));
        assert_eq!(t["providers"]["my-gh"]["display_name"].as_str(), Some("GitHub Enterprise"));
        assert_eq!(t["log_format"].as_str(), Some("text"));

        let errors =
            over("", &[("MCP_CONNECT_CACHE_CAPACITY", "lots"), ("MCP_CONNECT_CACHE_ENABLED", "maybe")]).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["MCP_CONNECT_CACHE_ENABLED", "MCP_CONNECT_CACHE_CAPACITY"], "all of them, at once");
    }

    #[test]
    fn the_database_url_can_come_from_a_file() {
        let path = std::env::temp_dir().join(format!("mcpc-db-url-{}", std::process::id()));
        std::fs::write(&path, "postgres://u:p@db/x\n").unwrap();
        let t = over("", &[("MCP_CONNECT_DATABASE_URL_FILE", path.to_str().unwrap())]).unwrap();
        assert_eq!(t["database"]["url"].as_str(), Some("postgres://u:p@db/x"));
        let _ = std::fs::remove_file(&path);
        let e = over("", &[("MCP_CONNECT_DATABASE_URL_FILE", "/nonexistent/db-url")]).unwrap_err();
        assert_eq!(e[0].field, "MCP_CONNECT_DATABASE_URL_FILE");
    }

    #[test]
    fn the_pools_url_comes_from_its_variable_then_database_url_then_its_file_then_the_file() {
        let path = std::env::temp_dir().join(format!("mcpc-db-url-order-{}", std::process::id()));
        std::fs::write(&path, "postgres://from-file-var/x\n").unwrap();
        let file_var = path.to_str().unwrap();
        let file = "[database]\nurl = \"postgres://from-toml/x\"\n";
        let url = |vars: &[(&str, &str)]| over(file, vars).unwrap()["database"]["url"].as_str().unwrap().to_owned();
        assert_eq!(url(&[]), "postgres://from-toml/x");
        assert_eq!(url(&[("DATABASE_URL", "postgres://generic/x")]), "postgres://generic/x");
        assert_eq!(url(&[("MCP_CONNECT_DATABASE_URL_FILE", file_var)]), "postgres://from-file-var/x");
        let both = [("DATABASE_URL", "postgres://generic/x"), ("MCP_CONNECT_DATABASE_URL_FILE", file_var)];
        assert_eq!(url(&both), "postgres://generic/x");
        let all = [
            ("DATABASE_URL", "postgres://generic/x"),
            ("MCP_CONNECT_DATABASE_URL_FILE", file_var),
            ("MCP_CONNECT_DATABASE_URL", "postgres://own/x"),
        ];
        assert_eq!(url(&all), "postgres://own/x");
        let _ = std::fs::remove_file(&path);
        // A file that cannot be read is an error even when the variable itself wins.
        let gone = [
            ("MCP_CONNECT_DATABASE_URL_FILE", "/nonexistent/db-url"),
            ("MCP_CONNECT_DATABASE_URL", "postgres://own/x"),
        ];
        assert_eq!(over(file, &gone).unwrap_err()[0].field, "MCP_CONNECT_DATABASE_URL_FILE");
    }

    #[test]
    fn the_secrets_without_a_place_in_the_file_come_back_beside_it() {
        let m: HashMap<String, String> = [
            ("MCP_CONNECT_VAULT_KEYS", "k1:AAAA"),
            ("MCP_CONNECT_IDP_CLIENT_SECRET", "idp-secret"),
            ("MCP_CONNECT_PROVIDER_MY_GH_CLIENT_SECRET", "gh-secret"),
            ("MCP_CONNECT_PROVIDER_UNNAMED_CLIENT_SECRET", "not for a provider the file has"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let mut t: toml::Table = toml::from_str("[providers.my-gh]\ntemplate = \"github\"\n").unwrap();
        let secrets = overlay(&mut t, &|k| m.get(k).cloned()).unwrap();
        let shown = |s: &Option<SecretString>| s.as_ref().map(|s| secrecy::ExposeSecret::expose_secret(s).to_owned());
        assert_eq!(shown(&secrets.vault_keys).as_deref(), Some("k1:AAAA"));
        assert_eq!(shown(&secrets.idp_client_secret).as_deref(), Some("idp-secret"));
        assert_eq!(secrets.provider_client_secrets.len(), 1);
        assert_eq!(shown(&secrets.provider_client_secrets.get("my-gh").cloned()).as_deref(), Some("gh-secret"));
        let debug = format!("{secrets:?}");
        assert!(!debug.contains("idp-secret") && !debug.contains("k1:AAAA"), "{debug}");
        assert!(!toml::to_string(&t).unwrap().contains("secret"), "no secret is written into the settings");
    }
}
