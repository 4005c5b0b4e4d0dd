//! A KMS for the aws-kms key-store tests: moto's server on loopback (tests/kms/moto_kms.py,
//! in `.venv-moto`, which `scripts/test` installs), one per test, with a symmetric key and
//! the alias `alias/mcp-connect` to it. Stopped with SIGSTOP (requests hang, as at a KMS
//! that does not answer) and resumed with SIGCONT; its state lives in its process only, which
//! is killed when the test drops it (SIGKILL ends a stopped process too).

use mcp_connect::vault::kek::aws_kms::AwsKmsSettings;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

pub const REGION: &str = "eu-central-1";

pub struct Kms {
    child: tokio::process::Child,
    _stdin: tokio::process::ChildStdin,
    pub endpoint: String,
    /// The key the alias names at start.
    pub arn: String,
    pub alias: String,
    /// The credentials' secret, in a file, for `[vault.aws_kms] secret_access_key_file`.
    secret_file: std::path::PathBuf,
}

impl Kms {
    pub async fn start() -> Kms {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let python = root.join(".venv-moto/bin/python");
        assert!(
            python.exists(),
            "moto is not installed: scripts/test installs .venv-moto (tests/moto-requirements.txt)"
        );
        let mut child = tokio::process::Command::new(python)
            .arg(root.join("tests/kms/moto_kms.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start moto_kms.py");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("moto became ready within 60 s")
            .unwrap()
            .expect("moto_kms.py ended before it was ready (its stderr is above)");
        let ready: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ready["ready"], true, "{line}");
        let secret_file = std::env::temp_dir().join(format!("kms-secret-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&secret_file, "testing").unwrap();
        Kms {
            child,
            _stdin: stdin,
            endpoint: ready["endpoint"].as_str().unwrap().to_owned(),
            arn: ready["arn"].as_str().unwrap().to_owned(),
            alias: ready["alias"].as_str().unwrap().to_owned(),
            secret_file,
        }
    }

    /// `[vault]` for the service: this KMS, the key by its alias.
    pub fn toml(&self) -> String {
        format!(
            "[vault]\nstore = \"aws-kms\"\n[vault.aws_kms]\nkey_id = {:?}\nregion = {REGION:?}\nendpoint = {:?}\naccess_key_id = \"testing\"\nsecret_access_key_file = {:?}\n",
            self.alias, self.endpoint, self.secret_file
        )
    }

    pub fn settings(&self) -> AwsKmsSettings {
        AwsKmsSettings {
            key_id: self.alias.clone(),
            region: REGION.to_owned(),
            endpoint: Some(self.endpoint.parse().unwrap()),
            credentials: Some(("testing".to_owned(), secrecy::SecretString::from("testing".to_owned()))),
        }
    }

    /// An SDK client of this KMS, to act as its administrator.
    pub async fn admin(&self) -> aws_sdk_kms::Client {
        let config = aws_sdk_kms::config::Builder::new()
            .behavior_version(aws_sdk_kms::config::BehaviorVersion::latest())
            .region(aws_sdk_kms::config::Region::new(REGION))
            .endpoint_url(&self.endpoint)
            .credentials_provider(aws_sdk_kms::config::Credentials::new("testing", "testing", None, None, "test"))
            .http_client(
                aws_smithy_http_client::Builder::new()
                    .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                        aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                    ))
                    .build_https(),
            )
            .build();
        aws_sdk_kms::Client::from_conf(config)
    }

    /// A new key, and the alias pointed at it: a KEK rotation as an operator makes one.
    pub async fn rotate_alias(&self) -> String {
        let admin = self.admin().await;
        let key = admin.create_key().key_usage(aws_sdk_kms::types::KeyUsageType::EncryptDecrypt).send().await.unwrap();
        let arn = key.key_metadata().unwrap().arn().unwrap().to_owned();
        admin.update_alias().alias_name(&self.alias).target_key_id(&arn).send().await.unwrap();
        arn
    }

    /// Every key and alias gone (moto's reset): what they wrapped unwraps no more.
    pub async fn remove_every_key(&self) {
        let r = reqwest::Client::new().post(format!("{}/moto-api/reset", self.endpoint)).send().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("moto runs").to_string();
        let out = std::process::Command::new("kill").args([signal, &pid]).output().unwrap();
        assert!(out.status.success(), "kill {signal} {pid}");
    }

    /// Requests hang until [`Kms::resume`].
    pub fn stop(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for Kms {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.secret_file);
    }
}
