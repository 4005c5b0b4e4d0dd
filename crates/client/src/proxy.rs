//! The request side of `/v1/proxy/{provider}/{path}` (docs/proxy.md): what a proxied call
//! names, checked before anything is sent, and what it can come back as. The Rust
//! counterpart of the Python SDK's `ConnectClient.proxied` and the TypeScript SDK's
//! `proxyFetch`, with their checks.
//!
//! The path is checked here because the server key goes with it: a URL parser resolves
//! `..` (also `%2e%2e`) before sending, so `/../../token` would reach another of
//! mcp-connect's endpoints with the key. Only what RFC 3986 §3.3 allows in a path as it is
//! passes, without dot or empty segments, and the URL built from it must still lie under
//! `/v1/proxy/{provider}/`.

use crate::api::{Elicitation, ElicitationId, McpUrlElicitation};
use crate::secret::SubjectToken;
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use std::fmt;
use url::Url;

/// The headers a caller addresses the proxy with (mcp-connect forwards none of them).
const SUBJECT: &str = "mcp-connect-subject";
const SUBJECT_TOKEN: &str = "mcp-connect-subject-token";
const SCOPES: &str = "mcp-connect-scopes";
const ELICITATION: &str = "mcp-connect-elicitation-id";
const ORIGIN: &str = "mcp-connect-origin";
const SERVER_NAME: &str = "mcp-connect-server-name";
/// On every answer the proxy makes itself (never on a provider's): its error code.
pub(crate) const ERROR_HEADER: &str = "mcp-connect-error";
/// The longest subject token mcp-connect takes.
const SUBJECT_TOKEN_MAX: usize = 8192;

/// Why a proxied request was refused before anything was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidProxyRequest {
    /// mcp-connect's provider ids go in the path as they are (it refuses an encoded one).
    #[error("the provider is not a provider id: 1 to 64 characters of a-z, 0-9, '-' or '_', from a letter or digit")]
    Provider,
    /// A URL, a `//host` or a relative path: the server key would go elsewhere.
    #[error("a proxied request takes the path at the provider's API from '/' (\"/user\"), not a URL or a //host")]
    NotAPath,
    /// RFC 3986 §3.3 `pchar` (and `/`, and in the query `?`) only, `%` only before two hex
    /// digits: a parser drops or re-encodes anything else before it resolves dot segments.
    #[error("the path or query has a character that must be percent-encoded, or a stray '%'")]
    Character,
    /// `//` inside the path: an empty segment, which some servers collapse.
    #[error("the path has an empty segment (//)")]
    EmptySegment,
    /// `.` or `..`, also encoded (`%2e`) and before a `;` (which some servers strip).
    #[error("the path has a dot segment: give the provider's path without . or ..")]
    DotSegment,
    /// `%2f` or `%5c`: a slash (or backslash) to servers that decode before routing.
    #[error("the path has an encoded slash or backslash")]
    EncodedSeparator,
    /// The URL built from the path lies outside `/v1/proxy/{provider}/` (a second look, as
    /// the sending parser sees it).
    #[error("the proxied URL leaves the provider's proxy")]
    LeavesTheProxy,
    /// A scope is empty, or holds white space or a non-ASCII character (the header is
    /// space-separated).
    #[error("each scope must be printable ASCII without white space")]
    Scope,
    /// Not an http(s) origin without a path, query, fragment or user.
    #[error("the origin must be an http(s) origin without a path, e.g. https://uploads.github.com")]
    Origin,
    /// Empty, longer than 8192 characters, or not a header value.
    #[error("the subject token must be 1 to 8192 visible ASCII characters")]
    SubjectToken,
}

/// One call to a provider's API through mcp-connect's proxy, as the user `subject`:
/// mcp-connect attaches the user's credential, which the caller never holds. Sent with
/// [`crate::Client::proxy`]; the body goes once, so a retry (after a `connect_required`,
/// with [`Self::elicitation_id`]) is a new `ProxyRequest`.
pub struct ProxyRequest {
    subject: String,
    provider: String,
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Option<reqwest::Body>,
    subject_token: Option<SubjectToken>,
    scopes: Option<Vec<String>>,
    elicitation_id: Option<ElicitationId>,
    server_name: Option<String>,
    origin: Option<String>,
}

impl ProxyRequest {
    /// `subject` is the `sub` of the validated MCP access token, never a tool argument;
    /// `provider` mcp-connect's id of it (`github`); `path` the path and query at the
    /// provider's API, from `/` (`/user`, `/repos/o/r/issues?state=open`).
    pub fn new(
        subject: impl Into<String>,
        provider: impl Into<String>,
        method: Method,
        path: impl Into<String>,
    ) -> Self {
        Self {
            subject: subject.into(),
            provider: provider.into(),
            method,
            path: path.into(),
            headers: HeaderMap::new(),
            body: None,
            subject_token: None,
            scopes: None,
            elicitation_id: None,
            server_name: None,
            origin: None,
        }
    }

    /// A header for the provider. `Authorization` is the server key's and `MCP-Connect-*`
    /// the proxy's: the caller's own of those are dropped. mcp-connect drops more (any
    /// that could carry a credential, docs/proxy.md "What passes").
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// The body for the provider (streamed as it is given; at most 10 MiB).
    pub fn body(mut self, body: impl Into<reqwest::Body>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// The user's MCP access token the subject was taken from, as
    /// [`crate::TokenRequest::subject_token`]: mcp-connect checks it proves the subject.
    pub fn subject_token(mut self, token: SubjectToken) -> Self {
        self.subject_token = Some(token);
        self
    }

    /// Scopes beyond the provider's configured default.
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// The retry after a `connect_required`: the elicitation it handed out, so mcp-connect
    /// reconciles it (pending, completed, declined) instead of starting anew.
    pub fn elicitation_id(mut self, id: ElicitationId) -> Self {
        self.elicitation_id = Some(id);
        self
    }

    /// The MCP server's name for the elicitation's message, as
    /// [`crate::TokenRequest::server_name`] (sent percent-encoded).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Another of the provider's API origins than its first (`https://uploads.github.com`).
    pub fn origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The provider's id, checked: it becomes a path segment under `/v1/proxy/`.
    pub(crate) fn checked_provider(&self) -> Result<&str, InvalidProxyRequest> {
        let p = self.provider.as_bytes();
        let ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let valid = (1..=64).contains(&p.len())
            && p.first().is_some_and(ok)
            && p.iter().all(|b| ok(b) || *b == b'-' || *b == b'_');
        if valid { Ok(&self.provider) } else { Err(InvalidProxyRequest::Provider) }
    }

    /// What goes on the wire but the server key: the URL under `prefix`
    /// (`<base>/v1/proxy/<provider>`), the caller's headers with ours, the body.
    pub(crate) fn prepare(self, prefix: &Url) -> Result<Prepared, InvalidProxyRequest> {
        let url = proxied_url(prefix, &self.path)?;
        let mut headers = self.headers;
        headers.remove(AUTHORIZATION);
        // Ours, and what would send the server key somewhere else than the URL checked
        // above (a `Host` a name-based front routes by, a rewrite of the path a front
        // honours) or change how the request is framed: mcp-connect forwards none of them.
        let theirs: Vec<HeaderName> = headers
            .keys()
            .filter(|n| n.as_str().starts_with("mcp-connect-") || redirects(n.as_str()))
            .cloned()
            .collect();
        for name in theirs {
            headers.remove(name);
        }
        let ask = Ask {
            subject: &self.subject,
            subject_token: self.subject_token.as_ref(),
            scopes: self.scopes.as_deref(),
            elicitation_id: self.elicitation_id.as_ref(),
            server_name: self.server_name.as_deref(),
            origin: self.origin.as_deref(),
        };
        ask.write(&mut headers)?;
        Ok(Prepared { method: self.method, url, headers, body: self.body, elicitation_id: self.elicitation_id })
    }
}

/// A header that names another host or path for the request, or frames it.
fn redirects(name: &str) -> bool {
    matches!(
        name,
        "host"
            | "forwarded"
            | "x-original-url"
            | "x-rewrite-url"
            | "x-http-method-override"
            | "x-http-method"
            | "x-method-override"
            | "connection"
            | "keep-alive"
            | "te"
            | "upgrade"
            | "transfer-encoding"
            | "content-length"
            | "proxy-authorization"
            | "proxy-connection"
    ) || name.starts_with("x-forwarded-")
}

/// Names only: header values and the body may hold what is never logged.
impl fmt::Debug for ProxyRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyRequest")
            .field("subject", &self.subject)
            .field("provider", &self.provider)
            .field("method", &self.method)
            .field("path", &self.path.split(['?', '#']).next().unwrap_or_default())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("body", &self.body.is_some())
            .field("subject_token", &self.subject_token)
            .field("scopes", &self.scopes)
            .field("elicitation_id", &self.elicitation_id)
            .field("server_name", &self.server_name)
            .field("origin", &self.origin)
            .finish()
    }
}

/// A checked proxied request, ready to send with the server key.
pub(crate) struct Prepared {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<reqwest::Body>,
    /// The elicitation the request names: a `connect_declined` is about this one.
    pub elicitation_id: Option<ElicitationId>,
}

/// What a proxied call came back as. `ConnectRequired` and `Declined` are
/// [`crate::TokenOutcome`]'s, so a caller handles both calls' the same way.
#[derive(Debug)]
pub enum ProxyOutcome {
    /// The provider's answer as it sent it: any status (its own `401` too, which may carry
    /// `MCP-Connect-Refreshed: true`, send it again, or `failed`), its headers but those
    /// mcp-connect drops, a redirect unfollowed. The body streams: read it with `chunk()`,
    /// `bytes()`, `json()` (or `bytes_stream()` with reqwest's `stream` feature).
    Response(reqwest::Response),
    /// No usable connection: send `mcp` as a URL-mode elicitation, then retry with
    /// [`ProxyRequest::elicitation_id`].
    ConnectRequired { elicitation: Elicitation, mcp: McpUrlElicitation, provider_name: Option<String> },
    /// The person declined the elicitation the request named: answer "not connected" and
    /// do not prompt again on your own. `provider_name` is `None` where the proxy's answer
    /// does not carry it.
    Declined { elicitation_id: ElicitationId, provider_name: Option<String> },
}

/// The `MCP-Connect-*` headers, borrowed from the request.
struct Ask<'a> {
    subject: &'a str,
    subject_token: Option<&'a SubjectToken>,
    scopes: Option<&'a [String]>,
    elicitation_id: Option<&'a ElicitationId>,
    server_name: Option<&'a str>,
    origin: Option<&'a str>,
}

impl Ask<'_> {
    fn write(&self, headers: &mut HeaderMap) -> Result<(), InvalidProxyRequest> {
        headers.insert(SUBJECT, encoded(self.subject)?);
        if let Some(token) = self.subject_token {
            headers.insert(SUBJECT_TOKEN, subject_token(token)?);
        }
        if let Some(scopes) = self.scopes {
            headers.insert(SCOPES, scopes_header(scopes)?);
        }
        if let Some(id) = self.elicitation_id {
            // Visible ASCII (ElicitationId::parse): a valid header value as it is.
            let value = HeaderValue::from_str(id.as_str()).map_err(|_| InvalidProxyRequest::Character)?;
            headers.insert(ELICITATION, value);
        }
        if let Some(name) = self.server_name {
            headers.insert(SERVER_NAME, encoded(name)?);
        }
        if let Some(origin) = self.origin {
            headers.insert(ORIGIN, origin_header(origin)?);
        }
        Ok(())
    }
}

/// Text for a header mcp-connect percent-decodes once as UTF-8: any text fits. The
/// unreserved characters (RFC 3986 §2.3) stay, every other byte, `%` first, is `%XX`.
fn encoded(text: &str) -> Result<HeaderValue, InvalidProxyRequest> {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&out).map_err(|_| InvalidProxyRequest::Character)
}

fn subject_token(token: &SubjectToken) -> Result<HeaderValue, InvalidProxyRequest> {
    let t = token.expose_secret();
    if t.is_empty() || t.len() > SUBJECT_TOKEN_MAX || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(InvalidProxyRequest::SubjectToken);
    }
    let mut value = HeaderValue::from_str(t).map_err(|_| InvalidProxyRequest::SubjectToken)?;
    // Kept out of the `Debug` of reqwest's request and header map.
    value.set_sensitive(true);
    Ok(value)
}

/// Space-separated; `%` is encoded, since mcp-connect percent-decodes the header.
fn scopes_header(scopes: &[String]) -> Result<HeaderValue, InvalidProxyRequest> {
    if scopes.iter().any(|s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic())) {
        return Err(InvalidProxyRequest::Scope);
    }
    let joined = scopes.iter().map(|s| s.replace('%', "%25")).collect::<Vec<_>>().join(" ");
    HeaderValue::from_str(&joined).map_err(|_| InvalidProxyRequest::Scope)
}

/// An http(s) origin, serialised as mcp-connect compares it (scheme, host, port).
fn origin_header(origin: &str) -> Result<HeaderValue, InvalidProxyRequest> {
    let url = Url::parse(origin).map_err(|_| InvalidProxyRequest::Origin)?;
    let bare = matches!(url.scheme(), "http" | "https")
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    if !bare {
        return Err(InvalidProxyRequest::Origin);
    }
    HeaderValue::from_str(&url.origin().ascii_serialization()).map_err(|_| InvalidProxyRequest::Origin)
}

/// `prefix` with the checked path and query appended; refused unless the URL's path is
/// exactly the prefix's followed by the path written.
fn proxied_url(prefix: &Url, target: &str) -> Result<Url, InvalidProxyRequest> {
    let (path, query) = checked_target(target)?;
    let wanted = format!("{}{path}", prefix.path());
    let mut url = prefix.clone();
    url.set_path(&wanted);
    url.set_query(query);
    url.set_fragment(None);
    if url.path() != wanted || url.origin() != prefix.origin() {
        return Err(InvalidProxyRequest::LeavesTheProxy);
    }
    Ok(url)
}

/// The path and query of `target` (a fragment is never sent, so it is dropped), refused
/// where a URL parser would send another path than the one written, or to another host.
/// mcp-connect refuses these too, and more (an encoded dot or percent sign), as
/// `proxy_path_refused`; here they never leave with the server key.
fn checked_target(target: &str) -> Result<(&str, Option<&str>), InvalidProxyRequest> {
    let target = target.split('#').next().unwrap_or_default();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let Some(rest) = path.strip_prefix('/') else { return Err(InvalidProxyRequest::NotAPath) };
    if rest.starts_with('/') {
        return Err(InvalidProxyRequest::NotAPath);
    }
    if !only(path, |b| b == b'/' || is_pchar(b))
        || !query.is_none_or(|q| only(q, |b| b == b'/' || b == b'?' || is_pchar(b)))
    {
        return Err(InvalidProxyRequest::Character);
    }
    let segments: Vec<&str> = rest.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        check_segment(segment, i + 1 == segments.len())?;
    }
    Ok((path, query))
}

fn check_segment(segment: &str, last: bool) -> Result<(), InvalidProxyRequest> {
    if segment.is_empty() && !last {
        return Err(InvalidProxyRequest::EmptySegment);
    }
    let lower = segment.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        return Err(InvalidProxyRequest::EncodedSeparator);
    }
    // `..;x` is `..` to servers that strip path parameters.
    let name = lower.split(';').next().unwrap_or_default().replace("%2e", ".");
    if name == "." || name == ".." {
        return Err(InvalidProxyRequest::DotSegment);
    }
    Ok(())
}

/// Whether every byte is `allowed`, `%` only as the start of `%XX`.
fn only(text: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let b = text.as_bytes();
    b.iter().enumerate().all(|(i, &c)| {
        if c == b'%' {
            b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
        } else {
            allowed(c)
        }
    })
}

/// RFC 3986 §3.3 `pchar` but `pct-encoded` (checked by [`only`]): unreserved, sub-delims,
/// `:` and `@`.
fn is_pchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use InvalidProxyRequest as R;

    fn prefix() -> Url {
        "https://c.example/base/v1/proxy/github".parse().unwrap()
    }

    #[test]
    fn paths_that_would_leave_the_proxy_are_refused() {
        let cases: &[(&str, R)] = &[
            ("user", R::NotAPath),
            ("https://evil.example/x", R::NotAPath),
            ("//evil.example/x", R::NotAPath),
            ("", R::NotAPath),
            ("/../token", R::DotSegment),
            ("/a/..", R::DotSegment),
            ("/a/./b", R::DotSegment),
            ("/%2e%2e/token", R::DotSegment),
            ("/%2E./token", R::DotSegment),
            ("/..;x/token", R::DotSegment),
            ("/a//b", R::EmptySegment),
            ("/a%2fb", R::EncodedSeparator),
            ("/a%5Cb", R::EncodedSeparator),
            ("/a\\b", R::Character),
            ("/a b", R::Character),
            ("/.\t./token", R::Character),
            ("/a%zz", R::Character),
            ("/a%2", R::Character),
            ("/caf\u{e9}", R::Character),
            ("/user?q=a b", R::Character),
        ];
        for (path, why) in cases {
            assert_eq!(proxied_url(&prefix(), path).unwrap_err(), *why, "{path:?}");
        }
    }

    #[test]
    fn paths_at_the_providers_api_keep_their_bytes() {
        let cases = [
            ("/user", "https://c.example/base/v1/proxy/github/user"),
            ("/", "https://c.example/base/v1/proxy/github/"),
            ("/repos/o/r/issues/", "https://c.example/base/v1/proxy/github/repos/o/r/issues/"),
            ("/a/...b/%41;v=1:@", "https://c.example/base/v1/proxy/github/a/...b/%41;v=1:@"),
            ("/search?q=a%20b&sort=x/y?z#top", "https://c.example/base/v1/proxy/github/search?q=a%20b&sort=x/y?z"),
        ];
        for (path, url) in cases {
            assert_eq!(proxied_url(&prefix(), path).unwrap().as_str(), url, "{path:?}");
        }
    }

    #[test]
    fn provider_ids_are_checked_before_they_become_a_path_segment() {
        let of = |p: &str| ProxyRequest::new("a", p, Method::GET, "/").checked_provider().map(str::to_owned);
        assert_eq!(of("git-hub_2").unwrap(), "git-hub_2");
        for bad in ["", "GitHub", "-gh", "a/b", "..", "a%2f", &"a".repeat(65)] {
            assert_eq!(of(bad), Err(R::Provider), "{bad:?}");
        }
    }

    fn prepared(req: ProxyRequest) -> Result<Prepared, R> {
        req.prepare(&prefix())
    }

    #[test]
    fn the_ask_headers_are_encoded_and_the_callers_own_are_dropped() {
        let p = prepared(
            ProxyRequest::new("alice@example.com ü", "github", Method::POST, "/user")
                .header(AUTHORIZATION, HeaderValue::from_static("Bearer theirs"))
                .header(HeaderName::from_static("mcp-connect-subject"), HeaderValue::from_static("mallory"))
                .header(HeaderName::from_static("accept"), HeaderValue::from_static("application/json"))
                .scopes(["repo", "read:org", "100%"])
                .elicitation_id(ElicitationId::parse("e-1").unwrap())
                .server_name("Whoami Tools")
                .origin("https://uploads.github.com")
                .subject_token(SubjectToken::new("eyJ.subject.token")),
        )
        .unwrap();
        let h = &p.headers;
        assert_eq!(h[SUBJECT], "alice%40example.com%20%C3%BC");
        assert_eq!(h.get_all(SUBJECT).iter().count(), 1);
        assert!(h.get(AUTHORIZATION).is_none(), "the server key is added when sending");
        assert_eq!(h["accept"], "application/json");
        assert_eq!(h[SCOPES], "repo read:org 100%25");
        assert_eq!(h[ELICITATION], "e-1");
        assert_eq!(h[SERVER_NAME], "Whoami%20Tools");
        assert_eq!(h[ORIGIN], "https://uploads.github.com");
        assert_eq!(h[SUBJECT_TOKEN], "eyJ.subject.token");
        assert!(!format!("{h:?}").contains("eyJ.subject.token"), "the subject token is a sensitive header");
        assert_eq!(p.method, Method::POST);

        // Nothing that would route the request, and the server key with it, elsewhere.
        let mut r = ProxyRequest::new("alice", "github", Method::GET, "/user");
        for (n, v) in [
            ("host", "admin-api.internal"),
            ("x-original-url", "/v1/token"),
            ("x-rewrite-url", "/v1/token"),
            ("x-forwarded-host", "evil.example"),
            ("forwarded", "host=evil.example"),
            ("x-http-method-override", "DELETE"),
            ("transfer-encoding", "chunked"),
        ] {
            r = r.header(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        let p = prepared(r).unwrap();
        assert!(
            p.headers.is_empty() || p.headers.keys().all(|k| k.as_str().starts_with("mcp-connect-")),
            "{:?}",
            p.headers
        );

        // An `MCP-Connect-*` header of the caller's is dropped even where the request sets none.
        let p =
            prepared(ProxyRequest::new("alice", "github", Method::GET, "/user").header(
                HeaderName::from_static("mcp-connect-origin"),
                HeaderValue::from_static("https://evil.example"),
            ))
            .unwrap();
        assert!(p.headers.get(ORIGIN).is_none());
    }

    #[test]
    fn ask_values_mcp_connect_would_refuse_are_refused_here() {
        let req = || ProxyRequest::new("alice", "github", Method::GET, "/user");
        assert_eq!(prepared(req().scopes(["a b"])).err(), Some(R::Scope));
        assert_eq!(prepared(req().scopes([""])).err(), Some(R::Scope));
        assert_eq!(prepared(req().subject_token(SubjectToken::new(""))).err(), Some(R::SubjectToken));
        assert_eq!(prepared(req().subject_token(SubjectToken::new("a\nb"))).err(), Some(R::SubjectToken));
        for bad in ["uploads.github.com", "https://uploads.github.com/x", "ftp://h", "https://u@h", "https://h/?q"] {
            assert_eq!(prepared(req().origin(bad)).err(), Some(R::Origin), "{bad}");
        }
    }

    #[test]
    fn debug_names_headers_but_shows_no_value_body_or_query() {
        let req = ProxyRequest::new("alice", "github", Method::POST, "/user?code=sekrit-query")
            .header(HeaderName::from_static("x-note"), HeaderValue::from_static("sekrit-header"))
            .body("sekrit-body")
            .subject_token(SubjectToken::new("sekrit-token"));
        let shown = format!("{req:?}");
        assert!(shown.contains("x-note") && shown.contains("/user"), "{shown}");
        assert!(!shown.contains("sekrit"), "{shown}");
    }
}
