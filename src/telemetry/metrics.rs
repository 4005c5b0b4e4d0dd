//! Prometheus metrics, served at `GET /metrics` on their own listener (`[metrics] listen`),
//! never on the public one. The `metrics` facade records; `metrics-exporter-prometheus`
//! keeps the values and renders the text format. Off (no recorder: every `counter!` is a
//! no-op) unless a listen address is configured.
//!
//! Labels are bounded sets only: route templates (never raw paths), status codes, outcome
//! and reason codes, configured provider names. No id, subject, key or token is a label.
//! The names are defined where they are recorded; [`describe`] lists them all with their
//! help text, so this file is the catalogue (docs/operations.md has the same table).

use actix_web::{App, HttpResponse, HttpServer, dev::Server, web};
use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::net::TcpListener;
use std::sync::OnceLock;
use std::time::Duration;

/// HTTP request duration, by route template, method and status.
pub const HTTP_REQUEST_DURATION: &str = "mcp_connect_http_request_duration_seconds";
/// `/v1/token` answers, by provider and outcome (`connected`, `connect_required`,
/// `declined`, or the error code).
pub const TOKEN_REQUESTS: &str = "mcp_connect_token_requests_total";
/// `/v1/proxy` answers, by provider and result: the provider's status class (`2xx` …
/// `5xx`) or the proxy's own error code. Never by path, method or subject.
pub const PROXY_REQUESTS: &str = "mcp_connect_proxy_requests_total";
/// Refreshes at the provider, by outcome.
pub const REFRESHES: &str = "mcp_connect_refreshes_total";
/// Elicitations created, by provider.
pub const ELICITATIONS_CREATED: &str = "mcp_connect_elicitations_created_total";
/// Elicitations that reached a final status, by status.
pub const ELICITATIONS_FINISHED: &str = "mcp_connect_elicitations_finished_total";
/// Provider callbacks refused, by reason code.
pub const CONNECT_FAILURES: &str = "mcp_connect_connect_failures_total";
/// A connect link opened by another person than the one it was made for.
pub const IDENTITY_MISMATCHES: &str = "mcp_connect_identity_mismatches_total";
/// 1, labelled with the release (`version`) and the `commit` of the running binary.
pub const BUILD_INFO: &str = "mcp_connect_build_info";

/// Counts elicitations that reached `status` (when the statement that set it ran).
pub fn elicitations_finished(status: crate::domain::ElicitationStatus, n: u64) {
    if n > 0 {
        metrics::counter!(ELICITATIONS_FINISHED, "status" => status.as_str()).increment(n);
    }
}

/// Buckets for every `_seconds` histogram: 100 µs to 10 s.
const BUCKETS: [f64; 14] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Whether this process records metrics (`[metrics] listen` set: [`install`] ran). Off, a
/// metric's labels are not worth building: a route template or a status as text is an
/// allocation, a provider's label a registry lookup, on every request, for nothing.
pub fn on() -> bool {
    HANDLE.get().is_some()
}

/// Installs the process's recorder (once; later calls get the same handle) and a task that
/// folds histogram samples into their buckets every 5 s, so that memory stays bounded
/// between scrapes.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new();
            // Only an empty bucket list is refused, and this one is not.
            let builder = builder
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was installed before; metrics go there");
            }
            describe();
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "commit" => crate::COMMIT).set(1.0);
            let upkeep = handle.clone();
            std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(Duration::from_secs(5));
                        upkeep.run_upkeep();
                    }
                })
                .map_err(|e| tracing::warn!(error = %e, "no metrics upkeep thread"))
                .ok();
            handle
        })
        .clone()
}

/// The scrape endpoint: one worker, `GET /metrics` only.
pub fn serve(listener: TcpListener, handle: PrometheusHandle) -> std::io::Result<Server> {
    Ok(HttpServer::new(move || {
        let handle = handle.clone();
        App::new().route(
            "/metrics",
            web::get().to(move || {
                let body = handle.render();
                async move { HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(body) }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run())
}

fn describe() {
    use crate::{api_keys, cache, store};
    describe_histogram!(HTTP_REQUEST_DURATION, Unit::Seconds, "HTTP requests by route template, method and status");
    describe_counter!(TOKEN_REQUESTS, "POST /v1/token answers by provider and outcome");
    describe_counter!(PROXY_REQUESTS, "/v1/proxy answers by provider and result (status class or error code)");
    describe_gauge!(BUILD_INFO, "1, labelled with the release and the commit of this binary");
    describe_counter!(REFRESHES, "refreshes at the provider by outcome");
    describe_counter!(ELICITATIONS_CREATED, "elicitations created by provider");
    describe_counter!(ELICITATIONS_FINISHED, "elicitations that reached a final status, by status");
    describe_counter!(CONNECT_FAILURES, "provider callbacks refused, by reason code");
    describe_counter!(
        IDENTITY_MISMATCHES,
        "connect links opened by another person than the subject they were made for"
    );
    describe_counter!(cache::LOOKUPS, "connection lookups by cache result (hit, miss, bypass)");
    describe_gauge!(cache::LISTENER_UP, "1 while the change listener is connected (the cache serves only then)");
    describe_gauge!(
        cache::waiters::WAITING,
        "requests held by wait_seconds until their elicitation changes (at most 10,000 an instance)"
    );
    describe_gauge!(store::handouts::QUEUE_DEPTH, "hand-out audit events waiting to be written");
    describe_histogram!(
        store::handouts::QUEUE_WAIT,
        Unit::Seconds,
        "time callers waited for room in a full hand-out audit queue (only those that waited)"
    );
    describe_counter!(store::handouts::BATCH_FAILURES, "hand-out audit batches that failed to write (retried)");
    describe_counter!(
        store::handouts::FOLDED,
        "hand-out audit rows merged into rows spanning minutes because the backlog was at its bound"
    );
    describe_counter!(
        crate::webhooks::worker::ATTEMPTS,
        "webhook delivery attempts by outcome (delivered, retry, failed: given up after 24 h)"
    );
    describe_counter!(
        crate::webhooks::worker::DROPPED,
        "webhook deliveries dropped, oldest first, because their tenant had more than webhooks.max_pending_per_tenant pending"
    );
    describe_gauge!(crate::webhooks::worker::PENDING, "webhook deliveries waiting to be delivered (all tenants)");
    describe_gauge!(
        crate::webhooks::worker::OLDEST_PENDING,
        Unit::Seconds,
        "age of the oldest webhook delivery still waiting"
    );
    describe_histogram!(api_keys::METRIC_HASH_WAIT, Unit::Seconds, "time API-key checks waited for an argon2 slot");
    describe_counter!(
        api_keys::METRIC_HASH_QUEUE_FULL,
        "API-key checks refused with 503: the argon2 queue was full or the wait too long"
    );
    describe_gauge!(
        crate::keys::RESEAL_REMAINING,
        "values not under their scope's active data key, and data keys not under the current KEK, at this instance's last background re-seal pass"
    );
    describe_counter!(
        crate::keys::RESEAL_FAILURES,
        "values or tables a background re-seal pass could not move (left for the next pass)"
    );
    describe_counter!(
        crate::keys::RESEALED,
        "values the background re-seal passes moved under their scope's active data key"
    );
    describe_histogram!(
        crate::keys::KEY_STORE_CALLS,
        Unit::Seconds,
        "key-store calls (wrap, unwrap a data key) by store, op and result (ok, unavailable, refused)"
    );
    describe_histogram!(
        store::POOL_WAIT,
        Unit::Seconds,
        "time to get a database connection (pool: lookup, main: with BEGIN)"
    );
}
