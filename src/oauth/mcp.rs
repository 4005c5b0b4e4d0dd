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

use super::resolve::ResolveError;
use crate::net::http::{Guard, Outbound, OutboundError};
use crate::net::metadata::{Admission, MetadataError};
use crate::net::urls;
use crate::providers::client_auth::ClientAuth;
use std::collections::HashMap;
use url::Url;

/// What discovery found for one remote MCP server.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The remote server's resource identifier (as configured, and as its metadata says).
    pub resource: String,
    /// Its authorization server, as its metadata describes it.
    pub server: ServerFound,
    /// The scopes to ask for when a connect names none: the `scope` of the server's
    /// challenge, else those its resource metadata lists (the MCP authorization spec's
    /// scope selection).
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
    token_endpoint_auth_methods_supported: Option<Vec<String>>,
}

/// The parameters of a `WWW-Authenticate: Bearer …` challenge (RFC 6750 §3, in the
/// auth-param syntax of RFC 9110 §11.2: `name=token` or `name="quoted string"`, where a
/// quoted string may hold `\"` and `\\`). `None` if the header is not a Bearer challenge
/// or does not parse: a parameter is read only where the whole list is well formed, never
/// out of another parameter's value.
pub fn bearer_params(challenge: &str) -> Option<HashMap<String, String>> {
    let (scheme, rest) = challenge.trim_start().split_once(' ').unwrap_or((challenge.trim(), ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.next_if(|c| *c == ' ' || *c == ',' || *c == '\t').is_some() {}
        if chars.peek().is_none() {
            return Some(params);
        }
        let name: String =
            std::iter::from_fn(|| chars.next_if(|c| c.is_ascii_alphanumeric() || "-_.!#$%&'*+^`|~".contains(*c)))
                .collect();
        while chars.next_if(|c| *c == ' ').is_some() {}
        if name.is_empty() || chars.next() != Some('=') {
            return None;
        }
        while chars.next_if(|c| *c == ' ').is_some() {}
        let value = if chars.next_if_eq(&'"').is_some() {
            let mut v = String::new();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => v.push(chars.next()?),
                    c => v.push(c),
                }
            }
            v
        } else {
            std::iter::from_fn(|| chars.next_if(|c| *c != ',' && *c != ' ')).collect()
        };
        params.entry(name.to_ascii_lowercase()).or_insert(value);
    }
}

/// The `resource_metadata` parameter of a Bearer challenge (RFC 9728 §5.1).
pub fn resource_metadata_of(challenge: &str) -> Option<String> {
    bearer_params(challenge)?.remove("resource_metadata").filter(|s| !s.is_empty())
}

/// The `scope` parameter of a Bearer challenge (RFC 6750 §3): the scopes the resource
/// needs, space-separated.
pub fn scope_of(challenge: &str) -> Vec<String> {
    bearer_params(challenge)
        .and_then(|mut p| p.remove("scope"))
        .map(|s| s.split(' ').filter(|x| !x.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
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
/// https addresses only, or private ones too where `allow_private` says so. Fetching is
/// here; what is fetched is judged by [`check_resource_metadata`] and
/// [`check_server_metadata`].
pub async fn discover(http: &Outbound, resource: &Url, allow_private: bool) -> Result<Discovered, ResolveError> {
    let name = resource.as_str();
    let mut adm = Admission::new(vec![resource.origin()], allow_private, "the server");
    // The server's own answer to the request an MCP client sends first, without a token,
    // names its metadata (RFC 9728 §5.1) and may name the scopes it needs (RFC 6750 §3).
    // A POST of `initialize`: Streamable HTTP lets a server answer a GET with 405.
    let (status, challenge) =
        http.probe(resource).await.map_err(|source| ResolveError::Fetch { url: name.to_owned(), source })?;
    let challenge = challenge.filter(|_| status == 401);
    let (raw, at_root) = resource_metadata(http, &mut adm, resource, challenge.as_deref()).await?;
    let found = check_resource_metadata(raw, resource, at_root).map_err(|e| invalid(name, e))?;
    let challenge_scopes = challenge.as_deref().map(scope_of).unwrap_or_default();
    let issuer_url =
        urls::endpoint(&found.issuer, &[]).map_err(|e| invalid(name, format!("authorization server: {e}")))?;
    let doc = server_metadata(http, &mut adm, name, &issuer_url).await?;
    let meta = check_server_metadata(doc, &found.issuer).map_err(|e| invalid(name, e))?;
    // The endpoints we send secrets to: guarded unless on the resource's origin.
    let ours = [("token_endpoint", Some(&meta.token_url)), ("revocation_endpoint", meta.revocation_url.as_ref())];
    for (what, url) in ours.into_iter().chain([("registration_endpoint", meta.registration_url.as_ref())]) {
        if let Some(u) = url {
            adm.admit(u, what).map_err(|e| ResolveError::of_metadata(name, e))?;
        }
    }
    Ok(Discovered {
        resource: found.resource,
        server: meta,
        scopes_supported: usable_scopes(
            name,
            if challenge_scopes.is_empty() { found.scopes_supported } else { challenge_scopes },
        )?,
        guard: adm.guard(),
    })
}

/// The protected resource metadata (RFC 9728 §3.1): at the URL the challenge gave, else
/// the well-known URL built from the resource's path, then the one built from its origin.
/// The document, and whether it came from the origin's root well-known URL.
async fn resource_metadata(
    http: &Outbound,
    adm: &mut Admission,
    resource: &Url,
    challenge: Option<&str>,
) -> Result<(serde_json::Value, bool), ResolveError> {
    let name = resource.as_str();
    let mut root = resource.clone();
    root.set_path("/");
    let root_url = well_known(&root, "oauth-protected-resource");
    let urls = match challenge.and_then(resource_metadata_of) {
        Some(u) => vec![urls::endpoint(&u, &[]).map_err(|e| invalid(name, format!("resource_metadata {u:?}: {e}")))?],
        None if resource.path() != "/" => vec![well_known(resource, "oauth-protected-resource"), root_url.clone()],
        None => vec![well_known(resource, "oauth-protected-resource")],
    };
    let mut last = None;
    for url in &urls {
        match adm.get_json(http, url, "resource_metadata").await {
            Ok(v) => return Ok((v, *url == root_url)),
            Err(e @ MetadataError::Refused(_)) => return Err(ResolveError::of_metadata(name, e)),
            Err(e) => last = Some(ResolveError::of_metadata(name, e)),
        }
    }
    Err(last.unwrap_or_else(|| invalid(name, "no protected resource metadata")))
}

/// The authorization server's metadata, at the places the MCP authorization spec lists in
/// its order; a place that answers 404 is passed over, any other failure ends the search.
async fn server_metadata(
    http: &Outbound,
    adm: &mut Admission,
    name: &str,
    issuer: &Url,
) -> Result<serde_json::Value, ResolveError> {
    let mut last = None;
    for url in server_metadata_urls(issuer) {
        match adm.get_json(http, &url, "authorization server metadata").await {
            Ok(v) => return Ok(v),
            Err(e @ MetadataError::Fetch { source: OutboundError::Status(404), .. }) => {
                last = Some(ResolveError::of_metadata(name, e));
            }
            Err(e) => return Err(ResolveError::of_metadata(name, e)),
        }
    }
    Err(last.unwrap_or_else(|| invalid(name, "no authorization server metadata")))
}

/// What a protected resource metadata document says, once checked.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceFound {
    /// The resource identifier to send (see [`resource_named`]).
    pub resource: String,
    /// The authorization server: the first one listed.
    pub issuer: String,
    pub scopes_supported: Vec<String>,
}

/// Checks a protected resource metadata document (RFC 9728 §3.2, §3.3) fetched for
/// `resource` (`at_root`: from the origin's root well-known URL).
pub fn check_resource_metadata(raw: serde_json::Value, resource: &Url, at_root: bool) -> Result<ResourceFound, String> {
    let prm: ResourceMetadata = serde_json::from_value(raw).map_err(|e| format!("protected resource metadata: {e}"))?;
    // RFC 9728 §3.3: the metadata is for the resource asked about, or it is not used.
    let said = resource_named(&prm.resource, resource, at_root)
        .ok_or_else(|| format!("its metadata is for another resource ({:?})", prm.resource))?;
    let issuer = prm.authorization_servers.into_iter().next().ok_or("no authorization_servers")?;
    Ok(ResourceFound { resource: said, issuer, scopes_supported: prm.scopes_supported })
}

/// What an authorization server's metadata says, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFound {
    pub issuer: String,
    pub authorize_url: Url,
    pub token_url: Url,
    pub revocation_url: Option<Url>,
    pub registration_url: Option<Url>,
    pub client_id_metadata_documents: bool,
    pub iss_parameter_supported: bool,
    pub auth_methods: Option<Vec<String>>,
}

/// Checks an authorization server's metadata (RFC 8414) asked of `issuer`: the issuer is
/// exactly that one (§3.3), PKCE S256 is advertised (the MCP authorization spec: else no
/// authorization), the endpoints are URLs by our rules and the two the flow needs are there.
pub fn check_server_metadata(raw: serde_json::Value, issuer: &str) -> Result<ServerFound, String> {
    let meta: ServerMetadata =
        serde_json::from_value(raw).map_err(|e| format!("authorization server metadata: {e}"))?;
    if meta.issuer != issuer {
        return Err(format!("authorization server issuer {:?} is not {issuer:?}", meta.issuer));
    }
    if !meta.code_challenge_methods_supported.iter().any(|m| m == "S256") {
        return Err("the authorization server does not advertise PKCE S256".to_owned());
    }
    let endpoint = |what: &str, u: Option<String>| -> Result<Option<Url>, String> {
        u.map(|s| urls::endpoint(&s, &[]).map_err(|e| format!("{what}: {e}"))).transpose()
    };
    Ok(ServerFound {
        authorize_url: endpoint("authorization_endpoint", meta.authorization_endpoint)?
            .ok_or("no authorization_endpoint")?,
        token_url: endpoint("token_endpoint", meta.token_endpoint)?.ok_or("no token_endpoint")?,
        revocation_url: endpoint("revocation_endpoint", meta.revocation_endpoint)?,
        registration_url: endpoint("registration_endpoint", meta.registration_endpoint)?,
        client_id_metadata_documents: meta.client_id_metadata_document_supported,
        iss_parameter_supported: meta.authorization_response_iss_parameter_supported,
        auth_methods: meta.token_endpoint_auth_methods_supported,
        issuer: meta.issuer,
    })
}

/// The scopes a server named (its challenge or its metadata), as they will be shown on the
/// consent page and asked for: each a valid scope token (RFC 6749 §3.3: printable ASCII,
/// so nothing invisible reaches the page), the others left out and said in the log; more
/// than [`crate::domain::Scopes`] takes is refused (the page and the request would differ).
fn usable_scopes(name: &str, named: Vec<String>) -> Result<Vec<String>, ResolveError> {
    let (good, bad): (Vec<String>, Vec<String>) =
        named.into_iter().partition(|s| crate::domain::Scopes::parse(std::slice::from_ref(s)).is_ok());
    if !bad.is_empty() {
        tracing::warn!(
            resource = name,
            left_out = bad.len(),
            "a remote MCP server named scopes that are no scope tokens"
        );
    }
    crate::domain::Scopes::parse(&good)
        .map(|s| s.as_slice().to_vec())
        .map_err(|e| invalid(name, format!("the scopes it names: {e}; configure `scopes`")))
}

/// The resource identifier to send (RFC 8707) if the metadata's `resource` (`said`) is the
/// one its URL was built from (RFC 9728 §3.3; compared as parsed URLs, so that `https://h`
/// and `https://h/` are one): the configured resource, or, for the document found at the
/// origin's root well-known URL (`at_root`), the origin itself, as the MCP SDKs serve it.
/// A document a challenge named, or one at the resource's own path, that names a broader
/// resource is refused: whoever answers for one path of a shared origin would otherwise
/// get tokens for every resource on it. `None`: another resource.
fn resource_named(said: &str, configured: &Url, at_root: bool) -> Option<String> {
    let u = Url::parse(said).ok()?;
    if !u.username().is_empty() || u.password().is_some() || u.query().is_some() || u.fragment().is_some() {
        return None;
    }
    if u == *configured {
        return Some(configured.as_str().to_owned());
    }
    let origin_only = u.path() == "/" && u.origin() == configured.origin();
    (at_root && origin_only).then(|| u.as_str().to_owned())
}

/// RFC 7591 §3.2.1: a registration's answer, as far as we read it.
#[derive(serde::Deserialize)]
struct RegistrationAnswer {
    client_id: String,
    client_secret: Option<String>,
    token_endpoint_auth_method: Option<String>,
}

/// RFC 7591 §3.2.2: a registration refused.
#[derive(serde::Deserialize)]
struct RegistrationError {
    error: String,
    error_description: Option<String>,
}

/// A registration: the client and how it authenticates (as the server registered it).
pub struct Registered {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub auth: ClientAuth,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("client_id", &self.client_id)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// SEP-837 (the MCP authorization spec's 2026 draft, after OIDC Registration §2): `native`
/// for a redirect URI on a loopback address, else `web`.
fn application_type(redirect_uri: &Url) -> &'static str {
    let loopback = match redirect_uri.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    if loopback { "native" } else { "web" }
}

/// Registers mcp-connect at `url` (RFC 7591) with this redirect URI, asking for a client
/// authentication method the server lists (a secret where it offers one), and takes the
/// method the answer says it registered.
pub async fn register(
    http: &Outbound,
    d: &Discovered,
    url: &Url,
    client_name: &str,
    redirect_uri: &Url,
) -> Result<Registered, ResolveError> {
    let asked = crate::providers::client_auth::for_registration(d.server.auth_methods.as_deref());
    let body = serde_json::json!({
        "client_name": client_name,
        "redirect_uris": [redirect_uri.as_str()],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": asked.as_str(),
        "application_type": application_type(redirect_uri),
    });
    let (status, answer) = http
        .with_guard(&d.guard)
        .post_json(url, &body)
        .await
        .map_err(|source| ResolveError::Fetch { url: url.to_string(), source })?;
    if status == 400 || status == 401 || status == 403 {
        // A refusal a retry will not change: the server's own words (never a secret of ours:
        // the request carried none).
        let said = serde_json::from_slice::<RegistrationError>(&answer)
            .map(|e| super::flow::server_error_answer(&e.error, e.error_description.as_deref()))
            .unwrap_or_else(|_| format!("HTTP {status}"));
        return Err(invalid(&d.resource, format!("its authorization server refused our registration: {said}")));
    }
    if !(200..300).contains(&status) {
        return Err(ResolveError::Fetch { url: url.to_string(), source: OutboundError::Status(status) });
    }
    let r: RegistrationAnswer =
        serde_json::from_slice(&answer).map_err(|e| invalid(&d.resource, format!("registration answer: {e}")))?;
    // It goes into every authorization URL and a database row.
    if r.client_id.is_empty() || r.client_id.len() > 255 || r.client_id.chars().any(char::is_control) {
        return Err(invalid(&d.resource, "the registration answer's client_id is not 1-255 printable characters"));
    }
    let secret = r.client_secret.filter(|s| !s.is_empty());
    if secret.as_ref().is_some_and(|s| s.len() > 4096 || s.chars().any(char::is_control)) {
        return Err(invalid(&d.resource, "the registration answer's client_secret is not 1-4096 printable characters"));
    }
    // RFC 7591 §3.2.1: the answer holds the metadata as registered, which may differ from
    // what was asked; where it leaves the method out, it is the one asked.
    let auth = match r.token_endpoint_auth_method.as_deref() {
        None => asked,
        Some(name) => ClientAuth::parse(name).ok_or_else(|| {
            invalid(
                &d.resource,
                format!("it registered us for token_endpoint_auth_method {name:?}, which mcp-connect does not use"),
            )
        })?,
    };
    if auth == ClientAuth::PrivateKeyJwt {
        // Never asked for: our registration names no JWKS.
        return Err(invalid(&d.resource, "it registered us for private_key_jwt, which mcp-connect did not ask for"));
    }
    match (auth.sends_secret(), secret) {
        (true, None) => {
            Err(invalid(&d.resource, format!("it registered us for {} but gave no client_secret", auth.as_str())))
        }
        // A public client: a secret it gave would never be sent.
        (false, _) => Ok(Registered { client_id: r.client_id, client_secret: None, auth }),
        (true, secret) => Ok(Registered { client_id: r.client_id, client_secret: secret, auth }),
    }
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
            // A quoted value may hold an escaped quote: what follows it is still that value.
            (
                r#"Bearer error_description="a \" resource_metadata=\"https://evil.example/x\"", resource_metadata="https://m.example/z""#,
                Some("https://m.example/z"),
            ),
            (r#"Bearer error_description="a \" resource_metadata=\"https://evil.example/x\"""#, None),
            (r#"bearer   resource_metadata = "https://m.example/s""#, Some("https://m.example/s")),
            (r#"Bearer resource_metadata="https://m.example/unterminated"#, None),
        ];
        for (challenge, want) in cases {
            assert_eq!(resource_metadata_of(challenge).as_deref(), want, "{challenge}");
        }
    }

    #[test]
    fn the_scope_of_a_challenge_is_read_as_a_parameter() {
        let none = Vec::<String>::new();
        assert_eq!(
            scope_of(r#"Bearer error="insufficient_scope", scope="files:read files:write""#),
            ["files:read", "files:write"]
        );
        assert_eq!(scope_of(r#"Bearer realm="x", error_description="scope=\"admin\"""#), none);
        assert_eq!(scope_of("Bearer scope=tools"), ["tools"]);
        assert_eq!(scope_of(r#"Basic scope="a""#), none);
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
    }

    #[test]
    fn resource_metadata_is_for_the_resource_and_names_an_authorization_server() {
        let mcp = Url::parse("https://m.example/mcp").unwrap();
        let ok = check_resource_metadata(
            serde_json::json!({"resource": "https://m.example/mcp", "authorization_servers": ["https://as.example", "https://b.example"], "scopes_supported": ["files:read"]}),
            &mcp,
            false,
        );
        assert_eq!(
            ok,
            Ok(ResourceFound {
                resource: "https://m.example/mcp".to_owned(),
                issuer: "https://as.example".to_owned(),
                scopes_supported: vec!["files:read".to_owned()],
            })
        );
        // (document, from the root well-known URL, what the refusal says)
        let cases = [
            (
                serde_json::json!({"resource": "https://evil.example/mcp", "authorization_servers": ["https://as.example"]}),
                true,
                "for another resource",
            ),
            (
                serde_json::json!({"resource": "https://m.example/", "authorization_servers": ["https://as.example"]}),
                false,
                "for another resource",
            ),
            (
                serde_json::json!({"resource": "https://m.example/mcp", "authorization_servers": []}),
                false,
                "no authorization_servers",
            ),
            (serde_json::json!({"resource": "https://m.example/mcp"}), false, "no authorization_servers"),
            (
                serde_json::json!({"authorization_servers": ["https://as.example"]}),
                false,
                "protected resource metadata: missing field `resource`",
            ),
            (serde_json::json!(["not", "an", "object"]), false, "protected resource metadata"),
        ];
        for (doc, at_root, why) in cases {
            let got = check_resource_metadata(doc.clone(), &mcp, at_root).unwrap_err();
            assert!(got.contains(why), "{doc}: {got}");
        }
        // At the root: the origin is the resource the token is for.
        let root = check_resource_metadata(
            serde_json::json!({"resource": "https://m.example", "authorization_servers": ["https://as.example"]}),
            &mcp,
            true,
        );
        assert_eq!(root.map(|f| f.resource), Ok("https://m.example/".to_owned()));
    }

    #[test]
    fn server_metadata_is_the_issuers_with_pkce_and_the_endpoints_the_flow_needs() {
        let good = serde_json::json!({
            "issuer": "https://as.example",
            "authorization_endpoint": "https://as.example/authorize",
            "token_endpoint": "https://as.example/token",
            "revocation_endpoint": "https://as.example/revoke",
            "registration_endpoint": "https://as.example/register",
            "code_challenge_methods_supported": ["plain", "S256"],
            "client_id_metadata_document_supported": true,
            "authorization_response_iss_parameter_supported": true,
            "token_endpoint_auth_methods_supported": ["client_secret_post"],
        });
        let found = check_server_metadata(good.clone(), "https://as.example").unwrap();
        assert_eq!(found.token_url.as_str(), "https://as.example/token");
        assert_eq!(found.registration_url.as_ref().map(Url::as_str), Some("https://as.example/register"));
        assert!(found.client_id_metadata_documents && found.iss_parameter_supported);
        assert_eq!(found.auth_methods, Some(vec!["client_secret_post".to_owned()]));
        let with = |key: &str, value: serde_json::Value| {
            let mut d = good.clone();
            match value {
                serde_json::Value::Null => d.as_object_mut().unwrap().remove(key),
                v => d.as_object_mut().unwrap().insert(key.to_owned(), v),
            };
            d
        };
        // (document, what the refusal says)
        let cases = [
            (with("issuer", "https://as.example/".into()), "is not \"https://as.example\""),
            (with("issuer", "https://evil.example".into()), "is not"),
            (with("code_challenge_methods_supported", serde_json::json!(["plain"])), "PKCE S256"),
            (with("code_challenge_methods_supported", serde_json::Value::Null), "PKCE S256"),
            (with("authorization_endpoint", serde_json::Value::Null), "no authorization_endpoint"),
            (with("token_endpoint", serde_json::Value::Null), "no token_endpoint"),
            (with("token_endpoint", "http://as.example/token".into()), "token_endpoint:"),
            (with("revocation_endpoint", "https://user:pw@as.example/revoke".into()), "revocation_endpoint:"),
            (with("registration_endpoint", "not a url".into()), "registration_endpoint:"),
            (with("issuer", serde_json::Value::Null), "authorization server metadata: missing field `issuer`"),
        ];
        for (doc, why) in cases {
            let got = check_server_metadata(doc.clone(), "https://as.example").unwrap_err();
            assert!(got.contains(why), "{doc}: {got}");
        }
    }

    #[test]
    fn metadata_names_the_resource_or_at_the_root_its_origin() {
        let mcp = Url::parse("https://m.example/mcp").unwrap();
        // (said, at the root well-known URL, what is sent)
        let cases = [
            ("https://m.example/mcp", false, Some("https://m.example/mcp")),
            ("https://m.example/mcp", true, Some("https://m.example/mcp")),
            ("https://m.example/", true, Some("https://m.example/")),
            ("https://m.example", true, Some("https://m.example/")),
            // A broader resource from a challenge's or the path's document: refused.
            ("https://m.example/", false, None),
            ("https://m.example/other", true, None),
            ("https://m.example/mc", true, None),
            ("https://m.example/mcp/deeper", true, None),
            ("https://evil.example/mcp", true, None),
            ("https://evil.example/", true, None),
            ("http://m.example/", true, None),
            ("https://m.example:8443/", true, None),
            ("https://m.example/?x=1", true, None),
            ("https://:x@m.example/", true, None),
            ("https://m.exa\tmple/", true, Some("https://m.example/")),
            ("not a url", true, None),
        ];
        for (said, at_root, want) in cases {
            assert_eq!(resource_named(said, &mcp, at_root).as_deref(), want, "{said} {at_root}");
        }
        let nested = Url::parse("https://m.example/a/b/mcp").unwrap();
        assert_eq!(resource_named("https://m.example/a", &nested, true), None, "not a parent path: the origin only");
    }
}
