//! In-process caches for the lookup path, safe in a token vault because they can never
//! serve what was revoked for longer than it takes a notification to arrive:
//!
//! - entries are dropped when Postgres announces a change (`LISTEN/NOTIFY`, sent by
//!   triggers from the same transaction that changed the row: see migration 0004);
//! - while the listener connection is down the caches are emptied and bypassed, and they
//!   come back only after a ping sent through the database has come back through the
//!   listener, which proves it hears again;
//! - every entry also has a short maximum age, so a lost notification cannot keep a
//!   revoked grant alive for long;
//! - a read that started before an invalidation is never stored after it (an epoch
//!   counter is compared at insert).
//!
//! Connection entries hold the row as stored (ciphertext, opened per request), never a
//! plaintext token.

use crate::store::PgPool;
use crate::store::connections::ConnectionRow;
use crate::tokens::KillState;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use time::OffsetDateTime;

const CONNECTIONS: &str = "mcpc_connections";
const KILL_SWITCHES: &str = "mcpc_kill_switches";
const API_KEYS: &str = "mcpc_api_keys";
const PING: &str = "mcpc_cache_ping";
const SEP: char = '\u{1f}';

/// What a hand-out needs from a connection row, kept small: 100,000 of these must fit in
/// a few tens of MiB.
#[derive(Debug, Clone)]
pub struct CachedConnection {
    pub id: uuid::Uuid,
    pub key_id: Box<str>,
    pub access_token_ct: Box<[u8]>,
    pub has_refresh_token: bool,
    pub token_type: Box<str>,
    pub scopes: Box<[String]>,
    pub account_id: Option<Box<str>>,
    pub account_login: Option<Box<str>>,
    pub access_expires_at: Option<OffsetDateTime>,
    pub refreshed_at: Option<OffsetDateTime>,
}

impl CachedConnection {
    /// Only active rows with a sealed access token are worth caching.
    pub fn of(row: &ConnectionRow) -> Option<Self> {
        if row.status != "active" {
            return None;
        }
        Some(Self {
            id: row.id,
            key_id: row.key_id.as_deref()?.into(),
            access_token_ct: row.access_token_ct.as_deref()?.into(),
            has_refresh_token: row.refresh_token_ct.is_some(),
            token_type: row.token_type.as_str().into(),
            scopes: row.scopes.clone().into_boxed_slice(),
            account_id: row.account_id.as_deref().map(Into::into),
            account_login: row.account_login.as_deref().map(Into::into),
            access_expires_at: row.access_expires_at,
            refreshed_at: row.refreshed_at,
        })
    }
}

fn conn_key(tenant: &str, subject: &str, provider: &str) -> String {
    let mut k = String::with_capacity(tenant.len() + subject.len() + provider.len() + 2);
    k.push_str(tenant);
    k.push(SEP);
    k.push_str(subject);
    k.push(SEP);
    k.push_str(provider);
    k
}

pub struct Caches {
    /// Barriers waiting for their ping to come back through the listener.
    barriers: std::sync::Mutex<HashMap<String, tokio::sync::oneshot::Sender<()>>>,
    enabled: bool,
    max_age: Duration,
    capacity: usize,
    healthy: AtomicBool,
    epoch: AtomicU64,
    connections: RwLock<HashMap<String, (Arc<CachedConnection>, Instant)>>,
    kill_switches: RwLock<HashMap<(String, String), (KillState, Instant)>>,
}

/// A snapshot of the invalidation counter, taken before a database read.
#[derive(Debug, Clone, Copy)]
pub struct Epoch(u64);

impl Caches {
    pub fn new(enabled: bool, max_age: Duration, capacity: usize) -> Self {
        Self {
            barriers: std::sync::Mutex::new(HashMap::new()),
            enabled,
            max_age,
            capacity: capacity.max(1),
            // Not serving until the listener has proven it hears notifications.
            healthy: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            connections: RwLock::new(HashMap::new()),
            kill_switches: RwLock::new(HashMap::new()),
        }
    }

    pub fn epoch(&self) -> Epoch {
        Epoch(self.epoch.load(Ordering::Acquire))
    }

    /// Connection entries are served: the cache is on and its listener proved it hears.
    pub fn is_serving(&self) -> bool {
        self.enabled && self.healthy.load(Ordering::Acquire)
    }

    pub fn connection(&self, tenant: &str, subject: &str, provider: &str) -> Option<Arc<CachedConnection>> {
        if !self.is_serving() {
            return None;
        }
        let map = self.connections.read().ok()?;
        let (entry, at) = map.get(&conn_key(tenant, subject, provider))?;
        (at.elapsed() < self.max_age).then(|| entry.clone())
    }

    pub fn store_connection(&self, epoch: Epoch, tenant: &str, subject: &str, provider: &str, entry: CachedConnection) {
        if !self.is_serving() {
            return;
        }
        if let Ok(mut map) = self.connections.write() {
            // Checked under the write lock: an invalidation after our read bumped the epoch.
            if self.epoch.load(Ordering::Acquire) != epoch.0 {
                return;
            }
            if map.len() >= self.capacity {
                let max_age = self.max_age;
                map.retain(|_, (_, at)| at.elapsed() < max_age);
                if map.len() >= self.capacity {
                    return;
                }
            }
            map.insert(conn_key(tenant, subject, provider), (Arc::new(entry), Instant::now()));
        }
    }

    /// Kill switches are cached even with the connection cache switched off: they change
    /// rarely, and the same notifications and maximum age protect them.
    pub fn kill_state(&self, tenant: &str, provider: &str) -> Option<KillState> {
        if !self.healthy.load(Ordering::Acquire) {
            return None;
        }
        let map = self.kill_switches.read().ok()?;
        let (state, at) = map.get(&(tenant.to_owned(), provider.to_owned()))?;
        (at.elapsed() < self.max_age).then_some(*state)
    }

    pub fn store_kill_state(&self, epoch: Epoch, tenant: &str, provider: &str, state: KillState) {
        if !self.healthy.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut map) = self.kill_switches.write() {
            if self.epoch.load(Ordering::Acquire) != epoch.0 {
                return;
            }
            if map.len() < self.capacity {
                map.insert((tenant.to_owned(), provider.to_owned()), (state, Instant::now()));
            }
        }
    }

    fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn invalidate_connection(&self, payload: &str) {
        if let Ok(mut map) = self.connections.write() {
            self.bump();
            map.remove(payload);
        }
    }

    fn invalidate_kill_switches(&self) {
        if let Ok(mut map) = self.kill_switches.write() {
            self.bump();
            map.clear();
        }
    }

    fn clear_all(&self) {
        self.bump();
        if let Ok(mut m) = self.connections.write() {
            m.clear();
        }
        if let Ok(mut m) = self.kill_switches.write() {
            m.clear();
        }
    }

    fn set_healthy(&self, healthy: bool) {
        if !healthy {
            // Stop serving first, then empty: nothing cached before the gap survives it.
            self.healthy.store(false, Ordering::Release);
            self.clear_all();
        } else {
            self.clear_all();
            self.healthy.store(true, Ordering::Release);
        }
    }

    /// Drops this instance's copy at once (read-your-writes on the instance that made the
    /// change; the others hear the notification).
    pub fn forget_connection(&self, tenant: &str, subject: &str, provider: &str) {
        self.invalidate_connection(&conn_key(tenant, subject, provider));
    }

    pub fn forget_kill_switches(&self) {
        self.invalidate_kill_switches();
    }

    /// Waits until every notification committed before this call has been applied here:
    /// notifications reach a listener in commit order, so once a ping sent now comes back,
    /// everything before it has. `false` when the listener is down or it took over 5 s.
    pub async fn barrier(&self, pool: &PgPool) -> bool {
        let token = crate::crypto::random_token(16);
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut b) = self.barriers.lock() {
            b.insert(token.clone(), tx);
        }
        if sqlx::query("SELECT pg_notify($1, $2)").bind(PING).bind(&token).execute(pool).await.is_err() {
            return false;
        }
        matches!(tokio::time::timeout(Duration::from_secs(5), rx).await, Ok(Ok(())))
    }

    fn release_barrier(&self, token: &str) {
        if let Some(tx) = self.barriers.lock().ok().and_then(|mut b| b.remove(token)) {
            let _ = tx.send(());
        }
    }

    pub fn len(&self) -> usize {
        self.connections.read().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Listens for change notifications until the process ends; reconnects on its own.
pub fn spawn_listener(pool: PgPool, caches: Arc<Caches>, api_keys: Arc<crate::api_keys::ApiKeyVerifier>) {
    tokio::spawn(async move {
        loop {
            if let Err(e) = listen(&pool, &caches, &api_keys).await {
                tracing::warn!(error = %e, "change listener failed; caches bypassed until it is back");
            }
            caches.set_healthy(false);
            api_keys.forget_all();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
}

async fn listen(pool: &PgPool, caches: &Caches, api_keys: &crate::api_keys::ApiKeyVerifier) -> Result<(), sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen_all([CONNECTIONS, KILL_SWITCHES, API_KEYS, PING]).await?;
    // Prove the round trip before serving from the caches.
    let token = crate::crypto::random_token(16);
    sqlx::query("SELECT pg_notify($1, $2)").bind(PING).bind(&token).execute(pool).await?;
    loop {
        match listener.try_recv().await? {
            None => return Ok(()), // connection lost; the caller flushes and reconnects
            Some(n) => match n.channel() {
                CONNECTIONS => caches.invalidate_connection(n.payload()),
                KILL_SWITCHES => caches.invalidate_kill_switches(),
                API_KEYS => api_keys.forget_all(),
                PING if n.payload() == token => {
                    caches.set_healthy(true);
                    tracing::info!("change listener ready; caches serving");
                }
                PING => caches.release_barrier(n.payload()),
                _ => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> CachedConnection {
        CachedConnection {
            id: uuid::Uuid::nil(),
            key_id: "k".into(),
            access_token_ct: vec![1, 2, 3].into(),
            has_refresh_token: true,
            token_type: "Bearer".into(),
            scopes: vec![].into(),
            account_id: None,
            account_login: None,
            access_expires_at: None,
            refreshed_at: None,
        }
    }

    fn healthy(max_age: Duration) -> Caches {
        let c = Caches::new(true, max_age, 10);
        c.set_healthy(true);
        c
    }

    #[test]
    fn nothing_is_served_before_the_listener_proved_itself() {
        let c = Caches::new(true, Duration::from_secs(5), 10);
        c.store_connection(c.epoch(), "t", "s", "p", entry());
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn a_notification_drops_the_entry() {
        let c = healthy(Duration::from_secs(5));
        c.store_connection(c.epoch(), "t", "s", "p", entry());
        assert!(c.connection("t", "s", "p").is_some());
        c.invalidate_connection(&conn_key("t", "s", "p"));
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn a_read_older_than_an_invalidation_is_not_stored() {
        let c = healthy(Duration::from_secs(5));
        let before = c.epoch();
        c.invalidate_connection(&conn_key("t", "s", "p"));
        c.store_connection(before, "t", "s", "p", entry());
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn losing_the_listener_empties_and_bypasses_the_cache() {
        let c = healthy(Duration::from_secs(5));
        c.store_connection(c.epoch(), "t", "s", "p", entry());
        c.set_healthy(false);
        assert!(c.connection("t", "s", "p").is_none());
        c.store_connection(c.epoch(), "t", "s", "p", entry());
        assert!(c.is_empty());
    }

    #[test]
    fn entries_expire_after_the_maximum_age() {
        let c = healthy(Duration::from_millis(20));
        c.store_connection(c.epoch(), "t", "s", "p", entry());
        std::thread::sleep(Duration::from_millis(30));
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn a_disabled_cache_never_serves() {
        let c = Caches::new(false, Duration::from_secs(5), 10);
        c.set_healthy(true);
        c.store_connection(c.epoch(), "t", "s", "p", entry());
        assert!(c.connection("t", "s", "p").is_none());
    }
}
