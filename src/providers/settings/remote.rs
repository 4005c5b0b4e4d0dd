//! `[providers.<name>]` of the `mcp` template: a remote MCP server's URL; its endpoints
//! come from discovery, its client from the configuration or from registering.

use super::{RawProvider, SettingError, err};
use crate::domain::ProviderId;
use crate::net::urls;
use crate::providers::{Client, McpClient, Origin, Provider, RemoteMcp, ScopeRules, Upstream};
use secrecy::SecretString;

/// A remote MCP server provider, checked. A `client_id` (with its secret, from the
/// environment or `client_secret_file`) is a client registered by hand; without one,
/// mcp-connect registers itself.
pub(super) fn validate_mcp(
    id: ProviderId,
    f: &dyn Fn(&str) -> String,
    p: RawProvider,
    secret: Option<String>,
) -> Result<Provider, SettingError> {
    let discovered = [
        ("authorize_url", p.authorize_url.is_some()),
        ("token_url", p.token_url.is_some()),
        ("userinfo_url", p.userinfo_url.is_some()),
        ("revocation_url", p.revocation_url.is_some()),
        ("fields", p.fields.is_some()),
        ("check", p.check.is_some()),
        ("account_id_field", p.account_id_field.is_some()),
        ("account_login_field", p.account_login_field.is_some()),
        ("extra_authorize_params", !p.extra_authorize_params.is_empty()),
        ("login_hint", p.login_hint.is_some()),
    ];
    if let Some((field, _)) = discovered.iter().find(|(_, set)| *set) {
        return Err(err(f(field), "the mcp template finds its endpoints by discovery (RFC 9728, RFC 8414)"));
    }
    let raw = p.resource.as_deref().ok_or_else(|| err(f("resource"), "required: the remote MCP server's URL"))?;
    let resource = urls::endpoint(raw, &p.allow_idn_hosts).map_err(|e| err(f("resource"), format!("{raw:?} {e}")))?;
    if resource.fragment().is_some() || resource.query().is_some() {
        return Err(err(f("resource"), "no query or fragment (RFC 8707 §2)"));
    }
    let secret = super::fields::client_secret(&f("client_secret_file"), secret, &p.client_secret_file)?;
    if p.client_id.is_none() && secret.is_some() {
        return Err(err(f("client_id"), "a client secret needs its client_id"));
    }
    // Without a client_id mcp-connect registers, and uses the method it registered with.
    if p.client_id.is_none() && p.token_endpoint_auth_method.is_some() {
        return Err(err(
            f("token_endpoint_auth_method"),
            "is for a client_id registered by hand; a registration uses what the server lists",
        ));
    }
    super::fields::auth_method_fits(f, p.token_endpoint_auth_method, secret.is_some())?;
    // The authorization server the discovered one must be (else the first one found is
    // pinned); a client registered by hand belongs to one, so it is named.
    let issuer = match &p.issuer {
        Some(i) => {
            Some(urls::Issuer::parse(i, &p.allow_idn_hosts).map_err(|e| err(f("issuer"), format!("{i:?} {e}")))?)
        }
        None if p.client_id.is_some() => {
            return Err(err(f("issuer"), "required with a client_id: the authorization server it is registered at"));
        }
        None => None,
    };
    let (scopes, separator) = super::fields::provider_scopes(f, &p, &p.template.template())?;
    let policy = p.policy(super::fields::clock_skew(&f("clock_skew_seconds"), p.clock_skew_seconds)?);
    let client = match p.client_id {
        Some(id) => McpClient::Configured(Client {
            id,
            secret: SecretString::from(secret.unwrap_or_default()),
            auth: p.token_endpoint_auth_method,
        }),
        None => McpClient::Automatic,
    };
    Ok(Provider {
        display_name: p.display_name.unwrap_or_else(|| id.to_string()),
        id,
        kind: p.template,
        policy,
        origin: Origin::File,
        proxy: None,
        upstream: Upstream::RemoteMcp(RemoteMcp {
            resource,
            client,
            issuer,
            authorization_response_iss: p.authorization_response_iss.unwrap_or(false),
            scopes: ScopeRules { default: scopes, separator },
        }),
    })
}

#[cfg(test)]
mod tests {
    use crate::providers::settings::{RawProvider, validate_provider};

    #[test]
    fn an_mcp_provider_names_its_resource_and_nothing_discovery_finds() {
        let raw: RawProvider =
            toml::from_str("template = \"mcp\"\nresource = \"https://mcp.example.com/mcp\"").unwrap();
        let p = validate_provider("p", raw, None).unwrap();
        assert_eq!(p.resource().map(url::Url::as_str), Some("https://mcp.example.com/mcp"));
        assert!(p.client().is_none(), "registered by mcp-connect itself");
        let cases = [
            ("template = \"mcp\"", "providers.p.resource"),
            ("template = \"mcp\"\nresource = \"http://mcp.example.com/mcp\"", "providers.p.resource"),
            ("template = \"mcp\"\nresource = \"https://mcp.example.com/mcp#x\"", "providers.p.resource"),
            (
                "template = \"mcp\"\nresource = \"https://m.example/mcp\"\ntoken_url = \"https://m.example/t\"",
                "providers.p.token_url",
            ),
            ("template = \"mcp\"\nresource = \"https://m.example/mcp\"\nclient_id = \"c\"", "providers.p.issuer"),
            ("template = \"oauth2\"\nresource = \"https://m.example/mcp\"", "providers.p.resource"),
        ];
        for (text, field) in cases {
            let raw: RawProvider = toml::from_str(text).unwrap();
            assert_eq!(validate_provider("p", raw, None).unwrap_err().field, field, "{text}");
        }
        let raw: RawProvider = toml::from_str("template = \"mcp\"\nresource = \"https://m.example/mcp\"").unwrap();
        assert_eq!(validate_provider("p", raw, Some("s".into())).unwrap_err().field, "providers.p.client_id");
    }
}
