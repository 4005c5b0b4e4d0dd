//! Trust stores: outbound HTTPS to a peer whose certificate was issued by a CA made in the
//! test (a real TLS server: Python's `http.server` under `ssl`) fails, and succeeds once
//! `outbound.ca_file` names that CA.

use crate::support::receiver::{cancel, deliveries, register};
use crate::support::{Options, TestApp, eventually, spawn_app, spawn_app_with};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

/// A CA and a certificate it issued for 127.0.0.1, as PEM files in a directory of their own.
struct Pki {
    dir: std::path::PathBuf,
}

impl Pki {
    fn make() -> Self {
        let dir = std::env::temp_dir().join(format!("mcpc-pki-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "mcp-connect test CA");
        ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let mut leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        leaf.distinguished_name.push(rcgen::DnType::CommonName, "127.0.0.1");
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
        std::fs::write(dir.join("server.pem"), leaf_cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), leaf_key.serialize_pem()).unwrap();
        Self { dir }
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTPS webhook receiver on 127.0.0.1 with the PKI's server certificate: answers 204 to
/// every POST and notes its path.
struct TlsReceiver {
    child: Child,
    url: String,
    posts: Arc<Mutex<Vec<String>>>,
}

const SERVER: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        print("POST " + self.path, flush=True)
        self.send_response(204)
        self.end_headers()
    def log_message(self, *args):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print("PORT %d" % s.server_address[1], flush=True)
s.serve_forever()
"#;

impl TlsReceiver {
    fn start(pki: &Pki) -> Self {
        let mut child = Command::new("python3")
            .args(["-c", SERVER, &pki.file("server.pem"), &pki.file("server.key")])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the TLS receiver");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let port = first.strip_prefix("PORT ").expect("the receiver says its port");
        let posts = Arc::new(Mutex::new(Vec::new()));
        let seen = posts.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                seen.lock().unwrap().push(line);
            }
        });
        Self { child, url: format!("https://127.0.0.1:{port}/hooks"), posts }
    }

    fn posts(&self) -> Vec<String> {
        self.posts.lock().unwrap().clone()
    }
}

impl Drop for TlsReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn cancel_a_link(app: &TestApp) {
    let (id, _) = app.elicit("alice", "testp").await;
    cancel(app, &id, "cancel").await;
}

#[tokio::test]
async fn a_receiver_on_a_private_ca_is_reached_only_once_outbound_ca_file_trusts_it() {
    let pki = Pki::make();
    let receiver = TlsReceiver::start(&pki);

    // Not trusted: the attempt fails at TLS, and nothing reaches the receiver.
    let app = spawn_app().await;
    let (webhook, _) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    cancel_a_link(&app).await;
    eventually(WAIT, "an attempt is recorded", || async {
        deliveries(&app, &webhook).await.first().is_some_and(|d| !d["last_error"].is_null())
    })
    .await;
    let d = &deliveries(&app, &webhook).await[0];
    assert_eq!(d["status"], "pending", "{d}");
    assert!(receiver.posts().is_empty(), "nothing reached the receiver: {:?}", receiver.posts());

    // Trusted through `outbound.ca_file`: delivered.
    let ca_file = pki.file("ca.pem");
    let trusting = spawn_app_with(Options {
        patch: vec![("[outbound]\n", format!("[outbound]\nca_file = \"{ca_file}\"\n"))],
        ..Options::default()
    })
    .await;
    let (webhook, _) = register(&trusting, &trusting.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    cancel_a_link(&trusting).await;
    eventually(WAIT, "the receiver got the event", || async { receiver.posts() == ["POST /hooks"] }).await;
    eventually(WAIT, "the delivery is recorded as delivered", || async {
        deliveries(&trusting, &webhook).await.first().is_some_and(|d| d["status"] == "delivered")
    })
    .await;
}

#[tokio::test]
async fn a_ca_file_that_is_missing_or_not_pem_is_refused_at_start_naming_the_setting() {
    let pki = Pki::make();
    let not_pem = pki.file("server.key");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    for path in [pki.file("missing.pem"), not_pem] {
        let opts = Options {
            patch: vec![("[outbound]\n", format!("[outbound]\nca_file = \"{path}\"\n"))],
            ..Options::default()
        };
        let text =
            mcp_connect_testkit::config_text("https://x.example", "https://idp.example", "https://p.example", &opts)
                .unwrap();
        let env = mcp_connect_testkit::config_env("postgres://localhost/x", &opts);
        let e = mcp_connect::config::Config::from_toml(&text, &|k| env.get(k).cloned()).unwrap_err();
        assert!(e.to_string().contains("outbound.ca_file"), "{e}");
    }
}
