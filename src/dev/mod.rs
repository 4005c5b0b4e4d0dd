//! `mcp-connect dev`: everything on loopback for a first try. A private PostgreSQL (unless
//! `DATABASE_URL` is set), throwaway development keys, a built-in dev identity provider and
//! dev downstream provider (real OAuth/OIDC servers on their own ports), a dev tenant with
//! fresh API keys, a dotenv file for scripts, and a printed walkthrough. Nothing here is
//! reachable from `serve`.
//!
//! One file per job: `postgres` (the private cluster), `demo_config` (the service's and
//! the dev providers' configuration), `webhook_echo`, `env_file`, `walkthrough`.

mod demo_config;
mod env_file;
mod postgres;
mod walkthrough;
mod webhook_echo;

pub use postgres::PrivatePostgres;

use crate::config::Config;
use crate::domain::{KeyScope, TenantId};
use crate::startup::{Application, shutdown_signal};
use crate::vault::Keyring;
use demo_config::{dev_toml, start_dev_providers};
use env_file::write_env_file;
use secrecy::ExposeSecret;
use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use walkthrough::print_walkthrough;
use webhook_echo::start_webhook_echo;

/// Where the example MCP server listens by default; the dev IdP's access tokens name it
/// as their audience, the protected resource's identifier (RFC 9728 §1.2: a URL).
pub const DEFAULT_MCP_URL: &str = "http://127.0.0.1:8090/mcp";

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Port of the service on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Where to write the values a script needs (service URL, keys, provider URLs).
    #[arg(long, default_value = ".mcp-connect-dev.env")]
    pub env_file: PathBuf,
    /// Folder for the private PostgreSQL cluster (made anew on every start). Default: a
    /// folder of its own under the system's temp directory, removed on exit, so it works
    /// from any checkout (also as root from a folder the `postgres` user cannot enter).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// An MCP server's URL (its RFC 9728 resource identifier): the dev IdP mints MCP
    /// access tokens for this audience. Repeat it for several servers side by side: the
    /// first is tenant `dev`, the n-th tenant `dev<n>` with its own server key
    /// (`MCP_CONNECT_API_KEY_<n>` in the env file); a token for another than the first is
    /// asked for with `resource=<its URL>` on the dev grant.
    #[arg(long = "mcp-url", default_value = DEFAULT_MCP_URL)]
    pub mcp_urls: Vec<url::Url>,
    /// Port of the dev IdP on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub idp_port: u16,
    /// Port of the dev provider on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub provider_port: u16,
    /// Port of the metrics listener on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub metrics_port: u16,
    /// Run a webhook receiver on loopback, registered for every event of the dev tenant:
    /// it checks each delivery's signature (the official `standardwebhooks` crate) and
    /// prints the event.
    #[arg(long)]
    pub webhook_echo: bool,
}

pub async fn run_dev(args: DevArgs) -> anyhow::Result<()> {
    let _logs = crate::telemetry::init(crate::config::LogFormat::Text, None);
    let private_pg;
    let database_url = match crate::config::process_env("DATABASE_URL") {
        Some(url) => url,
        None => {
            private_pg = PrivatePostgres::start(args.data_dir.as_deref())?;
            eprintln!("started a private PostgreSQL in {}", private_pg.data.display());
            private_pg.url.clone()
        }
    };

    let listener = TcpListener::bind(("127.0.0.1", args.port))
        .map_err(|e| anyhow::anyhow!("cannot listen on 127.0.0.1:{}: {e} (try --port 0)", args.port))?;
    let base = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
    let secret = crate::crypto::random_token(32);
    let ports = demo_config::Ports { idp: args.idp_port, provider: args.provider_port, metrics: args.metrics_port };
    let (idp, provider) = start_dev_providers(&base, &secret, &args.mcp_urls, ports).await?;

    // Development keys: random, in memory only, gone when this process ends.
    let vault_keys = Keyring::generate_entry("dev-only");
    let env: HashMap<&str, String> = HashMap::from([
        ("MCP_CONNECT_DATABASE_URL", database_url.clone()),
        ("MCP_CONNECT_VAULT_KEYS", vault_keys),
        ("MCP_CONNECT_IDP_CLIENT_SECRET", secret.clone()),
        ("MCP_CONNECT_PROVIDER_DEV_CLIENT_SECRET", secret.clone()),
    ]);
    let toml = dev_toml(&base, &idp.issuer(), &provider.issuer(), &args.mcp_urls, ports.metrics);
    let config = Config::from_toml(&toml, &|k| env.get(k).cloned())?;
    let app = Application::build_with_listener(config, listener).await?;
    let metrics_url = app.metrics_port().map(|p| format!("http://127.0.0.1:{p}/metrics")).unwrap_or_default();
    let keys = DevKeys::make(&app, &args.mcp_urls).await?;
    let echo = if args.webhook_echo { Some(start_webhook_echo(&app).await?) } else { None };
    let urls = DevUrls { base: &base, database: &database_url, metrics: &metrics_url, idp: &idp, provider: &provider };
    write_dev_env(&args, &urls, &keys, &secret)?;
    print_walkthrough(&base, &args.env_file, &args.mcp_urls, &metrics_url);
    if let Some(url) = &echo {
        println!("Webhooks: every event of the dev tenant goes to {url}; verified ones are printed here.\n");
    }
    let state = app.state();
    tokio::select! {
        r = app.run_until_stopped() => r?,
        _ = shutdown_signal() => eprintln!("\nshutting down"),
    }
    stop_quietly(&state, &_logs).await;
    drop(provider);
    drop(idp);
    Ok(())
}

/// An orderly stop: the hand-out audit written, the change listener ended; then the log
/// is silenced, since the private cluster stops after this and every background task
/// still holding a connection would report its end as a fault.
async fn stop_quietly(state: &crate::app::AppState, logs: &crate::telemetry::LogGuard) {
    state.caches.close();
    if !state.handouts.drain(std::time::Duration::from_secs(5)).await {
        tracing::warn!("hand-out audit rows not written before exit");
    }
    logs.silence();
}

/// The demo's keys: the dev tenant's server, admin and operator keys, and each further
/// MCP server's (tenant `dev<n>`) server key.
struct DevKeys {
    server: String,
    admin: String,
    operator: String,
    /// `(MCP_CONNECT_API_KEY_<n>, key, MCP_CONNECT_DEV_MCP_URL_<n>, url)` for n = 2, 3, …
    more: Vec<(String, String, String, String)>,
}

impl DevKeys {
    async fn make(app: &Application, mcp_urls: &[url::Url]) -> anyhow::Result<Self> {
        let (server, admin) = (dev_key(app, KeyScope::Server).await?, dev_key(app, KeyScope::Admin).await?);
        let mut more = Vec::new();
        for (i, url) in mcp_urls.iter().enumerate().skip(1) {
            let n = i + 1;
            let key = dev_key_of(app, &demo_config::tenant_of(n), KeyScope::Server).await?;
            more.push((
                format!("MCP_CONNECT_API_KEY_{n}"),
                key,
                format!("MCP_CONNECT_DEV_MCP_URL_{n}"),
                url.to_string(),
            ));
        }
        let operator = crate::flows::api_keys::create_operator_key(&app.state().pool, Some("dev")).await?;
        Ok(Self { server, admin, operator: operator.key.expose_secret().to_owned(), more })
    }
}

/// Where the demo's parts are.
struct DevUrls<'a> {
    base: &'a str,
    database: &'a str,
    metrics: &'a str,
    idp: &'a mcp_connect_devproviders::DevProvider,
    provider: &'a mcp_connect_devproviders::DevProvider,
}

/// The env file. What an MCP server of the docs and the examples reads is there under the
/// names they read it by (docs/mcp-servers.md#settings): the server key as
/// MCP_CONNECT_API_KEY (and, as before, MCP_CONNECT_SERVER_KEY), a requestState key, the
/// IdP as MCP_ISSUER and the dev provider's user endpoint as MCP_PROVIDERS.
fn write_dev_env(args: &DevArgs, urls: &DevUrls<'_>, keys: &DevKeys, secret: &str) -> anyhow::Result<()> {
    let state_key = {
        use base64::Engine;
        let mut key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
        base64::engine::general_purpose::STANDARD.encode(key)
    };
    let userinfo = format!("{}/userinfo", urls.provider.base_url());
    let (providers, issuer, idp_url) = (format!("dev={userinfo}"), urls.idp.issuer(), urls.idp.base_url());
    let provider_url = urls.provider.base_url();
    let vars = [
        ("MCP_CONNECT_URL", urls.base),
        ("MCP_CONNECT_API_KEY", &keys.server),
        ("MCP_STATE_KEY", &state_key),
        ("MCP_ISSUER", &issuer),
        ("MCP_PROVIDERS", &providers),
        ("MCP_CONNECT_SERVER_KEY", &keys.server),
        ("MCP_CONNECT_ADMIN_KEY", &keys.admin),
        ("MCP_CONNECT_OPERATOR_KEY", &keys.operator),
        ("MCP_CONNECT_DEV_IDP_URL", &idp_url),
        ("MCP_CONNECT_DEV_IDP_CLIENT_ID", "mcp-connect-dev"),
        ("MCP_CONNECT_DEV_IDP_CLIENT_SECRET", secret),
        ("MCP_CONNECT_DEV_MCP_URL", args.mcp_urls[0].as_str()),
        ("MCP_CONNECT_DEV_PROVIDER_URL", &provider_url),
        ("MCP_CONNECT_DEV_PROVIDER_USERINFO_URL", &userinfo),
        ("MCP_CONNECT_METRICS_URL", urls.metrics),
        ("DATABASE_URL", urls.database),
    ];
    let more = keys.more.iter().flat_map(|(k, key, u, url)| [(k.as_str(), key.as_str()), (u.as_str(), url.as_str())]);
    write_env_file(&args.env_file, &vars.into_iter().chain(more).collect::<Vec<_>>())
}

/// A fresh API key of the dev tenant.
async fn dev_key(app: &Application, scope: KeyScope) -> anyhow::Result<String> {
    dev_key_of(app, "dev", scope).await
}

/// A fresh API key of one of the demo's tenants.
async fn dev_key_of(app: &Application, tenant: &str, scope: KeyScope) -> anyhow::Result<String> {
    let tenant = TenantId::parse(tenant).map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = crate::flows::api_keys::create_api_key(&app.state().pool, &tenant, scope, Some("dev")).await?;
    Ok(key.key.expose_secret().to_owned())
}
