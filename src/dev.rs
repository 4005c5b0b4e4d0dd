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
    /// The MCP server's URL (its RFC 9728 resource identifier): the dev IdP mints MCP
    /// access tokens for this audience.
    #[arg(long, default_value = DEFAULT_MCP_URL)]
    pub mcp_url: url::Url,
    /// Run a webhook receiver on loopback, registered for every event of the dev tenant:
    /// it checks each delivery's signature (the official `standardwebhooks` crate) and
    /// prints the event.
    #[arg(long)]
    pub webhook_echo: bool,
}

/// A private PostgreSQL cluster, stopped when this is dropped (and its folder removed when
/// we made it). Public for tests that must stop and start a database (never the shared one
/// other tests use at the same time).
pub struct PrivatePostgres {
    bin: PathBuf,
    pub data: PathBuf,
    /// The folder to remove on exit (one we made under the temp directory).
    owned_root: Option<PathBuf>,
    as_postgres_user: bool,
    started: bool,
    port: u16,
    /// `postgres://postgres:<password>@127.0.0.1:<port>/postgres`: a random password
    /// (scram-sha-256), so that nobody else on the machine gets in.
    pub url: String,
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.started {
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
        if let Some(root) = &self.owned_root
            && let Err(e) = std::fs::remove_dir_all(root)
        {
            eprintln!("could not remove {}: {e}", root.display());
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
        // Run from the cluster's folder, not ours: as the postgres user, initdb and pg_ctl
        // fail when they cannot enter the working directory (a checkout under /root).
        if let Some(dir) = self.data.parent() {
            c.current_dir(dir);
        }
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

impl PrivatePostgres {
    /// Makes and starts a fresh cluster in `data_dir`, or in a folder of its own under the
    /// temp directory.
    pub fn start(data_dir: Option<&Path>) -> anyhow::Result<PrivatePostgres> {
        start_private_postgres(data_dir)
    }

    /// Stops the server (fast shutdown: sessions are ended, as in a failover).
    pub fn stop_server(&mut self) -> anyhow::Result<()> {
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D").arg(&self.data).args(["stop", "-m", "fast", "-w"]);
        run(cmd, "pg_ctl stop")?;
        self.started = false;
        Ok(())
    }

    /// Starts the server again on the same port and data.
    pub fn start_server(&mut self) -> anyhow::Result<()> {
        let mut start = self.command("pg_ctl");
        start
            .arg("-D")
            .arg(&self.data)
            .arg("-o")
            .arg(format!("-p {} -c listen_addresses=127.0.0.1 -k {}", self.port, self.data.display()))
            .arg("-l")
            .arg(self.data.join("server.log"))
            .args(["-w", "start"]);
        self.started = true;
        run(start, "pg_ctl start")
    }
}

fn start_private_postgres(data_dir: Option<&Path>) -> anyhow::Result<PrivatePostgres> {
    let Some(bin) = find_postgres_bin() else {
        anyhow::bail!(
            "no PostgreSQL server binaries (initdb, pg_ctl) found on PATH or under /usr/lib/postgresql/*/bin.\n\
             Install them (Debian/Ubuntu: `apt-get install postgresql`; macOS: `brew install postgresql`),\n\
             or set DATABASE_URL to a database you have, or start one with `docker compose up -d db`."
        );
    };
    let (root, owned_root) = match data_dir {
        Some(d) => (std::path::absolute(d)?, None),
        None => {
            let d = std::env::temp_dir().join(format!("mcp-connect-dev-{}", crate::crypto::random_token(8)));
            (d.clone(), Some(d))
        }
    };
    let data = root.join("pg");
    if data.exists() {
        std::fs::remove_dir_all(&data)?;
    }
    std::fs::create_dir_all(&data)?;
    let as_postgres_user = is_root();
    let port = free_port()?;
    // Password authentication, on the socket too: `trust` on 127.0.0.1 would let every
    // user and process of the machine in. initdb reads the password from a file, gone
    // once it has.
    let password = crate::crypto::random_token(24);
    let pwfile = root.join("pwfile");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        opts.open(&pwfile)?.write_all(password.as_bytes())?;
    }
    let mut pg = PrivatePostgres {
        bin,
        data: data.clone(),
        owned_root,
        as_postgres_user,
        started: false,
        port,
        url: format!("postgres://postgres:{password}@127.0.0.1:{port}/postgres"),
    };
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
    let mut initdb = pg.command("initdb");
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=scram-sha-256", "-E", "UTF8", "--no-instructions"])
        .arg(format!("--pwfile={}", pwfile.display()));
    let made = run(initdb, "initdb");
    std::fs::remove_file(&pwfile)?;
    made?;
    pg.start_server()?;
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
[metrics]
listen = "127.0.0.1:0"
[webhooks]
allow_loopback = true
poll_interval_ms = 500
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
    let _logs = crate::telemetry::init(crate::config::LogFormat::Text, None);
    let private_pg;
    let database_url = match crate::config::process_env("DATABASE_URL") {
        Some(url) => url,
        None => {
            private_pg = start_private_postgres(args.data_dir.as_deref())?;
            eprintln!("started a private PostgreSQL in {}", private_pg.data.display());
            private_pg.url.clone()
        }
    };

    let listener = TcpListener::bind(("127.0.0.1", args.port))
        .map_err(|e| anyhow::anyhow!("cannot listen on 127.0.0.1:{}: {e} (try --port 0)", args.port))?;
    let base = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
    let secret = crate::crypto::random_token(32);
    let (idp, provider) = start_dev_providers(&base, &secret, &args.mcp_url).await?;

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
    let metrics_url = app.metrics_port().map(|p| format!("http://127.0.0.1:{p}/metrics")).unwrap_or_default();
    let key = |scope| dev_key(&app, scope);
    let (server_key, admin_key) = (key(KeyScope::Server).await?, key(KeyScope::Admin).await?);
    let echo = if args.webhook_echo { Some(start_webhook_echo(&app).await?) } else { None };

    write_env_file(
        &args.env_file,
        &[
            ("MCP_CONNECT_URL", base.as_str()),
            ("MCP_CONNECT_SERVER_KEY", &server_key),
            ("MCP_CONNECT_ADMIN_KEY", &admin_key),
            ("MCP_CONNECT_DEV_IDP_URL", &idp.base_url()),
            ("MCP_CONNECT_DEV_IDP_CLIENT_ID", "mcp-connect-dev"),
            ("MCP_CONNECT_DEV_IDP_CLIENT_SECRET", &secret),
            ("MCP_CONNECT_DEV_MCP_URL", args.mcp_url.as_str()),
            ("MCP_CONNECT_DEV_PROVIDER_URL", &provider.base_url()),
            ("MCP_CONNECT_METRICS_URL", &metrics_url),
            ("DATABASE_URL", &database_url),
        ],
    )?;
    print_walkthrough(&base, &args.env_file, &args.mcp_url, &metrics_url);
    if let Some(url) = &echo {
        println!("Webhooks: every event of the dev tenant goes to {url}; verified ones are printed here.\n");
    }
    tokio::select! {
        r = app.run_until_stopped() => r?,
        _ = shutdown_signal() => eprintln!("\nshutting down"),
    }
    drop(provider);
    drop(idp);
    Ok(())
}

/// The dev IdP (minting MCP access tokens for `mcp_url`) and the dev provider, each with
/// mcp-connect registered as a client under `secret`.
async fn start_dev_providers(
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

/// A fresh API key of the dev tenant.
async fn dev_key(app: &Application, scope: KeyScope) -> anyhow::Result<String> {
    let tenant = TenantId::parse("dev").map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = crate::flows::api_keys::create_api_key(&app.state().pool, &tenant, scope, Some("dev")).await?;
    Ok(key.key.expose_secret().to_owned())
}

/// `--webhook-echo`: binds a receiver on loopback, registers it for every event of the dev
/// tenant (as `POST /admin/v1/webhooks` does), and serves it: each delivery is verified with
/// the official `standardwebhooks` crate and printed, or refused with 400. Returns its URL.
async fn start_webhook_echo(app: &Application) -> anyhow::Result<String> {
    use actix_web::{HttpRequest, HttpResponse, web};
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let url = format!("http://127.0.0.1:{}/webhooks", listener.local_addr()?.port());
    let state = app.state();
    let kinds: Vec<String> = crate::webhooks::EventKind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
    let r = crate::flows::webhooks::check_registration(
        &url,
        &kinds,
        Some("mcp-connect dev --webhook-echo"),
        state.webhook_policy,
    )?;
    let (_, secret) = crate::flows::webhooks::register(&state, "dev", &r, "dev").await?;
    let hook = std::sync::Arc::new(
        standardwebhooks::Webhook::new(secret.expose_secret()).map_err(|e| anyhow::anyhow!("echo secret: {e:?}"))?,
    );
    let server = actix_web::HttpServer::new(move || {
        let hook = hook.clone();
        actix_web::App::new().route(
            "/webhooks",
            web::post().to(move |req: HttpRequest, body: web::Bytes| {
                let hook = hook.clone();
                async move {
                    let mut headers = http::HeaderMap::new();
                    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
                        if let Some(v) =
                            req.headers().get(name).and_then(|v| http::HeaderValue::from_bytes(v.as_bytes()).ok())
                        {
                            headers.insert(name, v);
                        }
                    }
                    match hook.verify(&body, &headers) {
                        Ok(()) => {
                            println!("webhook (signature verified): {}", String::from_utf8_lossy(&body));
                            HttpResponse::NoContent().finish()
                        }
                        Err(e) => {
                            println!("webhook REFUSED ({e:?})");
                            HttpResponse::BadRequest().finish()
                        }
                    }
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    tokio::spawn(server);
    Ok(url)
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

/// Writes the env file (it holds keys and secrets) readable by its owner only: into a new
/// file of mode 0600 beside it, then renamed over it. An existing file's looser mode is not
/// kept (opening it with `mode` would), and a symbolic link at the path is replaced, never
/// followed to write somewhere else.
fn write_env_file(path: &Path, vars: &[(&str, &str)]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut text = String::from("# Written by `mcp-connect dev`: development values, valid while it runs.\n");
    for (k, v) in vars {
        text.push_str(&format!("{k}={v}\n"));
    }
    let named = |e: std::io::Error| anyhow::anyhow!("--env-file {}: {e}", path.display());
    let name = path.file_name().ok_or_else(|| anyhow::anyhow!("--env-file {}: not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", crate::crypto::random_token(6)));
    let tmp = path.with_file_name(tmp_name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let written =
        opts.open(&tmp).and_then(|mut f| f.write_all(text.as_bytes())).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(named(e));
    }
    Ok(())
}

fn print_walkthrough(base: &str, env_file: &Path, mcp_url: &url::Url, metrics_url: &str) {
    let env = env_file.display();
    // `.` needs a path with a slash to read a file rather than search PATH: `./` before a
    // relative one, an absolute one as it is.
    let source = if env_file.is_absolute() { env.to_string() } else { format!("./{env}") };
    let mcp_public = mcp_url.origin().ascii_serialization();
    let mcp_listen =
        format!("{}:{}", mcp_url.host_str().unwrap_or("127.0.0.1"), mcp_url.port_or_known_default().unwrap_or(8090));
    println!(
        r#"
mcp-connect dev is running on {base}  (development keys: nothing here is for real use)
Values for scripts are in {env}.

Try it (in another terminal):

  set -a; . {source}; set +a

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

  # People see and end their connections at {base}/connections (signed in as alice).
  # Operators: curl -s -H "Authorization: Bearer $MCP_CONNECT_ADMIN_KEY" $MCP_CONNECT_URL/admin/v1/audit
  # Webhooks: start dev with --webhook-echo to see each event, verified, in this terminal.
  # Metrics (Prometheus text, on their own port): curl -s {metrics_url}

The MCP side: run the example MCP server against this demo (its resource is {mcp_url}):

  MCP_LISTEN={mcp_listen} MCP_PUBLIC_URL={mcp_public} MCP_ISSUER=$MCP_CONNECT_DEV_IDP_URL \
  MCP_CONNECT_URL=$MCP_CONNECT_URL MCP_CONNECT_API_KEY=$MCP_CONNECT_SERVER_KEY \
  MCP_STATE_KEY=$(openssl rand -base64 32) MCP_PROVIDERS=dev=$MCP_CONNECT_DEV_PROVIDER_URL/userinfo \
    cargo run -p mcp-connect-example-server

  # An MCP access token for alice (the dev IdP's dev-only grant; its audience is {mcp_url}):
  curl -s -u mcp-connect-dev:$MCP_CONNECT_DEV_IDP_CLIENT_SECRET \
       -d grant_type=urn:mcp-connect:dev:subject -d subject=alice $MCP_CONNECT_DEV_IDP_URL/token
  #    Give its access_token to your MCP client as the bearer token for {mcp_url}.

Press Ctrl-C to stop (the private PostgreSQL stops with it).
"#
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::write_env_file;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_env_file_is_owner_only_even_when_it_existed_and_a_symlink_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("mcpc-envfile-{}", crate::crypto::random_token(6)));
        std::fs::create_dir_all(&dir).unwrap();
        // An existing file, readable by everyone: rewritten 0600.
        let existing = dir.join("dev.env");
        std::fs::write(&existing, "old").unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_env_file(&existing, &[("K", "secret")]).unwrap();
        assert_eq!(mode(&existing), 0o600);
        assert!(std::fs::read_to_string(&existing).unwrap().contains("K=secret"));
        // A symbolic link to another file: that file is not written; the link is replaced.
        let target = dir.join("elsewhere");
        std::fs::write(&target, "keep me").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.join("linked.env");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_env_file(&link, &[("K", "secret")]).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(mode(&link), 0o600);
        // No temporary file is left.
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 3, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
