//! The demo's configuration: the service's TOML (the parser `serve` uses) and the dev
//! IdP and provider it points at.

use mcp_connect_devproviders::{ClientRegistration, DevProvider, DevProviderConfig, Role};

/// The ports of the demo's own servers on 127.0.0.1 (0: any free port).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ports {
    pub idp: u16,
    pub provider: u16,
    pub metrics: u16,
}

/// The tenant of the `n`-th MCP server (`--mcp-url`, from 1): `dev`, then `dev2`, `dev3`…
pub(super) fn tenant_of(n: usize) -> String {
    if n <= 1 { "dev".to_owned() } else { format!("dev{n}") }
}

/// The service's configuration for the demo, as TOML (so it is the same parser `serve` uses).
/// Each MCP server is a tenant that takes its access tokens (for its URL) as `subject_token`.
pub(super) fn dev_toml(base: &str, idp: &str, provider: &str, mcp_urls: &[url::Url], metrics_port: u16) -> String {
    let mut tenants = String::new();
    for (i, url) in mcp_urls.iter().enumerate() {
        let (id, n) = (tenant_of(i + 1), i + 1);
        let name = if n == 1 { "Dev Assistant".to_owned() } else { format!("Dev Assistant {n}") };
        tenants.push_str(&format!(
            "[[tenants]]\nid = \"{id}\"\ndisplay_name = \"{name}\"\nproviders = [\"dev\", \"devkeys\"]\nsubject_token_audience = \"{url}\"\n"
        ));
    }
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
listen = "127.0.0.1:{metrics_port}"
[webhooks]
allow_loopback = true
poll_interval_ms = 500
{tenants}[providers.devkeys]
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
login_hint = "subject"
scopes = ["openid", "profile"]
account_id_field = "id"
account_login_field = "login"
[providers.dev.proxy]
origins = ["{provider}"]
"#
    )
}

/// The dev IdP (minting MCP access tokens for `mcp_url`) and the dev provider, each with
/// mcp-connect registered as a client under `secret`.
pub(super) async fn start_dev_providers(
    base: &str,
    secret: &str,
    mcp_urls: &[url::Url],
    ports: Ports,
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
        jwt_access_token_audience: mcp_urls.first().map(ToString::to_string),
        extra_access_token_audiences: mcp_urls.iter().skip(1).map(ToString::to_string).collect(),
        port: ports.idp,
        ..DevProviderConfig::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("the dev IdP cannot listen on 127.0.0.1:{}: {e} (try --idp-port 0)", ports.idp))?;
    let provider = DevProvider::start(DevProviderConfig {
        display_name: "Dev Provider".to_owned(),
        role: Role::Downstream,
        clients: vec![client(format!("{base}/connect/dev/callback"))],
        port: ports.provider,
        ..DevProviderConfig::default()
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!("the dev provider cannot listen on 127.0.0.1:{}: {e} (try --provider-port 0)", ports.provider)
    })?;
    Ok((idp, provider))
}
