//! A provider's settings, checked: the configuration file's `[providers.<name>]` and the
//! operator API's stored settings (the same [`RawProvider`], as JSON) become a
//! [`Provider`] through [`validate_provider`], the one check both share. Every error names
//! its field (`providers.<name>.<setting>`).
//!
//! - `remote`: the `mcp` template (a remote MCP server: its URL and client);
//! - `credential`: the `api_key` and `basic` templates (the fields and the check request);
//! - `fields`: checks more than one kind (and the IdP settings of `config`) share;
//! - `proxy`: `[providers.<name>.proxy]`, where `/v1/proxy` may go (every kind).

pub(crate) mod credential;
pub(crate) mod fields;
pub(crate) mod proxy;
pub(crate) mod remote;

use super::client_auth::ClientAuth;
use super::{
    AccountFields, Client, Endpoints, OAuth, Origin, Policy, Provider, ProviderKind, ScopeRules, Template, Upstream,
};
use crate::domain::ProviderId;
use crate::net::urls;
use fields::{auth_method_fits, client_secret, clock_skew, provider_scopes};
use secrecy::SecretString;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use url::Url;

/// A setting that is wrong: the field (`providers.github.token_url`) and why. `config`
/// reports it as a `ConfigError`, the operator API as a 400 naming the field.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SettingError {
    pub field: String,
    pub message: String,
}

pub(crate) fn err(field: impl Into<String>, message: impl Into<String>) -> SettingError {
    SettingError { field: field.into(), message: message.into() }
}

/// The environment variable that sets a provider's `what` (`CLIENT_ID`, `CLIENT_SECRET`).
fn provider_env(id: &ProviderId, what: &str) -> String {
    format!("MCP_CONNECT_PROVIDER_{}_{what}", id.as_str().to_ascii_uppercase().replace('-', "_"))
}

/// A provider as a file's `[providers.<name>]` (or the operator API, as its stored
/// settings) writes it, before validation.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub template: ProviderKind,
    pub display_name: Option<String>,
    pub client_id: Option<String>,
    pub client_secret_file: Option<PathBuf>,
    pub authorize_url: Option<String>,
    pub token_url: Option<String>,
    pub userinfo_url: Option<String>,
    pub revocation_url: Option<String>,
    pub issuer: Option<String>,
    pub authorization_response_iss: Option<bool>,
    pub scopes: Option<Vec<String>>,
    pub scope_separator: Option<String>,
    #[serde(default)]
    pub extra_authorize_params: BTreeMap<String, String>,
    pub account_id_field: Option<String>,
    pub account_login_field: Option<String>,
    #[serde(default)]
    pub allow_account_change: bool,
    #[serde(default)]
    pub allow_idn_hosts: Vec<String>,
    pub clock_skew_seconds: Option<u64>,
    #[serde(default)]
    pub allow_private_endpoints: bool,
    /// `api_key` only: the inputs of the connect page (default: one secret "API key").
    pub fields: Option<Vec<RawField>>,
    /// `api_key` and `basic`: the request that tells a good credential from a bad one.
    pub check: Option<RawCheck>,
    /// `mcp`: the remote MCP server's URL (its resource identifier).
    pub resource: Option<String>,
    /// `client_secret_basic`, `client_secret_post` or `none` (a public client); unset: what
    /// the server's metadata lists, else `client_secret_basic`.
    pub token_endpoint_auth_method: Option<ClientAuth>,
    /// `"subject"`: the MCP subject goes to the provider as OIDC `login_hint` (so its page
    /// offers that account first). Unset: the provider never learns the subject.
    pub login_hint: Option<String>,
    /// Where `/v1/proxy/{provider}/…` may send requests (`proxy::RawProxy`).
    pub proxy: Option<proxy::RawProxy>,
}

/// One input of an `api_key` provider's connect page.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawField {
    pub name: String,
    pub label: String,
    #[serde(default = "yes")]
    pub secret: bool,
}

impl RawProvider {
    /// The operator's policy for the provider, whatever its kind.
    fn policy(&self, clock_skew: time::Duration) -> Policy {
        Policy {
            allow_account_change: self.allow_account_change,
            allow_idn_hosts: self.allow_idn_hosts.clone(),
            clock_skew,
            allow_private_endpoints: self.allow_private_endpoints,
        }
    }
}

fn yes() -> bool {
    true
}

/// A credential provider's check request, as the file writes it.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    pub url: String,
    /// `GET` (default), `POST` or `HEAD`.
    pub method: Option<String>,
    /// The header that carries the key (`api_key`; default `Authorization`) ...
    pub header: Option<String>,
    /// ... after this prefix (default `"Bearer "` for `Authorization`, else none).
    pub prefix: Option<String>,
    /// Or the query parameter that carries it (instead of a header).
    pub query: Option<String>,
    /// The status that means valid (default 200).
    pub valid_status: Option<u16>,
}

/// A provider; its client secret from the environment (`secret`), else the file named.
/// One provider, checked as the file's `[providers.<name>]` and the operator API both check
/// it. `secret`: its client secret from the environment (else `client_secret_file`).
pub fn validate_provider(name: &str, p: RawProvider, secret: Option<String>) -> Result<Provider, SettingError> {
    let f = |sub: &str| format!("providers.{name}.{sub}");
    let (raw_proxy, allow_idn_hosts) = (p.proxy.clone(), p.allow_idn_hosts.clone());
    let mut provider = validate_kind(name, p, secret)?;
    provider.proxy = proxy::rules(&f, raw_proxy, &provider, &allow_idn_hosts)?;
    Ok(provider)
}

/// The provider of its kind, not yet with its proxy rules.
fn validate_kind(name: &str, p: RawProvider, secret: Option<String>) -> Result<Provider, SettingError> {
    let field = format!("providers.{name}");
    let f = |sub: &str| format!("{field}.{sub}");
    let id = ProviderId::parse(name).map_err(|e| err(&field, e.to_string()))?;
    // Shown on our pages and in the message an MCP client shows the person (and a model).
    if p.display_name.as_ref().is_some_and(|d| !crate::domain::shown::is_display_name(d, 100)) {
        return Err(err(
            f("display_name"),
            "must be 1-100 printable characters, without control or invisible formatting ones",
        ));
    }
    if p.template.is_credential() {
        return credential::validate(id, &f, p, secret);
    }
    if p.template == ProviderKind::Mcp {
        return remote::validate_mcp(id, &f, p, secret);
    }
    if p.resource.is_some() {
        return Err(err(f("resource"), "only the mcp template names a resource"));
    }
    if p.fields.is_some() {
        return Err(err(f("fields"), "only the api_key template asks for fields"));
    }
    if p.check.is_some() {
        return Err(err(f("check"), "only the api_key and basic templates are checked by a request"));
    }
    let t = p.template.template();
    let (client_id, client_secret) = provider_client(&id, &f, &p, secret)?;
    let ends = endpoints(&f, &p, &t)?;
    let (default_scopes, scope_separator) = provider_scopes(&f, &p, &t)?;
    let extra = extra_authorize_params(
        &f("extra_authorize_params"),
        t.extra_authorize_params,
        p.extra_authorize_params.clone(),
    )?;
    let login_hint_subject = match p.login_hint.as_deref() {
        None => false,
        Some("subject") => true,
        Some(_) => return Err(err(f("login_hint"), "must be \"subject\" (or left out)")),
    };
    if login_hint_subject && extra.iter().any(|(k, _)| k == "login_hint") {
        return Err(err(f("login_hint"), "extra_authorize_params sets login_hint too: one of them"));
    }
    let policy = p.policy(clock_skew(&f("clock_skew_seconds"), p.clock_skew_seconds)?);
    let display_name = p
        .display_name
        .unwrap_or_else(|| if t.display_name.is_empty() { name.to_owned() } else { t.display_name.to_owned() });

    Ok(Provider {
        id,
        kind: p.template,
        display_name,
        policy,
        origin: Origin::File,
        proxy: None,
        upstream: Upstream::OAuth(OAuth {
            client: Client {
                id: client_id,
                secret: SecretString::from(client_secret),
                auth: p.token_endpoint_auth_method,
            },
            endpoints: Endpoints {
                authorize_url: ends.authorize_url,
                token_url: ends.token_url,
                userinfo_url: ends.userinfo_url,
                revocation_url: ends.revocation_url,
            },
            issuer: ends.issuer,
            oidc: t.oidc,
            authorization_response_iss: ends.authorization_response_iss,
            scopes: ScopeRules { default: default_scopes, separator: scope_separator },
            extra_authorize_params: extra,
            login_hint_subject,
            account: AccountFields {
                id_field: p.account_id_field.unwrap_or_else(|| t.account_id_field.to_owned()),
                login_field: p.account_login_field.unwrap_or_else(|| t.account_login_field.to_owned()),
            },
        }),
    })
}

/// The client id and secret (environment, else the file named).
fn provider_client(
    id: &ProviderId,
    f: &dyn Fn(&str) -> String,
    p: &RawProvider,
    secret: Option<String>,
) -> Result<(String, String), SettingError> {
    let client_id = p
        .client_id
        .clone()
        .ok_or_else(|| err(f("client_id"), format!("missing (or set {})", provider_env(id, "CLIENT_ID"))))?;
    let secret_env = provider_env(id, "CLIENT_SECRET");
    let client_secret = client_secret(&f("client_secret_file"), secret, &p.client_secret_file)?;
    auth_method_fits(f, p.token_endpoint_auth_method, client_secret.is_some())?;
    if matches!(p.token_endpoint_auth_method, Some(ClientAuth::Public | ClientAuth::PrivateKeyJwt)) {
        return Ok((client_id, String::new()));
    }
    let client_secret = client_secret.ok_or_else(|| {
        err(f("client_secret_file"), format!("no client secret: set {secret_env} or client_secret_file"))
    })?;
    Ok((client_id, client_secret))
}

struct Configured {
    authorize_url: Option<Url>,
    token_url: Option<Url>,
    userinfo_url: Option<Url>,
    revocation_url: Option<Url>,
    issuer: Option<urls::Issuer>,
    authorization_response_iss: bool,
}

/// The provider's URLs (configured, else the template's), and what its template needs:
/// `oidc` an issuer for discovery, `oauth2` explicit authorize and token endpoints.
fn endpoints(f: &dyn Fn(&str) -> String, p: &RawProvider, t: &Template) -> Result<Configured, SettingError> {
    let allow = &p.allow_idn_hosts;
    let url_field = |sub: &str, raw: &Option<String>, default: Option<&str>| -> Result<Option<Url>, SettingError> {
        match raw.as_deref().or(default) {
            None => Ok(None),
            Some(s) => urls::endpoint(s, allow).map(Some).map_err(|e| err(f(sub), format!("{s:?} {e}"))),
        }
    };
    let ends = Configured {
        authorize_url: url_field("authorize_url", &p.authorize_url, t.authorize_url)?,
        token_url: url_field("token_url", &p.token_url, t.token_url)?,
        userinfo_url: url_field("userinfo_url", &p.userinfo_url, t.userinfo_url)?,
        revocation_url: url_field("revocation_url", &p.revocation_url, t.revocation_url)?,
        issuer: match p.issuer.as_deref().or(t.issuer) {
            None => None,
            Some(s) => Some(urls::Issuer::parse(s, allow).map_err(|e| err(f("issuer"), format!("{s:?} {e}")))?),
        },
        authorization_response_iss: p.authorization_response_iss.unwrap_or(false),
    };
    if p.template == ProviderKind::Oidc {
        if ends.issuer.is_none() {
            return Err(err(f("issuer"), "required for the oidc template (endpoints come from discovery)"));
        }
    } else {
        if ends.authorize_url.is_none() {
            return Err(err(f("authorize_url"), "required for the oauth2 template"));
        }
        if ends.token_url.is_none() {
            return Err(err(f("token_url"), "required for the oauth2 template"));
        }
    }
    if ends.authorization_response_iss && ends.issuer.is_none() {
        return Err(err(f("authorization_response_iss"), "needs `issuer` to compare against"));
    }
    Ok(ends)
}

/// The template's extra authorization parameters, overridden by the configured ones; the
/// parameters mcp-connect sets itself may not be configured.
fn extra_authorize_params(
    field: &str,
    template: &[(&str, &str)],
    configured: std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, SettingError> {
    const RESERVED: [&str; 8] = [
        "state",
        "code_challenge",
        "code_challenge_method",
        "redirect_uri",
        "client_id",
        "response_type",
        "scope",
        "nonce",
    ];
    if let Some(k) = configured.keys().find(|k| RESERVED.contains(&k.as_str())) {
        return Err(err(field, format!("{k:?} is set by mcp-connect itself")));
    }
    let mut extra: Vec<(String, String)> = template.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    for (k, v) in configured {
        extra.retain(|(ek, _)| *ek != k);
        extra.push((k, v));
    }
    Ok(extra)
}

#[cfg(test)]
mod tests {
    use super::{RawProvider, validate_provider};

    #[test]
    fn login_hint_is_subject_or_nothing_and_only_for_oauth_providers() {
        let oidc = "template = \"oidc\"\nissuer = \"https://id.example.com\"\nclient_id = \"c\"\n";
        let raw: RawProvider = toml::from_str(&format!("{oidc}login_hint = \"subject\"")).unwrap();
        let p = validate_provider("p", raw, Some("s".into())).unwrap();
        assert!(matches!(&p.upstream, super::Upstream::OAuth(o) if o.login_hint_subject));
        let refused = [
            format!("{oidc}login_hint = \"email\""),
            format!("{oidc}login_hint = \"subject\"\nextra_authorize_params = {{ login_hint = \"x\" }}"),
            "template = \"api_key\"\nlogin_hint = \"subject\"".to_owned(),
            "template = \"mcp\"\nresource = \"https://m.example/mcp\"\nlogin_hint = \"subject\"".to_owned(),
        ];
        for text in refused {
            let raw: RawProvider = toml::from_str(&text).unwrap();
            let secret = text.contains("oidc").then(|| "s".to_owned());
            assert_eq!(validate_provider("p", raw, secret).unwrap_err().field, "providers.p.login_hint", "{text}");
        }
    }
}
