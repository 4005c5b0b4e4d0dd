//! A real PgBouncer (the machine's package: Debian 12's is 1.18) in transaction mode in
//! front of the test server, on a port of its own, for the tests behind a connection pooler.
//! `scripts/test` installs the package; PgBouncer refuses to run as root, so as root it is
//! run as `postgres` (`setpriv`, which execs: the child is PgBouncer itself).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PgBouncer {
    dir: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

/// Where the package puts it, or the `PATH`'s.
fn binary() -> PathBuf {
    let packaged = Path::new("/usr/sbin/pgbouncer");
    if packaged.exists() { packaged.to_owned() } else { PathBuf::from("pgbouncer") }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

impl PgBouncer {
    /// Starts PgBouncer in transaction mode before the server of `server_url` (host and
    /// port; every database, the same user, trust), `pool_size` server sessions per
    /// database and user.
    pub fn start(server_url: &str, pool_size: u32) -> PgBouncer {
        let server = url::Url::parse(server_url).expect("the server URL");
        let (host, port) = (server.host_str().unwrap_or("127.0.0.1").to_owned(), server.port().unwrap_or(5432));
        let user = if server.username().is_empty() { "postgres".to_owned() } else { server.username().to_owned() };
        let dir = std::env::temp_dir().join(format!("mcpc-pgbouncer-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let listen_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let ini = format!(
            "[databases]\n* = host={host} port={port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {listen_port}\n\
             unix_socket_dir =\nauth_type = trust\nauth_file = {dir}/userlist.txt\npool_mode = transaction\n\
             default_pool_size = {pool_size}\nmax_client_conn = 1000\n\
             ignore_startup_parameters = extra_float_digits\nlogfile = {dir}/pgbouncer.log\npidfile = {dir}/pgbouncer.pid\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).unwrap();
        std::fs::File::create(dir.join("userlist.txt"))
            .unwrap()
            .write_all(format!("\"{user}\" \"\"\n").as_bytes())
            .unwrap();
        if is_root() {
            // PgBouncer (as postgres) writes its log and pid file here.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let mut bouncer = PgBouncer { dir, port: listen_port, child: None };
        bouncer.run();
        bouncer
    }

    /// The URL of database `name` through PgBouncer.
    pub fn url(&self, database_url: &str) -> String {
        let mut u = url::Url::parse(database_url).expect("the database URL");
        u.set_host(Some("127.0.0.1")).unwrap();
        u.set_port(Some(self.port)).unwrap();
        u.to_string()
    }

    fn run(&mut self) {
        let ini = self.dir.join("pgbouncer.ini");
        let mut cmd = if is_root() {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"]).arg(binary());
            c
        } else {
            Command::new(binary())
        };
        cmd.arg(&ini).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} (scripts/test installs pgbouncer): {e}", binary().display()));
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("pgbouncer ended ({status}): {}", self.log());
            }
            assert!(started.elapsed() < Duration::from_secs(10), "pgbouncer is not listening: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// PgBouncer's own log, for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Killed at once (every client and server connection cut), as a crash or a pod's end.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
