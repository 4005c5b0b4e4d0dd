//! Checks that more than one kind of provider shares (and `config`'s IdP settings): the
//! secrets read from files, ID-token clock skew, and a provider's client secret,
//! authentication method and scopes.

use super::{RawProvider, SettingError, err};
use crate::domain::Scopes;
use crate::providers::{ClientAuth, Template};
use std::path::{Path, PathBuf};

/// A clock skew for ID tokens: the setting, else 60 s; at most 5 min.
pub(crate) fn clock_skew(field: &str, raw: Option<u64>) -> Result<time::Duration, SettingError> {
    let secs = raw.unwrap_or(60);
    if secs > 300 {
        return Err(err(field, "must be at most 300 (a larger skew keeps expired ID tokens alive)"));
    }
    Ok(time::Duration::seconds(secs as i64))
}

/// A secret from a file, trimmed.
pub(crate) fn read_secret_file(field: &str, path: &Path) -> Result<String, SettingError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| err(field, format!("cannot read {}: {e}", path.display())))
}

/// A configured `token_endpoint_auth_method` fits the secret there is: `none` sends no
/// secret (one configured would be unused: a mistake), the others need one.
pub(crate) fn auth_method_fits(
    f: &dyn Fn(&str) -> String,
    method: Option<ClientAuth>,
    has_secret: bool,
) -> Result<(), SettingError> {
    match method {
        Some(m @ (ClientAuth::Public | ClientAuth::PrivateKeyJwt)) if has_secret => Err(err(
            f("token_endpoint_auth_method"),
            format!("{:?} sends no client secret: remove the secret, or name a method that sends it", m.as_str()),
        )),
        Some(m) if m.sends_secret() && !has_secret => {
            Err(err(f("token_endpoint_auth_method"), format!("{:?} needs a client secret", m.as_str())))
        }
        _ => Ok(()),
    }
}

/// Default scopes (configured, else the template's) and the separator they are sent with.
pub(crate) fn provider_scopes(
    f: &dyn Fn(&str) -> String,
    p: &RawProvider,
    t: &Template,
) -> Result<(Scopes, String), SettingError> {
    let scopes = match &p.scopes {
        Some(s) => Scopes::parse(s),
        None => Scopes::parse(t.default_scopes),
    }
    .map_err(|e| err(f("scopes"), e.to_string()))?;
    let separator = p.scope_separator.clone().unwrap_or_else(|| t.scope_separator.to_owned());
    if !matches!(separator.as_str(), " " | ",") {
        return Err(err(f("scope_separator"), "must be \" \" or \",\""));
    }
    Ok((scopes, separator))
}

/// A provider's client secret: the environment, else the file named (trimmed); `None` when
/// neither is given.
pub(crate) fn client_secret(
    field: &str,
    env_value: Option<String>,
    file: &Option<PathBuf>,
) -> Result<Option<String>, SettingError> {
    match (env_value, file) {
        (Some(s), _) => Ok(Some(s)),
        (None, Some(path)) => read_secret_file(field, path).map(Some),
        (None, None) => Ok(None),
    }
}
