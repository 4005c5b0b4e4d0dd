//! The one outbound HTTP client (token, discovery, JWKS, userinfo, revocation): redirects
//! are never followed (a token endpoint that redirects is misconfigured or hostile),
//! connect and total timeouts are short, response bodies are bounded, and no proxy from the
//! environment is used (`HTTPS_PROXY` would see every client secret and token we send).
//!
//! What the configuration names (an issuer, a configured endpoint) is reached as it is,
//! private addresses included (an internal Keycloak). An endpoint a server's discovery
//! document puts on another origin came from a document someone else serves, and is reached
//! as that server's [`Reach`] says (`with_guard`): over https on a public address, checked
//! on the address actually connected to (`net::ssrf`), so a discovery host cannot send our
//! client secret to `http://127.0.0.1:…` or into the private network; or, where the operator
//! allowed private endpoints for it, private and loopback addresses too (never link-local
//! ones or cloud metadata). The guard belongs to the one server: another provider's or
//! the IdP's configured origins are not trusted for it.

use oauth2::{HttpRequest, HttpResponse};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tracing::Instrument;

const MAX_BODY: usize = 256 * 1024;

#[derive(Debug, Clone, thiserror::Error)]
pub enum OutboundError {
    #[error("request failed: {0}")]
    Request(String),
    #[error("timed out")]
    Timeout,
    #[error("response body larger than {MAX_BODY} bytes")]
    TooLarge,
    #[error("unexpected status {0}")]
    Status(u16),
    #[error("response is not the expected JSON")]
    Json,
    /// A URL on an origin the configuration does not name, that is not https on a public
    /// address.
    #[error("refused: {0}")]
    Refused(crate::net::ssrf::Refusal),
}

impl OutboundError {
    /// Network trouble or an overloaded peer: worth a later retry, and no reason to doubt
    /// the grant.
    pub fn is_transient(&self) -> bool {
        match self {
            OutboundError::Request(_) | OutboundError::Timeout => true,
            OutboundError::Status(s) => *s >= 500 || *s == 429,
            OutboundError::TooLarge | OutboundError::Json | OutboundError::Refused(_) => false,
        }
    }
}

/// How an origin a discovery document named is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Over https, to public addresses only.
    Public,
    /// Private and loopback addresses too (`allow_private_endpoints`); never link-local or
    /// cloud metadata ones.
    Private,
}

impl Reach {
    pub fn policy(self) -> crate::net::ssrf::AddressPolicy {
        match self {
            Reach::Public => crate::net::ssrf::AddressPolicy::default(),
            Reach::Private => crate::net::ssrf::AddressPolicy { allow_loopback: true, allow_private: true },
        }
    }
}

/// The origins (`scheme://host:port`) of one server whose requests are guarded, and how.
pub type Guard = std::sync::Arc<std::collections::HashMap<String, Reach>>;

#[derive(Debug, Clone)]
pub struct Outbound {
    /// For what the configuration names.
    client: reqwest::Client,
    /// For [`Reach::Public`] origins: public addresses only, checked by its resolver.
    public: reqwest::Client,
    /// For [`Reach::Private`] origins.
    private: reqwest::Client,
    /// The server's guarded origins this view sends for (see [`Self::with_guard`]).
    guard: Guard,
    /// Send `traceparent` along (`tracing.propagate_to_providers`).
    propagate: bool,
}

/// A response read whole (at most `MAX_BODY` bytes).
struct Answer {
    status: reqwest::StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

pub type BoxedResponse<'a> = Pin<Box<dyn Future<Output = Result<HttpResponse, OutboundError>> + Send + 'a>>;

/// No connection is kept idle for reuse: each request goes out on a connection of its
/// own. A pooled connection the peer is closing as we send on it (its keep-alive ran out)
/// fails the request after it may have been read, and a token or refresh request must not
/// be sent twice (a rotated refresh token used twice makes a server with reuse detection
/// revoke the whole grant), nor fail for a reason that is ours. Outbound requests are few
/// (discovery and keys are cached; a hand-out makes none unless it refreshes), so a
/// handshake each is cheap next to a lost grant.
const POOL_MAX_IDLE: usize = 0;

impl Outbound {
    /// `cas`: certificate authorities trusted besides the system's store and the built-in
    /// Mozilla roots (`outbound.ca_file`).
    pub fn new(timeout: Duration, propagate: bool, cas: &[reqwest::Certificate]) -> Result<Self, reqwest::Error> {
        let builder = || {
            let b = reqwest::Client::builder();
            cas.iter()
                .fold(b, |b, ca| b.add_root_certificate(ca.clone()))
                .redirect(reqwest::redirect::Policy::none())
                .pool_max_idle_per_host(POOL_MAX_IDLE)
                .no_proxy()
                .connect_timeout(Duration::from_secs(3).min(timeout))
                .timeout(timeout)
                .user_agent(concat!("mcp-connect/", env!("CARGO_PKG_VERSION")))
        };
        let guarded = |reach: Reach| {
            let resolver = crate::net::ssrf::GuardedResolver::new(
                std::sync::Arc::new(crate::net::ssrf::SystemLookup),
                reach.policy(),
            );
            builder().dns_resolver(std::sync::Arc::new(resolver)).build()
        };
        let pinned = crate::net::ssrf::LoopbackPinned::new(std::sync::Arc::new(crate::net::ssrf::SystemLookup));
        Ok(Self {
            client: builder().dns_resolver(std::sync::Arc::new(pinned)).build()?,
            public: guarded(Reach::Public)?,
            private: guarded(Reach::Private)?,
            guard: Guard::default(),
            propagate,
        })
    }

    /// This client as it sends for one server: requests to the origins in `guard` go
    /// through the guarded clients (cheap: the clients are shared).
    #[must_use]
    pub fn with_guard(&self, guard: &Guard) -> Self {
        Self { guard: guard.clone(), ..self.clone() }
    }

    /// The client for `url`: the plain one unless its origin is guarded; else the guarded
    /// one, after the URL itself passed (an IP literal is never resolved, so the resolver
    /// alone would not see it).
    fn client_for(&self, url: &url::Url) -> Result<&reqwest::Client, OutboundError> {
        let Some(reach) = self.guard.get(&url.origin().ascii_serialization()) else { return Ok(&self.client) };
        crate::net::ssrf::check_url(url, reach.policy()).map_err(OutboundError::Refused)?;
        Ok(match reach {
            Reach::Public => &self.public,
            Reach::Private => &self.private,
        })
    }

    /// Sends a request in a span of its own (a child of the request's: method and host,
    /// never the URL, whose query may hold a code or token) and reads the answer.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Answer, OutboundError> {
        let mut request = request.build().map_err(classify)?;
        let span = outbound_span(&request);
        async {
            if self.propagate {
                inject_traceparent(request.headers_mut());
            }
            let client = self.client_for(request.url())?;
            // Sent once: never again after a failure, since a peer that closed without
            // answering may have read and acted on it (see `POOL_MAX_IDLE`).
            let resp = client.execute(request).await.map_err(classify)?;
            let (status, headers) = (resp.status(), resp.headers().clone());
            tracing::Span::current().record("http.response.status_code", status.as_u16());
            Ok(Answer { status, headers, body: read_bounded(resp).await? })
        }
        .instrument(span)
        .await
    }

    /// Sends a request built by the oauth2 crate, reading at most `MAX_BODY` bytes.
    pub async fn execute(&self, req: HttpRequest) -> Result<HttpResponse, OutboundError> {
        let (parts, body) = req.into_parts();
        let a = self
            .send(self.client.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body))
            .await?;
        let mut out = oauth2::http::Response::builder().status(a.status);
        if let Some(h) = out.headers_mut() {
            *h = a.headers;
        }
        out.body(a.body).map_err(|e| OutboundError::Request(e.to_string()))
    }

    /// An `AsyncHttpClient` for the oauth2 and openidconnect crates.
    pub fn as_client<'a>(&'a self) -> impl Fn(HttpRequest) -> BoxedResponse<'a> + 'a {
        move |req| Box::pin(self.execute(req))
    }

    /// GET a JSON document, optionally with a bearer token.
    pub async fn get_json(&self, url: &url::Url, bearer: Option<&str>) -> Result<serde_json::Value, OutboundError> {
        let mut r = self.client.get(url.as_str()).header("accept", "application/json");
        if let Some(t) = bearer {
            r = r.bearer_auth(t);
        }
        let a = self.send(r).await?;
        if !a.status.is_success() {
            return Err(OutboundError::Status(a.status.as_u16()));
        }
        serde_json::from_slice(&a.body).map_err(|_| OutboundError::Json)
    }

    /// A request without a token to a remote MCP server (RFC 9728 §5.1): the `initialize`
    /// an MCP client sends first (Streamable HTTP), for its status and `WWW-Authenticate`
    /// challenge, if any.
    pub async fn probe(&self, url: &url::Url) -> Result<(u16, Option<String>), OutboundError> {
        let initialize = serde_json::json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "mcp-connect", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let r =
            self.client.post(url.as_str()).header("accept", "application/json, text/event-stream").json(&initialize);
        let a = self.send(r).await?;
        let challenge = a.headers.get("www-authenticate").and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok((a.status.as_u16(), challenge))
    }

    /// POST a JSON document (RFC 7591 registration); the status and the body.
    pub async fn post_json(&self, url: &url::Url, body: &serde_json::Value) -> Result<(u16, Vec<u8>), OutboundError> {
        let r = self.client.post(url.as_str()).header("accept", "application/json").json(body);
        let a = self.send(r).await?;
        Ok((a.status.as_u16(), a.body))
    }

    /// A credential check (`oauth::credential`): the request as given, with the headers
    /// (marked sensitive by the caller) and HTTP Basic; returns the status and the body.
    pub async fn send_check(
        &self,
        method: reqwest::Method,
        url: &url::Url,
        headers: reqwest::header::HeaderMap,
        basic: Option<(String, String)>,
    ) -> Result<(u16, Vec<u8>), OutboundError> {
        let mut r = self.client.request(method, url.as_str()).header("accept", "application/json").headers(headers);
        if let Some((user, password)) = basic {
            r = r.basic_auth(user, Some(password));
        }
        let a = self.send(r).await?;
        Ok((a.status.as_u16(), a.body))
    }

    /// POST a form, with HTTP Basic credentials where given (already form-encoded as
    /// RFC 6749 §2.3.1 asks: `oauth::client_auth` decides); for RFC 7009 revocation.
    /// Returns the status.
    pub async fn post_form(
        &self,
        url: &url::Url,
        basic: Option<(String, String)>,
        form: &[(&str, &str)],
    ) -> Result<u16, OutboundError> {
        let mut r = self.client.post(url.as_str());
        if let Some((user, password)) = basic {
            r = r.basic_auth(user, Some(password));
        }
        Ok(self.send(r.form(form)).await?.status.as_u16())
    }
}

/// `traceparent` only: `tracestate` would pass on whatever a caller sent us.
struct TraceparentOnly<'a>(&'a mut reqwest::header::HeaderMap);

impl opentelemetry::propagation::Injector for TraceparentOnly<'_> {
    fn set(&mut self, key: &str, value: String) {
        if key == "traceparent"
            && let Ok(v) = reqwest::header::HeaderValue::from_str(&value)
        {
            self.0.insert("traceparent", v);
        }
    }
}

/// Adds the current span's `traceparent` to an outbound request (nothing while traces are
/// off: the span has no trace context then).
/// The span of one outbound request (a child of the request's): method and host, never
/// the URL, whose path or query may hold a code, a token or what the user reads.
pub(super) fn outbound_span(request: &reqwest::Request) -> tracing::Span {
    tracing::info_span!(
        "outbound",
        otel.kind = "client",
        otel.name = %format!("{} {}", request.method(), request.url().host_str().unwrap_or("")),
        http.request.method = %request.method(),
        server.address = request.url().host_str().unwrap_or(""),
        http.response.status_code = tracing::field::Empty,
    )
}

pub(super) fn inject_traceparent(headers: &mut reqwest::header::HeaderMap) {
    use opentelemetry::propagation::TextMapPropagator as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .inject_context(&context, &mut TraceparentOnly(headers));
}

pub(super) fn classify(e: reqwest::Error) -> OutboundError {
    if let Some(r) = crate::net::ssrf::refusal_of(&e) {
        OutboundError::Refused(r)
    } else if e.is_timeout() {
        OutboundError::Timeout
    } else {
        // reqwest's error text names the URL but never a body or header value.
        OutboundError::Request(e.without_url().to_string())
    }
}

async fn read_bounded(mut resp: reqwest::Response) -> Result<Vec<u8>, OutboundError> {
    if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
        return Err(OutboundError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(classify)? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(OutboundError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
