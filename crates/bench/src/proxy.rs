//! The proxy's rows (issue 42): a proxied `GET` against the same request sent straight to
//! the upstream, with the same load generator and concurrency (cache on); the latency the
//! proxy adds at one connection; and the service's memory while a 10 MiB answer streams
//! through it to a slow reader (nothing may be buffered whole).
//!
//! The upstream is an actix-web server this process starts on loopback (one worker):
//! `GET /echo` answers a 300-byte JSON body (about a provider's user document), `GET
//! /large` 10 MiB in 64 KiB chunks. It does no work of its own, so the ratio to it is the
//! proxy's whole cost on this machine.

use crate::bare::BareServer;
use crate::http1::{Ask, Target};
use crate::load::{self, KeySpace, Summary};
use crate::phase::Phase;
use crate::progress;
use crate::service::{Memory, Service};
use anyhow::Context;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The large answer's size.
const LARGE: usize = 10 << 20;
const CHUNK: usize = 64 << 10;
/// The slow reader's pause after each read: 10 MiB take it about two seconds.
const READ_PAUSE: Duration = Duration::from_millis(5);
/// Subjects the proxied load spreads over (× the providers): each connection then gets a
/// few requests a second, under the per-connection rate a tenant has by default.
const SUBJECTS: usize = 2_000;
/// Seconds of the one-connection latency phases.
const LATENCY_SECONDS: u64 = 3;

/// A user document of about the size GitHub's `/user` answers without its URLs.
const ECHO_BODY: &str = r#"{"login":"octocat","id":583231,"node_id":"MDQ6VXNlcjU4MzIzMQ==","type":"User","site_admin":false,"name":"The Octocat","company":"@github","blog":"https://github.blog","location":"San Francisco","email":null,"hireable":null,"bio":null,"public_repos":8,"followers":9000,"following":9}"#;

#[derive(Debug, Clone, Serialize)]
pub struct ProxyRun {
    /// Saturating closed loops, same connections and threads: straight to the upstream,
    /// then through the proxy.
    pub direct: Summary,
    pub proxied: Summary,
    /// proxied ÷ direct requests/s.
    pub ratio: f64,
    /// One connection, closed loop: the latency without load.
    pub direct_one: Summary,
    pub proxied_one: Summary,
    /// proxied p50 − direct p50 at one connection, in ms.
    pub added_p50_ms: f64,
    pub stream: StreamRun,
    pub service_warnings: usize,
    pub first_service_warning: Option<String>,
}

/// A 10 MiB answer through the proxy to a reader that takes about two seconds.
#[derive(Debug, Clone, Serialize)]
pub struct StreamRun {
    pub bytes: usize,
    pub seconds: f64,
    pub memory_before: Memory,
    /// The highest VmRSS sampled (every 10 ms) while the answer streamed.
    pub peak_rss_kib: u64,
    /// peak − before, in MiB.
    pub rss_growth_mib: f64,
}

/// The upstream: one worker, `/echo` and `/large`.
fn upstream() -> anyhow::Result<BareServer> {
    BareServer::start("upstream", 1, |c| {
        c.route("/echo", actix_web::web::get().to(echo)).route("/large", actix_web::web::get().to(large));
    })
}

async fn echo() -> actix_web::HttpResponse {
    actix_web::HttpResponse::Ok().content_type("application/json").body(ECHO_BODY)
}

/// `LARGE` bytes, or `?mib=N` MiB.
async fn large(req: actix_web::HttpRequest) -> actix_web::HttpResponse {
    let size = req.query_string().strip_prefix("mib=").and_then(|n| n.parse::<usize>().ok()).map_or(LARGE, |n| n << 20);
    let chunk = bytes::Bytes::from(vec![b'x'; CHUNK]);
    let chunks = futures_util::stream::iter((0..size / CHUNK).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    actix_web::HttpResponse::Ok().content_type("application/octet-stream").no_chunking(size as u64).streaming(chunks)
}

impl Phase<'_> {
    /// The upstream, then one instance (cache on) whose providers may proxy to it: the
    /// direct and proxied loads; then a fresh instance for the streamed answer, so that
    /// the loads' memory does not hide its growth.
    pub async fn proxy(&self) -> anyhow::Result<ProxyRun> {
        let upstream = upstream()?;
        let setup = crate::service::ServiceSetup { proxy_upstream: Some(upstream.origin()), ..self.setup.clone() };
        let keys = KeySpace { subjects: SUBJECTS.min(self.keys.subjects), providers: self.keys.providers };
        let (conns, threads, seconds) =
            (self.args.concurrency as usize, self.args.client_threads as usize, Duration::from_secs(self.args.seconds));
        let direct_target = Target { addr: upstream.addr, api_key: String::new(), ask: Ask::Direct("/echo") };

        let svc = setup.start("proxy", true).await?;
        let result = async {
            let proxied_target =
                Target { addr: svc.addr, api_key: self.api_key.to_owned(), ask: Ask::Proxied("/echo") };
            progress(self.started, &format!("proxy: warm-up, every one of {} connections once", keys.len()));
            let t = proxied_target.clone();
            let warm = self.load(move || load::sweep(&t, keys, conns, threads)).await?;
            anyhow::ensure!(warm.errors == 0, "proxied warm-up: {}", warm.first_error.unwrap_or_default());
            progress(self.started, "proxy: direct, then proxied, saturating; then one connection each");
            let run = |target: &Target, conns: usize, duration: Duration| {
                let t = target.clone();
                self.load(move || load::closed_loop(&t, keys, conns, threads.min(conns), duration))
            };
            let direct = run(&direct_target, conns, seconds).await?;
            let proxied = run(&proxied_target, conns, seconds).await?;
            let one = Duration::from_secs(LATENCY_SECONDS);
            let direct_one = run(&direct_target, 1, one).await?;
            let proxied_one = run(&proxied_target, 1, one).await?;
            anyhow::Ok((direct, proxied, direct_one, proxied_one))
        }
        .await;
        let warnings = svc.warnings().await;
        svc.stop().await;
        let (direct, proxied, direct_one, proxied_one) = result?;

        progress(self.started, "proxy: a 10 MiB answer to a slow reader, on a fresh instance");
        let svc = setup.start("proxy-stream", true).await?;
        let stream = stream_large(&svc, self.api_key).await;
        svc.stop().await;
        Ok(ProxyRun {
            ratio: proxied.rps / direct.rps.max(1e-9),
            added_p50_ms: (proxied_one.p50_us - direct_one.p50_us) / 1_000.0,
            direct,
            proxied,
            direct_one,
            proxied_one,
            stream: stream?,
            service_warnings: warnings.len(),
            first_service_warning: warnings.into_iter().next(),
        })
    }
}

/// One small proxied call (the key verified, the connection cached), then the large
/// answer read slowly while the service's VmRSS is sampled.
async fn stream_large(svc: &Service, api_key: &str) -> anyhow::Result<StreamRun> {
    let (subject, provider) = (KeySpace::subject(0), KeySpace::provider(1));
    let request = |path: &str| {
        format!(
            "GET /v1/proxy/{provider}{path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {api_key}\r\n\
             MCP-Connect-Subject: {subject}\r\nConnection: close\r\n\r\n",
            svc.addr
        )
    };
    let (status, _) = read_all(svc.addr, &request("/echo"), Duration::ZERO).await?;
    anyhow::ensure!(status == 200, "the first proxied call answered {status}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let memory_before = svc.memory()?;
    let pid = svc.pid;
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(crate::service::memory_of(pid).map_or(0, |m| m.rss_kib));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    let started = Instant::now();
    let read = read_all(svc.addr, &request("/large"), READ_PAUSE).await;
    let seconds = started.elapsed().as_secs_f64();
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak_rss_kib = sampler.await?.max(svc.memory()?.rss_kib);
    let (status, bytes) = read?;
    anyhow::ensure!(status == 200, "the large answer's status was {status}");
    anyhow::ensure!(bytes >= LARGE, "the large answer broke off after {bytes} bytes");
    Ok(StreamRun {
        bytes,
        seconds,
        memory_before,
        peak_rss_kib,
        rss_growth_mib: peak_rss_kib.saturating_sub(memory_before.rss_kib) as f64 / 1024.0,
    })
}

/// Sends `request` and reads until the server closes, pausing after each read: the status
/// and the bytes after the head.
async fn read_all(addr: SocketAddr, request: &str, pause: Duration) -> anyhow::Result<(u16, usize)> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.write_all(request.as_bytes()).await?;
    let mut buf = vec![0u8; CHUNK];
    let mut head = Vec::new();
    let mut body = 0usize;
    loop {
        let n = tcp.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let got = buf.get(..n).unwrap_or_default();
        if body == 0 && !head.ends_with(b"\r\n\r\n") {
            head.extend_from_slice(got);
            if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                body = head.len() - end - 4;
                head.truncate(end + 4);
            }
        } else {
            body += n;
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    let status = std::str::from_utf8(head.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .context("no status line in the answer")?;
    Ok((status, body))
}
