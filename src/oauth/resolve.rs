//! Turns configuration into ready `AuthServer`s, fetching OIDC discovery documents and
//! JWKS where needed and caching them for an hour. One fetch per server at a time: callers
//! that arrive while it runs wait for it and share its outcome; a failure is remembered for
//! [`FAILURE_KEPT`], so an IdP that is down costs one fetch per few seconds, not one (of up
//! to the outbound timeout) per `/login`.

use super::flow::AuthServer;
use crate::net::http::{Outbound, OutboundError, Reach};
use crate::net::metadata::Admission;
use crate::net::urls::{self, Issuer};
use crate::providers::{ClientAuth, OAuth, Provider, Upstream};
use openidconnect::core::CoreJsonWebKeySet;
use secrecy::SecretString;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::RwLock;
use url::Url;

const CACHE_FOR: Duration = Duration::from_secs(3600);
/// Up to how long after it was resolved a server's metadata and keys still serve while it
/// cannot be resolved again: a day (keys an IdP withdrew stay trusted only while the IdP
/// cannot be reached to say so).
const STALE_FOR: Duration = Duration::from_secs(24 * 3600);

/// A primary identity provider (the one whose `sub` is the MCP subject of the tenants that
/// name it).
#[derive(Debug)]
pub struct IdpConfig {
    /// `default` for `[idp]`, else the `<name>` of `[idps.<name>]`.
    pub name: String,
    pub issuer: Issuer,
    pub client_id: String,
    pub client_secret: SecretString,
    /// `token_endpoint_auth_method`; `None`: chosen from what the IdP lists.
    pub client_auth: Option<ClientAuth>,
    pub scopes: Vec<String>,
    pub allow_idn_hosts: Vec<String>,
    /// Tolerance for ID-token `exp` and `iat` (`idp.clock_skew_seconds`).
    pub clock_skew: time::Duration,
    /// Discovered endpoints on another origin than the issuer may be private addresses
    /// (`idp.allow_private_endpoints`).
    pub allow_private_endpoints: bool,
}

impl IdpConfig {
    /// Where the configuration names it (for messages).
    pub fn field(&self) -> String {
        if self.name == crate::domain::DEFAULT_IDP { "idp".to_owned() } else { format!("idps.{}", self.name) }
    }
}

/// Every configured primary IdP: the default and the named ones, found by name (a tenant's
/// `idp`, a login in progress) or by issuer (a session, which records only that). Issuers
/// are unique (the configuration refuses two entries with one issuer).
#[derive(Debug)]
pub struct Idps {
    default: Arc<IdpConfig>,
    named: HashMap<String, Arc<IdpConfig>>,
}

impl Idps {
    pub fn new(default: IdpConfig) -> Self {
        Self { default: Arc::new(default), named: HashMap::new() }
    }

    pub fn insert(&mut self, idp: IdpConfig) {
        self.named.insert(idp.name.clone(), Arc::new(idp));
    }

    /// `[idp]`: the IdP of tenants that name none, and of `/login` without `idp`.
    pub fn default(&self) -> &Arc<IdpConfig> {
        &self.default
    }

    /// `[idp]` and every `[idps.<name>]`.
    pub fn all(&self) -> impl Iterator<Item = &Arc<IdpConfig>> {
        std::iter::once(&self.default).chain(self.named.values())
    }

    /// The names of the `[idps.<name>]`.
    pub fn named_names(&self) -> impl Iterator<Item = &str> {
        self.named.keys().map(String::as_str)
    }

    /// How many `[idps.<name>]` there are (besides `[idp]`).
    pub fn named_count(&self) -> usize {
        self.named.len()
    }

    pub fn by_name(&self, name: &str) -> Option<&Arc<IdpConfig>> {
        if name == self.default.name { Some(&self.default) } else { self.named.get(name) }
    }

    /// A tenant's IdP: the one it names, or the default. `None` when it names one this
    /// instance does not have (a tenant another instance's file made).
    pub fn of_tenant(&self, idp: Option<&crate::domain::IdpName>) -> Option<&Arc<IdpConfig>> {
        match idp {
            None => Some(&self.default),
            Some(name) => self.by_name(name.as_str()),
        }
    }

    pub fn by_issuer(&self, issuer: &str) -> Option<&Arc<IdpConfig>> {
        std::iter::once(&self.default).chain(self.named.values()).find(|i| i.issuer.as_str() == issuer)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    #[error("discovery at {url} failed: {source}")]
    Fetch { url: String, source: OutboundError },
    #[error("discovery document of {0} is invalid: {1}")]
    Invalid(String, String),
    /// Our side could not finish (the database, for a registration): the server is not
    /// at fault, and a retry may succeed.
    #[error("resolving {0} could not finish: {1}")]
    Unavailable(String, String),
}

impl ResolveError {
    /// A metadata document of `name`'s server that could not be had.
    pub fn of_metadata(name: &str, e: crate::net::metadata::MetadataError) -> Self {
        match e {
            crate::net::metadata::MetadataError::Refused(why) => ResolveError::Invalid(name.to_owned(), why),
            crate::net::metadata::MetadataError::Fetch { url, source } => ResolveError::Fetch { url, source },
        }
    }

    /// Whether trying again later may help (the server is down, slow or busy, or our side
    /// was); `false`: the server or the configuration is refused as it is (metadata of
    /// another issuer, an endpoint on a refused address, no PKCE, a document missing),
    /// until someone changes it.
    pub fn is_transient(&self) -> bool {
        match self {
            ResolveError::Fetch { source, .. } => source.is_transient(),
            ResolveError::Invalid(..) => false,
            ResolveError::Unavailable(..) => true,
        }
    }
}

#[derive(serde::Deserialize)]
struct DiscoveryDoc {
    issuer: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    userinfo_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    end_session_endpoint: Option<String>,
    jwks_uri: Option<String>,
    #[serde(default)]
    authorization_response_iss_parameter_supported: bool,
    id_token_signing_alg_values_supported: Option<Vec<String>>,
    token_endpoint_auth_methods_supported: Option<Vec<String>>,
}

/// What discovery found, with every URL checked by the same rules as configured ones
/// (`Default`: nothing, for a provider without discovery).
#[derive(Default)]
struct Discovered {
    issuer: Option<String>,
    authorization_endpoint: Option<Url>,
    token_endpoint: Option<Url>,
    userinfo_endpoint: Option<Url>,
    revocation_endpoint: Option<Url>,
    end_session_endpoint: Option<Url>,
    jwks: Option<CoreJsonWebKeySet>,
    iss_supported: bool,
    id_token_algs: Vec<openidconnect::core::CoreJwsSigningAlgorithm>,
    /// `token_endpoint_auth_methods_supported`, if the document lists them.
    auth_methods: Option<Vec<String>>,
    guard: crate::net::http::Guard,
}

/// What discovery is allowed to reach for one server: the origins its configuration names
/// (the issuer's first), and whether private endpoints are allowed elsewhere. A discovered
/// endpoint that we call ourselves is reached as it is on one of those origins; else only
/// through the guard (`net::metadata::Admission`). Otherwise the discovery host could point
/// `token_endpoint` at `http://127.0.0.1:…` or an internal address and receive our client
/// secret and the user's code. The decision is this server's alone: an origin configured
/// for another provider is not trusted for it.
struct Allowed<'a> {
    configured: Vec<url::Origin>,
    allow_idn: &'a [String],
    allow_private: bool,
}

/// OpenID discovery of `issuer`, checked: the document's issuer, every URL by the same
/// rules as configured ones, the endpoints we call admitted, and its JWKS fetched.
async fn discover(http: &Outbound, issuer: &Issuer, allowed: &Allowed<'_>) -> Result<Discovered, ResolveError> {
    let allow_idn = allowed.allow_idn;
    let base = issuer.as_str();
    let doc_url = issuer.discovery_url().map_err(|e| ResolveError::Invalid(base.to_owned(), e.to_string()))?;
    let raw = http
        .get_json(&doc_url, None)
        .await
        .map_err(|source| ResolveError::Fetch { url: doc_url.to_string(), source })?;
    let doc: DiscoveryDoc =
        serde_json::from_value(raw).map_err(|e| ResolveError::Invalid(base.to_owned(), e.to_string()))?;
    // OIDC Discovery §4.3: the document's issuer must be exactly the one we asked for (a
    // trailing `/` is a difference).
    if doc.issuer != issuer.as_str() {
        return Err(ResolveError::Invalid(base.to_owned(), format!("issuer {:?} does not match", doc.issuer)));
    }
    let check = |what: &str, u: Option<String>| -> Result<Option<Url>, ResolveError> {
        u.map(|s| {
            urls::endpoint(&s, allow_idn).map_err(|e| ResolveError::Invalid(base.to_owned(), format!("{what}: {e}")))
        })
        .transpose()
    };
    // Endpoints we call ourselves (the browser goes to the others), and the guard they are
    // reached through.
    let mut adm = Admission::new(allowed.configured.clone(), allowed.allow_private, "the issuer");
    let mut ours = |what: &str, u: Option<String>| -> Result<Option<Url>, ResolveError> {
        let u = check(what, u)?;
        if let Some(url) = &u {
            adm.admit(url, what).map_err(|e| ResolveError::of_metadata(base, e))?;
        }
        Ok(u)
    };
    let jwks_uri = ours("jwks_uri", doc.jwks_uri)?
        .ok_or_else(|| ResolveError::Invalid(base.to_owned(), "no jwks_uri".to_owned()))?;
    let token_endpoint = ours("token_endpoint", doc.token_endpoint)?;
    let userinfo_endpoint = ours("userinfo_endpoint", doc.userinfo_endpoint)?;
    let revocation_endpoint = ours("revocation_endpoint", doc.revocation_endpoint)?;
    let jwks_raw = adm.get_json(http, &jwks_uri, "jwks_uri").await.map_err(|e| ResolveError::of_metadata(base, e))?;
    let jwks: CoreJsonWebKeySet =
        serde_json::from_value(jwks_raw).map_err(|e| ResolveError::Invalid(base.to_owned(), format!("jwks: {e}")))?;
    Ok(Discovered {
        issuer: Some(doc.issuer),
        authorization_endpoint: check("authorization_endpoint", doc.authorization_endpoint)?,
        token_endpoint,
        userinfo_endpoint,
        revocation_endpoint,
        end_session_endpoint: check("end_session_endpoint", doc.end_session_endpoint)?,
        jwks: Some(jwks),
        iss_supported: doc.authorization_response_iss_parameter_supported,
        id_token_algs: super::flow::id_token_algs(doc.id_token_signing_alg_values_supported.as_deref()),
        auth_methods: doc.token_endpoint_auth_methods_supported,
        guard: adm.guard(),
    })
}

/// How long a failed resolution is answered from memory.
pub const FAILURE_KEPT: Duration = Duration::from_secs(5);

/// How long a refusal a retry cannot fix (`ResolveError::is_transient` false) is answered
/// from memory: `/v1/token` resolves before it makes a link, so a tenant's calls would
/// otherwise probe, fetch and (for a remote MCP server) register anew every few seconds.
/// A provider changed over the operator API is a new key, and resolved at once.
pub const REFUSAL_KEPT: Duration = Duration::from_secs(60);

/// A provider's key among the resolved servers: its id and revision (a provider changed
/// over the operator API is resolved anew).
fn provider_key(p: &Provider) -> String {
    format!("provider:{}#{}", p.id, p.revision())
}

/// The server a key names, without its revision (`provider:<id>`, `idp:<name>`).
fn server_of(key: &str) -> &str {
    key.split_once('#').map_or(key, |(server, _)| server)
}

/// Resolved servers by key (`idp` or `provider:<id>#<revision>`), each with the time it was made.
pub struct Resolver {
    cache: RwLock<HashMap<String, (Arc<AuthServer>, Instant)>>,
    /// The last failure of each server, and when.
    failed: std::sync::Mutex<HashMap<String, (ResolveError, Instant)>>,
    /// One resolution per server at a time.
    building: crate::domain::gate::Gates<String>,
    /// When each server's keys were last fetched again for an unknown `kid`.
    refetched: std::sync::Mutex<HashMap<String, Instant>>,
    clock: Arc<dyn crate::domain::Clock>,
    /// The service's client signing keys, for servers it authenticates at with
    /// `private_key_jwt`.
    client_keys: Option<Arc<crate::keys::client_keys::ClientKeys>>,
}

impl Default for Resolver {
    fn default() -> Self {
        Self::with_clock(Arc::new(crate::domain::SystemClock))
    }
}

/// At most one JWKS fetch a minute per server for unknown key ids: a token naming a key
/// that does not exist cannot make us hammer the IdP.
const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(60);

/// Which server an ID token came from, to fetch its keys again.
pub enum Source<'a> {
    Idp(&'a IdpConfig),
    Provider(&'a Provider),
}

impl Resolver {
    /// A resolver reading time from `clock` (tests move it instead of waiting).
    pub fn with_clock(clock: Arc<dyn crate::domain::Clock>) -> Self {
        Self {
            cache: RwLock::default(),
            failed: std::sync::Mutex::default(),
            building: std::sync::Mutex::default(),
            refetched: std::sync::Mutex::default(),
            clock,
            client_keys: None,
        }
    }

    pub fn client_keys(&self) -> Option<Arc<crate::keys::client_keys::ClientKeys>> {
        self.client_keys.clone()
    }

    /// Servers set to `private_key_jwt` sign their assertions with `keys`.
    pub fn with_client_keys(mut self, keys: Arc<crate::keys::client_keys::ClientKeys>) -> Self {
        self.client_keys = Some(keys);
        self
    }

    async fn cached(&self, key: &str) -> Option<Arc<AuthServer>> {
        let c = self.cache.read().await;
        c.get(key).filter(|(_, at)| self.clock.since(*at) < CACHE_FOR).map(|(s, _)| s.clone())
    }

    /// A server resolved less than [`STALE_FOR`] ago, however old: what is used while
    /// resolving it again fails (an IdP down for an hour must not stop the
    /// sign-ins and subject tokens its last known keys can still check).
    async fn stale(&self, key: &str) -> Option<Arc<AuthServer>> {
        let c = self.cache.read().await;
        c.get(key).filter(|(_, at)| self.clock.since(*at) < STALE_FOR).map(|(s, _)| s.clone())
    }

    /// Keeps `s` for `key`; what is kept for an earlier revision of the same provider, and
    /// anything too old to be used even stale, goes (a provider changed over the operator
    /// API a thousand times is held once, not a thousand times).
    async fn store(&self, key: String, s: Arc<AuthServer>) {
        let mut c = self.cache.write().await;
        let server = server_of(&key).to_owned();
        c.retain(|k, (_, at)| server_of(k) != server && self.clock.since(*at) < STALE_FOR);
        c.insert(key, (s, self.clock.now()));
    }

    fn recent_failure(&self, key: &str) -> Option<ResolveError> {
        let f = self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f.get(key)
            .filter(|(e, at)| self.clock.since(*at) < if e.is_transient() { FAILURE_KEPT } else { REFUSAL_KEPT })
            .map(|(e, _)| e.clone())
    }

    /// The cached server, or the failure remembered, or one resolution by `build` (callers
    /// that come meanwhile wait for it and take its outcome).
    async fn resolve<F>(&self, key: &str, build: F) -> Result<Arc<AuthServer>, ResolveError>
    where
        F: std::future::Future<Output = Result<Arc<AuthServer>, ResolveError>>,
    {
        let known = || async {
            if let Some(s) = self.cached(key).await {
                return Some(Ok(s));
            }
            let failed = self.recent_failure(key)?;
            Some(self.stale(key).await.ok_or(failed))
        };
        if let Some(r) = known().await {
            return r;
        }
        let gate = crate::domain::gate::Gate::new(&self.building, key.to_owned());
        let _held = gate.acquire().await;
        match known().await {
            Some(r) => r,
            None => {
                let r = build.await;
                match &r {
                    Ok(s) => {
                        self.store(key.to_owned(), s.clone()).await;
                        self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
                    }
                    Err(e) => {
                        tracing::warn!(server = key, error = %e, "resolving again failed; its last known metadata and keys are kept");
                        let mut failed = self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        failed.retain(|k, (_, at)| {
                            server_of(k) != server_of(key) && self.clock.since(*at) < REFUSAL_KEPT
                        });
                        failed.insert(key.to_owned(), (e.clone(), self.clock.now()));
                    }
                }
                match r {
                    Err(e) => self.stale(key).await.ok_or(e),
                    ok => ok,
                }
            }
        }
    }

    /// Verifies an ID token against the server's keys (see [`Self::holding_key`]).
    pub async fn verify_id_token(
        &self,
        http: &Outbound,
        source: Source<'_>,
        server: Arc<AuthServer>,
        raw: &SecretString,
        nonce: &str,
        now: time::OffsetDateTime,
    ) -> Result<super::flow::VerifiedIdToken, super::flow::FlowError> {
        use secrecy::ExposeSecret;
        let kid = super::flow::jws_key_id(raw.expose_secret());
        let server = self.holding_key(http, source, server, kid.as_deref()).await?;
        super::flow::verify_id_token(&server, raw, nonce, now)
    }

    /// The server, with keys that hold `kid` if it has such a key. When the cached JWKS
    /// lacks it (the server rotated its keys), discovery and the JWKS are fetched again, at
    /// most once a minute per server, and those are returned; else the server as it is.
    pub async fn holding_key(
        &self,
        http: &Outbound,
        source: Source<'_>,
        server: Arc<AuthServer>,
        kid: Option<&str>,
    ) -> Result<Arc<AuthServer>, super::flow::FlowError> {
        let unknown_kid =
            kid.is_some_and(|kid| server.jwks.as_ref().is_some_and(|jwks| !super::flow::jwks_has_key(jwks, kid)));
        let key = match &source {
            Source::Idp(idp) => format!("idp:{}", idp.name),
            Source::Provider(p) => provider_key(p),
        };
        if !(unknown_kid && self.may_refetch(&key)) {
            return Ok(server);
        }
        // Built anew (discovery and JWKS) and stored only once that worked: an IdP that is
        // down now leaves the cached server in place.
        let fresh = match source {
            Source::Idp(idp) => self.build_idp(http, idp).await,
            Source::Provider(p) => self.build_provider(http, p).await,
        };
        match fresh {
            Ok(s) => {
                self.store(key, s.clone()).await;
                Ok(s)
            }
            Err(e) => Err(super::flow::FlowError::Transient(format!("fetching new keys: {e}"))),
        }
    }

    fn may_refetch(&self, key: &str) -> bool {
        let Ok(mut m) = self.refetched.lock() else { return false };
        match m.get(key) {
            Some(at) if self.clock.since(*at) < REFETCH_AT_MOST_EVERY => false,
            _ => {
                let now = self.clock.now();
                m.retain(|k, at| server_of(k) != server_of(key) && self.clock.since(*at) < REFETCH_AT_MOST_EVERY);
                m.insert(key.to_owned(), now);
                true
            }
        }
    }

    pub async fn idp(&self, http: &Outbound, idp: &IdpConfig) -> Result<Arc<AuthServer>, ResolveError> {
        self.resolve(&format!("idp:{}", idp.name), self.build_idp(http, idp)).await
    }

    async fn build_idp(&self, http: &Outbound, idp: &IdpConfig) -> Result<Arc<AuthServer>, ResolveError> {
        let allowed = Allowed {
            configured: vec![idp.issuer.url().origin()],
            allow_idn: &idp.allow_idn_hosts,
            allow_private: idp.allow_private_endpoints,
        };
        let d = discover(http, &idp.issuer, &allowed).await?;
        let invalid = |what: &str| ResolveError::Invalid(idp.issuer.as_str().to_owned(), format!("no {what}"));
        let client_auth = crate::providers::client_auth::choose(idp.client_auth, d.auth_methods.as_deref(), true)
            .map_err(|e| ResolveError::Invalid(idp.issuer.as_str().to_owned(), e))?;
        let server = Arc::new(AuthServer {
            client_id: idp.client_id.clone(),
            client_secret: idp.client_secret.clone(),
            authorize_url: d.authorization_endpoint.ok_or_else(|| invalid("authorization_endpoint"))?,
            token_url: d.token_endpoint.ok_or_else(|| invalid("token_endpoint"))?,
            userinfo_url: d.userinfo_endpoint,
            revocation_url: d.revocation_endpoint,
            end_session_url: d.end_session_endpoint,
            issuer: d.issuer,
            iss_parameter_required: d.iss_supported,
            jwks: d.jwks,
            id_token_algs: d.id_token_algs,
            clock_skew: idp.clock_skew,
            guard: d.guard,
            resource: None,
            scopes_supported: Vec::new(),
            client_auth,
            client_keys: self.client_keys.clone(),
        });
        Ok(server)
    }

    /// A provider resolved by the caller's `build` (a remote MCP server, whose client
    /// registration needs the database), cached and gated as every other server.
    pub async fn provider_with<F>(&self, p: &Provider, build: F) -> Result<Arc<AuthServer>, ResolveError>
    where
        F: std::future::Future<Output = Result<Arc<AuthServer>, ResolveError>>,
    {
        self.resolve(&provider_key(p), build).await
    }

    /// A downstream provider: configured endpoints win; OIDC providers add discovery
    /// (endpoints not configured, JWKS, RFC 9207 support).
    pub async fn provider(&self, http: &Outbound, p: &Provider) -> Result<Arc<AuthServer>, ResolveError> {
        self.resolve(&provider_key(p), self.build_provider(http, p)).await
    }

    async fn build_provider(&self, http: &Outbound, p: &Provider) -> Result<Arc<AuthServer>, ResolveError> {
        let name = p.id.to_string();
        let Upstream::OAuth(o) = &p.upstream else {
            return Err(ResolveError::Invalid(
                name,
                "not an OAuth provider: its server is found by its kind".to_owned(),
            ));
        };
        let guarded = operator_guard(p, o, &name)?;
        let http = &http.with_guard(&Arc::new(guarded.clone()));
        let discovered = match (&o.issuer, o.oidc) {
            (Some(issuer), true) => Some(discover(http, issuer, &discovery_allowed(p, o, issuer)).await?),
            _ => None,
        };
        let advertised = discovered.as_ref().and_then(|d| d.auth_methods.as_deref());
        let client_auth = crate::providers::client_auth::choose(o.client.auth, advertised, o.client.has_secret())
            .map_err(|e| ResolveError::Invalid(name.clone(), e))?;
        let mut server = oauth_server(p, o, discovered, guarded, client_auth)?;
        server.client_keys = self.client_keys.clone();
        Ok(Arc::new(server))
    }
}

/// A provider of the operator API: no origin is trusted for being configured; each one we
/// call is reached through the guard (empty for the file's providers).
fn operator_guard(p: &Provider, o: &OAuth, name: &str) -> Result<HashMap<String, Reach>, ResolveError> {
    let mut guarded = HashMap::new();
    if let Some(reach) = p.reach() {
        let configured =
            [o.endpoints.token_url.as_ref(), o.endpoints.userinfo_url.as_ref(), o.endpoints.revocation_url.as_ref()];
        for url in o.issuer.as_ref().map(Issuer::url).into_iter().chain(configured.into_iter().flatten()) {
            crate::net::ssrf::check_url(url, reach.policy())
                .map_err(|r| ResolveError::Invalid(name.to_owned(), format!("{url}: {r}")))?;
            guarded.insert(url.origin().ascii_serialization(), reach);
        }
    }
    Ok(guarded)
}

/// What an OIDC provider's discovery may reach as it is: the file's provider, its issuer's
/// and configured endpoints' origins; the operator API's, nothing (its reach decides).
fn discovery_allowed<'a>(p: &'a Provider, o: &OAuth, issuer: &Issuer) -> Allowed<'a> {
    let configured =
        [o.endpoints.token_url.as_ref(), o.endpoints.userinfo_url.as_ref(), o.endpoints.revocation_url.as_ref()];
    match p.reach() {
        None => Allowed {
            configured: std::iter::once(issuer.url().origin())
                .chain(configured.into_iter().flatten().map(Url::origin))
                .collect(),
            allow_idn: &p.policy.allow_idn_hosts,
            allow_private: p.policy.allow_private_endpoints,
        },
        Some(reach) => Allowed {
            configured: Vec::new(),
            allow_idn: &p.policy.allow_idn_hosts,
            allow_private: reach == Reach::Private,
        },
    }
}

/// The server of an OAuth provider: configured endpoints win over discovered ones; the
/// guard holds the operator API's configured origins and the discovered ones.
fn oauth_server(
    p: &Provider,
    o: &OAuth,
    discovered: Option<Discovered>,
    mut guard: HashMap<String, Reach>,
    client_auth: ClientAuth,
) -> Result<AuthServer, ResolveError> {
    let invalid = |what: &str| ResolveError::Invalid(p.id.to_string(), format!("no {what}"));
    let ends = &o.endpoints;
    let d = discovered.unwrap_or_default();
    guard.extend(d.guard.iter().map(|(k, v)| (k.clone(), *v)));
    Ok(AuthServer {
        client_id: o.client.id.clone(),
        client_secret: o.client.secret.clone(),
        authorize_url: ends
            .authorize_url
            .clone()
            .or(d.authorization_endpoint)
            .ok_or_else(|| invalid("authorize_url"))?,
        token_url: ends.token_url.clone().or(d.token_endpoint).ok_or_else(|| invalid("token_url"))?,
        userinfo_url: ends.userinfo_url.clone().or(d.userinfo_endpoint),
        revocation_url: ends.revocation_url.clone().or(d.revocation_endpoint),
        end_session_url: d.end_session_endpoint,
        issuer: d.issuer.or_else(|| o.issuer.as_ref().map(|i| i.as_str().to_owned())),
        iss_parameter_required: o.authorization_response_iss || d.iss_supported,
        jwks: d.jwks,
        id_token_algs: d.id_token_algs,
        clock_skew: p.policy.clock_skew,
        guard: Arc::new(guard),
        resource: None,
        scopes_supported: Vec::new(),
        client_auth,
        client_keys: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Arc<AuthServer> {
        Arc::new(AuthServer {
            client_id: "c".to_owned(),
            client_secret: SecretString::from("s"),
            authorize_url: Url::parse("https://as.example/a").unwrap(),
            token_url: Url::parse("https://as.example/t").unwrap(),
            userinfo_url: None,
            revocation_url: None,
            end_session_url: None,
            issuer: None,
            iss_parameter_required: false,
            jwks: None,
            id_token_algs: Vec::new(),
            clock_skew: time::Duration::ZERO,
            guard: crate::net::http::Guard::default(),
            resource: None,
            scopes_supported: Vec::new(),
            client_auth: ClientAuth::Basic,
            client_keys: None,
        })
    }

    #[tokio::test]
    async fn a_providers_earlier_revisions_and_servers_past_staleness_are_not_kept() {
        let clock = Arc::new(crate::domain::ManualClock::default());
        let r = Resolver::with_clock(clock.clone());
        for rev in 0..1000 {
            r.store(format!("provider:p#{rev}"), server()).await;
        }
        r.store("provider:q#0".to_owned(), server()).await;
        r.store("idp:default".to_owned(), server()).await;
        let keys = |c: &HashMap<String, (Arc<AuthServer>, Instant)>| {
            let mut k: Vec<String> = c.keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&*r.cache.read().await), ["idp:default", "provider:p#999", "provider:q#0"]);
        clock.advance(STALE_FOR);
        r.store("provider:p#1000".to_owned(), server()).await;
        assert_eq!(keys(&*r.cache.read().await), ["provider:p#1000"]);
    }
}
