//! The proxy's outbound client (`/v1/proxy`): a caller's request sent on to a provider's
//! API with the user's credential attached, its answer streamed back. Unlike the client
//! of `http` it keeps connections for reuse (proxied calls are many, and the caller, not
//! mcp-connect, decides whether to send again), has no total timeout (a server-sent event
//! stream may last) but bounds the connect, the wait for the answer's head and each read,
//! and never follows a redirect: a redirect is the caller's to see, and following one to
//! another origin would carry the credential there.
//!
//! A provider of the configuration file is reached as configured; one of the operator API
//! through the SSRF guard (`ssrf`), as its other endpoints are.

use super::http::{OutboundError, Reach};
use std::time::Duration;
use tracing::Instrument;

/// The bound on establishing a connection to the provider.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The bound on the provider's answer head after the request was sent.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// The bound on each read of the answer's body (an event stream must say something,
/// a comment at least, this often).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct Forwarder {
    /// For what the configuration file names.
    client: reqwest::Client,
    public: reqwest::Client,
    private: reqwest::Client,
    propagate: bool,
    /// What it was built with, for [`Forwarder::for_worker`].
    cas: std::sync::Arc<[reqwest::Certificate]>,
}

impl Forwarder {
    /// Built without reqwest's decompression features: a body's encoding passes through
    /// as it is, both ways.
    pub fn new(propagate: bool, cas: &[reqwest::Certificate]) -> Result<Self, reqwest::Error> {
        Self::build(propagate, cas.into())
    }

    /// The same settings with connection pools of its own, for one HTTP worker. A pooled
    /// connection's task runs on the worker that opened it: a request of another worker
    /// would hand every read across threads, a wake-up each way, and the answer's chunks
    /// allocated on one thread and freed on the other, which the allocator keeps (a 40 MiB
    /// answer grew the service's RSS by 12 MiB so; with a pool per worker it stays flat).
    pub fn for_worker(&self) -> Self {
        Self::build(self.propagate, self.cas.clone()).unwrap_or_else(|e| {
            // The same settings built once at start-up; should they fail now, the shared
            // pools still work.
            tracing::warn!(error = %e, "the proxy's client for this worker could not be built; sharing one");
            self.clone()
        })
    }

    fn build(propagate: bool, cas: std::sync::Arc<[reqwest::Certificate]>) -> Result<Self, reqwest::Error> {
        let builder = || {
            cas.iter()
                .fold(reqwest::Client::builder(), |b, ca| b.add_root_certificate(ca.clone()))
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(IDLE_TIMEOUT)
                .pool_idle_timeout(Duration::from_secs(30))
                .user_agent(concat!("mcp-connect/", env!("CARGO_PKG_VERSION")))
        };
        let guarded = |reach: Reach| {
            let lookup = std::sync::Arc::new(super::ssrf::SystemLookup);
            let resolver = super::ssrf::GuardedResolver::new(lookup, reach.policy());
            builder().dns_resolver(std::sync::Arc::new(resolver)).build()
        };
        let pinned = super::ssrf::LoopbackPinned::new(std::sync::Arc::new(super::ssrf::SystemLookup));
        Ok(Self {
            client: builder().dns_resolver(std::sync::Arc::new(pinned)).build()?,
            public: guarded(Reach::Public)?,
            private: guarded(Reach::Private)?,
            propagate,
            cas,
        })
    }

    /// Sends `request` (reached as `reach` says; `None`: as configured) and returns the
    /// answer as soon as its head is in, its body still to be streamed. In a span of its
    /// own: method and host, never the path or query, which may name what the user reads.
    pub async fn send(
        &self,
        mut request: reqwest::Request,
        reach: Option<Reach>,
    ) -> Result<reqwest::Response, OutboundError> {
        let client = match reach {
            None => &self.client,
            Some(r) => {
                super::ssrf::check_url(request.url(), r.policy()).map_err(OutboundError::Refused)?;
                match r {
                    Reach::Public => &self.public,
                    Reach::Private => &self.private,
                }
            }
        };
        let span = super::http::outbound_span(&request);
        async {
            if self.propagate {
                super::http::inject_traceparent(request.headers_mut());
            }
            let resp = tokio::time::timeout(HEAD_TIMEOUT, client.execute(request))
                .await
                .map_err(|_| OutboundError::Timeout)?
                .map_err(super::http::classify)?;
            tracing::Span::current().record("http.response.status_code", resp.status().as_u16());
            Ok(resp)
        }
        .instrument(span)
        .await
    }
}
