//! `AppState`: what flows and handlers share. Built by `startup`, passed down; this module
//! imports nothing above the services.

use crate::api_keys::ApiKeyVerifier;
use crate::cache::{CachedConnection, Caches};
use crate::domain::{ConnectionId, ConnectionKey, ElicitationId, ProviderId, TenantId};
use crate::keys::Keys;
use crate::net::http::Outbound;
use crate::oauth::resolve::{IdpConfig, Idps, Resolver};
use crate::store::{self, Db, connections::ConnectionRow, handouts::HandoutAudit};
use crate::tenants::Tenants;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use url::Url;

/// Everything a handler can reach. No globals: this is it. Each HTTP worker has its own
/// copy with its own database pool and lookup connections; everything else is shared
/// (the `Arc`s), so a clone is cheap.
#[derive(Clone)]
pub struct AppState {
    /// This worker's pool (background tasks and tests use the one made at start).
    pub pool: Db,
    /// The connections as the hand-out reads them: the lookup cache, else this worker's
    /// lookup connections.
    pub connections: ConnectionRepo,
    /// The vault's keys: what seals and opens tokens and secrets.
    pub keys: Arc<Keys>,
    /// The providers and tenants served, and their IdPs.
    pub directory: Directory,
    pub api_keys: Arc<ApiKeyVerifier>,
    /// Workload tokens presented in an API key's place (`workload`).
    pub workloads: Arc<crate::workload::WorkloadVerifier>,
    /// The public base and the URLs made from it.
    pub urls: PublicUrls,
    pub lifetimes: Lifetimes,
    pub resolver: Arc<Resolver>,
    pub outbound: Outbound,
    /// `/v1/proxy`: its client and its rate limits.
    pub proxy: Proxying,
    /// When a stored token is refreshed before it is handed out.
    pub refresh: crate::domain::RefreshPolicy,
    pub refresh_gate: Arc<RefreshGate>,
    pub handouts: HandoutAudit,
    pub caches: Arc<Caches>,
    /// Work that outlives its request, and where a shutdown is.
    pub lifecycle: Lifecycle,
    /// The `Strict-Transport-Security` value every answer carries: set when the public
    /// base is https and `[hsts] max_age_seconds` is not 0.
    pub hsts: Option<actix_web::http::header::HeaderValue>,
    /// The addresses webhook endpoints may have (`[webhooks]`).
    pub webhook_policy: crate::net::ssrf::AddressPolicy,
}

/// The providers and tenants every instance serves, and the primary IdPs people sign in
/// at: who may connect what, and where.
#[derive(Clone)]
pub struct Directory {
    /// The file's providers and the operator API's (see `tenants`).
    pub providers: Arc<crate::providers::Providers>,
    pub tenants: Arc<Tenants>,
    /// The primary IdPs: `[idp]` and `[idps.<name>]`.
    pub idps: Arc<Idps>,
}

/// The connections as the hand-out reads them: from the lookup cache when it holds a fresh
/// entry, else from the database on this worker's own lookup connections
/// (`store::lookup`), the row then kept in the cache when it may serve later lookups.
/// Each HTTP worker has its own (the lookup connections); the cache is shared.
#[derive(Clone)]
pub struct ConnectionRepo {
    lookups: Arc<store::lookup::LookupConnections>,
    caches: Arc<Caches>,
}

impl ConnectionRepo {
    pub fn new(lookups: store::lookup::LookupConnections, caches: Arc<Caches>) -> Self {
        Self { lookups: Arc::new(lookups), caches }
    }

    /// This one's cache, with another worker's lookup connections.
    pub fn with_lookups(&self, lookups: store::lookup::LookupConnections) -> Self {
        Self { lookups: Arc::new(lookups), caches: self.caches.clone() }
    }

    /// The cached entry, when the cache serves one that is fresh.
    pub fn cached(&self, key: &ConnectionKey) -> Option<CachedConnection> {
        self.caches.connection(key)
    }

    /// The row as the database has it now; kept in the cache when `keep` says it may serve
    /// as it is (not when a change was heard while it was read: the cache's ticket).
    pub async fn read(
        &self,
        key: &ConnectionKey,
        keep: impl FnOnce(&ConnectionRow) -> bool,
    ) -> Result<Option<ConnectionRow>, sqlx::Error> {
        let ticket = self.caches.ticket();
        let row = self.lookups.find_connection(key).await?;
        if let Some(r) = &row
            && keep(r)
            && let Some(entry) = CachedConnection::of(r)
        {
            self.caches.store_connection(ticket, key, &entry);
        }
        Ok(row)
    }

    /// Drops the cached entry on this instance at once (a change this instance made; the
    /// others hear of it through the change log).
    pub fn forget(&self, key: &ConnectionKey) {
        self.caches.forget_connection(key);
    }
}

/// Where mcp-connect is reached from outside, and the URLs it makes from that.
#[derive(Debug, Clone)]
pub struct PublicUrls {
    pub base: Url,
    /// The public base is https: cookies are `Secure` and `__Host-` prefixed.
    pub secure_cookies: bool,
}

/// How long things may take and live.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    /// A new elicitation's (`elicitations.ttl_seconds`).
    pub elicitation: Duration,
    /// The longest a request is held by `wait_seconds` (`elicitations.max_wait_seconds`).
    pub max_wait: Duration,
    /// A browser session's (`sessions.ttl_seconds`).
    pub session: Duration,
    pub outbound_timeout: Duration,
}

/// Work that outlives its request (refreshes, the callback's exchange), which shutdown
/// waits for, and where a shutdown is (see `startup::Application::run_until_signalled`).
#[derive(Clone, Default)]
pub struct Lifecycle {
    pub detached: tokio_util::task::TaskTracker,
    pub shutdown: Arc<Shutdown>,
}

impl PublicUrls {
    /// `<public base>/connect/<provider>?e=<id>`: the handle and nothing else.
    pub fn connect_url(&self, provider: &ProviderId, id: &ElicitationId) -> String {
        let mut u = self.base.clone();
        u.set_path(&format!("/connect/{provider}"));
        u.query_pairs_mut().clear().append_pair("e", &id.to_string());
        u.to_string()
    }

    /// Our callback URL for a provider: the exact redirect URI registered with it (used by
    /// the authorization request, the callback's check, the exchange and the refresh).
    pub fn provider_redirect_uri(&self, provider: &ProviderId) -> Url {
        let mut u = self.base.clone();
        u.set_path(&format!("/connect/{provider}/callback"));
        u
    }

    /// Our callback URL at a primary IdP: `/login/callback` at `[idp]`, and
    /// `/login/callback/<name>` at each `[idps.<name>]`, so that an answer arrives where
    /// only its own IdP's answers belong (a mix-up defence, RFC 9700 §4.4.2: a sign-in sent
    /// to one IdP and answered at another's address is refused).
    pub fn login_redirect_uri(&self, idp: &IdpConfig) -> Url {
        let mut u = self.base.clone();
        if idp.name == crate::domain::DEFAULT_IDP {
            u.set_path("/login/callback");
        } else {
            u.set_path(&format!("/login/callback/{}", idp.name));
        }
        u
    }
}

impl Directory {
    /// An active tenant's primary IdP (`None`: no such active tenant, or it names an IdP
    /// this instance's configuration does not have).
    /// Borrowed: a clone would be a count both workers write, on every request.
    pub fn tenant_idp(&self, tenant: &TenantId) -> Option<&Arc<IdpConfig>> {
        let named = self.tenants.idp_of(tenant)?;
        self.idps.of_tenant(named.as_ref())
    }

    /// The name users see for a tenant (its id if it is no longer configured).
    pub fn tenant_name(&self, tenant: &TenantId) -> String {
        self.tenants.display_name(tenant).unwrap_or_else(|| tenant.as_str().to_owned())
    }
}

/// Per-process single flight, one async mutex per connection being refreshed.
#[derive(Default)]
pub struct RefreshGate {
    locks: Mutex<HashMap<ConnectionId, Arc<tokio::sync::Mutex<()>>>>,
}

impl RefreshGate {
    pub fn lock_for(&self, id: ConnectionId) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.entry(id).or_default().clone()
    }

    pub fn release(&self, id: ConnectionId, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut m = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Ours and the map's: nobody else is waiting, the entry can go.
        if Arc::strong_count(&lock) <= 2 {
            m.remove(&id);
        }
    }
}

/// The phases of a graceful shutdown, as the request path sees them.
#[derive(Debug, Default)]
pub struct Shutdown {
    draining: std::sync::atomic::AtomicBool,
    stopping: std::sync::atomic::AtomicBool,
    /// Wakes requests that wait (`wait_seconds`) when the drain begins.
    drain_began: tokio::sync::Notify,
}

impl Shutdown {
    /// After SIGTERM: `/readyz` answers 503 and responses ask clients to close their
    /// connection, while every request is still served.
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Acquire)
    }

    /// After the drain period: no new work may start that would outlive its request (it
    /// could not be waited for), so such requests answer 503 + `Retry-After`.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn begin_drain(&self) {
        self.draining.store(true, std::sync::atomic::Ordering::Release);
        self.drain_began.notify_waiters();
    }

    /// Completes once the drain has begun (at once if it has).
    pub async fn draining(&self) {
        let notified = self.drain_began.notified();
        tokio::pin!(notified);
        // Armed before the flag is read, so a drain that begins in between still wakes it.
        notified.as_mut().enable();
        if !self.is_draining() {
            notified.await;
        }
    }

    pub fn begin_stop(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// What `/v1/proxy` keeps: the outbound client (streamed, pooled, redirects returned) and
/// the rate limits.
#[derive(Clone)]
pub struct Proxying {
    pub forwarder: crate::net::forward::Forwarder,
    pub limits: Arc<ProxyLimits>,
}

type Keyed<K> = governor::DefaultKeyedRateLimiter<K>;

/// Token buckets per tenant and per connection (`[proxy]`), on this instance: with N
/// instances behind a balancer a caller gets up to N times the rate. Keys unused for a
/// while are forgotten (`governor`'s `retain_recent`), so memory follows the active ones.
pub struct ProxyLimits {
    tenants: Option<Keyed<TenantId>>,
    connections: Option<Keyed<ConnectionId>>,
    /// Refreshes a provider's `401` may cause: one a minute per connection.
    refusals: Keyed<ConnectionId>,
    checks: std::sync::atomic::AtomicU64,
}

impl ProxyLimits {
    pub fn new(s: crate::config::ProxyLimitSettings) -> Self {
        fn keyed<K: std::hash::Hash + Eq + Clone>(rate: u32, burst: u32) -> Option<Keyed<K>> {
            let rate = std::num::NonZeroU32::new(rate)?;
            let burst = std::num::NonZeroU32::new(burst).unwrap_or(rate);
            Some(governor::RateLimiter::keyed(governor::Quota::per_second(rate).allow_burst(burst)))
        }
        Self {
            tenants: keyed(s.per_tenant_per_second, s.per_tenant_burst),
            connections: keyed(s.per_connection_per_second, s.per_connection_burst),
            refusals: governor::RateLimiter::keyed(governor::Quota::per_minute(std::num::NonZeroU32::MIN)),
            checks: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Err(wait)`: the tenant is over its rate; try again after `wait`.
    pub fn tenant(&self, t: &TenantId) -> Result<(), Duration> {
        self.forget_now_and_then();
        Self::check(self.tenants.as_ref(), t)
    }

    /// `Err(wait)`: a refresh for this connection's refused token was made less than a
    /// minute ago (on this instance).
    pub fn refresh_for_refusal(&self, c: &ConnectionId) -> Result<(), Duration> {
        Self::check(Some(&self.refusals), c)
    }

    /// `Err(wait)`: the connection is over its rate.
    pub fn connection(&self, c: &ConnectionId) -> Result<(), Duration> {
        Self::check(self.connections.as_ref(), c)
    }

    fn check<K: std::hash::Hash + Eq + Clone>(limiter: Option<&Keyed<K>>, key: &K) -> Result<(), Duration> {
        use governor::clock::Clock as _;
        let Some(l) = limiter else { return Ok(()) };
        l.check_key(key).map_err(|not_until| not_until.wait_time_from(governor::clock::DefaultClock::default().now()))
    }

    /// Every 4096th check drops the buckets that are full again (idle keys).
    fn forget_now_and_then(&self) {
        if self.checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 4096 == 4095 {
            if let Some(l) = &self.tenants {
                l.retain_recent();
            }
            if let Some(l) = &self.connections {
                l.retain_recent();
            }
            self.refusals.retain_recent();
        }
    }
}
