//! The service under test as a separate process: the release `mcp-connect serve` binary
//! with a generated configuration file and the secrets in its environment, exactly as an
//! operator runs it, so that its memory can be read from `/proc/<pid>/status`.

use crate::http1::{Conn, Target};
use anyhow::{Context, bail};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// What every instance shares: binary, database, key, providers.
#[derive(Debug, Clone)]
pub struct ServiceSetup {
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub database_url: String,
    pub vault_keys: String,
    pub idp_issuer: String,
    pub provider_base: String,
    pub providers: Vec<String>,
    /// `MCP_CONNECT_LOG` for the service; `None` keeps the product default (info).
    pub log_filter: Option<String>,
    /// `[cache] max_age_seconds`; `None` keeps the product default.
    pub cache_max_age: Option<u64>,
    /// `[cache] capacity` (entries); `None` keeps the product default (200,000).
    pub cache_capacity: Option<usize>,
    /// More environment for the service (allocator knobs and the like).
    pub extra_env: Vec<(String, String)>,
    /// An API origin every provider's proxy may reach (`/echo`, `/large`), with the
    /// tenant's proxy rate lifted out of the way (the proxy phase).
    pub proxy_upstream: Option<String>,
    /// A `[vault]` section (the key-store rows: `pkcs11`, `aws-kms`); `None`: the keyring.
    pub vault_toml: Option<String>,
}

pub const IDP_CLIENT: &str = "mcp-connect-bench";
pub const IDP_SECRET: &str = "bench-idp-secret";

pub fn client_id(provider: &str) -> String {
    format!("{provider}-client")
}

pub fn client_secret(provider: &str) -> String {
    format!("{provider}-bench-secret")
}

pub struct Service {
    child: tokio::process::Child,
    pub pid: u32,
    pub addr: SocketAddr,
    pub name: String,
    log: PathBuf,
}

/// Memory of the process, from `/proc/<pid>/status`, in KiB.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl ServiceSetup {
    fn config_toml(&self, port: u16) -> String {
        let mut t = format!(
            r#"public_base_url = "http://127.0.0.1:{port}"
listen = "127.0.0.1:{port}"
log_format = "json"
[idp]
issuer = "{idp}"
client_id = "{IDP_CLIENT}"
[[tenants]]
id = "{tenant}"
display_name = "Bench"
providers = [{list}]
"#,
            idp = self.idp_issuer,
            tenant = crate::db::TENANT,
            list = self.providers.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", "),
        );
        if self.cache_max_age.is_some() || self.cache_capacity.is_some() {
            t.push_str("[cache]\n");
        }
        if let Some(age) = self.cache_max_age {
            t.push_str(&format!("max_age_seconds = {age}\n"));
        }
        if let Some(capacity) = self.cache_capacity {
            t.push_str(&format!("capacity = {capacity}\n"));
        }
        for p in &self.providers {
            t.push_str(&format!(
                r#"[providers.{p}]
template = "oauth2"
display_name = "Bench provider {p}"
authorize_url = "{base}/authorize"
token_url = "{base}/token"
revocation_url = "{base}/revoke"
client_id = "{client}"
scopes = ["read"]
"#,
                base = self.provider_base,
                client = client_id(p),
            ));
            if let Some(upstream) = &self.proxy_upstream {
                t.push_str(&format!(
                    "[providers.{p}.proxy]\norigins = [\"{upstream}\"]\npaths = [\"/echo\", \"/large\"]\n"
                ));
            }
        }
        if let Some(vault) = &self.vault_toml {
            t.push_str(vault);
        }
        if self.proxy_upstream.is_some() {
            // Every request is still checked against both buckets (the check's cost is
            // measured); the tenant's is set above what two cores can send. The default
            // per-connection rate holds: the load spreads over every connection.
            t.push_str("[proxy]\nper_tenant_per_second = 100000\nper_tenant_burst = 100000\n");
        }
        t
    }

    /// Starts `mcp-connect serve` and waits until `/readyz` answers 200 and, with the
    /// cache on, until its change listener is ready (the log line says so).
    pub async fn start(&self, name: &str, cache_enabled: bool) -> anyhow::Result<Service> {
        let port = free_port()?;
        let config = self.dir.join(format!("{name}.toml"));
        tokio::fs::write(&config, self.config_toml(port)).await?;
        let log = self.dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log)?;
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.arg("serve").arg("--config").arg(&config);
        // A clean environment for the service: only what this bench decides.
        for (k, _) in std::env::vars() {
            if k.starts_with("MCP_CONNECT_") || k == "DATABASE_URL" {
                cmd.env_remove(k);
            }
        }
        cmd.env("MCP_CONNECT_DATABASE_URL", &self.database_url)
            .env("MCP_CONNECT_VAULT_KEYS", &self.vault_keys)
            .env("MCP_CONNECT_IDP_CLIENT_SECRET", IDP_SECRET)
            .env("MCP_CONNECT_CACHE_ENABLED", if cache_enabled { "true" } else { "false" })
            // No load balancer to tell: stop serving at once on SIGTERM.
            .env("MCP_CONNECT_SHUTDOWN_DRAIN_SECONDS", "0");
        for p in &self.providers {
            cmd.env(format!("MCP_CONNECT_PROVIDER_{}_CLIENT_SECRET", p.to_ascii_uppercase()), client_secret(p));
        }
        if let Some(f) = &self.log_filter {
            // The cache's "ready" line is how the bench knows the listener hears.
            cmd.env("MCP_CONNECT_LOG", format!("{f},mcp_connect::cache=info"));
        }
        cmd.envs(self.extra_env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null()).stdout(log_file.try_clone()?).stderr(log_file).kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("cannot start {}", self.binary.display()))?;
        let pid = child.id().context("service exited at once")?;
        let mut service =
            Service { child, pid, addr: SocketAddr::from(([127, 0, 0, 1], port)), name: name.to_owned(), log };
        if let Err(e) = service.wait_ready(cache_enabled).await {
            let tail = service.log_tail(20).await;
            service.stop().await;
            bail!("{name} did not become ready: {e:#}\n--- service log (tail) ---\n{tail}");
        }
        Ok(service)
    }
}

impl Service {
    async fn wait_ready(&mut self, cache_enabled: bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let target = Target::token(self.addr, "");
        let readyz = target.get_request("/readyz");
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the service exited: {status}");
            }
            if let Ok(mut c) = Conn::connect(self.addr).await
                && let Ok(r) = c.send(&readyz).await
                && r.status == 200
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("/readyz did not answer 200 within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if cache_enabled {
            while !self.log_contains("caches serving").await {
                if Instant::now() > deadline {
                    bail!("the cache listener did not report ready within 30 s");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    async fn log_contains(&self, needle: &str) -> bool {
        tokio::fs::read_to_string(&self.log).await.map(|s| s.contains(needle)).unwrap_or(false)
    }

    pub async fn log_tail(&self, lines: usize) -> String {
        let text = tokio::fs::read_to_string(&self.log).await.unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Lines in the service log at WARN or above (JSON log format).
    /// The service's WARN and ERROR log lines.
    pub async fn warnings(&self) -> Vec<String> {
        let text = tokio::fs::read_to_string(&self.log).await.unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(r#""level":"WARN""#) || l.contains(r#""level":"ERROR""#))
            .map(str::to_owned)
            .collect()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn memory(&self) -> anyhow::Result<Memory> {
        memory_of(self.pid)
    }

    /// SIGTERM, as a deploy stops it: the service writes the hand-out audit it still holds
    /// and exits by itself (killed if it has not within a minute).
    pub async fn stop(mut self) {
        let _ = tokio::process::Command::new("kill").args(["-TERM", &self.pid.to_string()]).status().await;
        if tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

/// The memory of process `pid`, from `/proc/<pid>/status`.
pub fn memory_of(pid: u32) -> anyhow::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{name} missing in /proc/{pid}/status"))
    };
    Ok(Memory { rss_kib: field("VmRSS:")?, hwm_kib: field("VmHWM:")? })
}
