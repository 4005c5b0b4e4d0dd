//! `dev --webhook-echo`: a receiver on loopback that verifies and prints each delivery.

use crate::startup::Application;
use secrecy::ExposeSecret;
use std::net::TcpListener;

/// `--webhook-echo`: binds a receiver on loopback, registers it for every event of the dev
/// tenant (as `POST /admin/v1/webhooks` does), and serves it: each delivery is verified with
/// the official `standardwebhooks` crate and printed, or refused with 400. Returns its URL.
pub(super) async fn start_webhook_echo(app: &Application) -> anyhow::Result<String> {
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
    let dev = crate::domain::TenantId::parse("dev")?;
    // No API key made this registration (the audit event names none).
    let (_, secret) = crate::flows::webhooks::register(&state.pool, &state.keys, &dev, &r, None).await?;
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
