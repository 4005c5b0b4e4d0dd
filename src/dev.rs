//! `mcp-connect dev`: everything on loopback for a first try. A private PostgreSQL (unless
//! `DATABASE_URL` is set), throwaway development keys, a built-in dev identity provider and
//! dev downstream provider (real OAuth/OIDC servers on their own ports), a dev tenant with
//! fresh API keys, a dotenv file for scripts, and a printed walkthrough. Nothing here is
//! reachable from `serve`.

use crate::config::Config;
use crate::domain::{KeyScope, TenantId};
use crate::startup::Application;
use crate::vault::Keyring;
use mcp_connect_devproviders::{ClientRegistration, DevProvider, DevProviderConfig, Role};
use secrecy::ExposeSecret;
use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The audience of the dev IdP's JWT access tokens, for an MCP server that validates them.
pub const DEV_MCP_AUDIENCE: &str = "urn:mcp-connect:dev-mcp-server";

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Port of the service on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Where to write the values a script needs (service URL, keys, provider URLs).
    #[arg(long, default_value = ".mcp-connect-dev.env")]
    pub env_file: PathBuf,
    /// Folder for the private PostgreSQL cluster (made anew on every start).
    #[arg(long, default_value = ".mcp-connect-dev")]
    pub data_dir: PathBuf,
}

/// A private PostgreSQL cluster, stopped when this is dropped.
struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    as_postgres_user: bool,
    url: String,
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D").arg(&self.data).args(["stop", "-m", "fast", "-w"]);
        match cmd.output() {
            Ok(o) if o.status.success() => eprintln!("stopped the private PostgreSQL"),
            Ok(o) => eprintln!(
                "could not stop the private PostgreSQL in {}: {}",
                self.data.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => eprintln!("could not stop the private PostgreSQL in {}: {e}", self.data.display()),
        }
    }
}

impl PrivatePostgres {
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        let mut c = if self.as_postgres_user {
            // PostgreSQL refuses to run as root; run it as the system's postgres user.
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        // Its own process group: Ctrl-C in the terminal reaches only us, and we stop the
        // cluster in order instead of it dying under a half-started service.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c
    }
}

/// Finds PostgreSQL's server binaries: on PATH, then under the usual install prefixes.
fn find_postgres_bin() -> Option<PathBuf> {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has(&dir) {
                return Some(dir);
            }
        }
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    // Overridable so the "nothing installed" message can be tested on a machine that has it.
    let prefixes = std::env::var("MCP_CONNECT_POSTGRES_PREFIXES")
        .unwrap_or_else(|_| "/usr/lib/postgresql:/usr/local/pgsql:/opt/homebrew/opt:/usr/local/opt".to_owned());
    for prefix in prefixes.split(':') {
        if let Ok(entries) = std::fs::read_dir(prefix) {
            for e in entries.flatten() {
                candidates.push(e.path().join("bin"));
            }
        }
        candidates.push(PathBuf::from(prefix).join("bin"));
    }
    // Newest version first (directories are named by version).
    candidates.sort_by_key(|p| std::cmp::Reverse(version_of(p)));
    candidates.into_iter().find(|d| has(d))
}

fn version_of(p: &Path) -> u32 {
    p.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn run(mut cmd: Command, what: &str) -> anyhow::Result<()> {
    let out = cmd.output().map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    if !out.status.success() {
        anyhow::bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn start_private_postgres(data_dir: &Path) -> anyhow::Result<PrivatePostgres> {
    let Some(bin) = find_postgres_bin() else {
        anyhow::bail!(
            "no PostgreSQL server binaries (initdb, pg_ctl) found on PATH or under /usr/lib/postgresql/*/bin.\n\
             Install them (Debian/Ubuntu: `apt-get install postgresql`; macOS: `brew install postgresql`),\n\
             or set DATABASE_URL to a database you have, or start one with `docker compose up -d db`."
        );
    };
    let root = std::fs::canonicalize(".")?.join(data_dir);
    let data = root.join("pg");
    if data.exists() {
        std::fs::remove_dir_all(&data)?;
    }
    std::fs::create_dir_all(&data)?;
    let as_postgres_user = is_root();
    if as_postgres_user {
        run(
            {
                let mut c = Command::new("chown");
                c.args(["-R", "postgres:postgres"]).arg(&root);
                c
            },
            "chown of the data folder to postgres",
        )?;
    }
    let port = free_port()?;
    let mut pg = PrivatePostgres { bin, data: data.clone(), as_postgres_user, url: String::new() };
    let mut initdb = pg.command("initdb");
    initdb.arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"]);
    run(initdb, "initdb")?;
    let mut start = pg.command("pg_ctl");
    start
        .arg("-D")
        .arg(&data)
        .arg("-o")
        .arg(format!("-p {port} -c listen_addresses=127.0.0.1 -k {}", data.display()))
        .arg("-l")
        .arg(data.join("server.log"))
        .args(["-w", "start"]);
    run(start, "pg_ctl start")?;
    pg.url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    Ok(pg)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The service's configuration for the demo, as TOML (so it is the same parser `serve` uses).
fn dev_toml(base: &str, idp: &str, provider: &str) -> String {
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
[[tenants]]
id = "dev"
display_name = "Dev Assistant"
providers = ["dev"]
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

pub async fn run_dev(args: DevArgs) -> anyhow::Result<()> {
    let _logs = crate::telemetry::init(crate::config::LogFormat::Text);
    let private_pg;
    let database_url = match crate::config::process_env("DATABASE_URL") {
        Some(url) => url,
        None => {
            eprintln!("starting a private PostgreSQL in {} ...", args.data_dir.join("pg").display());
            private_pg = start_private_postgres(&args.data_dir)?;
            private_pg.url.clone()
        }
    };

    let listener = TcpListener::bind(("127.0.0.1", args.port))
        .map_err(|e| anyhow::anyhow!("cannot listen on 127.0.0.1:{}: {e} (try --port 0)", args.port))?;
    let base = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
    let secret = crate::crypto::random_token(32);
    let client = |redirect: String| ClientRegistration {
        client_id: "mcp-connect-dev".to_owned(),
        client_secret: secret.clone(),
        redirect_uris: vec![redirect],
    };
    let idp = DevProvider::start(DevProviderConfig {
        display_name: "Dev Identity Provider".to_owned(),
        role: Role::IdentityProvider,
        clients: vec![client(format!("{base}/login/callback"))],
        jwt_access_token_audience: Some(DEV_MCP_AUDIENCE.to_owned()),
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

    // Development keys: random, in memory only, gone when this process ends.
    let vault_keys = Keyring::generate_entry("dev-only");
    let env: HashMap<&str, String> = HashMap::from([
        ("MCP_CONNECT_DATABASE_URL", database_url.clone()),
        ("MCP_CONNECT_VAULT_KEYS", vault_keys),
        ("MCP_CONNECT_IDP_CLIENT_SECRET", secret.clone()),
        ("MCP_CONNECT_PROVIDER_DEV_CLIENT_SECRET", secret.clone()),
    ]);
    let config = Config::from_toml(&dev_toml(&base, &idp.issuer(), &provider.issuer()), &|k| env.get(k).cloned())?;
    let app = Application::build_with_listener(config, listener).await?;
    let state = app.state();
    let tenant = TenantId::parse("dev").map_err(|e| anyhow::anyhow!("{e}"))?;
    let server_key = crate::cli::create_api_key(&state.pool, &tenant, KeyScope::Server, Some("dev")).await?;
    let admin_key = crate::cli::create_api_key(&state.pool, &tenant, KeyScope::Admin, Some("dev")).await?;
    let server_key = server_key.key.expose_secret().to_owned();
    let admin_key = admin_key.key.expose_secret().to_owned();

    write_env_file(
        &args.env_file,
        &[
            ("MCP_CONNECT_URL", base.as_str()),
            ("MCP_CONNECT_SERVER_KEY", &server_key),
            ("MCP_CONNECT_ADMIN_KEY", &admin_key),
            ("MCP_CONNECT_DEV_IDP_URL", &idp.base_url()),
            ("MCP_CONNECT_DEV_IDP_CLIENT_ID", "mcp-connect-dev"),
            ("MCP_CONNECT_DEV_IDP_CLIENT_SECRET", &secret),
            ("MCP_CONNECT_DEV_MCP_AUDIENCE", DEV_MCP_AUDIENCE),
            ("MCP_CONNECT_DEV_PROVIDER_URL", &provider.base_url()),
            ("DATABASE_URL", &database_url),
        ],
    )?;
    print_walkthrough(&base, &args.env_file);
    tokio::select! {
        r = app.run_until_stopped() => r?,
        _ = shutdown_signal() => eprintln!("\nshutting down"),
    }
    drop(provider);
    drop(idp);
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn write_env_file(path: &Path, vars: &[(&str, &str)]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut text = String::from("# Written by `mcp-connect dev`: development values, valid while it runs.\n");
    for (k, v) in vars {
        text.push_str(&format!("{k}={v}\n"));
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(|e| anyhow::anyhow!("--env-file {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

fn print_walkthrough(base: &str, env_file: &Path) {
    let env = env_file.display();
    println!(
        r#"
mcp-connect dev is running on {base}  (development keys: nothing here is for real use)
Values for scripts are in {env}.

Try it (in another terminal):

  set -a; . ./{env}; set +a

  # 1. An MCP server asks for alice's token at the dev provider:
  curl -s -H "Authorization: Bearer $MCP_CONNECT_SERVER_KEY" -H 'content-type: application/json' \
       -d '{{"subject":"alice","provider":"dev"}}' $MCP_CONNECT_URL/v1/token

  # 2. Open the "url" it printed in a browser. Sign in at the Dev Identity Provider as: alice
  #    Click Connect on the consent page, then Allow at the Dev Provider.

  # 3. The retried tool call asks again, with the elicitation id from step 1:
  curl -s -H "Authorization: Bearer $MCP_CONNECT_SERVER_KEY" -H 'content-type: application/json' \
       -d '{{"subject":"alice","provider":"dev","elicitation_id":"<id from step 1>"}}' $MCP_CONNECT_URL/v1/token
  #    -> "status":"connected" with the token.

  # Now try the phishing case: make a new link (step 1 with "subject":"carol"), open it,
  # and sign in as bob. The page refuses: the link was made for another account.

  # Operators: curl -s -H "Authorization: Bearer $MCP_CONNECT_ADMIN_KEY" $MCP_CONNECT_URL/admin/v1/audit

Press Ctrl-C to stop (the private PostgreSQL stops with it).
"#
    );
}
