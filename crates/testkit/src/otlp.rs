//! An OTLP/HTTP trace receiver for tests: a real HTTP server on loopback that takes what an
//! exporter sends to `POST /v1/traces` (protobuf `ExportTraceServiceRequest`, decoded with
//! the official generated types) and keeps the spans for the test to look at.

use actix_web::{App, HttpResponse, HttpServer, web};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use std::sync::{Arc, Mutex};

/// One span as received, ids in lower-case hex (an empty parent: a root span).
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// Attributes, each value as text.
    pub attributes: Vec<(String, String)>,
    /// Events (log lines inside the span): name and attributes.
    pub events: Vec<(String, Vec<(String, String)>)>,
    /// The resource's `service.name`.
    pub service: String,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

pub struct OtlpReceiver {
    /// The exporter's endpoint: `http://127.0.0.1:<port>/v1/traces`.
    pub url: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    handle: actix_web::dev::ServerHandle,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

async fn traces(body: web::Bytes, spans: web::Data<Mutex<Vec<ReceivedSpan>>>) -> HttpResponse {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return HttpResponse::BadRequest().body("not an ExportTraceServiceRequest");
    };
    let mut got = Vec::new();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .map(|a| text(a.value.as_ref()))
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            got.push(ReceivedSpan {
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                name: span.name,
                attributes: span.attributes.iter().map(|a| (a.key.clone(), text(a.value.as_ref()))).collect(),
                events: span
                    .events
                    .iter()
                    .map(|e| {
                        (e.name.clone(), e.attributes.iter().map(|a| (a.key.clone(), text(a.value.as_ref()))).collect())
                    })
                    .collect(),
                service: service.clone(),
            });
        }
    }
    if let Ok(mut s) = spans.lock() {
        s.extend(got);
    }
    HttpResponse::Ok().content_type("application/x-protobuf").finish()
}

impl OtlpReceiver {
    pub async fn start() -> anyhow::Result<Self> {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let data = web::Data::from(spans.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(16 * 1024 * 1024))
                .route("/v1/traces", web::post().to(traces))
        })
        .workers(1)
        .bind(("127.0.0.1", 0))?;
        let port = server.addrs().first().map(|a| a.port()).unwrap_or(0);
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Self { url: format!("http://127.0.0.1:{port}/v1/traces"), spans, handle })
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        drop(handle.stop(false));
    }
}
