//! The `mcp-connect` binary run as operators run it, on a test's database and providers:
//! a one-shot command ([`run`]), or `serve` as a process of its own ([`Served`]).

use super::{Options, TestApp, config_env, config_text, free_port, poll, register};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Runs the binary with the test configuration on `db_url` (providers are never contacted
/// by these commands, so their URLs point nowhere).
pub(crate) fn run(db_url: &str, toml: Option<&str>, args: &[&str]) -> Output {
    run_without(db_url, toml, args, &[])
}

/// [`run`] with some of the test configuration's variables left out.
pub(crate) fn run_without(db_url: &str, toml: Option<&str>, args: &[&str], left_out: &[&str]) -> Output {
    let opts = Options::default();
    let nowhere = "http://127.0.0.1:9";
    let text = match toml {
        Some(t) => t.to_owned(),
        None => config_text("http://127.0.0.1:8080", nowhere, nowhere, &opts).unwrap(),
    };
    let config = std::env::temp_dir().join(format!("mcpc-cli-{}.toml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
        .args(args)
        .arg("--config")
        .arg(&config)
        .env_remove("DATABASE_URL")
        .envs(config_env(db_url, &opts).into_iter().filter(|(k, _)| !left_out.contains(k)))
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&config);
    out
}

/// `mcp-connect serve` on a port of its own, on the database and providers of `app` (an
/// in-process instance the test uses to seed keys and connections).
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) base: String,
    pub(crate) config: std::path::PathBuf,
    pub(crate) env: Vec<(String, String)>,
}

impl Served {
    /// What the process wrote to stderr (its log) so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.config.with_extension("log")).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
        let _ = std::fs::remove_file(self.config.with_extension("log"));
    }
}

pub(crate) async fn serve(app: &TestApp, extra_env: &[(&str, &str)]) -> Served {
    serve_on(app, free_port(), extra_env).await
}

/// [`serve`] on a given port: a restart on the same port keeps the URLs registered at the
/// providers and the links already handed out.
pub(crate) async fn serve_on(app: &TestApp, port: u16, extra_env: &[(&str, &str)]) -> Served {
    let base = format!("http://127.0.0.1:{port}");
    register(&base, &app.idp, &app.provider);
    let opts = Options::default();
    let config = std::env::temp_dir().join(format!("mcpc-serve-{}.toml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&config, config_text(&base, &app.idp.issuer(), &app.provider.issuer(), &opts).unwrap()).unwrap();
    let mut env: Vec<(String, String)> =
        config_env(&app.db_url, &opts).into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    env.push(("MCP_CONNECT_LISTEN".into(), format!("127.0.0.1:{port}")));
    env.push(("MCP_CONNECT_LOG".into(), "warn".into()));
    env.extend(extra_env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let child = Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
        .args(["serve", "--config"])
        .arg(&config)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(config.with_extension("log")).unwrap())
        .spawn()
        .unwrap();
    let served = Served { child, base, config, env };
    let ready =
        || async { app.client.get(format!("{}/readyz", served.base)).send().await.is_ok_and(|r| r.status() == 200) };
    crate::support::eventually(Duration::from_secs(20), "mcp-connect serve is ready", ready).await;
    served
}

pub(crate) async fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let exited = poll(within, || std::future::ready(child.try_wait().unwrap().ok_or(()))).await;
    exited.unwrap_or_else(|()| panic!("serve did not exit within {within:?}"))
}

pub(crate) async fn handouts(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT coalesce(sum(count), 0)::bigint FROM audit_events WHERE kind = 'token_handed_out'")
        .fetch_one(&app.pool)
        .await
        .unwrap()
}
