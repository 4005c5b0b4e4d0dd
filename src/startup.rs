//! `Application::build`: the one way the service starts, in production and in tests.

use crate::api_keys::ApiKeyVerifier;
use crate::app::{AppState, Directory, Lifecycle, Lifetimes, PublicUrls};
use crate::config::{Config, TenantConfig};
use crate::keys::Keys;
use crate::net::http::Outbound;
use crate::store::{self, Db};
use actix_web::dev::Server;
use actix_web::{App, HttpServer, middleware::from_fn, web};
use secrecy::ExposeSecret;
use std::net::TcpListener;
use std::sync::Arc;

pub struct Application {
    port: u16,
    server: Server,
    state: web::Data<AppState>,
    /// The scrape endpoint, when `[metrics] listen` is set.
    metrics: Option<(u16, Server)>,
    drain: std::time::Duration,
}

impl Application {
    /// Connects to Postgres, applies migrations, mirrors tenants, and binds `config.listen`.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let listener =
            TcpListener::bind(config.listen).map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
        Self::build_with_listener(config, listener).await
    }

    pub async fn build_with_listener(config: Config, listener: TcpListener) -> anyhow::Result<Self> {
        Self::build_with_clock(config, listener, Arc::new(crate::domain::SystemClock)).await
    }

    /// [`Self::build_with_listener`] with the clock the time-keeping services read (tests
    /// pass one they move forward instead of sleeping).
    pub async fn build_with_clock(
        config: Config,
        listener: TcpListener,
        clock: Arc<dyn crate::domain::Clock>,
    ) -> anyhow::Result<Self> {
        // Bound before anything else starts: a wrong address fails the start at once.
        let metrics_listener = config
            .metrics_listen
            .map(|a| TcpListener::bind(a).map_err(|e| anyhow::anyhow!("cannot listen on {a} (metrics.listen): {e}")))
            .transpose()?;
        let drain = config.drain;
        // The recorder before anything that sets a metric (the listener's gauge is set at
        // its start: one set before the recorder would be lost).
        let recorder = metrics_listener.as_ref().map(|_| crate::telemetry::metrics::install());
        let pool = open_database(&config).await?;
        let split = PoolSplit::new(config.database_max_connections, config.database_lookup_connections_per_worker);
        let connect_options = store::connect_options(config.database_url.expose_secret())
            .map_err(|e| anyhow::anyhow!("database_url: {e}"))?;
        let state = app_state(config, pool, clock, &connect_options, split, Background::Run).await?;
        let port = listener.local_addr()?.port();
        let server = serve(listener, state.clone(), connect_options, split)?;
        let metrics = match (metrics_listener, recorder) {
            (Some(l), Some(handle)) => {
                let port = l.local_addr()?.port();
                Some((port, crate::telemetry::metrics::serve(l, handle)?))
            }
            _ => None,
        };
        Ok(Self { port, server, state: web::Data::new(state), metrics, drain })
    }

    /// The port `GET /metrics` is served on, when metrics are on.
    pub fn metrics_port(&self) -> Option<u16> {
        self.metrics.as_ref().map(|(p, _)| *p)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn state(&self) -> web::Data<AppState> {
        self.state.clone()
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        if let Some((_, metrics)) = self.metrics {
            tokio::spawn(metrics);
        }
        self.server.await
    }

    /// Serves until SIGTERM or SIGINT, then drains:
    /// 1. `/readyz` answers 503 at once, while every request is still served for
    ///    `shutdown.drain_seconds` (load balancers take the instance out meanwhile);
    /// 2. no new connections are accepted, requests that would start work outliving them
    ///    (a refresh, a callback's exchange) answer 503, and such work already running
    ///    finishes (bounded by three outbound timeouts and 15 s);
    /// 3. the server stops gracefully (in-flight requests finish, idle connections close);
    /// 4. the hand-out audit events still queued are written to Postgres.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        let handle = self.server.handle();
        let state = self.state.clone();
        let metrics = self.metrics.map(|(_, m)| {
            let h = m.handle();
            tokio::spawn(m);
            h
        });
        let mut server = tokio::spawn(self.server);
        tokio::select! {
            // The server ended by itself (it cannot bind, a worker died): nothing to drain.
            ended = &mut server => return ended.map_err(std::io::Error::other)?,
            () = shutdown_signal() => {}
        }
        state.lifecycle.shutdown.begin_drain();
        tracing::info!(drain_seconds = self.drain.as_secs(), "shutdown signal: draining (readyz answers 503)");
        tokio::time::sleep(self.drain).await;
        // From here no request starts work that outlives it; what runs is waited for, up to
        // the longest a refresh can take (pool wait, row lock, discovery, provider call).
        state.lifecycle.shutdown.begin_stop();
        handle.pause().await;
        state.lifecycle.detached.close();
        let bound = state.lifetimes.outbound_timeout * 3 + std::time::Duration::from_secs(15);
        if tokio::time::timeout(bound, state.lifecycle.detached.wait()).await.is_err() {
            tracing::warn!(tasks = state.lifecycle.detached.len(), "detached work still running at shutdown");
        }
        handle.stop(true).await;
        let served = server.await.map_err(std::io::Error::other)?;
        if !state.handouts.drain(std::time::Duration::from_secs(30)).await {
            tracing::error!(pending = state.handouts.pending(), "hand-out audit rows not written before exit");
        }
        if let Some(m) = metrics {
            m.stop(false).await;
        }
        tracing::info!("drained; exiting");
        served
    }
}

/// SIGTERM (orchestrators) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Inserts or updates the configured tenants. Never deactivates one (a tenant missing from
/// this file may be served by another instance's): `mcp-connect tenant deactivate` does.
/// Links and connections without an issuer (made before issuers were recorded) become
/// `default_issuer`'s subjects': the default `[idp]`, the only IdP the binaries before had;
/// rows such a binary inserts from now on get it at once (`default_idp`).
pub async fn sync_tenants(pool: &Db, tenants: &[TenantConfig], default_issuer: &str) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    let before: std::collections::HashMap<String, String> =
        store::tenants::all_tenants(&mut *tx).await?.into_iter().map(|t| (t.id, t.idp)).collect();
    for t in tenants {
        // A tenant the operator API made: the file's from now on, with none of what the
        // operator set (its IdP, subject-token settings) and none of the keys it had (the
        // holder of an operator key would otherwise keep serving as the platform's tenant).
        // Nor its webhooks (their receivers and secrets are the previous owner's), nor the
        // links its MCP server made (a person would connect them to the file's tenant).
        let taken_over = store::tenants::take_over(&mut *tx, t).await?;
        if taken_over {
            clear_taken_over(&mut tx, t).await?;
        }
        store::tenants::upsert_tenant(&mut *tx, t).await?;
        // A tenant moved to another IdP: its people are others now (links and connections
        // of the old IdP's subjects are not handed to the new one's). Said in the trail.
        // (A takeover resets an IdP the file leaves out to the default one.)
        let now =
            t.idp.as_ref().map(crate::domain::IdpName::as_str).or(taken_over.then_some(crate::domain::DEFAULT_IDP));
        if let (Some(was), Some(now)) = (before.get(t.id.as_str()), now)
            && was != now
        {
            tracing::warn!(tenant = %t.id, from = %was, to = %now, "the configuration moves a tenant to another IdP");
            let mut ev = store::audit::AuditEvent::new(crate::domain::AuditKind::TenantIdpChanged);
            ev.tenant_id = Some(t.id.clone());
            ev.detail = serde_json::json!({ "from": was, "to": now, "by": "configuration" });
            store::audit::insert_event(&mut *tx, &ev).await?;
        }
    }
    store::connections::set_default_issuer(&mut *tx, default_issuer).await?;
    tx.commit().await?;
    backfill_issuers(pool, default_issuer).await?;
    // Say so where a tenant that is gone from this file still works: removing it from the
    // file no longer switches it off (instances with different files would fight).
    let listed: Vec<&str> = tenants.iter().map(|t| t.id.as_str()).collect();
    for t in store::tenants::active_tenants(pool).await? {
        if !listed.contains(&t.id.as_str()) {
            tracing::warn!(
                tenant = %t.id,
                "an active tenant is not in this configuration; it stays active (`mcp-connect tenant deactivate` stops it)"
            );
        }
    }
    Ok(())
}

/// A tenant the operator API made, taken over by the file: its keys revoked, its webhooks
/// deleted, its pending links cancelled, and the takeover in the audit trail.
async fn clear_taken_over(tx: &mut store::Tx, t: &TenantConfig) -> anyhow::Result<()> {
    let tenant = &t.id;
    let revoked = store::api_keys::revoke_tenant_keys(&mut **tx, tenant).await?;
    let mut webhooks = Vec::new();
    for w in store::webhooks::list_webhooks(&mut **tx, tenant).await? {
        if store::webhooks::delete_webhook(&mut **tx, tenant, w.id).await? {
            webhooks.push(w.id);
        }
    }
    let now = time::OffsetDateTime::now_utc();
    let links = store::elicitations::cancel_pending(tx, tenant, None, None, None, now).await?;
    crate::flows::events::links_closed(
        tx,
        crate::webhooks::EventKind::ElicitationCancelled,
        &links,
        "configuration",
        "tenant_taken_over",
    )
    .await?;
    tracing::warn!(
        tenant = %tenant,
        keys_revoked = revoked.len(),
        webhooks_deleted = webhooks.len(),
        links_cancelled = links.len(),
        "the configuration takes over a tenant the operator API made"
    );
    let mut ev = store::audit::AuditEvent::new(crate::domain::AuditKind::TenantTakenOver);
    ev.tenant_id = Some(tenant.clone());
    ev.detail = serde_json::json!({
        "by": "configuration",
        "keys_revoked": revoked,
        "webhooks_deleted": webhooks,
        "links_cancelled": links.len(),
    });
    store::audit::insert_event(&mut **tx, &ev).await?;
    Ok(())
}

/// The issuer of rows written without one: the default IdP's.
async fn backfill_issuers(pool: &Db, default_issuer: &str) -> anyhow::Result<()> {
    // In batches, each its own statement: the rows of a large table are locked a thousand
    // at a time, never all at once (a refresh waiting on one would time out).
    const BATCH: i64 = 1000;
    let (mut links, mut connections) = (0, 0);
    loop {
        let n = store::elicitations::backfill_issuer(pool, default_issuer, BATCH).await?;
        links += n;
        if n < BATCH as u64 {
            break;
        }
    }
    loop {
        let n = store::connections::backfill_issuer(pool, default_issuer, BATCH).await?;
        connections += n;
        if n < BATCH as u64 {
            break;
        }
    }
    if links + connections > 0 {
        tracing::info!(links, connections, issuer = default_issuer, "recorded the issuer of rows written without one");
    }
    Ok(())
}

/// Connects, migrates (or, with `serve --no-migrate`, checks the schema is this binary's),
/// and writes the configured tenants.
async fn open_database(config: &Config) -> anyhow::Result<Db> {
    let pool = store::open(
        config.database_url.expose_secret(),
        config.database_max_connections,
        config.database_pooler,
        config.database_listen_url.as_ref().map(|u| u.expose_secret()),
        config.migrate_on_start,
    )
    .await
    .map_err(|e| match e {
        store::OpenError::Schema(e) if config.migrate_on_start => anyhow::anyhow!("migrations failed: {e}"),
        e => e.into(),
    })?;
    sync_tenants(&pool, &config.tenants, config.idps.default().issuer.as_str()).await?;
    record_configured_providers(&pool, &config.providers).await?;
    Ok(pool)
}

/// Records the provider ids this configuration names, so that the operator API uses none
/// of them on any instance (`configured_providers`).
pub async fn record_configured_providers(
    pool: &Db,
    providers: &crate::providers::ProviderRegistry,
) -> anyhow::Result<()> {
    let ids: Vec<String> = providers.iter().map(|p| p.id.to_string()).collect();
    // A file naming a provider the operator API made would carry its grants to the file's
    // client and endpoints: refused, saying so.
    if let Some(id) = store::providers::made_over_the_api(pool, &ids).await?.first() {
        return Err(crate::config::ConfigError {
            field: format!("providers.{id}"),
            message: format!(
                "{id:?} is a provider made over the operator API (its grants were made with its client): give the \
                 file's provider another name"
            ),
        }
        .into());
    }
    store::providers::record_configured(pool, &ids).await?;
    Ok(())
}

/// The service's state for a one-shot operator command that changes what instances serve
/// (`mcp-connect connections revoke`): the same flows, vault and outbound client as
/// `serve`, on a schema that must already be this binary's (nothing is migrated, and the
/// configured tenants are not written). Serves nothing and runs none of the background
/// work (no webhook deliveries, clean-up or change listener).
pub async fn operator_state(config: Config) -> anyhow::Result<AppState> {
    let pool = store::open(config.database_url.expose_secret(), 2, config.database_pooler, None, false).await?;
    let connect_options = store::connect_options(config.database_url.expose_secret())
        .map_err(|e| anyhow::anyhow!("database_url: {e}"))?;
    let clock = Arc::new(crate::domain::SystemClock);
    app_state(config, pool, clock, &connect_options, PoolSplit::new(2, 1), Background::None).await
}

/// `database.max_connections` split over the HTTP workers, and each worker's share between
/// its lookup connections (`database.lookup_connections_per_worker`; none behind a
/// transaction pooler, where lookups run on the pool: `store::lookup`) and its pool, which
/// takes the rest. The lookup connections count within `max_connections`: outside it they
/// had doubled an instance's connections and used up PostgreSQL's clients in a parallel CI
/// run.
#[derive(Debug, Clone, Copy)]
struct PoolSplit {
    workers: usize,
    lookups_per_worker: u32,
    pool_per_worker: u32,
}

impl PoolSplit {
    fn new(max_connections: u32, lookups_per_worker: u32) -> Self {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::for_workers(workers, max_connections, lookups_per_worker)
    }

    fn for_workers(workers: usize, max_connections: u32, lookups_per_worker: u32) -> Self {
        let share = max_connections.div_ceil(workers as u32);
        // At least one connection for transactions; two where the pool also carries the
        // lookups, so that one slow transaction does not hold up every lookup.
        let least = if lookups_per_worker == 0 { 2 } else { 1 };
        Self { workers, lookups_per_worker, pool_per_worker: share.saturating_sub(lookups_per_worker).max(least) }
    }
}

/// This process's name in the hand-out audit rows: the host name (a pod's name) and a random
/// suffix, since several processes may share a host.
fn instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| {
            h.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
                .take(63)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "mcp-connect".to_owned());
    format!("{host}-{:08x}", rand::random::<u32>())
}

/// Whether the state runs the service's background work (webhook deliveries, clean-up,
/// the change listener and confirmer): `serve` does; a one-shot operator command must not
/// (it would send other tenants' webhooks from the operator's host and abort them on exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Background {
    Run,
    None,
}

/// The shared state, and (with [`Background::Run`]) the background tasks that keep it
/// current (clean-up, the change listener, the cache confirmer, webhook deliveries).
async fn app_state(
    config: Config,
    pool: Db,
    clock: Arc<dyn crate::domain::Clock>,
    connect_options: &sqlx::postgres::PgConnectOptions,
    split: PoolSplit,
    background: Background,
) -> anyhow::Result<AppState> {
    // One change watch for every cache: one listener, one drop counter, one confirmation.
    let watch = crate::changes::ChangeWatch::new(clock.clone());
    let api_keys = api_key_verifier(&config, pool.clone(), clock.clone(), watch.clone());
    let refresh = refresh_policy(&config);
    let outbound = Outbound::new(config.outbound_timeout, config.propagate_to_providers, &config.outbound_cas)
        .map_err(|e| anyhow::anyhow!("http client: {e}"))?;
    let forwarder = crate::net::forward::Forwarder::new(config.propagate_to_providers, &config.outbound_cas)
        .map_err(|e| anyhow::anyhow!("the proxy's http client: {e}"))?;
    if background == Background::Run {
        crate::flows::cleanup::spawn(pool.clone(), config.cleanup_interval, config.audit_retention);
    }
    let signs = signs_assertions(&config);
    let (keys, pending) = data_keys(&pool, Arc::new(config.keyring), &config.vault, clock.clone(), background).await?;
    let (webhook_policy, worker) =
        webhook_worker(&config.webhooks, &config.outbound_cas, pool.clone(), keys.clone(), clock.clone())?;
    if background == Background::Run {
        worker.spawn();
    }
    let caches = Arc::new(crate::cache::Caches::with_watch(
        config.cache_enabled,
        config.cache_max_age,
        config.cache_capacity,
        watch,
    ));
    let providers = Arc::new(crate::providers::Providers::new(
        config.providers,
        keys.clone(),
        config.operator.allow_private_endpoints,
    ));
    let tenants =
        Arc::new(crate::tenants::Tenants::load(&pool, providers.clone(), &config.operator.workload_issuers).await?);
    reload_once_open(pending, &tenants, &pool);
    let listen_url = config.database_listen_url.clone();
    if background == Background::Run {
        let (a, t) = (api_keys.clone(), tenants.clone());
        crate::cache::spawn_listener(pool.clone(), listen_url, caches.clone(), a, t, keys.clone());
        crate::cache::spawn_confirmer(pool.clone(), caches.clone(), api_keys.clone(), tenants.clone());
    }
    Ok(AppState {
        connections: crate::app::ConnectionRepo::new(
            store::lookup::LookupConnections::for_pool(&pool, connect_options.clone(), split.lookups_per_worker),
            caches.clone(),
        ),
        caches,
        lifetimes: Lifetimes {
            elicitation: config.elicitation_ttl,
            max_wait: config.max_wait,
            session: config.session_ttl,
            outbound_timeout: config.outbound_timeout,
        },
        refresh,
        refresh_gate: Arc::default(),
        // Sized as the lookup cache: a minute of every connection it holds is one row each.
        handouts: crate::store::handouts::HandoutAudit::spawn(
            pool.clone(),
            instance_name(),
            crate::store::handouts::system_wall_clock(),
            crate::store::handouts::Bounds::for_connections(config.cache_capacity),
        ),
        directory: Directory { providers, tenants, idps: Arc::new(config.idps) },
        resolver: resolver(clock.clone(), &pool, &keys, signs).await,
        outbound,
        proxy: crate::app::Proxying { forwarder, limits: Arc::new(crate::app::ProxyLimits::new(config.proxy_limits)) },
        hsts: hsts(&config.public_base_url, config.hsts_max_age),
        keys,
        webhook_policy,
        api_keys,
        workloads: Arc::new(crate::workload::WorkloadVerifier::new(pool.clone(), &config.public_base_url, clock)),
        urls: PublicUrls { secure_cookies: config.public_base_url.scheme() == "https", base: config.public_base_url },
        lifecycle: Lifecycle::default(),
        pool,
    })
}

/// The data keys, their key store opened; turned on for a new database (it seals under
/// data keys from its first value on); re-sealing in the background where this instance
/// runs background work.
async fn data_keys(
    pool: &Db,
    keyring: Arc<crate::vault::Keyring>,
    vault: &crate::config::VaultSettings,
    clock: Arc<dyn crate::domain::Clock>,
    background: Background,
) -> anyhow::Result<(Arc<Keys>, Option<Arc<crate::keys::pending::Pending>>)> {
    // A command's instance (no background work) stops at once without its key store.
    let (store, pending) = match background {
        Background::Run => serving_key_store(&vault.key_store, keyring.clone()).await?,
        Background::None => (key_store(&vault.key_store, keyring.clone()).await?, None),
    };
    let keys = Arc::new(Keys::new(pool.clone(), store, keyring, clock, vault.data_key_cache));
    keys.switch_on_if_new().await?;
    if background == Background::Run {
        crate::flows::rotate::spawn_background(pool.clone(), keys.clone(), vault.reseal_interval);
    }
    Ok((keys, pending))
}

/// A key store that did not answer at start is tried until it does; then the tenants and
/// the operator API's providers (whose secrets did not open at start) are read again.
fn reload_once_open(
    pending: Option<Arc<crate::keys::pending::Pending>>,
    tenants: &Arc<crate::tenants::Tenants>,
    pool: &Db,
) {
    let Some(p) = pending else { return };
    let (tenants, pool) = (tenants.clone(), pool.clone());
    p.spawn_retries(async move {
        if let Err(e) = tenants.reload(&pool).await {
            tracing::warn!(error = %e, "tenants and providers not read again after the key store answered");
        }
    });
}

/// Whether a configured provider or IdP authenticates with `private_key_jwt`.
fn signs_assertions(config: &Config) -> bool {
    use crate::providers::ClientAuth;
    let jwt = Some(ClientAuth::PrivateKeyJwt);
    config.providers.iter().any(|p| p.client().is_some_and(|c| c.auth == jwt))
        || config.idps.all().any(|i| i.client_auth == jwt)
}

/// The authorization servers' resolver, signing `private_key_jwt` assertions with the
/// service's client keys; where a server is set to it (`signs`), the first key is made now,
/// so that its JWKS can be registered before the first request (a key store that does not
/// answer leaves that to the first request).
async fn resolver(
    clock: Arc<dyn crate::domain::Clock>,
    pool: &store::Db,
    keys: &Arc<Keys>,
    signs: bool,
) -> Arc<crate::oauth::resolve::Resolver> {
    let client_keys = crate::keys::client_keys::ClientKeys::new(pool.clone(), keys.clone());
    if signs && let Err(e) = client_keys.ensure(time::OffsetDateTime::now_utc()).await {
        tracing::warn!(error = %e, "no client signing key made at start: the first private_key_jwt request makes it");
    }
    Arc::new(crate::oauth::resolve::Resolver::with_clock(clock).with_client_keys(Arc::new(client_keys)))
}

/// The key store `[vault] store` names, opened: a store that cannot be reached, or lacks
/// its key, stops the command with a message naming it.
pub async fn key_store(
    settings: &crate::config::KeyStoreSettings,
    keyring: Arc<crate::vault::Keyring>,
) -> anyhow::Result<Arc<dyn crate::vault::kek::KeyStore>> {
    open_key_store(settings, keyring).await.map_err(|e| anyhow::anyhow!("vault: {e} ({})", key_store_named(settings)))
}

/// The key store for `serve`: one that did not answer (an outage) is tried again in the
/// background while the instance is not ready ([`crate::keys::pending`]); one that
/// answered no stops the start.
async fn serving_key_store(
    settings: &crate::config::KeyStoreSettings,
    keyring: Arc<crate::vault::Keyring>,
) -> anyhow::Result<(Arc<dyn crate::vault::kek::KeyStore>, Option<Arc<crate::keys::pending::Pending>>)> {
    match open_key_store(settings, keyring.clone()).await {
        Ok(store) => Ok((store, None)),
        Err(e) if e.is_transient() => {
            let what = key_store_named(settings);
            tracing::error!(error = %e, store = %what, "key store not usable: not ready until it is");
            let (settings, keyring) = (settings.clone(), keyring.clone());
            let kind = match &e {
                crate::vault::kek::KeyStoreError::Unavailable { store, .. }
                | crate::vault::kek::KeyStoreError::Refused { store, .. } => *store,
            };
            let pending = crate::keys::pending::Pending::new(kind, what, &e, move || {
                let (settings, keyring) = (settings.clone(), keyring.clone());
                Box::pin(async move { open_key_store(&settings, keyring).await })
            });
            Ok((pending.clone(), Some(pending)))
        }
        Err(e) => Err(anyhow::anyhow!("vault: {e} ({})", key_store_named(settings))),
    }
}

/// The store and its key, for messages.
fn key_store_named(settings: &crate::config::KeyStoreSettings) -> String {
    use crate::config::KeyStoreSettings as S;
    match settings {
        S::Local => "local (the keyring)".to_owned(),
        S::Pkcs11(s) => {
            format!("pkcs11 key {:?} in token {:?}, module {}", s.key_label, s.token_label, s.module.display())
        }
        S::AwsKms(s) => format!("aws-kms key {:?}, region {}", s.key_id, s.region),
    }
}

async fn open_key_store(
    settings: &crate::config::KeyStoreSettings,
    keyring: Arc<crate::vault::Keyring>,
) -> Result<Arc<dyn crate::vault::kek::KeyStore>, crate::vault::kek::KeyStoreError> {
    use crate::config::KeyStoreSettings as S;
    Ok(match settings {
        S::Local => Arc::new(crate::vault::kek::LocalKeyStore::new(keyring)),
        S::Pkcs11(s) => Arc::new(crate::vault::kek::pkcs11::Pkcs11KeyStore::open(s.clone()).await?),
        S::AwsKms(s) => Arc::new(crate::vault::kek::aws_kms::AwsKmsKeyStore::open(s.clone()).await?),
    })
}

/// The API-key verifier, its cache on the shared change watch.
fn api_key_verifier(
    config: &Config,
    pool: Db,
    clock: Arc<dyn crate::domain::Clock>,
    watch: Arc<crate::changes::ChangeWatch>,
) -> Arc<ApiKeyVerifier> {
    ApiKeyVerifier::sharing(
        pool,
        config.api_key_cache_ttl,
        config.api_key_cache_capacity,
        config.api_key_hash_queue,
        clock,
        watch,
    )
}

/// `[refresh]` as the hand-out decides by it.
fn refresh_policy(config: &Config) -> crate::domain::RefreshPolicy {
    crate::domain::RefreshPolicy {
        margin: time::Duration::try_from(config.refresh_margin).unwrap_or(time::Duration::MINUTE),
        unknown_expiry: time::Duration::try_from(config.unknown_expiry_refresh).unwrap_or(time::Duration::HOUR),
    }
}

/// The addresses webhook endpoints may have, and the delivery worker (spawned by the
/// caller where background tasks run).
fn webhook_worker(
    hooks: &crate::config::WebhookSettings,
    cas: &[reqwest::Certificate],
    pool: Db,
    keys: Arc<Keys>,
    clock: Arc<dyn crate::domain::Clock>,
) -> anyhow::Result<(crate::net::ssrf::AddressPolicy, crate::webhooks::worker::Worker)> {
    let policy =
        crate::net::ssrf::AddressPolicy { allow_loopback: hooks.allow_loopback, allow_private: hooks.allow_private };
    let client = crate::net::delivery::DeliveryClient::trusting(
        policy,
        Arc::new(crate::net::ssrf::SystemLookup),
        hooks.timeout,
        cas,
    )
    .map_err(|e| anyhow::anyhow!("webhook http client: {e}"))?;
    let worker = crate::webhooks::worker::Worker {
        pool,
        keys,
        client,
        clock,
        poll: hooks.poll_interval,
        // Longer than an attempt can take (the timeout bounds the request, and again the
        // reading of its answer); a dead instance's claims lapse after it.
        lease: hooks.timeout * 2 + std::time::Duration::from_secs(5),
        slow_after: hooks.timeout / 2,
        max_pending_per_tenant: i64::try_from(hooks.max_pending_per_tenant).unwrap_or(i64::MAX),
    };
    Ok((policy, worker))
}

/// The `Strict-Transport-Security` value: set when the public base is https and
/// `[hsts] max_age_seconds` is not 0.
fn hsts(public_base_url: &url::Url, max_age: u64) -> Option<actix_web::http::header::HeaderValue> {
    (public_base_url.scheme() == "https" && max_age > 0)
        .then(|| format!("max-age={max_age}"))
        .and_then(|v| actix_web::http::header::HeaderValue::from_str(&v).ok())
}

/// The HTTP server: one worker per core, each with its own pool and lookup connections.
fn serve(
    listener: TcpListener,
    shared: AppState,
    connect_options: sqlx::postgres::PgConnectOptions,
    split: PoolSplit,
) -> std::io::Result<Server> {
    Ok(HttpServer::new(move || {
        // Called once per worker, on the worker's thread.
        let pool = Db::new(store::connect_lazy(connect_options.clone(), split.pool_per_worker), shared.pool.pooler());
        let data = web::Data::new(AppState {
            connections: shared.connections.with_lookups(store::lookup::LookupConnections::for_pool(
                &pool,
                connect_options.clone(),
                split.lookups_per_worker,
            )),
            pool,
            proxy: crate::app::Proxying { forwarder: shared.proxy.forwarder.for_worker(), ..shared.proxy.clone() },
            ..shared.clone()
        });
        App::new()
            .wrap(from_fn(crate::http::middleware::request_context))
            .app_data(data)
            .configure(crate::http::ops::configure)
            .configure(crate::http::openapi::configure)
            .configure(crate::http::api::configure)
            .configure(crate::http::admin::configure)
            .configure(crate::http::operator::configure)
            .configure(crate::http::browser::configure)
    })
    .workers(split.workers)
    // Streamed answers (the proxy's, event streams) are written head first, then the
    // body: with Nagle's algorithm on, the body's write waits for the head's ACK, which a
    // client delays by up to 40 ms.
    .tcp_nodelay(true)
    // In-flight requests after the drain: bounded like everything else at shutdown.
    .shutdown_timeout(10)
    // Signals are ours: `Application::run_until_signalled` drains before it stops.
    .disable_signals()
    .listen(listener)?
    .run())
}

#[cfg(test)]
mod tests {
    use super::PoolSplit;

    fn sizes(workers: usize, max_connections: u32, lookups: u32) -> (u32, u32) {
        let s = PoolSplit::for_workers(workers, max_connections, lookups);
        (s.pool_per_worker, s.lookups_per_worker)
    }

    #[test]
    fn lookup_connections_count_within_max_connections_and_the_pool_keeps_at_least_one() {
        // The default on two cores: 8 a worker, one of them the lookup's.
        assert_eq!(sizes(2, 16, 1), (7, 1));
        assert_eq!(sizes(2, 16, 4), (4, 4));
        assert_eq!(sizes(8, 16, 1), (1, 1));
        // Behind a transaction pooler the pool carries the lookups too: at least two.
        assert_eq!(sizes(2, 16, 0), (8, 0));
        assert_eq!(sizes(4, 2, 0), (2, 0));
        // More lookup connections than the share: the pool keeps one for transactions.
        assert_eq!(sizes(2, 4, 16), (1, 16));
    }
}
