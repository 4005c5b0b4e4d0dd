//! A webhook receiver for the tests: a real HTTP server on loopback that records every
//! delivery (headers, body, when) and answers 204, or 503 while it is "down"; and the
//! check of deliveries with PyPI's official `standardwebhooks` verifier.

use super::{TestApp, eventually_ok};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    /// What the receiver answered.
    pub answered: u16,
}

impl Delivery {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

#[derive(Default)]
struct Shared {
    down: AtomicBool,
    /// Answer 503 to bodies that hold this text.
    refusing: Mutex<Option<String>>,
    got: Mutex<Vec<Delivery>>,
    /// Answer only after this long (a receiver that is slow but succeeds).
    delay: Mutex<Duration>,
}

pub struct Receiver {
    pub url: String,
    shared: Arc<Shared>,
}

impl Receiver {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}/hooks", listener.local_addr().unwrap().port());
        let s = shared.clone();
        let server = actix_web::HttpServer::new(move || {
            let s = s.clone();
            actix_web::App::new().default_service(actix_web::web::to(
                move |req: actix_web::HttpRequest, body: actix_web::web::Bytes| {
                    let s = s.clone();
                    async move {
                        let header =
                            |n: &str| req.headers().get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                        let text = String::from_utf8(body.to_vec()).unwrap();
                        let refused = s.refusing.lock().unwrap().as_deref().is_some_and(|r| text.contains(r));
                        let answered = if s.down.load(Ordering::SeqCst) || refused { 503 } else { 204 };
                        s.got.lock().unwrap().push(Delivery {
                            id: header("webhook-id"),
                            timestamp: header("webhook-timestamp"),
                            signature: header("webhook-signature"),
                            body: text,
                            answered,
                        });
                        let delay = *s.delay.lock().unwrap();
                        // Fixed sleep kept: a deliberately slow receiver (`set_delay`).
                        tokio::time::sleep(delay).await;
                        actix_web::HttpResponse::build(actix_web::http::StatusCode::from_u16(answered).unwrap())
                            // A long answer: at most 1 KB of it may be kept.
                            .body(if answered == 503 {
                                format!("down for maintenance{}", "!".repeat(5000))
                            } else {
                                String::new()
                            })
                    }
                },
            ))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        tokio::spawn(server);
        Self { url, shared }
    }

    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Answers every request only after `delay` (recorded when it arrives).
    pub fn set_delay(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// Answers 503 to every delivery whose body holds `text` (`None`: to none).
    pub fn refuse_holding(&self, text: Option<&str>) {
        *self.shared.refusing.lock().unwrap() = text.map(str::to_owned);
    }

    /// Every request, in arrival order.
    pub fn all(&self) -> Vec<Delivery> {
        self.shared.got.lock().unwrap().clone()
    }

    /// The deliveries it accepted, once per `webhook-id` (the first), in arrival order.
    pub fn accepted(&self) -> Vec<Delivery> {
        let mut seen = std::collections::HashSet::new();
        self.all().into_iter().filter(|d| d.answered == 204 && seen.insert(d.id.clone())).collect()
    }

    /// Waits until `n` distinct events were accepted; returns them.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Delivery> {
        eventually_ok(within, &format!("{n} events accepted"), || async {
            let got = self.accepted();
            if got.len() >= n { Ok(got) } else { Err(Value::from_iter(got.iter().map(|d| d.json()["type"].clone()))) }
        })
        .await
    }
}

/// Registers `url` for `events` with `admin_key`; returns the endpoint's id and secret.
pub async fn register(app: &TestApp, admin_key: &str, url: &str, events: &[&str]) -> (String, String) {
    let r = app
        .client
        .post(format!("{}/admin/v1/webhooks", app.base))
        .bearer_auth(admin_key)
        .json(&json!({"url": url, "events": events, "description": "test receiver"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let b: Value = r.json().await.unwrap();
    (b["id"].as_str().unwrap().to_owned(), b["secret"].as_str().unwrap().to_owned())
}

/// Each delivery checked by PyPI's `standardwebhooks` (timestamps within its 5 minutes of
/// now): `ok`, or the verifier's error.
pub async fn python_verdicts(secret: &str, deliveries: &[Delivery]) -> Vec<String> {
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
secret = sys.argv[1]
out = []
for d in json.load(sys.stdin):
    try:
        Webhook(secret).verify(d["body"], {"webhook-id": d["id"], "webhook-timestamp": d["ts"], "webhook-signature": d["sig"]})
        out.append("ok")
    except Exception as e:
        out.append(f"{type(e).__name__}: {e}")
print(json.dumps(out))
"#;
    let input: Vec<Value> =
        deliveries.iter().map(|d| json!({"body": d.body, "id": d.id, "ts": d.timestamp, "sig": d.signature})).collect();
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv-mcp/bin/python");
    let mut child = tokio::process::Command::new(python)
        .args(["-c", script, secret])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, serde_json::to_string(&input).unwrap().as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Asserts that `standardwebhooks` accepts every delivery under `secret`.
pub async fn assert_verified(secret: &str, deliveries: &[Delivery]) {
    let verdicts = python_verdicts(secret, deliveries).await;
    assert_eq!(verdicts.len(), deliveries.len());
    assert!(verdicts.iter().all(|v| v == "ok"), "{verdicts:?}");
}

/// Cancels elicitation `id` as the MCP client would (`reason`: `cancel` or `decline`),
/// which queues an `elicitation.cancelled` event.
pub async fn cancel(app: &TestApp, id: &str, reason: &str) {
    let r = app
        .client
        .post(format!("{}/v1/elicitations/{id}/cancel", app.base))
        .bearer_auth(&app.key)
        .json(&json!({ "reason": reason }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// The endpoint's deliveries as `GET /admin/v1/webhooks/{id}/deliveries` lists them.
pub async fn deliveries(app: &TestApp, webhook: &str) -> Vec<Value> {
    let r = app.admin(reqwest::Method::GET, &format!("/webhooks/{webhook}/deliveries"), None).await;
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    b["deliveries"].as_array().unwrap().clone()
}
