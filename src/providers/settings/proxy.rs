//! `[providers.<name>.proxy]`: where `/v1/proxy/{provider}/…` may send a caller's request
//! with the user's credential. Unset, a known template's API origins (GitHub, GitLab,
//! Google, Microsoft Graph, Slack), a remote MCP server's URL, or a typed credential's
//! check origin; a generic OAuth provider without it is not proxied. `origins = []` turns
//! the proxy off for a provider that would have one.

use super::{SettingError, err};
use crate::net::urls;
use crate::providers::proxy::{DEFAULT_METHODS, ProxyRules, check_path};
use crate::providers::{Provider, Upstream};
use reqwest::Method;
use serde::Deserialize;

/// The proxy's settings as the file (or the operator API) writes them.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawProxy {
    /// The API origins (`https://api.github.com`); the first is the default.
    pub origins: Option<Vec<String>>,
    /// Path prefixes (`/api/v4/`); default `/` (any path), or the template's.
    pub paths: Option<Vec<String>>,
    /// Default `GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub methods: Option<Vec<String>>,
    /// Whether `%2F` may stand inside a path segment (GitLab's project paths); default the
    /// template's (GitLab: true), else false.
    pub encoded_slashes: Option<bool>,
}

/// The most origins, prefixes or methods one provider's proxy lists.
const MAX_ITEMS: usize = 32;

/// The proxy rules of `provider`, from `raw` over its kind's defaults; `None`: not proxied.
pub(super) fn rules(
    f: &dyn Fn(&str) -> String,
    raw: Option<RawProxy>,
    provider: &Provider,
    allow_idn_hosts: &[String],
) -> Result<Option<ProxyRules>, SettingError> {
    let raw = raw.unwrap_or_default();
    let (default_origins, default_paths) = defaults(provider);
    let origins = match raw.origins {
        Some(o) => o,
        None => default_origins,
    };
    if origins.is_empty() {
        if raw.paths.is_some() || raw.methods.is_some() || raw.encoded_slashes.is_some() {
            return Err(err(f("proxy.origins"), "names no origin: paths and methods would go nowhere"));
        }
        return Ok(None);
    }
    let origins = list(&f("proxy.origins"), origins, |o| origin(o, allow_idn_hosts))?;
    let paths = list(&f("proxy.paths"), raw.paths.unwrap_or(default_paths), prefix)?;
    let methods = match raw.methods {
        None => DEFAULT_METHODS.to_vec(),
        Some(m) => list(&f("proxy.methods"), m, method)?,
    };
    let encoded_slashes = raw.encoded_slashes.unwrap_or(match &provider.upstream {
        Upstream::OAuth(_) => provider.kind.template().proxy_encoded_slashes,
        Upstream::RemoteMcp(_) | Upstream::Typed(_) => false,
    });
    Ok(Some(ProxyRules { origins, paths, methods, encoded_slashes }))
}

/// A kind's proxy where the configuration says nothing.
fn defaults(provider: &Provider) -> (Vec<String>, Vec<String>) {
    let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    match &provider.upstream {
        Upstream::OAuth(_) => {
            let t = provider.kind.template();
            (owned(t.proxy_origins), owned(t.proxy_paths))
        }
        // The server's own URL: a Streamable HTTP MCP server has the one endpoint.
        Upstream::RemoteMcp(m) => (vec![m.resource.origin().ascii_serialization()], vec![m.resource.path().to_owned()]),
        Upstream::Typed(t) => match &t.spec.check {
            Some(c) => (vec![c.url.origin().ascii_serialization()], vec!["/".to_owned()]),
            None => (Vec::new(), Vec::new()),
        },
    }
}

/// 1-32 distinct items, each checked by `one` (its message names what is wrong).
fn list<T: PartialEq>(
    field: &str,
    raw: Vec<String>,
    one: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, SettingError> {
    if raw.is_empty() || raw.len() > MAX_ITEMS {
        return Err(err(field, format!("must name 1 to {MAX_ITEMS}")));
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let item = one(r).map_err(|m| err(format!("{field}[{i}]"), m))?;
        if out.contains(&item) {
            return Err(err(format!("{field}[{i}]"), "is listed twice"));
        }
        out.push(item);
    }
    Ok(out)
}

/// An origin as the endpoint rules take it (https, or http to loopback; no IDN host
/// unless allowed), with nothing after the host and port.
fn origin(raw: &str, allow_idn_hosts: &[String]) -> Result<String, String> {
    let url = urls::endpoint(raw, allow_idn_hosts).map_err(|e| format!("{raw:?} {e}"))?;
    if url.path() != "/" || url.query().is_some() || raw.ends_with('/') {
        return Err(format!("{raw:?} must be an origin (scheme://host[:port]): put paths in proxy.paths"));
    }
    Ok(url.origin().ascii_serialization())
}

/// A path prefix: from `/`, as a proxied path must be.
fn prefix(raw: &str) -> Result<String, String> {
    check_path(raw, false).map_err(|e| format!("{raw:?}: {e}"))?;
    Ok(raw.to_owned())
}

/// A method name of the six the proxy forwards (no `CONNECT`, `TRACE`, `OPTIONS`).
fn method(raw: &str) -> Result<Method, String> {
    DEFAULT_METHODS
        .iter()
        .find(|m| m.as_str() == raw)
        .cloned()
        .ok_or_else(|| format!("{raw:?} is not one of GET, HEAD, POST, PUT, PATCH, DELETE"))
}

#[cfg(test)]
mod tests {
    use crate::providers::settings::{RawProvider, validate_provider};

    fn provider(toml_text: &str) -> Result<crate::providers::Provider, String> {
        let raw: RawProvider = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        // An OAuth client's secret, as the environment gives it.
        let secret = raw.client_id.as_ref().map(|_| "s".to_owned());
        validate_provider("p", raw, secret).map_err(|e| e.to_string())
    }

    #[test]
    fn a_known_template_is_proxied_to_its_api_and_a_generic_one_only_where_configured() {
        let gh = provider("template = \"github\"\nclient_id = \"c\"").unwrap();
        let rules = gh.proxy.unwrap();
        assert_eq!(rules.origins, ["https://api.github.com", "https://uploads.github.com"]);
        assert_eq!(rules.paths, ["/"]);
        assert_eq!(rules.allow(), "GET, HEAD, POST, PUT, PATCH, DELETE");
        let generic = "template = \"oauth2\"\nclient_id = \"c\"\nauthorize_url = \"https://a.example/authorize\"\n\
                       token_url = \"https://a.example/token\"";
        assert!(provider(generic).unwrap().proxy.is_none());
        let configured = format!(
            "{generic}\n[proxy]\norigins = [\"https://api.a.example\", \"http://127.0.0.1:9000\"]\n\
             paths = [\"/v2/\"]\nmethods = [\"GET\"]"
        );
        let rules = provider(&configured).unwrap().proxy.unwrap();
        assert_eq!(rules.origins, ["https://api.a.example", "http://127.0.0.1:9000"]);
        assert_eq!((rules.paths.as_slice(), rules.allow().as_str()), (["/v2/".to_owned()].as_slice(), "GET"));
        let off = "template = \"github\"\nclient_id = \"c\"\n[proxy]\norigins = []";
        assert!(provider(off).unwrap().proxy.is_none());
    }

    #[test]
    fn a_remote_mcp_server_is_proxied_to_its_own_url_and_a_typed_credential_to_its_check() {
        let mcp = provider("template = \"mcp\"\nresource = \"https://mcp.example.com/mcp\"").unwrap();
        let rules = mcp.proxy.unwrap();
        assert_eq!(
            (rules.origins.as_slice(), rules.paths.as_slice()),
            (["https://mcp.example.com".to_owned()].as_slice(), ["/mcp".to_owned()].as_slice())
        );
        let typed = provider("template = \"api_key\"\n[check]\nurl = \"https://api.example.com/v1/me\"").unwrap();
        assert_eq!(typed.proxy.unwrap().origins, ["https://api.example.com"]);
        assert!(provider("template = \"api_key\"").unwrap().proxy.is_none(), "no check: nowhere to go");
    }

    #[test]
    fn wrong_proxy_settings_name_their_field() {
        let gh = "template = \"github\"\nclient_id = \"c\"\n[proxy]\n";
        let cases = [
            ("origins = [\"http://api.example.com\"]", "providers.p.proxy.origins[0]"),
            ("origins = [\"https://api.example.com/v1\"]", "providers.p.proxy.origins[0]"),
            ("origins = [\"https://api.example.com/\"]", "providers.p.proxy.origins[0]"),
            ("origins = [\"https://u:p@api.example.com\"]", "providers.p.proxy.origins[0]"),
            ("origins = [\"https://a.example\", \"https://a.example\"]", "providers.p.proxy.origins[1]"),
            ("paths = [\"api\"]", "providers.p.proxy.paths[0]"),
            ("paths = [\"/a/../b\"]", "providers.p.proxy.paths[0]"),
            ("paths = []", "providers.p.proxy.paths"),
            ("methods = [\"TRACE\"]", "providers.p.proxy.methods[0]"),
            ("methods = [\"get\"]", "providers.p.proxy.methods[0]"),
            ("origins = []\nmethods = [\"GET\"]", "providers.p.proxy.origins"),
            ("hosts = [\"x\"]", "unknown field"),
        ];
        for (setting, field) in cases {
            let e = provider(&format!("{gh}{setting}")).unwrap_err();
            assert!(e.contains(field), "{setting}: {e}");
        }
    }
}
