//! `/v1/proxy/{provider}/{path}`: a caller's request sent on to the provider's API with the
//! user's credential attached, so the caller never holds it. Authenticated as `/v1/token`
//! (a server key; the subject in `MCP-Connect-Subject` or proven by
//! `MCP-Connect-Subject-Token`), decided as a hand-out is (`flows::token`: kill switches, a
//! switched-off provider or tenant, a revoked connection, a refresh first when one is due),
//! and refused before a byte leaves where the provider's proxy rules
//! (`providers::proxy`) do not allow the method, the origin or the path.
//!
//! What passes: the caller's method, path, query, body (streamed, at most
//! [`MAX_REQUEST_BODY`]) and end-to-end headers, without any that carries a credential
//! (`Authorization`, `Cookie`, and any whose name says token, secret, password, key,
//! auth, session or credential), our own `MCP-Connect-*` ones, and what says where the
//! caller is (`Forwarded`, `X-Forwarded-*`). Back: the provider's status, headers without
//! `Set-Cookie` and hop-by-hop ones, and its body streamed (at most
//! [`MAX_RESPONSE_BODY`]). A redirect is returned, never followed. Every answer the proxy
//! makes itself carries `MCP-Connect-Error` with its code, so a caller tells it from the
//! provider's own (whose `MCP-Connect-*` headers are dropped).

use super::ServerCaller;
use crate::app::AppState;
use crate::domain::{ElicitationId, MethodClass, ProviderId, ProxiedCall, Scopes, StatusClass, Subject};
use crate::flows::token::{self as tokens, TokenOutcome, TokenRequest};
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::net::OutboundError;
use crate::providers::Provider;
use crate::providers::credential::{Credential, Placement};
use crate::providers::proxy::ProxyRefusal;
use crate::store::connections::ConnectionRow;
use crate::telemetry::metrics::PROXY_REQUESTS;
use actix_web::http::header::HeaderMap;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, ResponseError, web};
use bytes::Bytes;
use futures_util::StreamExt;
use secrecy::{ExposeSecret, SecretString};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use time::OffsetDateTime;

/// The largest request body the proxy forwards.
pub const MAX_REQUEST_BODY: u64 = 10 * 1024 * 1024;
/// The largest answer body the proxy passes back (a longer one is cut).
pub const MAX_RESPONSE_BODY: u64 = 256 * 1024 * 1024;

/// The headers a caller addresses the proxy with (never forwarded).
const SUBJECT: &str = "mcp-connect-subject";
const SUBJECT_TOKEN: &str = "mcp-connect-subject-token";
const SCOPES: &str = "mcp-connect-scopes";
const ELICITATION: &str = "mcp-connect-elicitation-id";
const ORIGIN: &str = "mcp-connect-origin";
const SERVER_NAME: &str = "mcp-connect-server-name";
use crate::http::error::ERROR_HEADER;
/// On a provider's `401` the proxy could not send again: whether the grant was refreshed.
pub const REFRESHED_HEADER: &str = "mcp-connect-refreshed";

/// `{provider}`'s API at `{path}` (and the query), with the user's credential attached:
/// the answer is the provider's, streamed, unless the proxy answers itself (then with
/// `MCP-Connect-Error`). docs/proxy.md says what passes and what is refused.
#[utoipa::path(
    method(get, post, put, patch, delete, head),
    path = "/v1/proxy/{provider}/{path}",
    operation_id = "proxy",
    tag = "v1",
    params(
        ("provider" = String, Path, description = "A configured provider with API origins to proxy to."),
        ("path" = String, Path, description = "The path at the provider's API, sent byte for byte as received: \
            no dot or empty segment, no encoded slash, backslash, dot or percent sign."),
        ("MCP-Connect-Subject" = Option<String>, Header, description = "The MCP user (percent-encoded UTF-8); \
            needed unless `MCP-Connect-Subject-Token` is sent."),
        ("MCP-Connect-Subject-Token" = Option<String>, Header, description = "The user's MCP access token, proving \
            the subject, as `subject_token` on `/v1/token`."),
        ("MCP-Connect-Scopes" = Option<String>, Header, description = "Scopes beyond the provider's default, \
            space-separated."),
        ("MCP-Connect-Elicitation-Id" = Option<String>, Header, description = "The retry after a \
            `connect_required`: its elicitation's id."),
        ("MCP-Connect-Origin" = Option<String>, Header, description = "Another of the provider's API origins \
            than its first."),
        ("MCP-Connect-Server-Name" = Option<String>, Header, description = "The MCP server's name for the \
            elicitation's message (percent-encoded), as `server_name` on `/v1/token`."),
    ),
    responses(
        (status = "default", description = "The provider's answer, as it sent it (without `Set-Cookie`, \
            hop-by-hop and `MCP-Connect-*` headers); a redirect is returned, never followed."),
        (status = 400, description = "`proxy_path_refused`, `proxy_origin_not_allowed`, `unknown_provider`, \
            `invalid_subject`, `invalid_scope`, `invalid_elicitation_id`, `elicitation_mismatch`, \
            `subject_token_not_accepted` or `invalid_request` (an `MCP-Connect-*` header).", body = ErrorBody),
        (status = 403, description = "`proxy_not_configured`, `proxy_path_not_allowed`, `connect_declined`, \
            `provider_not_allowed`, `provider_disabled`, `insufficient_scope`, or a `subject_token` refused \
            (as `/v1/token`).", body = ErrorBody),
        (status = 404, description = "`elicitation_not_found`.", body = ErrorBody),
        (status = 405, description = "`proxy_method_not_allowed`, with `Allow`.", body = ErrorBody,
            headers(("Allow" = String, description = "The methods this provider's proxy takes."))),
        (status = 413, description = "`payload_too_large`: a body over 10 MiB.", body = ErrorBody),
        (status = 429, description = "`rate_limited`: this connection or tenant is over its `[proxy]` rate.",
            body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds until a request would pass."))),
        (status = 428, description = "`connect_required`: no usable connection. The body is `/v1/token`'s \
            `connect_required` answer (`status`, `elicitation`, `mcp`, `provider_name`) with `error` and \
            `error_description`; retry with `MCP-Connect-Elicitation-Id`.", body = ErrorBody),
        (status = 502, description = "`upstream_unreachable`, `upstream_refused`, `upstream_too_large` or \
            `provider_misconfigured`.", body = ErrorBody),
        (status = 503, description = "`provider_unavailable` or `temporarily_unavailable`, with `Retry-After`.",
            body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 504, description = "`upstream_timeout`.", body = ErrorBody),
    ),
    security(("server_key" = [])),
)]
pub async fn proxy(
    caller: ServerCaller,
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    // A configured provider's name, or `other`: labels never carry what a caller made up.
    let label = match req.match_info().get("provider").map(ProviderId::parse) {
        Some(Ok(p)) if state.directory.providers.get(&p).is_some() => p.as_str().to_owned(),
        _ => "other".to_owned(),
    };
    let mut sent = None;
    let (response, result) = match forward(caller, &state, &req, payload, &mut sent).await {
        Ok(r) => {
            let class = StatusClass::of(r.status().as_u16());
            if let Some(s) = &mut sent {
                s.answered = class;
            }
            (r, class.as_str())
        }
        Err(Refused::Api(e)) => (e.error_response(), e.code.as_str()),
        Err(Refused::Connect(r)) => (*r, ErrorCode::ConnectRequired.as_str()),
    };
    // Counted here (or, if this request is given up first, when `sent` is dropped).
    drop(sent);
    metrics::counter!(PROXY_REQUESTS, "provider" => label, "result" => result).increment(1);
    response
}

/// A call that went to the provider with a connection's credential: counted in the audit
/// trail, by method and answer class, when dropped. So a call is counted once it went out,
/// even if its request is given up before the answer (a shutdown's deadline): as `none`
/// then, as when the provider did not answer in time.
struct Sent {
    audit: crate::store::handouts::HandoutAudit,
    connection: crate::domain::ConnectionId,
    /// As cached, when it was served from the lookup cache (see `TokenOutcome::Connected`).
    holder: Option<crate::store::connections::packed::PackedConnection>,
    api_key: crate::domain::ApiKeyId,
    method: MethodClass,
    answered: StatusClass,
}

impl Drop for Sent {
    fn drop(&mut self) {
        let call = ProxiedCall { method: self.method, status: self.answered };
        if self.audit.try_record_proxied(self.connection, &self.api_key, call, self.holder.as_ref()) {
            return;
        }
        // The rows waiting are at their bound: wait for room off this request.
        let (audit, connection, api_key, holder) =
            (self.audit.clone(), self.connection, self.api_key.clone(), self.holder.take());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { audit.record_proxied(connection, &api_key, call, holder.as_ref()).await });
        }
    }
}

/// What the proxy answers itself instead of the provider.
enum Refused {
    Api(ApiError),
    /// `connect_required`, with the elicitation.
    Connect(Box<HttpResponse>),
}

impl<E: Into<ApiError>> From<E> for Refused {
    fn from(e: E) -> Self {
        Refused::Api(e.into())
    }
}

fn refusal(r: ProxyRefusal, provider: &Provider) -> ApiError {
    let rules_allow = provider.proxy.as_ref().map(|p| p.allow()).unwrap_or_default();
    match r {
        ProxyRefusal::Malformed(why) => {
            ApiError::new(ErrorCode::ProxyPathRefused, format!("the path is refused: {why}"))
        }
        ProxyRefusal::PathNotAllowed => ApiError::new(ErrorCode::ProxyPathNotAllowed, r.to_string()),
        ProxyRefusal::OriginNotAllowed => ApiError::new(ErrorCode::ProxyOriginNotAllowed, r.to_string()),
        ProxyRefusal::MethodNotAllowed => {
            let mut e =
                ApiError::new(ErrorCode::ProxyMethodNotAllowed, format!("this provider's proxy takes {rules_allow}"));
            e.allow = Some(rules_allow.into());
            e
        }
    }
}

/// Where a request goes, checked before anything else is done for it.
struct Target {
    id: ProviderId,
    provider: Arc<Provider>,
    method: reqwest::Method,
    url: url::Url,
}

/// The provider, method and URL a request names, refused (before any connection is looked
/// up, and before anything leaves) where the provider's proxy rules do not allow them.
fn target(caller: &ServerCaller, state: &AppState, req: &HttpRequest) -> Result<Target, ApiError> {
    // `GET http://host/… HTTP/1.1`: a proxy's request form, not ours.
    if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        return Err(ApiError::new(ErrorCode::ProxyPathRefused, "an absolute-form request target is refused"));
    }
    let name = req.match_info().get("provider").unwrap_or_default();
    let id = ProviderId::parse(name).map_err(|e| ApiError::new(ErrorCode::UnknownProvider, e.0))?;
    let provider = state
        .directory
        .providers
        .get(&id)
        .ok_or_else(|| ApiError::new(ErrorCode::UnknownProvider, "no provider of that name"))?;
    // The path as received, encodings and all: the router's decoded view is not what goes.
    let path = req
        .uri()
        .path()
        .strip_prefix("/v1/proxy/")
        .and_then(|p| p.strip_prefix(id.as_str()))
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| ApiError::new(ErrorCode::ProxyPathRefused, "the provider's name is encoded"))?;
    // Another tenant's provider is not this caller's to learn the rules of.
    if state.directory.tenants.allows(&caller.0.tenant, &id) != Some(true) {
        return Err(ApiError::new(ErrorCode::ProviderNotAllowed, "this tenant may not use that provider"));
    }
    let Some(rules) = &provider.proxy else {
        return Err(ApiError::new(ErrorCode::ProxyNotConfigured, "this provider has no API origins to proxy to"));
    };
    let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
        .map_err(|_| refusal(ProxyRefusal::MethodNotAllowed, &provider))?;
    let origin = header_text(req.headers(), ORIGIN)?;
    let url = rules.target(&method, origin.as_deref(), path, req.uri().query()).map_err(|r| refusal(r, &provider))?;
    if req.headers().get(actix_web::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        > Some(MAX_REQUEST_BODY)
    {
        return Err(ApiError::new(ErrorCode::PayloadTooLarge, "the body is larger than 10 MiB"));
    }
    Ok(Target { id, provider, method, url })
}

async fn forward(
    caller: ServerCaller,
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
    sent: &mut Option<Sent>,
) -> Result<HttpResponse, Refused> {
    let Target { id, provider, method, url } = target(&caller, state, req)?;
    let ask = Ask::of(req.headers())?;
    let tenant = caller.0.tenant.clone();
    state.proxy.limits.tenant(&tenant).map_err(|wait| rate_limited("this tenant", wait))?;
    let now = OffsetDateTime::now_utc();
    let subject =
        crate::flows::subject::proven_subject(state, &tenant, ask.subject, ask.subject_token.as_ref(), now).await?;
    let key = crate::domain::ConnectionKey { tenant: tenant.clone(), subject, provider: id.clone() };
    let request = TokenRequest {
        subject: key.subject.clone(),
        provider: id.clone(),
        scopes: ask.scopes,
        elicitation_id: ask.elicitation_id,
        mcp_context: serde_json::json!({}),
    };
    let asking = ask.server_name;
    let (credential, Served { connection, holder }) = usable(state, &caller, request.clone(), asking.clone()).await?;
    // One runaway tool does not spend the user's quota at the provider for every other.
    state.proxy.limits.connection(&connection).map_err(|wait| rate_limited("this connection", wait))?;
    let request_id = req.extensions().get::<crate::http::middleware::RequestId>().map(|r| r.0.clone());
    let out = Outgoing { method, url, headers: forwarded_headers(req.headers()), request_id };
    let too_large = Arc::new(AtomicBool::new(false));
    let mut body = Body::of(req.headers(), payload, too_large.clone()).await?;
    let outgoing = out.build(&provider, &credential, body.sendable())?;
    *sent = Some(Sent {
        audit: state.handouts.clone(),
        connection,
        holder,
        api_key: caller.0.id.clone(),
        method: MethodClass::of(out.method.as_str()),
        answered: StatusClass::NoAnswer,
    });
    let answer = match state.proxy.forwarder.send(outgoing, provider.reach()).await {
        Ok(a) => a,
        Err(_) if too_large.load(Ordering::Relaxed) => {
            return Err(ApiError::new(ErrorCode::PayloadTooLarge, "the body is larger than 10 MiB").into());
        }
        Err(e) => return Err(upstream_error(&e).into()),
    };
    // The provider refused the token (revoked, or expired before its time): a grant that
    // can be refreshed is, once, and a request that can be sent again is.
    let watch = Watch { state: state.clone(), key: key.clone(), connection };
    if answer.status() != reqwest::StatusCode::UNAUTHORIZED || provider.credential().is_some() {
        return respond(answer, &out.method, None, watch, &spellings(&credential.0, credential.1.as_ref())).await;
    }
    let refreshed = crate::flows::refresh::refresh_refused(state, &key, &credential.0, OffsetDateTime::now_utc()).await;
    if let Err(e) = &refreshed {
        tracing::info!(provider = %key.provider, error = %e, "a proxied call's token was refused and not refreshed");
    }
    let (Ok(token), Some(again)) = (refreshed.as_ref(), body.again()) else {
        let said = if refreshed.is_ok() { "true" } else { "failed" };
        return respond(answer, &out.method, Some(said), watch, &spellings(&credential.0, credential.1.as_ref())).await;
    };
    // The refreshed token as the row holds it (the lookup cache may not have heard yet).
    let credential = (token.clone(), None);
    let answer = state
        .proxy
        .forwarder
        .send(out.build(&provider, &credential, again)?, provider.reach())
        .await
        .map_err(|e| upstream_error(&e))?;
    let secrets = spellings(&credential.0, credential.1.as_ref());
    respond(answer, &out.method, None, watch, &secrets).await
}

/// The ways a credential may be written back in a header: as it is, percent-encoded (as in
/// a query), and as HTTP Basic's base64 (with its username).
type Spellings = Vec<String>;

fn spellings(token: &SecretString, credential: Option<&Credential>) -> Spellings {
    let t = token.expose_secret();
    if t.len() < 8 {
        // Too short to tell from other text; nothing to compare.
        return Vec::new();
    }
    let mut out = vec![t.to_owned(), url::form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>()];
    out.push(percent_encoding::utf8_percent_encode(t, percent_encoding::NON_ALPHANUMERIC).to_string());
    if let Some(user) = credential.and_then(|c| c.fields.get("username")) {
        out.push(base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("{user}:{t}")));
    }
    out.sort();
    out.dedup();
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// How often a streaming answer looks whether its connection is still usable.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The connection an answer streams for: revoked (or replaced by a new connect), the
/// stream is cut, on every instance within the bound a hand-out has.
struct Watch {
    state: AppState,
    key: crate::domain::ConnectionKey,
    connection: crate::domain::ConnectionId,
}

impl Watch {
    /// Resolves when the connection is no longer the usable one (or cannot be read). A
    /// look costs nothing while the lookup cache holds the connection: a revocation
    /// drops the entry on every instance, and only then is the row read.
    async fn revoked(self) {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if self.state.connections.cached(&self.key).is_some_and(|c| c.id == self.connection) {
                continue;
            }
            let ours = |row: &ConnectionRow| {
                row.id == self.connection && row.status == crate::domain::ConnectionStatus::Active
            };
            match self.state.connections.read(&self.key, ours).await {
                Ok(Some(row)) if ours(&row) => {}
                Ok(_) => {
                    tracing::info!(provider = %self.key.provider, "the connection ended: its proxied stream is cut");
                    return;
                }
                // The database did not answer: the stream goes on; the next look asks again.
                Err(_) => {}
            }
        }
    }
}

/// The connection a credential came from, and as cached when it was served from there.
struct Served {
    connection: crate::domain::ConnectionId,
    holder: Option<crate::store::connections::packed::PackedConnection>,
}

/// The usable credential of the request's connection (and its typed fields), or the
/// proxy's `connect_required` or `connect_declined`.
async fn usable(
    state: &AppState,
    caller: &ServerCaller,
    request: TokenRequest,
    asking: Option<String>,
) -> Result<((SecretString, Option<Credential>), Served), Refused> {
    let tenant = &caller.0.tenant;
    let provider = request.provider.clone();
    match tokens::credential_for(state, tenant, request, OffsetDateTime::now_utc()).await? {
        TokenOutcome::Connected { access_token, credential, connection_id, holder, .. } => {
            Ok(((access_token, credential.map(|(_, c)| c)), Served { connection: connection_id, holder }))
        }
        TokenOutcome::ConnectRequired(e) => {
            let asking = asking.or_else(|| state.directory.tenants.display_name(tenant));
            let answer =
                super::token::connect_required(state, asking.as_deref().unwrap_or(tenant.as_str()), &provider, &e);
            Err(Refused::Connect(Box::new(connect_required(answer))))
        }
        TokenOutcome::Declined(_) => {
            Err(ApiError::new(ErrorCode::ConnectDeclined, "the person declined to connect this provider").into())
        }
    }
}

/// What goes to the provider, but the credential and the body.
struct Outgoing {
    method: reqwest::Method,
    url: url::Url,
    headers: reqwest::header::HeaderMap,
    request_id: Option<String>,
}

impl Outgoing {
    fn build(
        &self,
        provider: &Provider,
        (token, credential): &(SecretString, Option<Credential>),
        body: Option<reqwest::Body>,
    ) -> Result<reqwest::Request, ApiError> {
        let mut out = reqwest::Request::new(self.method.clone(), self.url.clone());
        *out.headers_mut() = self.headers.clone();
        attach(&mut out, provider, token, credential.as_ref())?;
        if let Some(v) = self.request_id.as_deref().and_then(|id| reqwest::header::HeaderValue::from_str(id).ok()) {
            out.headers_mut().insert("x-request-id", v);
        }
        *out.body_mut() = body;
        Ok(out)
    }
}

/// How long a body to be kept (at most [`REPEATABLE_BODY`]) may take to arrive.
const KEPT_BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The largest body kept to be sent again after a refresh.
const REPEATABLE_BODY: u64 = 64 * 1024;

/// The caller's body: none, small enough to keep (and send again), or streamed once.
enum Body {
    None,
    Kept(Bytes),
    Streamed(Option<Chunks>),
}

impl Body {
    async fn of(headers: &HeaderMap, mut payload: web::Payload, too_large: Arc<AtomicBool>) -> Result<Self, ApiError> {
        if !has_body(headers) {
            return Ok(Body::None);
        }
        let length = headers
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
        if length.is_none_or(|n| n > REPEATABLE_BODY) {
            return Ok(Body::Streamed(Some(request_body(payload, too_large))));
        }
        let read = async {
            let mut kept = bytes::BytesMut::new();
            while let Some(chunk) = payload.next().await {
                let chunk = chunk.map_err(|_| ApiError::new(ErrorCode::InvalidRequest, "the body broke off"))?;
                if (kept.len() + chunk.len()) as u64 > REPEATABLE_BODY {
                    return Err(ApiError::new(ErrorCode::InvalidRequest, "the body is longer than its Content-Length"));
                }
                kept.extend_from_slice(&chunk);
            }
            Ok(Body::Kept(kept.freeze()))
        };
        // A caller that stops sending holds no buffer for long.
        tokio::time::timeout(KEPT_BODY_DEADLINE, read)
            .await
            .map_err(|_| ApiError::new(ErrorCode::InvalidRequest, "the body did not arrive within 10 s"))?
    }

    /// The body for the first send (a streamed one is taken: it goes once).
    fn sendable(&mut self) -> Option<reqwest::Body> {
        match self {
            Body::None => None,
            Body::Kept(b) => Some(reqwest::Body::from(b.clone())),
            Body::Streamed(chunks) => chunks.take().map(reqwest::Body::wrap_stream),
        }
    }

    /// The body for a second send; `None`: it was streamed, and is gone.
    fn again(&self) -> Option<Option<reqwest::Body>> {
        match self {
            Body::None => Some(None),
            Body::Kept(b) => Some(Some(reqwest::Body::from(b.clone()))),
            Body::Streamed(_) => None,
        }
    }
}

/// `429 rate_limited`, with the seconds until a request would pass.
fn rate_limited(whose: &str, wait: std::time::Duration) -> ApiError {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    ApiError::new(ErrorCode::RateLimited, format!("{whose} sent more proxied requests than it may just now"))
        .retry_after(seconds.max(1))
}

/// What the caller's `MCP-Connect-*` headers ask for.
struct Ask {
    subject: Option<Subject>,
    subject_token: Option<SecretString>,
    scopes: Option<Scopes>,
    elicitation_id: Option<ElicitationId>,
    server_name: Option<String>,
}

impl Ask {
    fn of(headers: &HeaderMap) -> Result<Self, ApiError> {
        let subject = header_text(headers, SUBJECT)?
            .map(|s| Subject::parse(&s))
            .transpose()
            .map_err(|e| ApiError::new(ErrorCode::InvalidSubject, e.0))?;
        let subject_token = match headers.get(SUBJECT_TOKEN).map(|v| v.to_str()) {
            None => None,
            Some(Ok(t)) if !t.is_empty() && t.len() <= crate::http::schema::SUBJECT_TOKEN_MAX => {
                Some(SecretString::from(t.to_owned()))
            }
            Some(_) => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    "MCP-Connect-Subject-Token must be 1-8192 characters",
                ));
            }
        };
        let scopes = header_text(headers, SCOPES)?
            .map(|s| Scopes::parse(&s.split(' ').filter(|s| !s.is_empty()).collect::<Vec<_>>()))
            .transpose()
            .map_err(|e| ApiError::new(ErrorCode::InvalidScope, e.0))?;
        let elicitation_id = header_text(headers, ELICITATION)?
            .map(|s| ElicitationId::parse(&s))
            .transpose()
            .map_err(|e| ApiError::new(ErrorCode::InvalidElicitationId, e.0))?;
        let server_name = match header_text(headers, SERVER_NAME)? {
            None => None,
            Some(s) if crate::domain::shown::is_display_name(&s, 64) => Some(s.trim().to_owned()),
            Some(_) => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    "MCP-Connect-Server-Name must be 1-64 printable characters, without control or invisible \
                     formatting ones",
                ));
            }
        };
        Ok(Ask { subject, subject_token, scopes, elicitation_id, server_name })
    }
}

/// A header's value as UTF-8 text, percent-decoded (a subject may hold any character; a
/// header only visible ASCII).
fn header_text(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(name) else { return Ok(None) };
    let bad = || ApiError::new(ErrorCode::InvalidRequest, format!("{name} must be percent-encoded UTF-8"));
    let raw = v.to_str().map_err(|_| bad())?;
    let text = percent_encoding::percent_decode_str(raw).decode_utf8().map_err(|_| bad())?;
    Ok(Some(text.into_owned()))
}

/// Whether a (lower-case) name says the header carries a credential or a session:
/// `Authorization`, `Cookie`, `X-Api-Key`, `X-Goog-Api-Key`, `Private-Token`,
/// `X-Amz-Security-Token`, `X-Session-Id` … (`Idempotency-Key` is no credential, nor
/// `Mcp-Session-Id`: a Streamable HTTP MCP session the caller holds with the server itself,
/// which checks the bearer on every request anyway).
fn names_a_credential(name: &str) -> bool {
    if name == "mcp-session-id" {
        return false;
    }
    const WORDS: [&str; 11] = [
        "auth",
        "token",
        "secret",
        "password",
        "passwd",
        "session",
        "cookie",
        "credential",
        "api-key",
        "apikey",
        "api_key",
    ];
    WORDS.iter().any(|w| name.contains(w)) || name == "key" || name.ends_with("-access-key")
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) and those the proxy sets itself.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "forwarded"
            | "via"
            | "x-real-ip"
            | "x-request-id"
            | "traceparent"
            | "tracestate"
    ) || name.starts_with("x-forwarded-")
        || name.starts_with("proxy-")
        || name.starts_with("mcp-connect-")
}

/// Headers that make a server act on another method or path than the one checked
/// (`X-HTTP-Method-Override: DELETE` on a `POST`), or that claim where the caller is.
fn changes_the_request(name: &str) -> bool {
    matches!(
        name,
        "x-http-method-override"
            | "x-http-method"
            | "x-method-override"
            | "x-original-url"
            | "x-rewrite-url"
            | "x-original-method"
            | "true-client-ip"
            | "x-client-ip"
            | "cf-connecting-ip"
            | "x-cluster-client-ip"
    ) || name.contains("subscription-key")
}

/// The header names `Connection` lists: hop-by-hop for this one message.
fn connection_listed(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(actix_web::http::header::CONNECTION)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect()
}

/// The caller's end-to-end headers that carry no credential and say nothing of where it is.
fn forwarded_headers(headers: &HeaderMap) -> reqwest::header::HeaderMap {
    let listed = connection_listed(headers);
    let mut out = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let n = name.as_str();
        if hop_by_hop(n) || names_a_credential(n) || changes_the_request(n) || listed.iter().any(|l| l == n) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(n.as_bytes()),
            reqwest::header::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.append(name, value);
        }
    }
    out
}

/// Attaches the user's credential as the provider takes it: a bearer token for OAuth and
/// remote MCP servers; for a typed credential where its check puts it (a header, a query
/// parameter, HTTP Basic), else `Authorization: Bearer` for an API key.
fn attach(
    out: &mut reqwest::Request,
    provider: &Provider,
    token: &SecretString,
    credential: Option<&Credential>,
) -> Result<(), ApiError> {
    let placement = match provider.credential() {
        None => None,
        Some(spec) => spec
            .check
            .as_ref()
            .map(|c| c.placement.clone())
            .or_else(|| (spec.credential_type() == "basic").then_some(Placement::Basic)),
    };
    let bad = || ApiError::new(ErrorCode::ProviderMisconfigured, "the credential cannot be sent in a header");
    match placement {
        None => {
            let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.expose_secret()))
                .map_err(|_| bad())?;
            v.set_sensitive(true);
            out.headers_mut().insert(reqwest::header::AUTHORIZATION, v);
        }
        Some(Placement::Header { name, prefix }) => {
            let mut v = reqwest::header::HeaderValue::from_str(&format!("{prefix}{}", token.expose_secret()))
                .map_err(|_| bad())?;
            v.set_sensitive(true);
            out.headers_mut().insert(name, v);
        }
        Some(Placement::Query { name }) => {
            // The caller's own value of that parameter, if any, is dropped: ours is the one.
            let url = out.url_mut();
            let kept: Vec<(String, String)> =
                url.query_pairs().filter(|(k, _)| *k != name).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
            url.query_pairs_mut().clear().extend_pairs(kept).append_pair(&name, token.expose_secret());
        }
        Some(Placement::Basic) => {
            let user = credential.and_then(|c| c.fields.get("username")).cloned().unwrap_or_default();
            let encoded = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{user}:{}", token.expose_secret()),
            );
            let mut v = reqwest::header::HeaderValue::from_str(&format!("Basic {encoded}")).map_err(|_| bad())?;
            v.set_sensitive(true);
            out.headers_mut().insert(reqwest::header::AUTHORIZATION, v);
        }
    }
    Ok(())
}

/// Whether the caller sends a body (RFC 9112 §6.3: a length or a transfer coding).
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(actix_web::http::header::TRANSFER_ENCODING)
        || headers
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// The caller's body as a stream reqwest can send from another thread: actix's payload
/// is read here, on the worker, into a small channel (so nothing is buffered whole); past
/// [`MAX_REQUEST_BODY`] the stream fails and `too_large` says why.
fn request_body(mut payload: web::Payload, too_large: Arc<AtomicBool>) -> Chunks {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    actix_web::rt::spawn(async move {
        let mut sent: u64 = 0;
        while let Some(chunk) = payload.next().await {
            let item = match chunk {
                Ok(c) => {
                    sent += c.len() as u64;
                    if sent > MAX_REQUEST_BODY {
                        too_large.store(true, Ordering::Relaxed);
                        let _ = tx.send(Err(std::io::Error::other("request body too large"))).await;
                        return;
                    }
                    Ok(c)
                }
                Err(_) => Err(std::io::Error::other("the caller's body broke off")),
            };
            let stop = item.is_err();
            if tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    Chunks(rx)
}

/// A channel's receiving end as a body stream.
struct Chunks(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_util::Stream for Chunks {
    type Item = Result<Bytes, std::io::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

fn upstream_error(e: &OutboundError) -> ApiError {
    tracing::warn!(error = %e, "the proxy could not reach the provider's API");
    match e {
        OutboundError::Timeout => {
            ApiError::new(ErrorCode::UpstreamTimeout, "the provider's API sent no answer in time")
        }
        OutboundError::Refused(r) => {
            ApiError::new(ErrorCode::UpstreamRefused, format!("the provider's API address is refused ({})", r.code()))
        }
        _ => ApiError::new(ErrorCode::UpstreamUnreachable, "the provider's API could not be reached"),
    }
}

/// The caller's answer's status and headers from the provider's: hop-by-hop headers,
/// cookies and any header that repeats the credential dropped; `refreshed` said.
fn answer_head(
    answer: &reqwest::Response,
    refreshed: Option<&'static str>,
    secrets: &Spellings,
) -> Result<actix_web::HttpResponseBuilder, ApiError> {
    let status = actix_web::http::StatusCode::from_u16(answer.status().as_u16())
        .map_err(|_| ApiError::new(ErrorCode::UpstreamUnreachable, "the provider answered an invalid status"))?;
    let mut r = HttpResponse::build(status);
    let listed: Vec<String> = answer
        .headers()
        .get_all(reqwest::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in answer.headers() {
        let n = name.as_str();
        if hop_by_hop(n) || n == "set-cookie" || n == "set-cookie2" || listed.iter().any(|l| l == n) {
            continue;
        }
        // A provider that repeats the credential (a `Location` or `Link` with the query it
        // was sent, an echoed `Authorization`) would hand it to the caller: such a header
        // is dropped.
        if secrets.iter().any(|s| contains(value.as_bytes(), s.as_bytes())) {
            tracing::info!(header = n, "a provider's answer header repeats the credential; dropped");
            continue;
        }
        r.append_header((n, value.as_bytes()));
    }
    if let Some(said) = refreshed {
        r.insert_header((REFRESHED_HEADER, said));
    }
    Ok(r)
}

/// Answers of a known length up to this are read whole and sent on at once.
const SMALL_ANSWER: u64 = 64 * 1024;

/// The provider's answer, its body streamed (cut past [`MAX_RESPONSE_BODY`]) unless it is
/// small; with `refreshed`, a `401` after which the grant was refreshed (`true`: the
/// caller may send its request again) or could not be (`failed`).
async fn respond(
    answer: reqwest::Response,
    method: &reqwest::Method,
    refreshed: Option<&'static str>,
    watch: Watch,
    secrets: &Spellings,
) -> Result<HttpResponse, Refused> {
    let length = answer.content_length();
    if length.is_some_and(|n| n > MAX_RESPONSE_BODY) {
        return Err(ApiError::new(ErrorCode::UpstreamTooLarge, "the provider's answer is larger than 256 MiB").into());
    }
    let mut r = answer_head(&answer, refreshed, secrets)?;
    // A small answer of known length (most API answers) is read whole and sent in one
    // write: no stream to set up or watch. It is read within the bound on an answer's head
    // (a provider that trickles it gets no longer, and a revocation meanwhile is not waited
    // for longer: what was sent before it is answered, as a stream's first bytes are). A
    // HEAD's length is that of a body it does not have: streamed as it is.
    if length.is_some_and(|n| n <= SMALL_ANSWER) && method != reqwest::Method::HEAD {
        let body = tokio::time::timeout(crate::net::forward::HEAD_TIMEOUT, answer.bytes()).await;
        let body = match body {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => {
                tracing::warn!(error = %e.without_url(), "the provider's answer broke off");
                return Err(ApiError::new(ErrorCode::UpstreamUnreachable, "the provider's answer broke off").into());
            }
            Err(_) => {
                return Err(
                    ApiError::new(ErrorCode::UpstreamTimeout, "the provider's answer did not come in time").into()
                );
            }
        };
        return Ok(r.body(body));
    }
    let mut read: u64 = 0;
    let body = answer.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| {
            tracing::warn!(error = %e.without_url(), "the provider's answer broke off");
            std::io::Error::other("the provider's answer broke off")
        })?;
        read += chunk.len() as u64;
        if read > MAX_RESPONSE_BODY {
            tracing::warn!("the provider's answer passed 256 MiB; cut");
            return Err(std::io::Error::other("the provider's answer is too large"));
        }
        Ok(chunk)
    });
    // Cut with an error (the caller's connection is broken off, not ended as if complete)
    // when the connection ends; the watch is dropped with the stream.
    let body = futures_util::stream::unfold(
        (Box::pin(body), Box::pin(watch.revoked()), false),
        |(mut body, mut revoked, cut)| async move {
            if cut {
                return None;
            }
            tokio::select! {
                () = &mut revoked => {
                    Some((Err(std::io::Error::other("the connection ended")), (body, revoked, true)))
                }
                item = body.next() => item.map(|i| (i, (body, revoked, false))),
            }
        },
    );
    Ok(match length {
        Some(n) => r.body(actix_web::body::SizedStream::new(n, body)),
        None => r.streaming(body),
    })
}

/// The proxy's `connect_required`: 428 with `/v1/token`'s answer (the elicitation for the
/// MCP client) and the error code.
fn connect_required(answer: super::token::ConnectRequired) -> HttpResponse {
    #[derive(serde::Serialize)]
    struct Body {
        error: ErrorCode,
        error_description: &'static str,
        #[serde(flatten)]
        answer: super::token::TokenAnswer<'static>,
    }
    let mut r = HttpResponse::build(ErrorCode::ConnectRequired.status());
    r.insert_header((ERROR_HEADER, ErrorCode::ConnectRequired.as_str()));
    r.json(Body {
        error: ErrorCode::ConnectRequired,
        error_description: "no usable connection: show the elicitation, then retry with MCP-Connect-Elicitation-Id",
        answer: super::token::TokenAnswer::ConnectRequired(answer),
    })
}
