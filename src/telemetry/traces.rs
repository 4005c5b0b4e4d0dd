//! Traces: spans exported by OTLP over HTTP (protobuf) when `[tracing] otlp_endpoint` is
//! set; off otherwise, and then nothing here runs. The spans are the `tracing` spans the
//! code already has (a request, an outbound provider or IdP call, a database
//! transaction), turned into OpenTelemetry spans by `tracing-opentelemetry`.
//!
//! What a span may carry: methods, route templates and paths (never a query string: codes
//! and states travel there), status codes, host names, ids. Never a token, code, key,
//! cookie, header value or body; the spans' fields are chosen by hand for that.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Set once the exporter is installed: only then is an incoming `traceparent` read.
static ON: AtomicBool = AtomicBool::new(false);

pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The exporter's HTTP client: our reqwest (the exporter's own would bring a second major
/// version), run on the service's runtime, since the batch processor exports from a thread
/// of its own that has none. Written by hand because the exporter takes any client through
/// this trait and none is offered for reqwest 0.12.
#[derive(Debug)]
struct OtlpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let (status, body) = self
            .runtime
            .spawn(async move {
                let response = client.execute(request).await?;
                let status = response.status();
                Ok::<_, reqwest::Error>((status, response.bytes().await?))
            })
            .await??;
        Ok(Response::builder().status(status).body(body)?)
    }
}

/// The tracer provider exporting to `endpoint` (the full URL, `/v1/traces` included).
/// Needs a running tokio runtime (the exporter's requests run on it).
pub fn provider(
    endpoint: &url::Url,
    timeout: Duration,
    cas: &[reqwest::Certificate],
) -> anyhow::Result<SdkTracerProvider> {
    let builder = reqwest::Client::builder().timeout(timeout).redirect(reqwest::redirect::Policy::none());
    let client = OtlpClient {
        client: cas.iter().fold(builder, |b, ca| b.add_root_certificate(ca.clone())).build()?,
        runtime: tokio::runtime::Handle::try_current()?,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.as_str())
        .with_timeout(timeout)
        .with_http_client(client)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("mcp-connect").build();
    // Every request is sampled, whatever a caller's `traceparent` flags say: a caller must
    // not be able to take its requests out of our traces.
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn)
        .build();
    ON.store(true, Ordering::Relaxed);
    Ok(provider)
}

/// The layer that turns spans into OpenTelemetry spans for `provider`: this crate's spans
/// (a request, a refresh, an outbound call, a transaction), not its dependencies'. This
/// crate's log lines inside a span become events of it, with the same fields as the line
/// (ids, outcomes, reason codes: no secret, see the `telemetry` module).
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let layer: tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer> = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("mcp-connect"))
        .with_threads(false)
        .with_location(false);
    // A filter that also dropped events (`filter_fn(is_span)`) cost the spans made right
    // after an event that the log filter let through their parent (tracing-subscriber's
    // per-layer filter state; seen in serve::a_token_call_…): events stay, as span events.
    let ours = tracing_subscriber::filter::Targets::new()
        .with_target("mcp_connect", tracing_subscriber::filter::LevelFilter::INFO);
    layer.with_filter(ours)
}

struct ActixHeaders<'a>(&'a actix_web::http::header::HeaderMap);

impl Extractor for ActixHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Continues the caller's trace (W3C `traceparent`, when `from_caller`) in `span`, which
/// must not have been entered yet; marks it a server span and records its trace id in its
/// `trace_id` field, so that every log line inside it names the trace. Returns the trace
/// id. A missing or malformed header starts a new trace.
pub fn continue_trace(
    span: &tracing::Span,
    headers: &actix_web::http::header::HeaderMap,
    from_caller: bool,
) -> Option<String> {
    if !enabled() {
        return None;
    }
    if from_caller {
        let parent = TraceContextPropagator::new().extract(&ActixHeaders(headers));
        let _ = span.set_parent(parent);
    }
    span.record("otel.kind", "server");
    let context = span.context();
    let span_context = context.span().span_context().clone();
    let id = span_context.is_valid().then(|| span_context.trace_id().to_string())?;
    span.record("trace_id", id.as_str());
    Some(id)
}
