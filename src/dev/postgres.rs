//! A private PostgreSQL cluster for `dev` (and for tests that must stop and start a
//! database): found on PATH or under the usual prefixes, made with a random password,
//! stopped and removed when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

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
