//! Middleware for every response: a request id, an access log line that names the path
//! but never the query string (callbacks carry codes and states there), and headers that
//! keep responses out of caches and frames.

use actix_web::HttpMessage;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use rand::RngCore;
use tracing::Instrument;

/// The id of one request, shown on error pages and in `X-Request-Id`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

pub async fn request_context(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = crate::domain::hex16(rand::rng().next_u64());
    let state = req.app_data::<actix_web::web::Data<crate::app::AppState>>();
    let draining = state.is_some_and(|s| s.lifecycle.shutdown.is_draining());
    let hsts = state.and_then(|s| s.hsts.clone());
    req.extensions_mut().insert(RequestId(id.clone()));
    let request = crate::telemetry::Request { id, method: req.method().clone(), path: req.path().to_owned() };
    let (res, request, trace_id, started) = if crate::telemetry::request_spans() {
        let (res, trace_id, started) = in_span(&request, req, next).await;
        (res, request, trace_id, started)
    } else {
        let started = std::time::Instant::now();
        let (res, request) = crate::telemetry::in_request(request, next.call(req)).await;
        (res, request, None, started)
    };
    let crate::telemetry::Request { id, method, path } = request;
    // The access-log line names the request itself, outside the span: the span's fields
    // would otherwise be serialized into the line a second time (a tenth of a cached
    // lookup's cost).
    let elapsed = started.elapsed();
    record_duration(&res, &method, elapsed);
    match res {
        Ok(mut res) => {
            answer_headers(&mut res, &id, hsts, draining);
            tracing::info!(
                request_id = id.as_str(),
                method = method.as_str(),
                path = path.as_str(),
                status = res.status().as_u16(),
                elapsed_ms = elapsed.as_millis() as u64,
                trace_id = trace_id.as_deref(),
                "request"
            );
            Ok(res)
        }
        Err(e) => {
            tracing::warn!(
                request_id = id.as_str(),
                method = method.as_str(),
                path = path.as_str(),
                elapsed_ms = elapsed.as_millis() as u64,
                trace_id = trace_id.as_deref(),
                "request failed"
            );
            Err(e)
        }
    }
}

/// Handles the request in a span of its own (exported spans, or text lines: see
/// `telemetry::request_spans`), continuing a caller's trace; with the trace's id when spans
/// are exported, and when the handling began (the span made: the duration is the
/// handling's alone).
async fn in_span<B: MessageBody>(
    request: &crate::telemetry::Request,
    req: ServiceRequest,
    next: Next<B>,
) -> (Result<ServiceResponse<B>, actix_web::Error>, Option<String>, std::time::Instant) {
    // Fields as `&str` (here and in the access line) are written as they are; `%` would
    // format each through `Display` into a string of its own first.
    let span = tracing::info_span!(
        "request",
        request_id = request.id.as_str(),
        method = request.method.as_str(),
        path = request.path.as_str(),
        trace_id = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
        otel.name = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    // A caller's trace is continued on the API only: a browser's header means nothing to us.
    let api = request.path.starts_with("/v1/") || request.path.starts_with("/admin/v1/");
    let trace_id = if crate::telemetry::traces::enabled() {
        // Named by the route template (`POST /v1/token`), never the raw path: before it
        // starts, so that the name is its own from the first.
        let route = req.match_pattern().unwrap_or_else(|| "unmatched".to_owned());
        span.record("otel.name", format!("{} {route}", known_method(&request.method)));
        crate::telemetry::traces::continue_trace(&span, req.headers(), api)
    } else {
        None
    };
    let started = std::time::Instant::now();
    let res = next.call(req).instrument(span.clone()).await;
    // For the exported span only: recorded with traces off, the log layer would format
    // the span's fields a second time (JSON: parse and write them again) on every request,
    // while the access-log line below carries the status anyway.
    if trace_id.is_some()
        && let Ok(r) = &res
    {
        span.record("http.response.status_code", r.status().as_u16());
    }
    (res, trace_id, started)
}

/// The request id's header.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What every answer carries unless its handler set its own. Constants: a name given as
/// `&str` is parsed (and a non-standard one copied) on each lookup and each insert.
const SECURE_HEADERS: [(HeaderName, HeaderValue); 6] = [
    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
    (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
    (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    (header::X_DNS_PREFETCH_CONTROL, HeaderValue::from_static("off")),
    (
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ),
];

/// What every answer carries: its request id, the security headers, HSTS where the public
/// base is https, and `Connection: close` while the instance drains.
#[inline]
fn answer_headers<B>(res: &mut ServiceResponse<B>, id: &str, hsts: Option<HeaderValue>, draining: bool) {
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(id) {
        h.insert(X_REQUEST_ID, v);
    }
    secure_headers(h);
    if let Some(v) = hsts {
        // RFC 6797 §7.2: sent on https only; the public base says which we are behind a
        // TLS-terminating proxy.
        h.insert(actix_web::http::header::STRICT_TRANSPORT_SECURITY, v);
    }
    if draining {
        // Clients open their next request elsewhere instead of on a connection that the
        // stop will close under them.
        res.response_mut().head_mut().set_connection_type(actix_web::http::ConnectionType::Close);
    }
}

/// The method as a label: the standard ones, anything else `other` (a client can send any
/// token as a method, and labels must stay a bounded set).
fn known_method(m: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Response headers every answer carries unless the handler set its own.
fn secure_headers(h: &mut actix_web::http::header::HeaderMap) {
    for (k, v) in SECURE_HEADERS {
        if !h.contains_key(&k) {
            h.insert(k, v);
        }
    }
}

/// The request duration histogram, by route template (`/v1/elicitations/{id}/cancel`),
/// never the raw path: no ids in labels. A path no route matched is `unmatched`.
fn record_duration<B>(
    res: &Result<ServiceResponse<B>, actix_web::Error>,
    method: &actix_web::http::Method,
    elapsed: std::time::Duration,
) {
    if !crate::telemetry::metrics::on() {
        return;
    }
    let (route, status) = match res {
        Ok(r) => (r.request().match_pattern().unwrap_or_else(|| "unmatched".to_owned()), r.status().as_u16()),
        Err(e) => ("unmatched".to_owned(), e.as_response_error().status_code().as_u16()),
    };
    metrics::histogram!(
        crate::telemetry::metrics::HTTP_REQUEST_DURATION,
        "route" => route,
        "method" => known_method(method),
        "status" => status.to_string()
    )
    .record(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::{SECURE_HEADERS, secure_headers};
    use actix_web::http::header::{self, HeaderMap, HeaderValue};

    #[test]
    fn every_security_header_is_set_unless_the_handler_set_its_own() {
        let mut h = HeaderMap::new();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=60"));
        secure_headers(&mut h);
        assert_eq!(h.get(header::CACHE_CONTROL).unwrap(), "private, max-age=60");
        assert_eq!(h.get_all(header::CACHE_CONTROL).count(), 1);
        for (name, value) in SECURE_HEADERS.iter().skip(1) {
            assert_eq!(h.get(name), Some(value), "{name}");
        }
        assert_eq!(h.get("x-frame-options").unwrap(), "DENY");
        assert_eq!(
            h.get("content-security-policy").unwrap().to_str().unwrap().split(';').next(),
            Some("default-src 'none'")
        );
        assert_eq!(h.len(), 6);
    }
}
