//! `mcp-connect dev`, run as a newcomer would: the real binary, its private PostgreSQL,
//! its built-in IdP and provider, and the walkthrough it prints, followed over HTTP.

use crate::support::browser::Browser;
use crate::support::{eventually_ok, free_port, poll_blocking};
use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::Duration;

pub(crate) struct Dev {
    child: Child,
    pub(crate) dir: std::path::PathBuf,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let exited = poll_blocking(Duration::from_secs(20), || match self.child.try_wait() {
            Ok(Some(_)) => Ok(()),
            _ => Err(()),
        });
        if exited.is_err() {
            let _ = self.child.kill();
        }
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
    start_dev_in(with_database_url, None, &[])
}

/// `dev` from a fresh folder (mode `mode` where given), with its defaults for the cluster.
/// `extra` arguments are added; the command's output goes to `stdout.txt` in its folder.
pub(crate) fn start_dev_in(
    with_database_url: Option<&str>,
    mode: Option<u32>,
    extra: &[&str],
) -> (Dev, HashMap<String, String>) {
    let dir = std::env::temp_dir().join(format!("mcpc-dev-test-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let env_file = dir.join("dev.env");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-connect"));
    let stdout = std::fs::File::create(dir.join("stdout.txt")).unwrap();
    cmd.args(["dev", "--port", "0", "--env-file"])
        .arg(&env_file)
        .args(extra)
        .current_dir(&dir)
        .stdout(stdout)
        .stderr(std::fs::File::create(dir.join("stderr.txt")).unwrap())
        .env_remove("DATABASE_URL");
    if let Some(url) = with_database_url {
        cmd.env("DATABASE_URL", url);
    }
    let child = cmd.spawn().expect("the binary starts");
    let dev = Dev { child, dir };
    let written = poll_blocking(Duration::from_secs(60), || {
        read_env(&env_file).filter(|e| e.contains_key("DATABASE_URL")).ok_or(())
    });
    (dev, written.expect("dev writes its env file within 60 s"))
}

/// The walkthrough the command prints: alice connects, bob is refused.
async fn walkthrough(env: &HashMap<String, String>) {
    let base = &env["MCP_CONNECT_URL"];
    let key = &env["MCP_CONNECT_API_KEY"];
    // One vocabulary: the env file writes what the docs and the SDKs' from_env read.
    assert_eq!(&env["MCP_CONNECT_SERVER_KEY"], key, "the earlier name, the same key");
    let state_key = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &env["MCP_STATE_KEY"]);
    assert_eq!(state_key.map(|k| k.len()).ok(), Some(32), "a requestState key, 32 bytes in standard base64");
    assert_eq!(env["MCP_ISSUER"], env["MCP_CONNECT_DEV_IDP_URL"]);
    assert_eq!(env["MCP_PROVIDERS"], format!("dev={}", env["MCP_CONNECT_DEV_PROVIDER_USERINFO_URL"]));
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
    let app = crate::support::BaseOnly(base.clone());
    let r = Browser::new().connect(&app, url, "alice", "alice-at-dev").await;
    assert_eq!(r.status(), 200);
    let again =
        ask(serde_json::json!({"subject": "alice", "provider": "dev", "elicitation_id": first["elicitation"]["id"]}))
            .await;
    assert_eq!(again["status"], "connected");
    assert_eq!(again["account"]["login"], "alice-at-dev");

    // The API-key provider of the walkthrough: the form on our page, the key checked.
    let keyed = ask(serde_json::json!({"subject": "alice", "provider": "devkeys"})).await;
    let browser = Browser::new();
    let page = browser.open(&app, keyed["elicitation"]["url"].as_str().unwrap(), "alice").await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    let form = [
        ("csrf", crate::support::browser::form_value(&page, "csrf")),
        ("e", crate::support::browser::form_value(&page, "e")),
        ("api_key", "devkey-alice".to_owned()),
    ];
    let r = browser.client.post(format!("{base}/connect/devkeys/credential")).form(&form).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let key_answer = ask(
        serde_json::json!({"subject": "alice", "provider": "devkeys", "elicitation_id": keyed["elicitation"]["id"]}),
    )
    .await;
    assert_eq!(
        (key_answer["credential_type"].as_str(), key_answer["access_token"].as_str()),
        (Some("api_key"), Some("devkey-alice"))
    );

    let carol = ask(serde_json::json!({"subject": "carol", "provider": "dev"})).await;
    let r = Browser::new().open(&app, carol["elicitation"]["url"].as_str().unwrap(), "bob").await;
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("made for another account"));
    // Listed once every transaction begun before it has ended (other tests' too).
    let audit = eventually_ok(Duration::from_secs(5), "the identity mismatch is listed", || async {
        let admin = http
            .get(format!("{base}/admin/v1/audit?kind=identity_mismatch"))
            .bearer_auth(&env["MCP_CONNECT_ADMIN_KEY"])
            .send()
            .await
            .unwrap();
        let audit: serde_json::Value = admin.json().await.unwrap();
        if audit["events"].as_array().unwrap().is_empty() { Err(audit) } else { Ok(audit) }
    })
    .await;
    assert_eq!(audit["events"].as_array().unwrap().len(), 1, "{audit}");
    // The platform's operator key of the env file adds a tenant, as the walkthrough says
    // (a new id each time: a test may run the walkthrough twice on one database).
    let id = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let made = http
        .post(format!("{base}/operator/v1/tenants"))
        .bearer_auth(&env["MCP_CONNECT_OPERATOR_KEY"])
        .json(&serde_json::json!({"id": id, "display_name": "Acme", "providers": ["dev"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
}

#[tokio::test]
async fn dev_with_its_own_postgres_runs_the_printed_walkthrough_and_stops_cleanly() {
    let (dev, env) = start_dev(None);
    walkthrough(&env).await;
    let db_url = env["DATABASE_URL"].clone();
    let port = url::Url::parse(&db_url).unwrap().port().unwrap();
    let dir = dev.dir.clone();
    drop(dev);
    // A quiet stop: nothing on the way out reads like a fault (the change listener once
    // warned "terminating connection due to administrator command").
    let stderr = std::fs::read_to_string(dir.join("stderr.txt")).unwrap();
    let after = &stderr[stderr.find("shutting down").expect("it says it is shutting down")..];
    assert!(!after.contains("WARN") && !after.contains("ERROR"), "{after}");
    // The private cluster is stopped with the command.
    let out = Command::new("pg_isready").args(["-h", "127.0.0.1", "-p", &port.to_string()]).output();
    if let Ok(o) = out {
        assert!(!o.status.success(), "the private PostgreSQL still answers after dev stopped");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The MCP side of the demo: an access token from the dev IdP's dev grant, for the MCP
/// server's URL (RFC 9728: the protected resource's identifier is a URL).
async fn mcp_token_audience(env: &HashMap<String, String>) -> String {
    let r = dev_grant(env, "alice", None).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    let jwt = body["access_token"].as_str().unwrap();
    use base64::Engine;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(jwt.split('.').nth(1).unwrap()).unwrap();
    let claims: serde_json::Value = serde_json::from_slice(&claims).unwrap();
    assert_eq!(claims["sub"], "alice");
    claims["aud"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn dev_mints_mcp_tokens_for_the_mcp_servers_url() {
    let db = crate::support::create_database().await;
    let (_dev, env) = start_dev(Some(&db.url));
    assert_eq!(env["MCP_CONNECT_DEV_MCP_URL"], "http://127.0.0.1:8090/mcp");
    let aud = mcp_token_audience(&env).await;
    assert_eq!(aud, env["MCP_CONNECT_DEV_MCP_URL"]);
    // A URL, as the example MCP server (`auth::check_resource`) and RFC 9728 clients demand.
    let u = url::Url::parse(&aud).unwrap();
    assert_eq!((u.scheme(), u.host_str(), u.path()), ("http", Some("127.0.0.1"), "/mcp"));
}

#[tokio::test]
async fn dev_runs_from_a_folder_only_its_owner_can_enter_and_cleans_up() {
    // As root (the tests run as root in CI), the cluster runs as `postgres`, which cannot
    // enter this folder: dev must put the cluster elsewhere and run it from there.
    let (dev, env) = start_dev_in(None, Some(0o700), &[]);
    walkthrough(&env).await;
    // Ours is the cluster whose postmaster.pid names the port of the DATABASE_URL.
    let port = url::Url::parse(&env["DATABASE_URL"]).unwrap().port().unwrap().to_string();
    let cluster: Vec<std::path::PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("mcp-connect-dev-")))
        .filter(|p| {
            std::fs::read_to_string(p.join("pg").join("postmaster.pid"))
                .is_ok_and(|pid| pid.lines().nth(3) == Some(port.as_str()))
        })
        .collect();
    assert_eq!(cluster.len(), 1, "the private cluster lives in a folder of its own under the temp directory");
    assert!(!dev.dir.join(".mcp-connect-dev").exists(), "nothing is written into the checkout");
    let dir = dev.dir.clone();
    drop(dev);
    assert!(!cluster[0].exists(), "{} is removed on exit", cluster[0].display());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn dev_uses_database_url_when_it_is_set() {
    let db = crate::support::create_database().await;
    let (dev, env) = start_dev(Some(&db.url));
    assert_eq!(env["DATABASE_URL"], db.url);
    walkthrough(&env).await;
    assert!(!dev.dir.join(".mcp-connect-dev").exists());
}

#[tokio::test]
async fn dev_with_webhook_echo_prints_each_event_it_verified() {
    let db = crate::support::create_database().await;
    let (dev, env) = start_dev_in(Some(&db.url), None, &["--webhook-echo"]);
    walkthrough(&env).await;
    let out = dev.dir.join("stdout.txt");
    let text = eventually_ok(Duration::from_secs(20), "a verified connection.created printed", || async {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        // The walkthrough connects two providers (`dev` and `devkeys`); their events may
        // arrive in either order: wait for the `dev` one.
        let created = text.lines().any(|l| {
            l.starts_with("webhook (signature verified): ")
                && l.contains(r#""type":"connection.created""#)
                && l.contains(r#""account_login":"alice-at-dev""#)
        });
        if created { Ok(text) } else { Err(text) }
    })
    .await;
    let verified: Vec<&str> = text.lines().filter(|l| l.starts_with("webhook (signature verified): ")).collect();
    assert!(text.contains("Webhooks: every event of the dev tenant goes to http://127.0.0.1:"), "{text}");
    let created = verified
        .iter()
        .find(|l| l.contains("connection.created") && l.contains(r#""account_login":"alice-at-dev""#))
        .unwrap();
    assert!(created.contains(r#""subject":"alice""#) && created.contains(r#""account_login":"alice-at-dev""#));
    assert!(!text.contains("REFUSED"), "{text}");
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

/// A dev-grant token for `subject`, for `resource` when given (RFC 8707), else the first.
pub(crate) async fn dev_grant(
    env: &HashMap<String, String>,
    subject: &str,
    resource: Option<&str>,
) -> reqwest::Response {
    let mut form = vec![("grant_type", "urn:mcp-connect:dev:subject"), ("subject", subject)];
    form.extend(resource.map(|r| ("resource", r)));
    reqwest::Client::new()
        .post(format!("{}/token", env["MCP_CONNECT_DEV_IDP_URL"]))
        .basic_auth("mcp-connect-dev", Some(&env["MCP_CONNECT_DEV_IDP_CLIENT_SECRET"]))
        .form(&form)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn dev_serves_two_mcp_servers_side_by_side_on_ports_it_is_told() {
    let db = crate::support::create_database().await;
    let (idp, provider, metrics) = (free_port(), free_port(), free_port());
    let (first, second) = ("http://127.0.0.1:8091/mcp", "http://127.0.0.1:8092/mcp");
    let ports = [idp, provider, metrics].map(|p| p.to_string());
    let args = [
        "--idp-port",
        &ports[0],
        "--provider-port",
        &ports[1],
        "--metrics-port",
        &ports[2],
        "--mcp-url",
        first,
        "--mcp-url",
        second,
    ];
    let (_dev, env) = start_dev_in(Some(&db.url), None, &args);
    // The ports asked for, in the env file.
    assert_eq!(env["MCP_CONNECT_DEV_IDP_URL"], format!("http://127.0.0.1:{idp}"));
    assert_eq!(env["MCP_CONNECT_DEV_PROVIDER_URL"], format!("http://127.0.0.1:{provider}"));
    assert_eq!(env["MCP_CONNECT_METRICS_URL"], format!("http://127.0.0.1:{metrics}/metrics"));
    assert_eq!((env["MCP_CONNECT_DEV_MCP_URL"].as_str(), env["MCP_CONNECT_DEV_MCP_URL_2"].as_str()), (first, second));

    // Each server's tokens name its URL: the first by default, the second by resource=.
    let token = |r: reqwest::Response| async move {
        assert_eq!(r.status(), 200);
        r.json::<serde_json::Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned()
    };
    let (for_first, for_second) =
        (token(dev_grant(&env, "alice", None).await).await, token(dev_grant(&env, "alice", Some(second)).await).await);
    let aud = |jwt: &str| {
        use base64::Engine;
        let c = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(jwt.split('.').nth(1).unwrap()).unwrap();
        serde_json::from_slice::<serde_json::Value>(&c).unwrap()["aud"].as_str().unwrap().to_owned()
    };
    assert_eq!((aud(&for_first), aud(&for_second)), (first.to_owned(), second.to_owned()));
    // A resource it does not serve is refused, not given another audience.
    let other = dev_grant(&env, "alice", Some("http://127.0.0.1:9/mcp")).await;
    assert_eq!(other.status(), 400);
    assert_eq!(other.json::<serde_json::Value>().await.unwrap()["error"], "invalid_target");

    // Each server is its own tenant with its own key; a user's token proves the subject at
    // the server it was minted for, and only there.
    let ask = |key: String, subject_token: String| {
        let base = env["MCP_CONNECT_URL"].clone();
        async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/token"))
                .bearer_auth(key)
                .json(&serde_json::json!({"subject": "alice", "provider": "dev", "subject_token": subject_token}))
                .send()
                .await
                .unwrap()
        }
    };
    let (key1, key2) = (env["MCP_CONNECT_API_KEY"].clone(), env["MCP_CONNECT_API_KEY_2"].clone());
    assert_ne!(key1, key2);
    for (key, t) in [(&key1, &for_first), (&key2, &for_second)] {
        let r = ask(key.clone(), t.clone()).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "connect_required");
    }
    let crossed = ask(key2, for_first).await;
    assert_eq!(crossed.status(), 403, "the first server's token at the second");
    assert_eq!(crossed.json::<serde_json::Value>().await.unwrap()["error"], "subject_token_audience");
}
