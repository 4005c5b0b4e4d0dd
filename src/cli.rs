//! The `mcp-connect` command line. `main.rs` only calls `run`.

use crate::config::{CommandConfig, Config};
use crate::domain::{ApiKeyId, KeyScope, KillMode, ProviderId, TenantId};
use crate::flows::kill_switches::{KillSwitchChange, KillSwitchError, Operator, change_kill_switch};
use crate::startup::{Application, sync_tenants};
use crate::store;
use crate::vault::Keyring;
use clap::{Parser, Subcommand};
use secrecy::ExposeSecret;
use std::path::{Path, PathBuf};

#[derive(Debug, Parser)]
#[command(name = "mcp-connect", version = crate::VERSION, about = "Downstream OAuth tokens for MCP servers, via URL-mode elicitation")]
pub struct Cli {
    /// Configuration file (TOML); MCP_CONNECT_* environment variables override it.
    #[arg(long, global = true, env = "MCP_CONNECT_CONFIG", default_value = "mcp-connect.toml")]
    pub config: PathBuf,
    /// How listings are printed: `text` (tab-separated, for people) or `json` (an array of
    /// objects, for scripts).
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (applies migrations first, unless --no-migrate).
    Serve {
        /// Do not migrate: refuse to start unless every migration of this binary is applied
        /// (a newer release's schema is served when its `schema_compat` admits this binary).
        #[arg(long)]
        no_migrate: bool,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Manage API keys.
    Apikey {
        #[command(subcommand)]
        action: ApikeyAction,
    },
    /// Everything on loopback for a first try: private PostgreSQL, dev IdP, dev provider,
    /// a dev tenant with fresh keys, and a walkthrough.
    #[cfg(feature = "dev")]
    Dev(crate::dev::DevArgs),
    /// Turn data keys on, re-wrap every data key under the current vault key (the first in
    /// the keyring; no row re-sealed) and move values sealed before data keys under them.
    /// Safe to interrupt and rerun; old keys can be removed once it reports 0 remaining.
    RotateKey {
        /// Rows per transaction.
        #[arg(long, default_value_t = 200)]
        batch: i64,
    },
    /// The key store's own keys (`[vault] store`).
    Keystore {
        #[command(subcommand)]
        action: KeystoreAction,
    },
    /// The keys mcp-connect signs `private_key_jwt` client assertions with (docs/keys.md).
    ClientKeys {
        #[command(subcommand)]
        action: ClientKeysAction,
    },
    /// Provider kill switches for every tenant (tenant admins use the admin API).
    Killswitch {
        #[command(subcommand)]
        action: KillAction,
    },
    /// Switch tenants off and on (start-up never deactivates one).
    Tenant {
        #[command(subcommand)]
        action: TenantAction,
    },
    /// Run the periodic clean-up once and print what it removed.
    Cleanup,
    /// Ask the service on this machine whether it is ready (`GET /readyz` on `listen`,
    /// 127.0.0.1 when it listens on all addresses): exit 0 when it answers 200, 1 when
    /// not. For container health checks.
    Healthcheck,
    /// The configuration file and environment, checked as `serve` checks them at start
    /// (every IdP and provider secret included), without starting anything.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// The audit trail across tenants, including the events of no tenant (`login_failed`),
    /// which no tenant's admin API shows.
    Audit {
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Connections across tenants: list them, or off-board a subject (revoke every
    /// connection of theirs in a tenant, at the provider too, and close their pending links).
    Connections {
        #[command(subcommand)]
        action: ConnectionsAction,
    },
    /// Webhook endpoints across tenants, with their backlog.
    Webhooks {
        #[command(subcommand)]
        action: WebhooksAction,
    },
    /// Print the shell completion script for `shell` (e.g. `mcp-connect completions bash >
    /// /etc/bash_completion.d/mcp-connect`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a new random vault key entry (`<id>:<base64>`) for MCP_CONNECT_VAULT_KEYS.
    Genkey {
        /// Key id, e.g. the month it was made.
        #[arg(long, default_value = "k1")]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KillAction {
    /// Stop a provider: `no_new_elicitations` or `no_token_handouts`.
    Set {
        provider: String,
        #[arg(value_enum)]
        mode: KillMode,
        /// Only for this tenant (default: every tenant).
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lift a kill switch.
    Clear {
        provider: String,
        #[arg(long)]
        tenant: Option<String>,
    },
    /// List the switches in force.
    List,
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Exit 0 and say so when the configuration is valid; else print what is wrong, naming
    /// each setting, and exit 78.
    Check,
}

#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Newest first.
    List {
        /// Only this tenant's events.
        #[arg(long, conflicts_with = "without_tenant")]
        tenant: Option<String>,
        /// Only the events of no tenant (`login_failed`).
        #[arg(long)]
        without_tenant: bool,
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        subject: Option<String>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
        /// Only the events of the last this many days (1 to 3660): the trail is partitioned
        /// by month, so a bound keeps the read to the partitions it names.
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(i64).range(1..=3660))]
        days: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConnectionsAction {
    /// By tenant, subject and provider; never a token.
    List {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        subject: Option<String>,
        /// At most this many (1 to 10000).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        limit: i64,
    },
    /// Revoke every connection of a subject in a tenant (or one provider's), as the admin
    /// API's off-boarding does: at the provider (RFC 7009) where it can, the tokens
    /// deleted, every instance told, pending links closed; audited with `by: cli`. Needs
    /// the whole configuration (the provider secrets, the vault keys).
    Revoke {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        subject: String,
        #[arg(long)]
        provider: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum WebhooksAction {
    /// Each endpoint's id, tenant, host (never the path, which may hold a secret), events,
    /// failures and pending deliveries.
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeystoreAction {
    /// Make the key-encryption key `[vault.pkcs11] key_label` in the HSM's token: AES-256,
    /// sensitive and never extractable. Refused when one of that label exists.
    CreateKek,
}

#[derive(Debug, Subcommand)]
pub enum ClientKeysAction {
    /// Every key, with when it signs from and until when it is published.
    List,
    /// A new key: published at once (GET /.well-known/jwks.json), signing once
    /// `--publish-ahead-seconds` have passed; the keys before stay published
    /// `--overlap-seconds` longer.
    Rotate {
        /// Longer than any provider keeps our JWKS cached.
        #[arg(long, default_value_t = 3600)]
        publish_ahead_seconds: u32,
        #[arg(long, default_value_t = 86_400)]
        overlap_seconds: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum TenantAction {
    /// Stop a tenant: its API keys and connect links stop working on every instance.
    Deactivate { id: String },
    /// Let a deactivated tenant work again (not an ended one).
    Activate { id: String },
    /// End a tenant for good (off-boarding): off, and its data keys destroyed, so nothing it
    /// held opens on any instance again. Revoke its grants first where that matters.
    End {
        id: String,
        /// The tenant's id again.
        #[arg(long)]
        confirm: String,
    },
    /// List every tenant with its state.
    List,
    /// A new data key for a tenant: new values are sealed under it at once; run `rotate-key`
    /// to re-seal what the one before sealed (then it is destroyed).
    RotateDataKey { id: String },
}

#[derive(Debug, Subcommand)]
pub enum ApikeyAction {
    /// Create a key and print it once: a tenant's (`server`, `admin`: --tenant) or the
    /// platform operator's (`operator`: no tenant; for `/operator/v1`).
    Create {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, value_enum)]
        scope: KeyScope,
        /// A note for operators (who uses the key).
        #[arg(long)]
        label: Option<String>,
    },
    /// List keys (never the keys themselves).
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a key by its id (the 16 hex digits after `mcpc_`).
    Revoke { id: String },
}

/// The binary's whole `main`: parse the command line, run it on a multi-threaded runtime.
/// Kept in the library so that the binary crate instantiates nothing (its release build
/// took half a minute compiling the runtime and the server a second time).
///
/// Exit codes (BSD `sysexits.h`): 0 done, 64 usage error, 69 database unreachable, 78
/// configuration error, 1 anything else (said on stderr).
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // `--help` and `--version` are answers, not errors.
            return if e.use_stderr() {
                std::process::ExitCode::from(EX_USAGE)
            } else {
                std::process::ExitCode::SUCCESS
            };
        }
    };
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(cli)));
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-connect: {e:#}{}", store::pooler_hint(e.as_ref()));
            std::process::ExitCode::from(exit_code(&e))
        }
    }
}

pub const EX_USAGE: u8 = 64;
pub const EX_UNAVAILABLE: u8 = 69;
pub const EX_CONFIG: u8 = 78;

/// The exit code for a failed command, from what failed.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<crate::config::ConfigError>()) {
        EX_CONFIG
    } else if e.chain().any(|c| {
        // `OpenError` is transparent: its `Unreachable` is not in the chain of sources.
        c.is::<store::Unreachable>() || matches!(c.downcast_ref(), Some(store::OpenError::Unreachable(_)))
    }) {
        EX_UNAVAILABLE
    } else {
        1
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let _failpoints = crate::domain::failpoint::setup();
    match cli.command {
        Command::Genkey { id } => {
            let entry = Keyring::generate_entry(&id);
            Keyring::parse(&entry).map_err(|e| anyhow::anyhow!("--id: {e}"))?;
            println!("{entry}");
            Ok(())
        }
        Command::Serve { no_migrate } => serve(&cli.config, no_migrate).await,
        Command::Migrate => {
            migrate(&cli.config).await?;
            println!("migrations applied");
            Ok(())
        }
        #[cfg(feature = "dev")]
        Command::Dev(args) => crate::dev::run_dev(args).await,
        Command::RotateKey { batch } => {
            let (config, pool) = open_database(&cli.config, true).await?;
            let keys = command_keys(&pool, config).await?;
            rotate_key(&pool, &keys, batch).await
        }
        Command::Keystore { action: KeystoreAction::CreateKek } => {
            let config = CommandConfig::load(&cli.config, true)?;
            match config.vault.map(|v| v.key_store) {
                Some(crate::config::KeyStoreSettings::Pkcs11(s)) => {
                    let (label, token) = (s.key_label.clone(), s.token_label.clone());
                    crate::vault::kek::pkcs11::Pkcs11KeyStore::create_kek(s).await?;
                    println!("made key {label:?} in token {token:?}");
                    Ok(())
                }
                _ => anyhow::bail!("[vault] store is local: its keys are the keyring's (`mcp-connect genkey`)"),
            }
        }
        Command::ClientKeys { action } => client_keys(&cli.config, action, cli.output).await,
        Command::Killswitch { action } => {
            killswitch(&open_database(&cli.config, false).await?.1, action, cli.output).await
        }
        Command::Tenant { action: TenantAction::RotateDataKey { id } } => {
            let tenant = TenantId::parse(&id).map_err(|e| anyhow::anyhow!("tenant id: {e}"))?;
            let (config, pool) = open_database(&cli.config, true).await?;
            let key = command_keys(&pool, config).await?.rotate_tenant(&tenant).await?;
            println!(
                "tenant {tenant} seals under data key {key} now; run `mcp-connect rotate-key` to re-seal the rest"
            );
            Ok(())
        }
        Command::Tenant { action } => tenant(&open_database(&cli.config, false).await?.1, action, cli.output).await,
        Command::Cleanup => {
            let (config, pool) = open_database(&cli.config, false).await?;
            let r =
                crate::flows::cleanup::run_once(&pool, time::OffsetDateTime::now_utc(), config.audit_retention).await?;
            println!("{}", serde_json::to_string_pretty(&r)?);
            Ok(())
        }
        Command::Healthcheck => healthcheck(CommandConfig::load(&cli.config, false)?.listen).await,
        Command::Apikey { action } => apikey(&open_database(&cli.config, false).await?.1, action, cli.output).await,
        Command::Config { action: ConfigAction::Check } => config_check(&cli.config),
        Command::Audit { action } => audit(&open_database(&cli.config, false).await?.1, action, cli.output).await,
        Command::Connections { action } => connections(&cli.config, action, cli.output).await,
        Command::Webhooks { action: WebhooksAction::List { tenant } } => {
            let pool = open_database(&cli.config, false).await?.1;
            webhooks(&pool, parse_tenant(tenant)?.as_ref(), cli.output).await
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "mcp-connect", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// `serve`: the service until SIGTERM or SIGINT.
async fn serve(path: &std::path::Path, no_migrate: bool) -> anyhow::Result<()> {
    let mut config = Config::load(path)?;
    config.migrate_on_start = !no_migrate;
    let traces = config.otlp_endpoint.as_ref().map(|endpoint| crate::telemetry::TraceExport {
        endpoint,
        timeout: config.outbound_timeout,
        cas: &config.outbound_cas,
    });
    let _logs = crate::telemetry::init(config.log_format, traces);
    let (listen, metrics) = (config.listen, config.metrics_listen);
    let app = Application::build(config).await?;
    tracing::info!(%listen, metrics = ?metrics, "mcp-connect serving");
    app.run_until_signalled().await?;
    Ok(())
}

/// `config check`: the file loads, and what it holds.
fn config_check(path: &std::path::Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let (tenants, idps) = (config.tenants.len(), 1 + config.idps.named_count());
    println!(
        "{}: valid ({tenants} tenants, {} providers, {idps} identity providers)",
        path.display(),
        config.providers.iter().count()
    );
    Ok(())
}

/// `connections revoke` and `connections list`.
async fn connections(config: &std::path::Path, action: ConnectionsAction, output: Output) -> anyhow::Result<()> {
    match action {
        ConnectionsAction::Revoke { tenant, subject, provider } => {
            let tenant = TenantId::parse(&tenant).map_err(|e| anyhow::anyhow!("--tenant: {e}"))?;
            let subject = crate::domain::Subject::parse(&subject).map_err(|e| anyhow::anyhow!("--subject: {e}"))?;
            let provider =
                provider.map(|p| ProviderId::parse(&p).map_err(|e| anyhow::anyhow!("--provider: {e}"))).transpose()?;
            let state = crate::startup::operator_state(Config::load(config)?).await?;
            anyhow::ensure!(
                store::tenants::tenant_exists(&state.pool, &tenant).await?,
                "--tenant: no active tenant {tenant}"
            );
            let done =
                crate::flows::revoke::revoke_subject(&state, &tenant, &subject, provider.as_ref(), "cli").await?;
            for r in &done.revoked {
                println!("revoked {} ({}): provider {}", r.connection_id, r.provider, r.provider_result);
            }
            println!(
                "{} connections revoked, {} pending links closed",
                done.revoked.len(),
                done.cancelled_elicitations
            );
            Ok(())
        }
        ConnectionsAction::List { tenant, subject, limit } => {
            let pool = open_database(config, false).await?.1;
            let tenant = parse_tenant(tenant)?;
            let subject = subject
                .map(|s| crate::domain::Subject::parse(&s).map_err(|e| anyhow::anyhow!("--subject: {e}")))
                .transpose()?;
            let rows = store::connections::list_for_operator(&pool, tenant.as_ref(), subject.as_ref(), limit).await?;
            print_rows(output, &rows, |c| {
                format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    c.id,
                    c.tenant_id,
                    c.subject,
                    c.provider,
                    c.status.as_str(),
                    c.account_login.as_deref().unwrap_or("-"),
                    c.scopes.join(" ")
                )
            })
        }
    }
}

/// Prints a listing: tab-separated `text` lines, or the rows as one JSON array.
fn print_rows<T: serde::Serialize>(output: Output, rows: &[T], line: impl Fn(&T) -> String) -> anyhow::Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(rows)?),
        Output::Text => {
            for r in rows {
                println!("{}", line(r));
            }
        }
    }
    Ok(())
}

/// One webhook endpoint as `webhooks list` prints it.
#[derive(serde::Serialize)]
struct WebhookLine {
    id: crate::domain::WebhookId,
    tenant: TenantId,
    /// The URL's host (and port): its path may hold the receiver's own secret.
    host: String,
    events: Vec<String>,
    consecutive_failures: i32,
    #[serde(with = "time::serde::rfc3339::option")]
    paused_until: Option<time::OffsetDateTime>,
    pending: i64,
    #[serde(with = "time::serde::rfc3339::option")]
    oldest_pending: Option<time::OffsetDateTime>,
}

async fn webhooks(pool: &store::Db, tenant: Option<&TenantId>, output: Output) -> anyhow::Result<()> {
    let rows: Vec<WebhookLine> = store::webhooks::list_for_operator(pool, tenant)
        .await?
        .into_iter()
        .map(|w| WebhookLine {
            id: w.id,
            tenant: w.tenant_id,
            host: url::Url::parse(&w.url)
                .ok()
                .and_then(|u| u.host_str().map(|h| u.port().map_or_else(|| h.to_owned(), |p| format!("{h}:{p}"))))
                .unwrap_or_default(),
            events: w.events,
            consecutive_failures: w.consecutive_failures,
            paused_until: w.paused_until,
            pending: w.pending,
            oldest_pending: w.oldest_pending,
        })
        .collect();
    print_rows(output, &rows, |w| {
        format!(
            "{}\t{}\t{}\t{}\tpending {}\tfailures {}",
            w.id,
            w.tenant,
            w.host,
            w.events.join(","),
            w.pending,
            w.consecutive_failures
        )
    })
}

/// One audit event as `audit list` prints it.
#[derive(serde::Serialize)]
struct AuditLine {
    id: i64,
    #[serde(with = "time::serde::rfc3339")]
    at: time::OffsetDateTime,
    tenant: Option<String>,
    kind: String,
    subject: Option<String>,
    /// The issuer of the IdP whose `sub` `subject` is.
    issuer: Option<String>,
    provider: Option<String>,
    elicitation_id: Option<uuid::Uuid>,
    connection_id: Option<uuid::Uuid>,
    api_key_id: Option<String>,
    count: i32,
    detail: serde_json::Value,
}

/// `--tenant`, when given, as a tenant id.
fn parse_tenant(t: Option<String>) -> anyhow::Result<Option<TenantId>> {
    t.map(|t| TenantId::parse(&t).map_err(|e| anyhow::anyhow!("--tenant: {e}"))).transpose()
}

async fn audit(pool: &store::Db, action: AuditAction, output: Output) -> anyhow::Result<()> {
    let AuditAction::List { tenant, without_tenant, kind, subject, limit, days } = action;
    let tenant = tenant.map(|t| TenantId::parse(&t).map_err(|e| anyhow::anyhow!("--tenant: {e}"))).transpose()?;
    let whose = match (&tenant, without_tenant) {
        (Some(t), _) => store::audit::Whose::Tenant(t),
        (None, true) => store::audit::Whose::NoTenant,
        (None, false) => store::audit::Whose::Everyone,
    };
    let filter = store::audit::AuditFilter {
        subject: subject.as_deref(),
        provider: None,
        kind: kind.as_deref(),
        since: Some(time::OffsetDateTime::now_utc() - time::Duration::days(days)),
        until: None,
        page: store::audit::Page::Before(None),
        limit,
    };
    let rows: Vec<AuditLine> = store::audit::list_operator_events(pool, whose, &filter)
        .await?
        .into_iter()
        .map(|r| AuditLine {
            id: r.id,
            at: r.at,
            tenant: r.tenant_id,
            kind: r.kind,
            subject: r.subject,
            issuer: r.issuer,
            provider: r.provider,
            elicitation_id: r.elicitation_id,
            connection_id: r.connection_id,
            api_key_id: r.api_key_id,
            count: r.count,
            detail: r.detail,
        })
        .collect();
    print_rows(output, &rows, |r| {
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        format!("{}\t{}\t{}\t{}\t{}\t{}", r.at, dash(&r.tenant), r.kind, dash(&r.subject), dash(&r.provider), r.detail)
    })
}

/// `migrate`: the whole configuration (the tenants it writes name configured providers).
async fn migrate(config: &Path) -> anyhow::Result<()> {
    let config = Config::load(config)?;
    let pool = store::open(
        config.database_url.expose_secret(),
        1,
        config.database_pooler,
        config.database_listen_url.as_ref().map(|u| u.expose_secret()),
        true,
    )
    .await?;
    sync_tenants(&pool, &config.tenants, config.idps.default().issuer.as_str()).await?;
    crate::startup::record_configured_providers(&pool, &config.providers).await?;
    Ok(())
}

/// Every other command that works on the database: only the settings it uses (no IdP or
/// provider secrets), and a schema that must already be this binary's. Only `migrate`
/// (and `serve`, `dev`) change the schema or write the configured tenants.
async fn open_database(config: &Path, keyring: bool) -> anyhow::Result<(CommandConfig, store::Db)> {
    let config = CommandConfig::load(config, keyring)?;
    let pool = store::open(config.database_url.expose_secret(), 2, config.database_pooler, None, false).await?;
    Ok((config, pool))
}

async fn healthcheck(listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    let url = format!("http://{addr}/readyz");
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(3)).no_proxy().build()?;
    let r = client.get(&url).send().await.map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    let status = r.status();
    let body = r.text().await.unwrap_or_default();
    anyhow::ensure!(status == reqwest::StatusCode::OK, "{url} answered {status}: {body}");
    println!("ready ({url})");
    Ok(())
}

async fn client_keys(config: &Path, action: ClientKeysAction, output: Output) -> anyhow::Result<()> {
    let (config, pool) = open_database(config, true).await?;
    let keys = std::sync::Arc::new(command_keys(&pool, config).await?);
    let now = time::OffsetDateTime::now_utc();
    match action {
        ClientKeysAction::List => {
            let list = store::client_keys::list(&pool).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&list)?),
                Output::Text => {
                    for k in &list {
                        let until = k.unpublish_at.map_or_else(|| "-".to_owned(), |t| t.to_string());
                        println!("{}  {}  signs from {}  published until {until}", k.kid, k.alg, k.sign_from);
                    }
                }
            }
        }
        ClientKeysAction::Rotate { publish_ahead_seconds, overlap_seconds } => {
            let client_keys = crate::keys::client_keys::ClientKeys::new(pool.clone(), keys);
            let ahead = time::Duration::seconds(publish_ahead_seconds.into());
            let kid = client_keys.rotate(now, ahead, time::Duration::seconds(overlap_seconds.into())).await?;
            println!("key {kid} published; it signs from {}", now + ahead);
        }
    }
    Ok(())
}

/// The vault's keys as a command uses them: the keyring and the configured key store.
async fn command_keys(pool: &store::Db, config: CommandConfig) -> anyhow::Result<crate::keys::Keys> {
    let keyring =
        std::sync::Arc::new(config.keyring.ok_or_else(|| anyhow::anyhow!("this command needs the vault keys"))?);
    let vault = config.vault.ok_or_else(|| anyhow::anyhow!("this command needs [vault]"))?;
    let store = crate::startup::key_store(&vault.key_store, keyring.clone()).await?;
    let clock = std::sync::Arc::new(crate::domain::SystemClock);
    Ok(crate::keys::Keys::new(pool.clone(), store, keyring, clock, vault.data_key_cache))
}

async fn rotate_key(pool: &store::Db, keys: &crate::keys::Keys, batch: i64) -> anyhow::Result<()> {
    let store = keys.store();
    println!("wrapping data keys under {} key {}; re-sealing under data keys", store.kind(), store.current_kek());
    let report = crate::flows::rotate::rotate_keys(pool, keys, batch.clamp(1, 10_000), |done, total| {
        println!("  {done} of {total} rows re-sealed");
    })
    .await?;
    println!(
        "done: {} data keys re-wrapped, {} values re-sealed, {} remaining",
        report.rewrapped, report.resealed, report.remaining
    );
    if report.remaining > 0 {
        println!("rows were busy (being refreshed); run rotate-key again");
    }
    if report.legacy_closed {
        println!("every sealed value is bound to its row's generation; values without one are refused from now on");
    }
    if report.unbound_closed {
        println!("every sealed token is bound to its person's issuer; unbound ones are refused from now on");
    }
    Ok(())
}

/// One tenant as `tenant list` prints it.
#[derive(serde::Serialize)]
struct TenantLine {
    id: String,
    active: bool,
    display_name: String,
    providers: Vec<String>,
    /// The name of its IdP (`default`: `[idp]`).
    idp: String,
    subject_token_audience: Option<String>,
    require_subject_token: bool,
    /// `file` (a configuration file keeps it) or `api` (the operator API).
    managed_by: String,
}

async fn tenant(pool: &store::Db, action: TenantAction, output: Output) -> anyhow::Result<()> {
    let (id, active) = match action {
        TenantAction::List => {
            let rows: Vec<TenantLine> = store::tenants::all_tenants(pool)
                .await?
                .into_iter()
                .map(|t| TenantLine {
                    id: t.id,
                    active: t.active,
                    display_name: t.display_name,
                    providers: t.allowed_providers,
                    idp: t.idp,
                    subject_token_audience: t.subject_token_audience,
                    require_subject_token: t.require_subject_token,
                    managed_by: t.managed_by,
                })
                .collect();
            return print_rows(output, &rows, |t| {
                let state = if t.active { "active" } else { "inactive" };
                format!("{}\t{state}\t{}\t{}\t{}", t.id, t.display_name, t.providers.join(","), t.managed_by)
            });
        }
        TenantAction::RotateDataKey { .. } => anyhow::bail!("tenant rotate-data-key needs the vault keys"),
        TenantAction::End { id, confirm } => {
            let tenant = TenantId::parse(&id).map_err(|e| anyhow::anyhow!("tenant id: {e}"))?;
            let e = crate::flows::tenants::end_tenant(pool, &tenant, &confirm, "cli").await?;
            if !e.ended_now {
                println!("tenant {tenant} had ended already");
            } else {
                println!(
                    "tenant {tenant} ended: {} data keys destroyed; {} connections' tokens open nowhere now",
                    e.data_keys_destroyed, e.connections
                );
            }
            return Ok(());
        }
        TenantAction::Deactivate { id } => (id, false),
        TenantAction::Activate { id } => (id, true),
    };
    let tenant = TenantId::parse(&id).map_err(|e| anyhow::anyhow!("tenant id: {e}"))?;
    let changed = crate::flows::tenants::set_tenant_active(pool, &tenant, active, "cli").await?;
    let word = if active { "active" } else { "inactive" };
    match changed {
        None => anyhow::bail!("no tenant {tenant}"),
        Some(true) => println!("tenant {tenant} is now {word}"),
        Some(false) => println!("tenant {tenant} was {word} already"),
    }
    Ok(())
}

/// One API key as `apikey list` prints it (never the key).
#[derive(serde::Serialize)]
struct KeyLine {
    id: ApiKeyId,
    /// `None`: an operator key.
    tenant: Option<TenantId>,
    scope: KeyScope,
    revoked: bool,
    #[serde(with = "time::serde::rfc3339")]
    created_at: time::OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    last_used_at: Option<time::OffsetDateTime>,
    label: Option<String>,
}

async fn apikey(pool: &store::Db, action: ApikeyAction, output: Output) -> anyhow::Result<()> {
    match action {
        ApikeyAction::Create { tenant, scope: KeyScope::Operator, label } => {
            if tenant.is_some() {
                anyhow::bail!("--tenant: an operator key belongs to no tenant");
            }
            let key = crate::flows::api_keys::create_operator_key(pool, label.as_deref()).await?;
            println!("{}", key.key.expose_secret());
            eprintln!("operator key id {}: store it now, it is not shown again", key.id);
            Ok(())
        }
        ApikeyAction::Create { tenant, scope, label } => {
            let Some(tenant) = tenant else {
                anyhow::bail!("--tenant: a {} key belongs to a tenant", scope.as_str());
            };
            let tenant = TenantId::parse(&tenant).map_err(|e| anyhow::anyhow!("--tenant: {e}"))?;
            if !store::tenants::tenant_exists(pool, &tenant).await? {
                anyhow::bail!(
                    "--tenant: tenant {tenant} is not in the database: list it under [[tenants]] in the configuration \
                     and run `mcp-connect migrate`, which writes the configured tenants"
                );
            }
            let key = crate::flows::api_keys::create_api_key(pool, &tenant, scope, label.as_deref()).await?;
            println!("{}", key.key.expose_secret());
            eprintln!(
                "key id {} for tenant {tenant}, scope {}: store it now, it is not shown again",
                key.id,
                scope.as_str()
            );
            Ok(())
        }
        ApikeyAction::List { tenant } => {
            let rows: Vec<KeyLine> = store::api_keys::list_api_keys(pool, parse_tenant(tenant)?.as_ref())
                .await?
                .into_iter()
                .map(|k| KeyLine {
                    id: k.id,
                    tenant: k.tenant_id,
                    scope: k.scope,
                    revoked: k.revoked_at.is_some(),
                    created_at: k.created_at,
                    last_used_at: k.last_used_at,
                    label: k.label,
                })
                .collect();
            print_rows(output, &rows, |k| {
                format!(
                    "{}\t{}\t{}\t{}\tcreated {}\tlast used {}\t{}",
                    k.id,
                    k.tenant.as_ref().map_or("(operator)", TenantId::as_str),
                    k.scope.as_str(),
                    if k.revoked { "revoked" } else { "active" },
                    k.created_at,
                    k.last_used_at.map_or_else(|| "never".to_owned(), |t| t.to_string()),
                    k.label.clone().unwrap_or_default()
                )
            })
        }
        ApikeyAction::Revoke { id } => {
            let id = ApiKeyId::parse(&id).map_err(|e| anyhow::anyhow!("id: {e}"))?;
            if crate::flows::api_keys::revoke_api_key(pool, &id).await?.is_none() {
                anyhow::bail!("no active key with id {id}");
            }
            println!("revoked {id}");
            Ok(())
        }
    }
}

/// One kill switch as `killswitch list` prints it.
#[derive(serde::Serialize)]
struct KillLine {
    provider: String,
    /// `None`: every tenant.
    tenant: Option<String>,
    mode: String,
    #[serde(with = "time::serde::rfc3339")]
    updated_at: time::OffsetDateTime,
    reason: Option<String>,
}

async fn killswitch(pool: &store::Db, action: KillAction, output: Output) -> anyhow::Result<()> {
    let (provider, tenant, mode, reason) = match action {
        KillAction::List => {
            let rows: Vec<KillLine> = store::kill_switches::list_kill_switches(pool, None)
                .await?
                .into_iter()
                .map(|k| KillLine {
                    provider: k.provider.to_string(),
                    tenant: k.tenant_id.map(|t| t.to_string()),
                    mode: k.mode.as_str().to_owned(),
                    updated_at: k.updated_at,
                    reason: k.reason,
                })
                .collect();
            return print_rows(output, &rows, |k| {
                format!(
                    "{}\t{}\t{}\t{}\t{}",
                    k.provider,
                    k.tenant.as_deref().unwrap_or("(all tenants)"),
                    k.mode,
                    k.updated_at,
                    k.reason.clone().unwrap_or_default()
                )
            });
        }
        KillAction::Set { provider, mode, tenant, reason } => (provider, parse_tenant(tenant)?, Some(mode), reason),
        KillAction::Clear { provider, tenant } => (provider, parse_tenant(tenant)?, None, None),
    };
    let provider = ProviderId::parse(&provider).map_err(|e| anyhow::anyhow!("provider: {e}"))?;
    if let Some(t) = &tenant
        && !store::tenants::tenant_exists(pool, t).await?
    {
        anyhow::bail!("--tenant: no tenant {t} in the database");
    }
    let change = KillSwitchChange { provider: &provider, mode, reason: reason.as_deref() };
    // No cache here: every serving instance hears of the change from the database.
    change_kill_switch(pool, None, Operator::Cli { tenant: tenant.as_ref() }, change).await.map_err(|e| match e {
        // The fault's text already holds its source: said once, not twice by `{:#}`.
        KillSwitchError::Fault(f) => anyhow::anyhow!("{f}"),
        refused => anyhow::anyhow!("--reason: {refused}"),
    })?;
    println!("{provider}: {}", KillMode::or_off(mode));
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{Cli, Command, KillAction};
    use crate::domain::KillMode;
    use clap::Parser;

    #[test]
    fn a_kill_mode_is_spelled_as_the_admin_api_spells_it_and_nothing_else() {
        let set = |word: &str| Cli::try_parse_from(["mcp-connect", "killswitch", "set", "github", word]);
        for (word, mode) in
            [("no_new_elicitations", KillMode::NoNewElicitations), ("no_token_handouts", KillMode::NoTokenHandouts)]
        {
            let cli = set(word).unwrap();
            assert!(
                matches!(cli.command, Command::Killswitch { action: KillAction::Set { mode: m, .. } } if m == mode),
                "{word}"
            );
        }
        for bad in ["no-new-elicitations", "NO_TOKEN_HANDOUTS", "off", ""] {
            assert_eq!(set(bad).unwrap_err().kind(), clap::error::ErrorKind::InvalidValue, "{bad:?}");
        }
    }
}
