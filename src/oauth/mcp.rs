//! Remote MCP servers as providers (`template = "mcp"`): the authorization server found
//! from the server's protected resource metadata (RFC 9728: the `resource_metadata` of its
//! `WWW-Authenticate` answer, else the well-known URI), then the authorization server's
//! metadata (RFC 8414, else OpenID discovery), checked as the MCP authorization spec asks
//! (the metadata's `resource` is the server's, the issuer is the one named, PKCE S256 is
//! supported). The code flow then carries the RFC 8707 `resource` on authorize, token and
//! refresh requests (`AuthServer::resource`). Registering a client is the caller's (it
//! needs the database): this module says which ways the server offers.
//!
//! Written by hand: neither `oauth2` nor `openidconnect` reads RFC 9728 metadata or a
//! `WWW-Authenticate` challenge.

use super::http::{Guard, Outbound, OutboundError, Reach};
use super::resolve::ResolveError;
use super::urls;
use std::collections::HashMap;
use std::sync::Arc;
use url::Url;

/// What discovery found for one remote MCP server.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The remote server's resource identifier (as configured, and as its metadata says).
    pub resource: String,
    pub issuer: String,
    pub authorize_url: Url,
    pub token_url: Url,
    pub revocation_url: Option<Url>,
    /// RFC 7591 dynamic registration, where offered.
    pub registration_url: Option<Url>,
    /// The server fetches a client's metadata from its `client_id` URL (Client ID Metadata
    /// Documents, as the MCP authorization spec describes).
    pub client_id_metadata_documents: bool,
    pub iss_parameter_supported: bool,
    /// The scopes the resource's metadata lists (asked for when a connect names none).
    pub scopes_supported: Vec<String>,
    /// The origins other than the resource's that we send to, and how they are reached.
    pub guard: Guard,
}

#[derive(serde::Deserialize)]
struct ResourceMetadata {
    resource: String,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

#[derive(serde::Deserialize)]
struct ServerMetadata {
    issuer: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    registration_endpoint: Option<String>,
    #[serde(default)]
    code_challenge_methods_supported: Vec<String>,
    #[serde(default)]
    client_id_metadata_document_supported: bool,
    #[serde(default)]
    authorization_response_iss_parameter_supported: bool,
}

/// The `resource_metadata` parameter of a `WWW-Authenticate: Bearer …` challenge.
pub fn resource_metadata_of(challenge: &str) -> Option<String> {
    let params = challenge.strip_prefix("Bearer ").or_else(|| challenge.strip_prefix("bearer "))?;
    // The parameter itself (at the start, or after a `,` or a space, outside any quoted
    // value), not text inside another parameter that mentions it.
    let at = params.match_indices("resource_metadata=").map(|(i, _)| i).find(|&i| {
        (i == 0 || matches!(params.as_bytes()[i - 1], b' ' | b',')) && params[..i].matches('"').count() % 2 == 0
    })? + "resource_metadata=".len();
    let rest = &params[at..];
    match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().map(str::to_owned),
        None => rest.split([',', ' ']).next().map(str::to_owned),
    }
    .filter(|s| !s.is_empty())
}

/// RFC 9728 §3.1 and RFC 8414 §3.1: the well-known name inserted between the host and the
/// path (`https://h/.well-known/<name>/path`; no trailing `/` for an empty path).
pub fn well_known(base: &Url, name: &str) -> Url {
    let mut u = base.clone();
    let path = base.path().trim_end_matches('/');
    u.set_path(&format!("/.well-known/{name}{path}"));
    u.set_query(None);
    u.set_fragment(None);
    u
}

/// The places an authorization server's metadata may be, in the order the MCP
/// authorization spec lists them.
fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let mut urls = vec![well_known(issuer, "oauth-authorization-server"), well_known(issuer, "openid-configuration")];
    let path = issuer.path().trim_end_matches('/');
    if !path.is_empty() {
        let mut appended = issuer.clone();
        appended.set_path(&format!("{path}/.well-known/openid-configuration"));
        urls.push(appended);
    }
    urls
}

fn invalid(resource: &str, message: impl Into<String>) -> ResolveError {
    ResolveError::Invalid(resource.to_owned(), message.into())
}

/// Discovers the authorization server of the remote MCP server at `resource`. Every origin
/// but the resource's (the operator's word) is reached through the SSRF guard: public
/// https addresses only, or private ones too where `allow_private` says so.
pub async fn discover(http: &Outbound, resource: &Url, allow_private: bool) -> Result<Discovered, ResolveError> {
    let name = resource.as_str();
    let reach = if allow_private { Reach::Private } else { Reach::Public };
    let guard = std::cell::RefCell::new(HashMap::<String, Reach>::new());
    let ours = resource.origin();
    let admit = |url: &Url, what: &str| -> Result<(), ResolveError> {
        if url.origin() != ours {
            crate::oauth::ssrf::check_url(url, reach.policy()).map_err(|r| {
                let hint = if allow_private { "" } else { " (set allow_private_endpoints to allow it)" };
                invalid(name, format!("{what} {url} is on another origin than the server and {r}{hint}"))
            })?;
            guard.borrow_mut().insert(url.origin().ascii_serialization(), reach);
        }
        Ok(())
    };
    let guarded = || http.with_guard(&Arc::new(guard.borrow().clone()));
    // The server's own answer to a request without a token names its metadata.
    let (status, challenge) =
        http.probe(resource).await.map_err(|source| ResolveError::Fetch { url: name.to_owned(), source })?;
    let named = challenge.as_deref().filter(|_| status == 401).and_then(resource_metadata_of);
    let metadata_urls = match named {
        Some(u) => vec![urls::endpoint(&u, &[]).map_err(|e| invalid(name, format!("resource_metadata {u:?}: {e}")))?],
        None => {
            let mut root = resource.clone();
            root.set_path("/");
            vec![well_known(resource, "oauth-protected-resource"), well_known(&root, "oauth-protected-resource")]
        }
    };
    let mut found = None;
    let mut last = None;
    for url in &metadata_urls {
        admit(url, "resource_metadata")?;
        match guarded().get_json(url, None).await {
            Ok(v) => {
                found = Some(v);
                break;
            }
            Err(e) => last = Some(ResolveError::Fetch { url: url.to_string(), source: e }),
        }
    }
    let Some(raw) = found else {
        return Err(last.unwrap_or_else(|| invalid(name, "no protected resource metadata")));
    };
    let prm: ResourceMetadata =
        serde_json::from_value(raw).map_err(|e| invalid(name, format!("protected resource metadata: {e}")))?;
    // RFC 9728 §3.3: the metadata is for the resource asked about, or it is not used.
    if !same_resource(&prm.resource, resource) {
        return Err(invalid(name, format!("its metadata is for another resource ({:?})", prm.resource)));
    }
    let issuer = prm.authorization_servers.first().ok_or_else(|| invalid(name, "no authorization_servers"))?;
    let issuer_url = urls::endpoint(issuer, &[]).map_err(|e| invalid(name, format!("authorization server: {e}")))?;
    let mut doc = None;
    let mut last = None;
    for url in server_metadata_urls(&issuer_url) {
        admit(&url, "authorization server metadata")?;
        match guarded().get_json(&url, None).await {
            Ok(v) => {
                doc = Some(v);
                break;
            }
            Err(e @ OutboundError::Status(404)) => last = Some(ResolveError::Fetch { url: url.to_string(), source: e }),
            Err(e) => return Err(ResolveError::Fetch { url: url.to_string(), source: e }),
        }
    }
    let doc = doc.ok_or_else(|| last.unwrap_or_else(|| invalid(name, "no authorization server metadata")))?;
    let meta: ServerMetadata =
        serde_json::from_value(doc).map_err(|e| invalid(name, format!("authorization server metadata: {e}")))?;
    // RFC 8414 §3.3: the issuer is exactly the one the metadata was asked for.
    if meta.issuer != *issuer {
        return Err(invalid(name, format!("authorization server issuer {:?} is not {issuer:?}", meta.issuer)));
    }
    // The MCP authorization spec: no PKCE S256 advertised, no authorization.
    if !meta.code_challenge_methods_supported.iter().any(|m| m == "S256") {
        return Err(invalid(name, "the authorization server does not advertise PKCE S256"));
    }
    let endpoint = |what: &str, u: Option<String>| -> Result<Option<Url>, ResolveError> {
        u.map(|s| urls::endpoint(&s, &[]).map_err(|e| invalid(name, format!("{what}: {e}")))).transpose()
    };
    let authorize_url = endpoint("authorization_endpoint", meta.authorization_endpoint)?
        .ok_or_else(|| invalid(name, "no authorization_endpoint"))?;
    let token_url =
        endpoint("token_endpoint", meta.token_endpoint)?.ok_or_else(|| invalid(name, "no token_endpoint"))?;
    let revocation_url = endpoint("revocation_endpoint", meta.revocation_endpoint)?;
    let registration_url = endpoint("registration_endpoint", meta.registration_endpoint)?;
    // The endpoints we send secrets to: guarded unless on the resource's origin.
    for (url, what) in [(Some(&token_url), "token_endpoint"), (revocation_url.as_ref(), "revocation_endpoint")]
        .into_iter()
        .chain([(registration_url.as_ref(), "registration_endpoint")])
    {
        if let Some(u) = url {
            admit(u, what)?;
        }
    }
    Ok(Discovered {
        resource: resource.as_str().to_owned(),
        issuer: meta.issuer,
        authorize_url,
        token_url,
        revocation_url,
        registration_url,
        client_id_metadata_documents: meta.client_id_metadata_document_supported,
        iss_parameter_supported: meta.authorization_response_iss_parameter_supported,
        scopes_supported: prm.scopes_supported,
        guard: Arc::new(guard.into_inner()),
    })
}

/// Whether the metadata's `resource` names the configured one (compared as parsed URLs, so
/// that `https://h` and `https://h/` are one; a different path or host is not).
fn same_resource(said: &str, configured: &Url) -> bool {
    Url::parse(said).is_ok_and(|u| u == *configured)
}

/// RFC 7591: a registration's answer.
#[derive(serde::Deserialize)]
pub struct Registered {
    pub client_id: String,
    pub client_secret: Option<String>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered").field("client_id", &self.client_id).finish_non_exhaustive()
    }
}

/// Registers mcp-connect at `url` (RFC 7591) with this redirect URI.
pub async fn register(
    http: &Outbound,
    d: &Discovered,
    url: &Url,
    client_name: &str,
    redirect_uri: &Url,
) -> Result<Registered, ResolveError> {
    let body = serde_json::json!({
        "client_name": client_name,
        "redirect_uris": [redirect_uri.as_str()],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
    });
    let (status, answer) = http
        .with_guard(&d.guard)
        .post_json(url, &body)
        .await
        .map_err(|source| ResolveError::Fetch { url: url.to_string(), source })?;
    if !(200..300).contains(&status) {
        return Err(ResolveError::Fetch { url: url.to_string(), source: OutboundError::Status(status) });
    }
    let r: Registered =
        serde_json::from_slice(&answer).map_err(|e| invalid(&d.resource, format!("registration answer: {e}")))?;
    // It goes into every authorization URL and a database row.
    if r.client_id.is_empty() || r.client_id.len() > 255 || r.client_id.chars().any(char::is_control) {
        return Err(invalid(&d.resource, "the registration answer's client_id is not 1-255 printable characters"));
    }
    if r.client_secret.as_ref().is_some_and(|s| s.len() > 4096 || s.chars().any(char::is_control)) {
        return Err(invalid(&d.resource, "the registration answer's client_secret is not 1-4096 printable characters"));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_metadata_url_is_read_from_a_bearer_challenge() {
        let cases = [
            (
                r#"Bearer resource_metadata="https://m.example/.well-known/oauth-protected-resource/mcp""#,
                Some("https://m.example/.well-known/oauth-protected-resource/mcp"),
            ),
            (
                r#"Bearer error="invalid_token", resource_metadata="https://m.example/x", scope="a b""#,
                Some("https://m.example/x"),
            ),
            ("Bearer resource_metadata=https://m.example/y, scope=a", Some("https://m.example/y")),
            (r#"Bearer realm="x""#, None),
            (r#"Bearer resource_metadata="""#, None),
            (r#"Bearer error_description="see resource_metadata=https://evil.example/x""#, None),
            (r#"Bearer xresource_metadata="https://evil.example/x""#, None),
            (r#"Basic resource_metadata="https://m.example/x""#, None),
        ];
        for (challenge, want) in cases {
            assert_eq!(resource_metadata_of(challenge).as_deref(), want, "{challenge}");
        }
    }

    #[test]
    fn well_known_names_go_between_host_and_path() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert_eq!(
            well_known(&u("https://m.example/mcp"), "oauth-protected-resource").as_str(),
            "https://m.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            well_known(&u("https://as.example"), "oauth-authorization-server").as_str(),
            "https://as.example/.well-known/oauth-authorization-server"
        );
        let tenant = server_metadata_urls(&u("https://as.example/tenant1"));
        let tenant: Vec<&str> = tenant.iter().map(Url::as_str).collect();
        assert_eq!(
            tenant,
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration",
            ]
        );
        assert!(same_resource("https://m.example/mcp", &u("https://m.example/mcp")));
        assert!(!same_resource("https://m.example/other", &u("https://m.example/mcp")));
        assert!(!same_resource("https://evil.example/mcp", &u("https://m.example/mcp")));
    }
}
