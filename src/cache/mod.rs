//! In-process caches for the lookup path, safe in a token vault because they can never
//! serve what was revoked for longer than a short bound: they follow the one scheme of
//! [`crate::changes`] (maximum age, confirmation by reading the change log, a drop counter
//! checked at insert, one capacity rule):
//!
//! - entries are dropped when Postgres announces a change (`LISTEN/NOTIFY`, sent by
//!   triggers from the same transaction that changed the row: see migration 0004);
//! - while the listener connection is down the caches are emptied and bypassed, and they
//!   come back only after a ping sent through the database has come back through the
//!   listener, which proves it hears again;
//! - the change log is read a few times per maximum age ([`spawn_confirmer`]): what it
//!   names is dropped, and then every entry still held counts as confirmed when that read
//!   began. A lost notification therefore ends its entry at the next read, and an entry in
//!   steady use stays cached without its row ever being read again.
//!
//! Connection entries hold the row as stored (ciphertext, opened per request), never a
//! plaintext token. They are packed (`store::connections::packed`): one allocation per
//! entry for its fixed fields, key, ciphertext and account, and the parts many rows share
//! (vault key id, token type, scopes, issuer) kept once.

use crate::changes::{ChangeWatch, Ticket};
use crate::domain::{Clock, ConnectionKey, KillState, ProviderId, TenantId};
use crate::store::Db;
use hashbrown::HashTable;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

const CONNECTIONS: &str = "mcpc_connections";
const KILL_SWITCHES: &str = "mcpc_kill_switches";
const API_KEYS: &str = "mcpc_api_keys";
const PING: &str = "mcpc_cache_ping";
const ELICITATIONS: &str = "mcpc_elicitations";
/// Shapes kept for sharing; rows with rarer shapes get their own copy.
const MAX_SHAPES: usize = 4096;
/// The connection entries are split over this many locks: a writer (a miss, a
/// notification, the confirmer) holds up only the lookups of its own shard, and never for
/// more than one entry's work, even when the writing thread is descheduled.
const SHARDS: usize = 32;

mod listener;
pub mod waiters;

pub use crate::store::connections::packed::{CachedConnection, Shape};
use crate::store::connections::packed::{PackedConnection, SEP};
pub use listener::{spawn_confirmer, spawn_listener};

/// Metrics (catalogue: `telemetry::metrics`): lookups by `result` (hit, miss, bypass), and
/// whether the change listener is up.
pub const LOOKUPS: &str = "mcp_connect_cache_lookups_total";
pub const LISTENER_UP: &str = "mcp_connect_cache_listener_up";

/// A kill switch's key, borrowed: hashes (a tuple hashes its parts in order, as the derive
/// does) and compares as `(TenantId, ProviderId)`, so that a hand-out's lookup clones neither
/// string (issue 46).
#[derive(Hash)]
struct KillKey<'a>(&'a TenantId, &'a ProviderId);

impl hashbrown::Equivalent<(TenantId, ProviderId)> for KillKey<'_> {
    fn equivalent(&self, key: &(TenantId, ProviderId)) -> bool {
        *self.0 == key.0 && *self.1 == key.1
    }
}

pub struct Caches {
    /// Barriers waiting for their ping to come back through the listener.
    barriers: Mutex<HashMap<String, tokio::sync::oneshot::Sender<()>>>,
    enabled: bool,
    max_age: Duration,
    capacity: usize,
    /// Listening, the drop counter and the last confirmation, shared with the API-key
    /// cache.
    watch: Arc<ChangeWatch>,
    hasher: RandomState,
    /// A pointer a slot: the tables' free slots cost that much each, not a whole entry.
    connections: Box<[RwLock<HashTable<PackedConnection>>]>,
    shapes: Mutex<HashMap<Arc<Shape>, ()>>,
    kill_switches: crate::changes::Cached<(TenantId, ProviderId), KillState>,
    /// Requests waiting for an elicitation to change (woken by the same listener).
    pub waiters: waiters::Waiters,
    /// The listener's test notification did not arrive (a `LISTEN` through a transaction
    /// pooler): the instance is not ready (`/readyz`) until it does.
    unheard: std::sync::atomic::AtomicBool,
    /// The process is stopping: the listener and the confirmer end at their next round
    /// instead of reporting the database going away as a fault.
    closing: std::sync::atomic::AtomicBool,
}

impl Caches {
    pub fn new(enabled: bool, max_age: Duration, capacity: usize) -> Self {
        Self::with_clock(enabled, max_age, capacity, Arc::new(crate::domain::SystemClock))
    }

    /// [`Self::new`] reading ages from `clock` (tests move it instead of sleeping).
    pub fn with_clock(enabled: bool, max_age: Duration, capacity: usize, clock: Arc<dyn Clock>) -> Self {
        Self::with_watch(enabled, max_age, capacity, ChangeWatch::new(clock))
    }

    /// [`Self::new`] sharing `watch` with the other caches of the process.
    pub fn with_watch(enabled: bool, max_age: Duration, capacity: usize, watch: Arc<ChangeWatch>) -> Self {
        Self {
            barriers: Mutex::new(HashMap::new()),
            enabled,
            max_age,
            capacity: capacity.max(1),
            hasher: RandomState::new(),
            connections: (0..SHARDS).map(|_| RwLock::new(HashTable::new())).collect(),
            shapes: Mutex::new(HashMap::new()),
            kill_switches: crate::changes::Cached::new(watch.clone(), max_age, capacity),
            watch,
            waiters: waiters::Waiters::default(),
            unheard: Default::default(),
            closing: Default::default(),
        }
    }

    pub fn watch(&self) -> &Arc<ChangeWatch> {
        &self.watch
    }

    /// Take before reading what may be stored here.
    pub fn ticket(&self) -> Ticket {
        self.watch.ticket()
    }

    /// The change listener has proved it hears (whether or not the cache is on).
    pub fn is_listening(&self) -> bool {
        self.watch.is_listening()
    }

    /// Connection entries are served: the cache is on and its listener proved it hears.
    pub fn is_serving(&self) -> bool {
        self.enabled && self.watch.is_listening()
    }

    /// The key's bytes are hashed as one stream (`tenant␟subject␟provider`), so the parts
    /// hash like the joined key a notification names.
    fn hash_parts(&self, key: &ConnectionKey) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(key.tenant.as_str().as_bytes());
        h.write(&[SEP]);
        h.write(key.subject.as_str().as_bytes());
        h.write(&[SEP]);
        h.write(key.provider.as_str().as_bytes());
        h.finish()
    }

    /// Bits the tables themselves do not use (they take the low bits for the slot and the
    /// top seven for the tag).
    fn shard(&self, hash: u64) -> &RwLock<HashTable<PackedConnection>> {
        &self.connections[(hash >> 32) as usize % SHARDS]
    }

    fn hash_key(&self, key: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(key);
        h.finish()
    }

    pub fn connection(&self, key: &ConnectionKey) -> Option<CachedConnection> {
        if !self.is_serving() {
            metrics::counter!(LOOKUPS, "result" => "bypass").increment(1);
            return None;
        }
        let found = self.find_fresh(key);
        metrics::counter!(LOOKUPS, "result" => if found.is_some() { "hit" } else { "miss" }).increment(1);
        found
    }

    fn find_fresh(&self, key: &ConnectionKey) -> Option<CachedConnection> {
        let hash = self.hash_parts(key);
        let table = self.shard(hash).read().ok()?;
        let e = table.find(hash, |e| e.is_key(key))?;
        let h = e.header();
        // One clock read for both (each is a call into the vDSO: a tenth of the lookup in
        // issue 46's profile).
        let now_ms = self.watch.now_ms();
        if !self.watch.is_fresh_at(h.confirmed_ms, self.max_age, now_ms) {
            return None;
        }
        let now_s = ChangeWatch::seconds(now_ms);
        if h.used_s.load(Ordering::Relaxed) != now_s {
            h.used_s.store(now_s, Ordering::Relaxed);
        }
        Some(e.unpack())
    }

    /// One shared copy per shape, up to a bound.
    fn shared_shape(&self, shape: &Arc<Shape>) -> Arc<Shape> {
        let Ok(mut shapes) = self.shapes.lock() else { return shape.clone() };
        if let Some((s, ())) = shapes.get_key_value(shape) {
            return s.clone();
        }
        if shapes.len() < MAX_SHAPES {
            shapes.insert(shape.clone(), ());
        }
        shape.clone()
    }

    pub fn store_connection(&self, ticket: Ticket, key: &ConnectionKey, c: &CachedConnection) {
        if !self.is_serving() {
            return;
        }
        // The age counts from before the read began.
        let now_s = self.watch.now_s();
        let Some(entry) = PackedConnection::pack(key, c, self.shared_shape(&c.shape), ticket.at_ms(), now_s) else {
            return;
        };
        let hash = self.hash_parts(key);
        if let Ok(mut table) = self.shard(hash).write() {
            // Checked under the write lock: a drop after our read bumped the counter.
            if !self.watch.admits(&ticket) {
                return;
            }
            if let Ok(old) = table.find_entry(hash, |e| e.is_key(key)) {
                old.remove();
            }
            let capacity = self.capacity.div_ceil(SHARDS);
            if table.len() >= capacity {
                table.retain(|e| {
                    let h = e.header();
                    crate::changes::keeps(&self.watch, h.confirmed_ms, self.max_age, &h.used_s, now_s)
                });
                if table.len() >= capacity {
                    return;
                }
            }
            table.insert_unique(hash, entry, |e| self.hash_key(e.key()));
        }
    }

    /// Kill switches are cached even with the connection cache switched off: they change
    /// rarely, and the same notifications, change log and maximum age protect them.
    pub fn kill_state(&self, tenant: &TenantId, provider: &ProviderId) -> Option<KillState> {
        if !self.watch.is_listening() {
            return None;
        }
        match self.kill_switches.get(&KillKey(tenant, provider))? {
            crate::changes::Found::Fresh(state) => Some(state),
            crate::changes::Found::Due(_) => None,
        }
    }

    pub fn store_kill_state(&self, ticket: Ticket, tenant: &TenantId, provider: &ProviderId, state: KillState) {
        if self.watch.is_listening() {
            self.kill_switches.insert(&ticket, (tenant.clone(), provider.clone()), state);
        }
    }

    fn invalidate_connection(&self, payload: &str) {
        let hash = self.hash_key(payload.as_bytes());
        if let Ok(mut table) = self.shard(hash).write() {
            self.watch.changed();
            if let Ok(e) = table.find_entry(hash, |e| e.key() == payload.as_bytes()) {
                e.remove();
            }
        }
    }

    fn invalidate_kill_switches(&self) {
        self.kill_switches.clear();
    }

    fn clear_all(&self) {
        self.watch.changed();
        for shard in &self.connections {
            if let Ok(mut t) = shard.write() {
                t.clear();
                t.shrink_to_fit(|e| self.hash_key(e.key()));
            }
        }
        self.kill_switches.clear();
        if let Ok(mut s) = self.shapes.lock() {
            s.clear();
        }
    }

    /// Ends the listener and the confirmer quietly (the process is stopping, and the
    /// database may stop before it: `dev`'s private cluster).
    pub fn close(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The change listener did not hear its own test notification (see `listener`).
    pub fn is_unheard(&self) -> bool {
        self.unheard.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_unheard(&self, unheard: bool) {
        self.unheard.store(unheard, std::sync::atomic::Ordering::Relaxed);
    }

    fn set_healthy(&self, healthy: bool) {
        metrics::gauge!(LISTENER_UP).set(if healthy { 1.0 } else { 0.0 });
        if !healthy {
            // Stop serving first, then empty: nothing cached before the gap survives it.
            self.watch.set_listening(false);
            self.clear_all();
            // Changes may now go unheard: every waiter reads again and answers.
            self.waiters.wake_all();
        } else {
            self.clear_all();
            self.watch.set_listening(true);
        }
    }

    /// Drops this instance's copy at once (read-your-writes on the instance that made the
    /// change; the others hear the notification).
    pub fn forget_connection(&self, key: &ConnectionKey) {
        let hash = self.hash_parts(key);
        if let Ok(mut table) = self.shard(hash).write() {
            self.watch.changed();
            if let Ok(e) = table.find_entry(hash, |e| e.is_key(key)) {
                e.remove();
            }
        }
    }

    /// Applies a read of the change log to these caches: drops the entries it names (the
    /// listener applies the API-key and tenant scopes).
    fn apply_changes(&self, changes: &[crate::store::changes::Change]) {
        for c in changes {
            match c.scope.as_str() {
                "connection" => self.invalidate_connection(&c.key),
                "kill_switch" => self.invalidate_kill_switches(),
                _ => {}
            }
        }
    }

    pub fn forget_kill_switches(&self) {
        self.invalidate_kill_switches();
    }

    /// Waits until every notification committed before this call has been applied here:
    /// notifications reach a listener in commit order, so once a ping sent now comes back,
    /// everything before it has. `false` when the listener is down or it took over 5 s.
    pub async fn barrier(&self, pool: &Db) -> bool {
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
        self.connections.iter().map(|s| s.read().map(|t| t.len()).unwrap_or(0)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::changes::Change;
    use time::OffsetDateTime;
    use uuid::Uuid;

    fn entry() -> CachedConnection {
        CachedConnection {
            id: crate::domain::ConnectionId::from_uuid(Uuid::nil()),
            xmin: 100,
            shape: Arc::new(Shape {
                key_id: "k".into(),
                token_type: "Bearer".into(),
                scopes: crate::domain::Scopes::default(),
                issuer: "https://idp.example".into(),
            }),
            access_token_ct: vec![1, 2, 3].into(),
            has_refresh_token: true,
            account_id: None,
            account_login: None,
            access_expires_at: None,
            refreshed_at: None,
            seal_version: Some(1),
            packed: None,
        }
    }

    fn key(t: &str, s: &str, p: &str) -> ConnectionKey {
        ConnectionKey {
            tenant: TenantId::parse(t).unwrap(),
            subject: crate::domain::Subject::parse(s).unwrap(),
            provider: ProviderId::parse(p).unwrap(),
        }
    }

    fn healthy(max_age: Duration) -> Caches {
        let c = Caches::new(true, max_age, 1000);
        c.set_healthy(true);
        c
    }

    /// [`healthy`] on a clock the test moves.
    fn healthy_on_a_clock(max_age: Duration) -> (Caches, Arc<crate::domain::ManualClock>) {
        let clock = Arc::new(crate::domain::ManualClock::default());
        let c = Caches::with_clock(true, max_age, 1000, clock.clone());
        c.set_healthy(true);
        (c, clock)
    }

    fn change(scope: &str, key: &str) -> Change {
        Change { scope: scope.to_owned(), key: key.to_owned() }
    }

    #[test]
    fn an_entry_comes_back_as_stored_and_only_under_its_own_key() {
        let c = healthy(Duration::from_secs(5));
        let mut e = entry();
        e.account_id = Some("42".into());
        e.account_login = Some("alice".into());
        e.access_expires_at = Some(OffsetDateTime::UNIX_EPOCH + time::Duration::microseconds(1_795_000_000_123_456));
        e.refreshed_at = Some(OffsetDateTime::UNIX_EPOCH - time::Duration::microseconds(1));
        c.store_connection(c.ticket(), &key("t", "s", "p"), &e);
        let mut got = c.connection(&key("t", "s", "p")).expect("cached");
        // Read from the cache, it keeps the entry (for the hand-out audit), which names its
        // holder.
        let packed = got.packed.take().expect("the entry");
        assert_eq!(packed.holder(), Some(("t", "s", "p", "https://idp.example")));
        assert_eq!(format!("{got:?}"), format!("{e:?}"));
        // (No part of a key can be empty, so a separator cannot be moved to make another.)
        for (t, s, p) in [("t", "s", "q"), ("t", "sp", "p"), ("ts", "s", "p"), ("t", "s", "pp"), ("p", "t", "s")] {
            assert!(c.connection(&key(t, s, p)).is_none(), "{t:?} {s:?} {p:?}");
        }
        // Rows of one shape share it.
        let other = entry();
        c.store_connection(c.ticket(), &key("t", "s2", "p"), &other);
        let (a, b) = (c.connection(&key("t", "s", "p")).unwrap(), c.connection(&key("t", "s2", "p")).unwrap());
        assert!(Arc::ptr_eq(&a.shape, &b.shape));
    }

    #[test]
    fn nothing_is_served_before_the_listener_proved_itself() {
        let c = Caches::new(true, Duration::from_secs(5), 1000);
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        assert!(c.connection(&key("t", "s", "p")).is_none());
    }

    #[test]
    fn a_notification_drops_the_entry() {
        let c = healthy(Duration::from_secs(5));
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        assert!(c.connection(&key("t", "s", "p")).is_some());
        c.invalidate_connection("t\u{1f}s\u{1f}p");
        assert!(c.connection(&key("t", "s", "p")).is_none());
    }

    #[test]
    fn a_read_older_than_an_invalidation_is_not_stored() {
        let c = healthy(Duration::from_secs(5));
        let before = c.ticket();
        c.invalidate_connection("t\u{1f}s\u{1f}p");
        c.store_connection(before, &key("t", "s", "p"), &entry());
        assert!(c.connection(&key("t", "s", "p")).is_none());
    }

    #[test]
    fn losing_the_listener_empties_and_bypasses_the_cache() {
        let c = healthy(Duration::from_secs(5));
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        let before = c.ticket();
        c.set_healthy(false);
        assert!(c.connection(&key("t", "s", "p")).is_none());
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        assert!(c.is_empty());
        // Back: a read begun before the gap is still not stored.
        c.set_healthy(true);
        c.store_connection(before, &key("t", "s", "p"), &entry());
        assert!(c.is_empty());
    }

    #[test]
    fn entries_expire_after_the_maximum_age() {
        let (c, clock) = healthy_on_a_clock(Duration::from_millis(20));
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        clock.advance(Duration::from_millis(19));
        assert!(c.connection(&key("t", "s", "p")).is_some(), "younger than the maximum age");
        clock.advance(Duration::from_millis(1));
        assert!(c.connection(&key("t", "s", "p")).is_none());
    }

    #[test]
    fn the_age_counts_from_before_the_read() {
        let (c, clock) = healthy_on_a_clock(Duration::from_millis(40));
        let before_read = c.ticket();
        clock.advance(Duration::from_millis(50));
        c.store_connection(before_read, &key("t", "s", "p"), &entry());
        assert!(c.connection(&key("t", "s", "p")).is_none());
        // The same store from a read just made is served.
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        assert!(c.connection(&key("t", "s", "p")).is_some());
    }

    #[test]
    fn a_disabled_cache_never_serves() {
        let c = Caches::new(false, Duration::from_secs(5), 1000);
        c.set_healthy(true);
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        assert!(c.connection(&key("t", "s", "p")).is_none());
    }

    #[test]
    fn a_change_log_read_drops_what_it_names_and_confirms_the_rest_as_of_its_start() {
        let (c, clock) = healthy_on_a_clock(Duration::from_millis(100));
        c.store_connection(c.ticket(), &key("t", "s", "p"), &entry());
        c.store_connection(c.ticket(), &key("t", "s2", "p"), &entry());
        clock.advance(Duration::from_millis(60));
        let read_ms = c.watch.now_ms();
        clock.advance(Duration::from_millis(10));
        c.apply_changes(&[change("connection", "t\u{1f}s2\u{1f}p"), change("connection", "t\u{1f}x\u{1f}p")]);
        c.watch.confirm(read_ms);
        assert!(c.connection(&key("t", "s2", "p")).is_none(), "named in the log: dropped");
        clock.advance(Duration::from_millis(80));
        assert!(c.connection(&key("t", "s", "p")).is_some(), "150 ms after its read, 90 ms after the log read began");
        clock.advance(Duration::from_millis(10));
        assert!(c.connection(&key("t", "s", "p")).is_none(), "the log read is as old as the maximum age");
    }

    #[test]
    fn a_read_begun_before_a_change_log_drop_is_not_stored_after_it() {
        let c = healthy(Duration::from_secs(5));
        let before = c.ticket();
        c.apply_changes(&[change("connection", "t\u{1f}s\u{1f}p")]);
        c.store_connection(before, &key("t", "s", "p"), &entry());
        assert!(c.connection(&key("t", "s", "p")).is_none());
    }

    #[test]
    fn a_kill_state_is_found_by_its_borrowed_key_and_only_by_its_own() {
        let c = healthy(Duration::from_secs(5));
        let id = |t: &str, p: &str| (TenantId::parse(t).unwrap(), ProviderId::parse(p).unwrap());
        let ((t, p), (t2, p2)) = (id("acme", "github"), id("acme", "google"));
        c.store_kill_state(c.ticket(), &t, &p, KillState::NoNewElicitations);
        c.store_kill_state(c.ticket(), &t2, &p2, KillState::Open);
        assert_eq!(c.kill_state(&t, &p), Some(KillState::NoNewElicitations));
        assert_eq!(c.kill_state(&t2, &p2), Some(KillState::Open));
        let (other, _) = id("acm", "github");
        assert_eq!(c.kill_state(&other, &p), None, "another tenant");
        assert_eq!(c.kill_state(&t, &ProviderId::parse("githu").unwrap()), None, "another provider");
        // Hashed as the owned key, and equal to it alone (a miss above may come from the hash).
        use hashbrown::Equivalent as _;
        let hasher = RandomState::new();
        assert_eq!(hasher.hash_one(KillKey(&t, &p)), hasher.hash_one((t.clone(), p.clone())));
        assert!(KillKey(&t, &p).equivalent(&(t.clone(), p.clone())));
        assert!(!KillKey(&t, &p).equivalent(&(t.clone(), p2.clone())), "another provider");
        assert!(!KillKey(&t, &p).equivalent(&(other.clone(), p.clone())), "another tenant");
    }

    #[test]
    fn a_change_log_read_naming_kill_switches_drops_every_cached_state() {
        let c = healthy(Duration::from_secs(5));
        let (t, p) = (TenantId::parse("t").unwrap(), ProviderId::parse("p").unwrap());
        c.store_kill_state(c.ticket(), &t, &p, KillState::Open);
        assert_eq!(c.kill_state(&t, &p), Some(KillState::Open));
        c.apply_changes(&[change("connection", "t\u{1f}s\u{1f}p")]);
        assert_eq!(c.kill_state(&t, &p), Some(KillState::Open), "a connection change leaves it");
        c.apply_changes(&[change("kill_switch", "")]);
        assert_eq!(c.kill_state(&t, &p), None);
    }

    #[test]
    fn a_full_cache_makes_room_from_entries_nobody_asked_for_within_a_minute() {
        let clock = Arc::new(crate::domain::ManualClock::default());
        // One entry per shard.
        let c = Caches::with_clock(true, Duration::from_secs(5), SHARDS, clock.clone());
        c.set_healthy(true);
        // Two keys of one shard.
        let keys: Vec<String> = (0..1000).map(|i| format!("s{i}")).collect();
        let shard_of = |s: &str| (c.hash_parts(&key("t", s, "p")) >> 32) as usize % SHARDS;
        let first = &keys[0];
        let second = keys.iter().find(|k| *k != first && shard_of(k) == shard_of(first)).unwrap();
        c.store_connection(c.ticket(), &key("t", first, "p"), &entry());
        c.store_connection(c.ticket(), &key("t", second, "p"), &entry());
        assert!(c.connection(&key("t", second, "p")).is_none(), "the shard is full of an entry in use");
        // Kept confirmed for over a minute, but not asked for.
        for _ in 0..13 {
            clock.advance(Duration::from_secs(5));
            c.watch.confirm(c.watch.now_ms());
        }
        c.store_connection(c.ticket(), &key("t", second, "p"), &entry());
        assert!(c.connection(&key("t", second, "p")).is_some());
        assert!(c.connection(&key("t", first, "p")).is_none(), "the idle entry made room");
    }

    #[test]
    fn a_row_changed_in_memory_is_never_cached() {
        let c = healthy(Duration::from_secs(5));
        let mut e = entry();
        e.xmin = 0;
        c.store_connection(c.ticket(), &key("t", "s", "p"), &e);
        assert!(c.connection(&key("t", "s", "p")).is_none());
    }
}
