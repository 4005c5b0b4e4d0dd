//! The framework's ceiling (issue 46): a bare actix-web handler that answers `POST
//! /v1/token` with the very bytes a cached hand-out answered, after reading the request's
//! JSON as the service does, and does nothing else; as many workers as the service has.
//! Driven by the same load generator, connections, threads and seconds as the cached
//! lookup, it tells what the HTTP stack itself allows on this machine: the cached lookup
//! is judged against it as well as against the floor. `oha` then drives the same handler,
//! so that the cached lookup's ratio to the ceiling can be told under both generators
//! (on 2 cores a generator takes CPU from what it measures, so the rates differ; their
//! ratios should not).

use crate::bare::BareServer;
use crate::http1::{Conn, Target};
use crate::load::{self, Summary};
use crate::oha::{self, OhaRun};
use crate::phase::Phase;
use crate::progress;
use crate::service::Service;
use actix_web::{HttpResponse, web};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Serialize)]
pub struct CeilingRun {
    /// The size of the hand-out answer served.
    pub body_bytes: usize,
    pub workers: usize,
    pub saturating: Summary,
    /// The same handler under an open loop at half the cached lookup's median rate (the
    /// rate its half-rate phases offer): the tail this machine, the generator and the
    /// HTTP stack give a handler that does nothing, the control for the half-rate p99.
    pub half_rate: Summary,
    /// The median of the runs' cached rate ÷ the ceiling measured beside each
    /// (`beside_each_run`), else the cached lookup's median saturating rate ÷ this rate.
    pub cached_ratio: f64,
    pub beside_each_run: bool,
    /// `oha` against the same handler, with the same connections, threads and seconds
    /// (`Err`: why it did not run).
    pub oha: Result<OhaRun, String>,
}

/// What the handler reads, as `/v1/token` reads it.
#[derive(serde::Deserialize)]
struct Ask {
    subject: String,
    provider: String,
}

async fn answer(ask: web::Json<Ask>, body: web::Data<bytes::Bytes>) -> HttpResponse {
    if ask.subject.is_empty() || ask.provider.is_empty() {
        return HttpResponse::BadRequest().finish();
    }
    HttpResponse::Ok().content_type("application/json").body(body.get_ref().clone())
}

/// The bare handler, started once before the lookup runs and kept to the end, so that a
/// ceiling can be measured beside each cached run (the machine drifts by ±10 % within an
/// hour: a ceiling measured once, at the end, judges runs made 20 minutes before it).
pub struct Bare {
    server: BareServer,
    pub body_bytes: usize,
    pub workers: usize,
}

impl Phase<'_> {
    /// One real cached hand-out's answer (from a fresh instance), then the bare handler
    /// that serves it.
    pub async fn bare_handler(&self) -> anyhow::Result<Bare> {
        let svc = self.setup.start("ceiling-sample", true).await?;
        let body = sample(&svc, self.api_key).await;
        svc.stop().await;
        // Its lookups counted in before the first run's hit rate starts counting.
        crate::db::wait_for_service_sessions_to_end(self.pool).await?;
        let body = bytes::Bytes::from(body?);
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let body_bytes = body.len();
        let server = BareServer::start("ceiling", workers, move |c| {
            c.app_data(web::Data::new(body.clone())).route("/v1/token", web::post().to(answer));
        })?;
        Ok(Bare { server, body_bytes, workers })
    }

    /// The bare handler under the cached lookup's saturating load: the same generator,
    /// connections, threads and seconds, after one second to open the connections.
    pub async fn ceiling_closed_loop(&self, bare: &Bare, name: &str) -> anyhow::Result<Summary> {
        let target = Target::token(bare.server.addr, self.api_key);
        let (keys, conns, threads) = (self.keys, self.args.concurrency as usize, self.args.client_threads as usize);
        progress(self.started, &format!("{name}: a bare handler, {conns} connections, {} s", self.args.seconds));
        let t = target.clone();
        self.load(move || load::closed_loop(&t, keys, conns, threads, Duration::from_secs(1))).await?;
        let seconds = Duration::from_secs(self.args.seconds);
        Ok(self.saturate(&target, seconds, oha::Serving::Bench).await?.0)
    }

    /// The ceiling phase after the runs: the saturating rate again (beside the check
    /// instance's reference, for the generator cross-check), the half rate, and `oha`.
    /// `cached_ratio` is the runs' median ratio to the ceiling beside each (`beside`), or
    /// the cached median ÷ this saturating rate where none was measured.
    pub async fn ceiling(
        &self,
        bare: &Bare,
        cached_median: f64,
        beside: Option<f64>,
        oha_bin: Option<(&Path, String)>,
    ) -> anyhow::Result<CeilingRun> {
        let saturating = self.ceiling_closed_loop(bare, "ceiling").await?;
        let target = Target::token(bare.server.addr, self.api_key);
        let (keys, conns, threads) = (self.keys, self.args.concurrency as usize, self.args.client_threads as usize);
        let seconds = Duration::from_secs(self.args.seconds);
        let rate = (cached_median / 2.0).max(1.0);
        progress(self.started, &format!("ceiling: open loop at {rate:.0} req/s, {} s", self.args.seconds));
        let t = target.clone();
        let half_rate = self.load(move || load::open_loop(&t, keys, conns, threads, seconds, rate)).await?;
        let oha = match oha_bin {
            Some((bin, version)) => {
                progress(self.started, &format!("ceiling: {version}, {} s", self.args.seconds));
                let shape = (conns, threads, self.args.seconds);
                oha::run(bin, version, &target, keys, &self.setup.dir, shape, oha::Serving::Bench)
                    .await
                    .map_err(|e| format!("{e:#}"))
            }
            None => Err("oha not found (bench/run.sh installs it; --oha names it)".to_owned()),
        };
        Ok(CeilingRun {
            oha,
            body_bytes: bare.body_bytes,
            workers: bare.workers,
            cached_ratio: beside.unwrap_or(cached_median / saturating.rps.max(1e-9)),
            beside_each_run: beside.is_some(),
            saturating,
            half_rate,
        })
    }
}

/// The body of one cached hand-out (the key asked twice: the second is served cached).
async fn sample(svc: &Service, api_key: &str) -> anyhow::Result<Vec<u8>> {
    let target = Target::token(svc.addr, api_key);
    let mut conn = Conn::connect(svc.addr).await?;
    let mut request = Vec::new();
    let (subject, provider) = (load::KeySpace::subject(0), load::KeySpace::provider(1));
    target.token_request(&mut request, &subject, &provider);
    for _ in 0..2 {
        conn.send(&request).await?;
    }
    let r = conn.send(&request).await?;
    anyhow::ensure!(r.is_connected(), "the sample hand-out answered {}", r.status);
    Ok(r.body.to_vec())
}
