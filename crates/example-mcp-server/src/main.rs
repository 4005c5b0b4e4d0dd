//! `mcp-connect-example-server`: reads its settings from the environment and serves.
//!
//! MCP_LISTEN (default 127.0.0.1:8090), MCP_PUBLIC_URL (default http://<MCP_LISTEN>),
//! MCP_ISSUER, MCP_RESOURCE (optional), MCP_CONNECT_URL, MCP_CONNECT_API_KEY,
//! MCP_STATE_KEY (32 bytes, base64), MCP_PROVIDERS (`name=user-endpoint,...`).

use anyhow::Context;
use mcp_connect_client::{ApiKey, RequestStateKey};
use mcp_connect_example_server::{Config, app, serve};

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("MCP_LOG").unwrap_or_else(|_| "info".into()))
        .init();
    let listen = std::env::var("MCP_LISTEN").unwrap_or_else(|_| "127.0.0.1:8090".to_owned());
    let public = std::env::var("MCP_PUBLIC_URL").unwrap_or_else(|_| format!("http://{listen}"));
    let providers = var("MCP_PROVIDERS")?
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.split_once('=').map(|(n, u)| (n.trim().to_owned(), u.trim().to_owned())))
        .collect::<Option<_>>()
        .context("MCP_PROVIDERS: expected name=url,name=url")?;
    let config = Config {
        issuer: var("MCP_ISSUER")?,
        public_url: public.parse().context("MCP_PUBLIC_URL")?,
        resource: std::env::var("MCP_RESOURCE").ok(),
        connect_url: var("MCP_CONNECT_URL")?.parse().context("MCP_CONNECT_URL")?,
        connect_api_key: ApiKey::new(var("MCP_CONNECT_API_KEY")?),
        state_key: RequestStateKey::from_base64(&var("MCP_STATE_KEY")?).context("MCP_STATE_KEY")?,
        providers,
    };
    let router = app(config).await?;
    let listener = tokio::net::TcpListener::bind(&listen).await.with_context(|| format!("bind {listen}"))?;
    tracing::info!(%listen, "serving MCP at /mcp");
    serve(listener, router).await?;
    Ok(())
}
