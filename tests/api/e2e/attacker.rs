//! A page an attacker would serve to clickjack the consent page: our page in an iframe,
//! next to a frame of the attacker's own that shows frames do render in this browser.
//! It runs on 127.0.0.1 like the app, so it is the same *site* and the browser sends the
//! session cookie into the frame: only `frame-ancestors` stands between it and our page.

use actix_web::{App, HttpResponse, HttpServer, web};

pub struct Attacker {
    pub base: String,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Attacker {
    fn drop(&mut self) {
        // Stopping is a future; a dropped server only needs to stop accepting.
        drop(self.handle.stop(false));
    }
}

fn page(framed: &str) -> String {
    // `framed` is a URL this test made; it holds no quote or angle bracket to escape.
    assert!(!framed.contains(['"', '<', '>']), "{framed}");
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Win a prize</title>
<style>body{{font:16px sans-serif;margin:16px}} figure{{display:inline-block;vertical-align:top;margin:0 16px 0 0}} iframe{{width:580px;height:480px;border:3px solid #c00;display:block}}</style>
</head><body>
<h1>Click the big button to win a prize!</h1>
<figure><figcaption>The consent page, framed:</figcaption><iframe id="victim" src="{framed}"></iframe></figure>
<figure><figcaption>The attacker's own frame:</figcaption><iframe id="control" src="/inner"></iframe></figure>
</body></html>"#
    )
}

const INNER: &str =
    r#"<!doctype html><html lang="en"><body><p id="control-text">attacker's own frame</p></body></html>"#;

/// Serves `/` (the framing page) and `/inner` (the control frame) on a free loopback port.
pub fn start(framed: &str) -> Attacker {
    let html = page(framed);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let server = HttpServer::new(move || {
        let html = html.clone();
        App::new()
            .route(
                "/",
                web::get().to(move || {
                    let html = html.clone();
                    async move { HttpResponse::Ok().content_type("text/html; charset=utf-8").body(html) }
                }),
            )
            .route(
                "/inner",
                web::get().to(|| async { HttpResponse::Ok().content_type("text/html; charset=utf-8").body(INNER) }),
            )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    tokio::spawn(server);
    Attacker { base, handle }
}
