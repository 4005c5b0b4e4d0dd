//! The HTTP side: one reqwest client (redirects off, timeouts, bounded bodies), the API
//! key on every call, JSON errors mapped to [`Error::Api`] with mcp-connect's stable code,
//! and `503`/`429` with `Retry-After` retried within [`RetryPolicy`]. Retrying is safe:
//! `/v1/token` is idempotent (DESIGN.md invariant 6) and the elicitation lookup is a GET.
//! A proxied call (`/v1/proxy`) is never retried: it need not be idempotent.

use crate::api::{CancelReason, ElicitationId, ElicitationInfo, TokenOutcome, TokenRequest, TokenWire};
use crate::proxy::{ERROR_HEADER, InvalidProxyRequest, ProxyOutcome, ProxyRequest};
use crate::token_source::Credential;
use reqwest::StatusCode;
use secrecy::ExposeSecret as _;
use std::time::Duration;
use url::Url;

/// The largest answer body read; mcp-connect's answers are a few hundred bytes.
const MAX_BODY: usize = 64 * 1024;
/// How long a proxied call waits for each read (the answer's head, each part of its body)
/// by default: longer than mcp-connect waits for the provider (30 s for the head, 120 s
/// between two reads of the body), so the proxy's own `upstream_timeout` comes first.
const PROXY_READ_TIMEOUT: Duration = Duration::from_secs(150);

/// How long the client waits for mcp-connect to become available again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// A `Retry-After` longer than this is not waited for: the caller gets
    /// [`Error::Unavailable`] at once (a tool call should not hang for minutes).
    pub max_delay: Duration,
    /// The sum of all waits stays below this.
    pub max_total: Duration,
    /// The wait when a `503` carries no usable `Retry-After`.
    pub default_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            max_delay: Duration::from_secs(10),
            max_total: Duration::from_secs(15),
            default_delay: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> Self {
        Self { max_retries: 0, ..Self::default() }
    }
}

/// Why a call did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// mcp-connect refused the request with a stable error code (docs/api.md), e.g.
    /// `provider_not_allowed`, `elicitation_mismatch`, `invalid_api_key`.
    #[error("mcp-connect answered {status}: {code}: {description}")]
    Api { status: u16, code: String, description: String },
    /// mcp-connect or the provider is temporarily unavailable and the retry budget is
    /// spent (or the server asked for a longer wait than the policy allows).
    #[error("mcp-connect is temporarily unavailable ({code})")]
    Unavailable { code: String, retry_after: Option<Duration> },
    /// The request did not reach mcp-connect or its answer did not arrive.
    #[error("request to mcp-connect failed")]
    Transport(#[source] reqwest::Error),
    /// An answer that is not what the API documents.
    #[error("unexpected answer from mcp-connect: {0}")]
    InvalidResponse(String),
    /// The base URL cannot have paths appended.
    #[error("the mcp-connect base URL must be an http(s) URL")]
    InvalidBaseUrl,
    /// A proxied request refused before anything was sent (a path that would leave the
    /// provider's proxy, a value mcp-connect would refuse).
    #[error("the proxied request was refused before sending")]
    InvalidProxyRequest(#[from] InvalidProxyRequest),
    /// The workload token could not be had (its file unreadable or empty, its function
    /// failed); nothing was sent.
    #[error("no workload token: {0}")]
    Token(String),
}

impl Error {
    /// mcp-connect's stable error code, where it sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } | Error::Unavailable { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Builds a [`Client`] with non-default settings.
#[derive(Debug)]
pub struct ClientBuilder {
    base: Url,
    key: Credential,
    retry: RetryPolicy,
    timeout: Duration,
    connect_timeout: Duration,
    proxy_read_timeout: Duration,
}

impl ClientBuilder {
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The total time one HTTP exchange may take (default 15 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a proxied call waits for each read of its answer (default 150 s). There is
    /// no deadline for the whole of it: a provider's answer may stream for long.
    pub fn proxy_read_timeout(mut self, timeout: Duration) -> Self {
        self.proxy_read_timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        if !matches!(self.base.scheme(), "http" | "https") || self.base.cannot_be_a_base() {
            return Err(Error::InvalidBaseUrl);
        }
        // Redirects off, for both: a redirect would carry the API key to wherever it points.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(Error::Transport)?;
        // Proxied calls' own: no total timeout (an answer may stream), a bound on each read.
        let proxy_http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.connect_timeout)
            .read_timeout(self.proxy_read_timeout)
            .build()
            .map_err(Error::Transport)?;
        Ok(Client { http, proxy_http, base: self.base, key: self.key, retry: self.retry, timeout: self.timeout })
    }
}

/// A client of mcp-connect's `/v1` API for one tenant (the API key decides which).
/// Cheap to clone; clones share the connection pool.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    proxy_http: reqwest::Client,
    base: Url,
    key: Credential,
    retry: RetryPolicy,
    timeout: Duration,
}

impl Client {
    /// `base` is mcp-connect's public base URL, e.g. `https://connect.example.com`; `key`
    /// an [`crate::ApiKey`] or a workload [`crate::TokenSource`].
    pub fn new(base: Url, key: impl Into<Credential>) -> Result<Self, Error> {
        Self::builder(base, key).build()
    }

    pub fn builder(base: Url, key: impl Into<Credential>) -> ClientBuilder {
        ClientBuilder {
            base,
            key: key.into(),
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            proxy_read_timeout: PROXY_READ_TIMEOUT,
        }
    }

    /// `POST /v1/token`: the token, or an elicitation to send, or "declined".
    #[tracing::instrument(skip_all, fields(provider = req.provider()))]
    pub async fn token(&self, req: &TokenRequest) -> Result<TokenOutcome, Error> {
        let url = self.endpoint(&["v1", "token"])?;
        // A request mcp-connect may hold (`wait_seconds`) gets that much more time.
        let timeout = self.timeout + req.wait();
        let body = self.send(|| self.http.post(url.clone()).timeout(timeout).json(req)).await?;
        let wire: TokenWire =
            serde_json::from_slice(&body).map_err(|e| Error::InvalidResponse(format!("token answer: {e}")))?;
        Ok(wire.into())
    }

    /// `GET /v1/elicitations/{id}`: the status of one of this tenant's elicitations.
    #[tracing::instrument(skip_all)]
    pub async fn elicitation(&self, id: &ElicitationId) -> Result<ElicitationInfo, Error> {
        let url = self.endpoint(&["v1", "elicitations", id.as_str()])?;
        let body = self.send(|| self.http.get(url.clone())).await?;
        serde_json::from_slice(&body).map_err(|e| Error::InvalidResponse(format!("elicitation answer: {e}")))
    }

    /// `POST /v1/elicitations/{id}/cancel`: the MCP client answered the URL elicitation
    /// with `cancel` or `decline`, so the link must stop working. Harmless to repeat.
    #[tracing::instrument(skip_all)]
    pub async fn cancel_elicitation(&self, id: &ElicitationId, reason: CancelReason) -> Result<(), Error> {
        let url = self.endpoint(&["v1", "elicitations", id.as_str(), "cancel"])?;
        let body = serde_json::json!({ "reason": reason.as_str() });
        self.send(|| self.http.post(url.clone()).json(&body)).await?;
        Ok(())
    }

    /// `ANY /v1/proxy/{provider}/{path}`: the request sent to the provider's API with the
    /// user's credential attached by mcp-connect, so this process never holds it. The
    /// path is checked first ([`InvalidProxyRequest`]): nothing that would leave
    /// `/v1/proxy/{provider}/` is sent.
    ///
    /// The provider's answer comes back as it is ([`ProxyOutcome::Response`], its body
    /// streaming), whatever its status. The proxy's own answers (`MCP-Connect-Error`) are
    /// [`ProxyOutcome::ConnectRequired`] (`428`) and [`ProxyOutcome::Declined`] (`403
    /// connect_declined`), or [`Error::Api`] / [`Error::Unavailable`] with the stable code,
    /// as for [`Self::token`]. Never retried, a `503` neither: the request need not be
    /// idempotent, so the caller decides. No deadline for the whole exchange (an answer
    /// may stream for long): each read waits at most [`ClientBuilder::proxy_read_timeout`].
    #[tracing::instrument(skip_all, fields(provider = req.provider(), method = %req.method()))]
    pub async fn proxy(&self, req: ProxyRequest) -> Result<ProxyOutcome, Error> {
        let prefix = self.endpoint(&["v1", "proxy", req.checked_provider()?])?;
        let sent = req.prepare(&prefix)?;
        let mut request = self.proxy_http.request(sent.method, sent.url).headers(sent.headers);
        if let Some(body) = sent.body {
            request = request.body(body);
        }
        // Without the URL: its path and query are the caller's call to the provider.
        let resp = request
            .bearer_auth(self.key.bearer()?.expose_secret())
            .send()
            .await
            .map_err(|e| Error::Transport(e.without_url()))?;
        if !resp.headers().contains_key(ERROR_HEADER) {
            return Ok(ProxyOutcome::Response(resp));
        }
        proxy_refusal(Refusal::read(resp).await?, sent.elicitation_id)
    }

    fn endpoint(&self, segments: &[&str]) -> Result<Url, Error> {
        let mut url = self.base.clone();
        url.path_segments_mut().map_err(|()| Error::InvalidBaseUrl)?.pop_if_empty().extend(segments);
        url.set_query(None);
        Ok(url)
    }

    /// Sends, retrying `503`/`429` within the policy; returns the body of a `200`.
    async fn send(&self, make: impl Fn() -> reqwest::RequestBuilder) -> Result<Vec<u8>, Error> {
        let mut waited = Duration::ZERO;
        let mut attempt = 0u32;
        loop {
            let bearer = self.key.bearer()?;
            let resp = make().bearer_auth(bearer.expose_secret()).send().await.map_err(Error::Transport)?;
            if resp.status() == StatusCode::OK {
                return read_bounded(resp).await;
            }
            let refusal = Refusal::read(resp).await?;
            if !refusal.retryable() {
                return Err(refusal.into_error());
            }
            let delay = refusal.retry_after.unwrap_or(self.retry.default_delay);
            let within = attempt < self.retry.max_retries
                && delay <= self.retry.max_delay
                && waited + delay <= self.retry.max_total;
            if !within {
                return Err(refusal.into_error());
            }
            tracing::info!(
                status = refusal.status.as_u16(),
                code = refusal.code,
                delay_ms = delay.as_millis() as u64,
                "mcp-connect asked to retry"
            );
            tokio::time::sleep(delay).await;
            waited += delay;
            attempt += 1;
        }
    }
}

/// An answer mcp-connect made itself instead of the one asked for: its status, stable code
/// and description, `Retry-After`, and the body (a proxy's `connect_required` carries the
/// elicitation in it).
struct Refusal {
    status: StatusCode,
    code: String,
    description: String,
    retry_after: Option<Duration>,
    body: Vec<u8>,
}

impl Refusal {
    /// Reads the (bounded) body. The code is `MCP-Connect-Error`'s, which every API error
    /// carries, else the body's `error`.
    async fn read(resp: reqwest::Response) -> Result<Self, Error> {
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        let header_code = resp.headers().get(ERROR_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = read_bounded(resp).await?;
        let (code, description) = error_body(&body, status);
        Ok(Self { status, code: header_code.unwrap_or(code), description, retry_after, body })
    }

    /// `503`/`429`: mcp-connect or the provider asks to come back later.
    fn retryable(&self) -> bool {
        self.status == StatusCode::SERVICE_UNAVAILABLE || self.status == StatusCode::TOO_MANY_REQUESTS
    }

    fn into_error(self) -> Error {
        if self.retryable() {
            Error::Unavailable { code: self.code, retry_after: self.retry_after }
        } else {
            Error::Api { status: self.status.as_u16(), code: self.code, description: self.description }
        }
    }
}

/// What a proxy's own answer means: `428 connect_required` with `/v1/token`'s answer in
/// its body, `403 connect_declined` about the elicitation the request named, else an error.
fn proxy_refusal(refusal: Refusal, asked: Option<ElicitationId>) -> Result<ProxyOutcome, Error> {
    match (refusal.status, refusal.code.as_str()) {
        (StatusCode::PRECONDITION_REQUIRED, "connect_required") => {
            let wire: TokenWire = serde_json::from_slice(&refusal.body)
                .map_err(|e| Error::InvalidResponse(format!("proxy's connect_required: {e}")))?;
            match TokenOutcome::from(wire) {
                TokenOutcome::ConnectRequired { elicitation, mcp, provider_name } => {
                    Ok(ProxyOutcome::ConnectRequired { elicitation, mcp, provider_name })
                }
                _ => Err(Error::InvalidResponse("a 428 connect_required without its elicitation".to_owned())),
            }
        }
        (StatusCode::FORBIDDEN, "connect_declined") => {
            #[derive(serde::Deserialize)]
            struct Named {
                #[serde(default)]
                provider_name: Option<String>,
            }
            let elicitation_id = asked.ok_or_else(|| {
                Error::InvalidResponse("connect_declined for a request that named no elicitation".to_owned())
            })?;
            let provider_name = serde_json::from_slice::<Named>(&refusal.body).ok().and_then(|n| n.provider_name);
            Ok(ProxyOutcome::Declined { elicitation_id, provider_name })
        }
        _ => Err(refusal.into_error()),
    }
}

/// `Retry-After` as delay-seconds (RFC 9110 §10.2.3). An HTTP-date is treated as absent:
/// mcp-connect sends seconds, and a clock-skewed date is worse than the default delay.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    v.parse::<u64>().ok().map(Duration::from_secs)
}

async fn read_bounded(mut resp: reqwest::Response) -> Result<Vec<u8>, Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(Error::Transport)? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(Error::InvalidResponse("answer body too large".to_owned()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The API's `{"error", "error_description"}`, or a stand-in naming the status.
fn error_body(body: &[u8], status: StatusCode) -> (String, String) {
    #[derive(serde::Deserialize)]
    struct ApiErrorBody {
        error: String,
        #[serde(default)]
        error_description: String,
    }
    match serde_json::from_slice::<ApiErrorBody>(body) {
        Ok(b) => (b.error, b.error_description),
        Err(_) => (format!("http_{}", status.as_u16()), "the answer carried no JSON error body".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::ApiKey;

    #[test]
    fn endpoints_keep_a_base_path_and_escape_the_id() {
        let c = Client::new("https://c.example/prefix/".parse().unwrap(), ApiKey::new("k")).unwrap();
        assert_eq!(c.endpoint(&["v1", "token"]).unwrap().as_str(), "https://c.example/prefix/v1/token");
        assert_eq!(
            c.endpoint(&["v1", "elicitations", "a/b?c"]).unwrap().as_str(),
            "https://c.example/prefix/v1/elicitations/a%2Fb%3Fc"
        );
        let c = Client::new("https://c.example".parse().unwrap(), ApiKey::new("k")).unwrap();
        assert_eq!(c.endpoint(&["v1", "token"]).unwrap().as_str(), "https://c.example/v1/token");
    }

    #[test]
    fn a_base_url_that_is_not_http_is_refused() {
        assert!(matches!(Client::new("mailto:a@b".parse().unwrap(), ApiKey::new("k")), Err(Error::InvalidBaseUrl)));
    }

    #[test]
    fn retry_after_reads_seconds_only() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(reqwest::header::RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }
}
