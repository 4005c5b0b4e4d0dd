//! The demo's configuration: the service's TOML (the parser `serve` uses) and the dev
//! IdP and provider it points at.

use mcp_connect_devproviders::{ClientRegistration, DevProvider, DevProviderConfig, Role};

/// The service's configuration for the demo, as TOML (so it is the same parser `serve` uses).
/// The dev tenant takes the MCP server's access tokens (for `mcp_url`) as `subject_token`.
pub(super) fn dev_toml(base: &str, idp: &str, provider: &str, mcp_url: &str) -> String {
    format!(
        r#"
public_base_url = "{base}"
listen = "127.0.0.1:0"
log_format = "text"
[idp]
issuer = "{idp}"
client_id = "mcp-connect-dev"
[sessions]
ttl_seconds = 3600
[metrics]
listen = "127.0.0.1:0"
[webhooks]
allow_loopback = true
poll_interval_ms = 500
[[tenants]]
id = "dev"
display_name = "Dev Assistant"
providers = ["dev", "devkeys"]
subject_token_audience = "{mcp_url}"
[providers.devkeys]
template = "api_key"
display_name = "Dev Key Service"
account_id_field = "id"
account_login_field = "login"
[providers.devkeys.check]
url = "{provider}/api/me"
header = "X-Api-Key"
[providers.dev]
template = "oidc"
display_name = "Dev Provider"
issuer = "{provider}"
client_id = "mcp-connect-dev"
scopes = ["openid", "profile"]
account_id_field = "id"
account_login_field = "login"
"#
    )
}

/// The dev IdP (minting MCP access tokens for `mcp_url`) and the dev provider, each with
/// mcp-connect registered as a client under `secret`.
pub(super) async fn start_dev_providers(
    base: &str,
    secret: &str,
    mcp_url: &url::Url,
) -> anyhow::Result<(DevProvider, DevProvider)> {
    let client = |redirect: String| ClientRegistration {
        client_id: "mcp-connect-dev".to_owned(),
        client_secret: secret.to_owned(),
        redirect_uris: vec![redirect],
    };
    let idp = DevProvider::start(DevProviderConfig {
        display_name: "Dev Identity Provider".to_owned(),
        role: Role::IdentityProvider,
        clients: vec![client(format!("{base}/login/callback"))],
        jwt_access_token_audience: Some(mcp_url.to_string()),
        ..DevProviderConfig::default()
    })
    .await?;
    let provider = DevProvider::start(DevProviderConfig {
        display_name: "Dev Provider".to_owned(),
        role: Role::Downstream,
        clients: vec![client(format!("{base}/connect/dev/callback"))],
        ..DevProviderConfig::default()
    })
    .await?;
    Ok((idp, provider))
}
