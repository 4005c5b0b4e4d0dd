//! An example MCP server that uses mcp-connect: rmcp's Streamable HTTP transport behind an
//! axum router that validates MCP access tokens, and one tool whose wiring of mcp-connect
//! is the part to copy (`whoami::WhoamiServer::downstream_token`).

/// MCP access-token validation (RFC 9068 JWTs of the IdP) and RFC 9728 metadata.
pub mod auth;
/// 2025-11-25 retries: the elicitation handed out per session and call.
pub mod legacy;
/// The MCP handler and its tool.
pub mod whoami;

use axum::Router;
use axum::routing::get;
use mcp_connect_client::{ApiKey, Client, RequestStateKey};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::collections::HashMap;
use std::sync::Arc;
use url::Url;

pub use whoami::WhoamiServer;

/// Everything the server is started with.
pub struct Config {
    /// The IdP that issues the MCP access tokens (also mcp-connect's primary IdP).
    pub issuer: String,
    /// This server's public base URL; the MCP endpoint is `<base>/mcp`.
    pub public_url: Url,
    /// The resource identifier access tokens must name in `aud` (default `<base>/mcp`).
    pub resource: Option<String>,
    pub connect_url: Url,
    pub connect_api_key: ApiKey,
    pub state_key: RequestStateKey,
    /// Provider name → its user endpoint (e.g. `github` → `https://api.github.com/user`).
    pub providers: HashMap<String, String>,
}

impl Config {
    pub fn resource(&self) -> String {
        self.resource.clone().unwrap_or_else(|| format!("{}/mcp", self.public_url.as_str().trim_end_matches('/')))
    }
}

/// The router: `/mcp` (bearer required) and `/.well-known/oauth-protected-resource`.
pub async fn app(config: Config) -> anyhow::Result<Router> {
    let resource = config.resource();
    let base = config.public_url.as_str().trim_end_matches('/').to_owned();
    let validator = auth::AccessTokenValidator::discover(&config.issuer, &resource).await?;
    let auth = Arc::new(auth::AuthState {
        validator,
        resource_metadata_url: format!("{base}/.well-known/oauth-protected-resource"),
    });
    let connect = Client::new(config.connect_url, config.connect_api_key)?;
    let handler = WhoamiServer::new(connect, config.state_key, config.providers)?;
    let host = config.public_url.host_str().unwrap_or("localhost").to_owned();
    let mut hosts = vec![host.clone()];
    if let Some(port) = config.public_url.port() {
        hosts.push(format!("{host}:{port}"));
    }
    // 2025-11-25 clients declare capabilities once, at `initialize`: their sessions keep
    // them. 2026-07-28 requests are stateless whatever this says.
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(true)
            .with_json_response(true)
            .with_allowed_hosts(hosts),
    );
    let protected = Router::new()
        .route_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(auth.clone(), auth::require_bearer));
    Ok(Router::new()
        .route("/.well-known/oauth-protected-resource", get(auth::protected_resource_metadata))
        .with_state(auth)
        .merge(protected))
}

/// Serves `router` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router).await
}
