//! `mcp-connect dev`, run as a newcomer would: the real binary, its private PostgreSQL,
//! its built-in IdP and provider, and the walkthrough it prints, followed over HTTP.

use crate::browser::Browser;
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Dev {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
    }
}

fn read_env(path: &std::path::Path) -> Option<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

fn start_dev(with_database_url: Option<&str>) -> (Dev, HashMap<String, String>) {
    let dir = std::env::temp_dir().join(format!("mcpc-dev-test-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let env_file = dir.join("dev.env");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-connect"));
    cmd.args(["dev", "--port", "0", "--env-file"])
        .arg(&env_file)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("DATABASE_URL");
    if let Some(url) = with_database_url {
        cmd.env("DATABASE_URL", url);
    }
    let child = cmd.spawn().expect("the binary starts");
    let dev = Dev { child, dir };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(env) = read_env(&env_file).filter(|e| e.contains_key("DATABASE_URL")) {
            return (dev, env);
        }
        assert!(Instant::now() < deadline, "dev did not write its env file in 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The walkthrough the command prints: alice connects, bob is refused.
async fn walkthrough(env: &HashMap<String, String>) {
    let base = &env["MCP_CONNECT_URL"];
    let key = &env["MCP_CONNECT_SERVER_KEY"];
    let http = reqwest::Client::new();
    let ask = |body: serde_json::Value| {
        let http = http.clone();
        async move {
            let r = http.post(format!("{base}/v1/token")).bearer_auth(key).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let first = ask(serde_json::json!({"subject": "alice", "provider": "dev"})).await;
    assert_eq!(first["status"], "connect_required");
    let url = first["elicitation"]["url"].as_str().unwrap();
    let app = crate::helpers::BaseOnly(base.clone());
    let r = Browser::new().connect(&app, url, "alice", "alice-at-dev").await;
    assert_eq!(r.status(), 200);
    let again =
        ask(serde_json::json!({"subject": "alice", "provider": "dev", "elicitation_id": first["elicitation"]["id"]}))
            .await;
    assert_eq!(again["status"], "connected");
    assert_eq!(again["account"]["login"], "alice-at-dev");

    let carol = ask(serde_json::json!({"subject": "carol", "provider": "dev"})).await;
    let r = Browser::new().open(&app, carol["elicitation"]["url"].as_str().unwrap(), "bob").await;
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("made for another account"));
    let admin = http
        .get(format!("{base}/admin/v1/audit?kind=identity_mismatch"))
        .bearer_auth(&env["MCP_CONNECT_ADMIN_KEY"])
        .send()
        .await
        .unwrap();
    let audit: serde_json::Value = admin.json().await.unwrap();
    assert_eq!(audit["events"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn dev_with_its_own_postgres_runs_the_printed_walkthrough_and_stops_cleanly() {
    let (dev, env) = start_dev(None);
    walkthrough(&env).await;
    let db_url = env["DATABASE_URL"].clone();
    let port = url::Url::parse(&db_url).unwrap().port().unwrap();
    let dir = dev.dir.clone();
    drop(dev);
    // The private cluster is stopped with the command.
    let out = Command::new("pg_isready").args(["-h", "127.0.0.1", "-p", &port.to_string()]).output();
    if let Ok(o) = out {
        assert!(!o.status.success(), "the private PostgreSQL still answers after dev stopped");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn dev_uses_database_url_when_it_is_set() {
    let db = crate::helpers::create_database().await;
    let (dev, env) = start_dev(Some(&db));
    assert_eq!(env["DATABASE_URL"], db);
    walkthrough(&env).await;
    assert!(!dev.dir.join("data").join("pg").exists());
}

#[tokio::test]
async fn dev_without_postgres_binaries_says_what_to_install() {
    let dir = std::env::temp_dir().join(format!("mcpc-dev-nopg-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
        .args(["dev", "--port", "0"])
        .current_dir(&dir)
        .env_remove("DATABASE_URL")
        .env("PATH", "/nonexistent")
        .env("MCP_CONNECT_POSTGRES_PREFIXES", "/nonexistent")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("apt-get install postgresql") && err.contains("DATABASE_URL") && err.contains("docker compose"),
        "{err}"
    );
}
