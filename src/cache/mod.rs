//! In-process caches for the lookup path, safe in a token vault because they can never
//! serve what was revoked for longer than it takes a notification to arrive:
//!
//! - entries are dropped when Postgres announces a change (`LISTEN/NOTIFY`, sent by
//!   triggers from the same transaction that changed the row: see migration 0004);
//! - while the listener connection is down the caches are emptied and bypassed, and they
//!   come back only after a ping sent through the database has come back through the
//!   listener, which proves it hears again;
//! - every entry is served only up to a short maximum age after the database last
//!   confirmed its content, so a lost notification cannot keep a revoked grant alive for
//!   long. Entries asked for within the last minute are confirmed in batches before they
//!   reach that age (see [`spawn_confirmer`]): the row's version (`xmin`, which every write
//!   to the row changes; use is recorded in another table) is re-read; a different version
//!   drops the entry, the same restarts its age from the moment the read began;
//! - a read that started before an invalidation is never stored after it (an epoch
//!   counter is compared at insert).
//!
//! Connection entries hold the row as stored (ciphertext, opened per request), never a
//! plaintext token. They are packed: one allocation per entry for its key, ciphertext and
//! account, and the parts many rows share (vault key id, token type, scopes) kept once.

use crate::domain::{Clock, KillState};
use crate::store::PgPool;
use crate::store::connections::RowVersion;
use hashbrown::HashTable;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use uuid::Uuid;

const CONNECTIONS: &str = "mcpc_connections";
const KILL_SWITCHES: &str = "mcpc_kill_switches";
const API_KEYS: &str = "mcpc_api_keys";
const PING: &str = "mcpc_cache_ping";
const ELICITATIONS: &str = "mcpc_elicitations";
const SEP: u8 = 0x1f;
/// Shapes kept for sharing; rows with rarer shapes get their own copy.
const MAX_SHAPES: usize = 4096;
/// At most this many ids per confirmer query (about 0.3 ms of Postgres's work): a tick's
/// due entries (about 250 per 8 ms tick with 100,000 entries in use and the default maximum
/// age) are re-read in a few short queries, not in one that holds a core for milliseconds.
const CONFIRM_BATCH: usize = 100;
/// The connection entries are split over this many locks: a writer (a miss, a
/// notification, the confirmer) holds up only the lookups of its own shard, and never for
/// more than one entry's work, even when the writing thread is descheduled.
const SHARDS: usize = 32;
/// Shards the confirmer looks at per tick (a pass over all of them takes 32 ticks).
const SHARDS_PER_TICK: usize = 1;
/// Entries not asked for this long are no longer re-read; they age out.
const KEEP_IDLE: Duration = Duration::from_secs(60);

mod entry;
mod listener;
pub mod waiters;

pub use entry::{CachedConnection, Shape};
use entry::{Due, Entry};
pub use listener::{spawn_confirmer, spawn_listener};

/// Metrics (catalogue: `telemetry::metrics`): lookups by `result` (hit, miss, bypass), and
/// whether the change listener is up.
pub const LOOKUPS: &str = "mcp_connect_cache_lookups_total";
pub const LISTENER_UP: &str = "mcp_connect_cache_listener_up";

pub struct Caches {
    /// Barriers waiting for their ping to come back through the listener.
    barriers: Mutex<HashMap<String, tokio::sync::oneshot::Sender<()>>>,
    enabled: bool,
    max_age: Duration,
    capacity: usize,
    healthy: AtomicBool,
    epoch: AtomicU64,
    began: Instant,
    hasher: RandomState,
    /// Boxed: the tables' free slots then cost a pointer each, not a whole entry.
    connections: Box<[RwLock<HashTable<Box<Entry>>>]>,
    shapes: Mutex<HashMap<Arc<Shape>, ()>>,
    keep_idle: Duration,
    kill_switches: RwLock<HashMap<(String, String), (KillState, Instant)>>,
    clock: Arc<dyn Clock>,
    /// Requests waiting for an elicitation to change (woken by the same listener).
    pub waiters: waiters::Waiters,
}

/// A snapshot of the invalidation counter and the time, taken before a database read.
#[derive(Debug, Clone, Copy)]
pub struct Epoch {
    n: u64,
    at_ms: u64,
}

impl Caches {
    pub fn new(enabled: bool, max_age: Duration, capacity: usize) -> Self {
        Self::with_clock(enabled, max_age, capacity, Arc::new(crate::domain::SystemClock))
    }

    /// [`Self::new`] reading ages from `clock` (tests move it instead of sleeping).
    pub fn with_clock(enabled: bool, max_age: Duration, capacity: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            barriers: Mutex::new(HashMap::new()),
            enabled,
            max_age,
            capacity: capacity.max(1),
            // Not serving until the listener has proven it hears notifications.
            healthy: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            began: clock.now(),
            clock,
            hasher: RandomState::new(),
            connections: (0..SHARDS).map(|_| RwLock::new(HashTable::new())).collect(),
            shapes: Mutex::new(HashMap::new()),
            keep_idle: KEEP_IDLE,
            kill_switches: RwLock::new(HashMap::new()),
            waiters: waiters::Waiters::default(),
        }
    }

    pub fn epoch(&self) -> Epoch {
        Epoch { n: self.epoch.load(Ordering::Acquire), at_ms: self.now_ms() }
    }

    /// The change listener has proved it hears (whether or not the cache is on).
    pub fn is_listening(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Connection entries are served: the cache is on and its listener proved it hears.
    pub fn is_serving(&self) -> bool {
        self.enabled && self.healthy.load(Ordering::Acquire)
    }

    fn now_ms(&self) -> u64 {
        self.clock.since(self.began).as_millis() as u64
    }

    fn max_age_ms(&self) -> u64 {
        self.max_age.as_millis() as u64
    }

    /// The key's bytes are hashed as one stream, so the parts hash like the joined key.
    fn hash_parts(&self, t: &str, s: &str, p: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(t.as_bytes());
        h.write(&[SEP]);
        h.write(s.as_bytes());
        h.write(&[SEP]);
        h.write(p.as_bytes());
        h.finish()
    }

    /// Bits the tables themselves do not use (they take the low bits for the slot and the
    /// top seven for the tag).
    fn shard(&self, hash: u64) -> &RwLock<HashTable<Box<Entry>>> {
        &self.connections[(hash >> 32) as usize % SHARDS]
    }

    fn hash_key(&self, key: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(key);
        h.finish()
    }

    pub fn connection(&self, tenant: &str, subject: &str, provider: &str) -> Option<CachedConnection> {
        if !self.is_serving() {
            metrics::counter!(LOOKUPS, "result" => "bypass").increment(1);
            return None;
        }
        let found = self.find_fresh(tenant, subject, provider);
        metrics::counter!(LOOKUPS, "result" => if found.is_some() { "hit" } else { "miss" }).increment(1);
        found
    }

    fn find_fresh(&self, tenant: &str, subject: &str, provider: &str) -> Option<CachedConnection> {
        let hash = self.hash_parts(tenant, subject, provider);
        let table = self.shard(hash).read().ok()?;
        let e = table.find(hash, |e| e.is_key(tenant, subject, provider))?;
        let now = self.now_ms();
        if now.saturating_sub(e.confirmed_ms) >= self.max_age_ms() {
            return None;
        }
        let now_s = (now / 1000) as u32;
        if e.used_s.load(Ordering::Relaxed) != now_s {
            e.used_s.store(now_s, Ordering::Relaxed);
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

    pub fn store_connection(&self, epoch: Epoch, tenant: &str, subject: &str, provider: &str, c: &CachedConnection) {
        if !self.is_serving() {
            return;
        }
        // The age counts from before the read began.
        let Some(entry) = Entry::pack((tenant, subject, provider), c, self.shared_shape(&c.shape), epoch.at_ms) else {
            return;
        };
        let hash = self.hash_parts(tenant, subject, provider);
        if let Ok(mut table) = self.shard(hash).write() {
            // Checked under the write lock: an invalidation after our read bumped the epoch.
            if self.epoch.load(Ordering::Acquire) != epoch.n {
                return;
            }
            if let Ok(old) = table.find_entry(hash, |e| e.is_key(tenant, subject, provider)) {
                old.remove();
            }
            let capacity = self.capacity.div_ceil(SHARDS);
            if table.len() >= capacity {
                let (now, max_age) = (self.now_ms(), self.max_age_ms());
                table.retain(|e| now.saturating_sub(e.confirmed_ms) < max_age);
                if table.len() >= capacity {
                    return;
                }
            }
            table.insert_unique(hash, Box::new(entry), |e| self.hash_key(e.key()));
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
        (self.clock.since(*at) < self.max_age).then_some(*state)
    }

    pub fn store_kill_state(&self, epoch: Epoch, tenant: &str, provider: &str, state: KillState) {
        if !self.healthy.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut map) = self.kill_switches.write() {
            if self.epoch.load(Ordering::Acquire) != epoch.n {
                return;
            }
            if map.len() < self.capacity {
                map.insert((tenant.to_owned(), provider.to_owned()), (state, self.clock.now()));
            }
        }
    }

    fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn invalidate_connection(&self, payload: &str) {
        let hash = self.hash_key(payload.as_bytes());
        if let Ok(mut table) = self.shard(hash).write() {
            self.bump();
            if let Ok(e) = table.find_entry(hash, |e| e.key() == payload.as_bytes()) {
                e.remove();
            }
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
        for shard in &self.connections {
            if let Ok(mut t) = shard.write() {
                t.clear();
                t.shrink_to_fit(|e| self.hash_key(e.key()));
            }
        }
        if let Ok(mut m) = self.kill_switches.write() {
            m.clear();
        }
        if let Ok(mut s) = self.shapes.lock() {
            s.clear();
        }
    }

    fn set_healthy(&self, healthy: bool) {
        metrics::gauge!(LISTENER_UP).set(if healthy { 1.0 } else { 0.0 });
        if !healthy {
            // Stop serving first, then empty: nothing cached before the gap survives it.
            self.healthy.store(false, Ordering::Release);
            self.clear_all();
            // Changes may now go unheard: every waiter reads again and answers.
            self.waiters.wake_all();
        } else {
            self.clear_all();
            self.healthy.store(true, Ordering::Release);
        }
    }

    /// Drops this instance's copy at once (read-your-writes on the instance that made the
    /// change; the others hear the notification).
    pub fn forget_connection(&self, key: &crate::domain::ConnectionKey) {
        let (tenant, subject, provider) = (key.tenant.as_str(), key.subject.as_str(), key.provider.as_str());
        let hash = self.hash_parts(tenant, subject, provider);
        if let Ok(mut table) = self.shard(hash).write() {
            self.bump();
            if let Ok(e) = table.find_entry(hash, |e| e.is_key(tenant, subject, provider)) {
                e.remove();
            }
        }
    }

    pub fn forget_kill_switches(&self) {
        self.invalidate_kill_switches();
    }

    /// How much later than half its maximum age an entry falls due: a fixed share of a
    /// quarter of the maximum age, taken from its id. Entries read or confirmed together
    /// fall due apart, so the re-reads spread out instead of coming as one wave per period
    /// (a wave of 100,000 rows kept Postgres busy for a tenth of a second and showed in the
    /// lookups' p99).
    fn due_after_ms(&self, id: &Uuid) -> u64 {
        let quarter = self.max_age_ms() / 4;
        self.max_age_ms() / 2 + if quarter == 0 { 0 } else { id.as_u64_pair().1 % quarter }
    }

    /// One shard's entries asked for recently that are past their due age (between half
    /// and three quarters of the maximum age): the ones to re-read before they age out.
    fn due_in_shard(&self, shard: usize, due: &mut Vec<Due>) {
        let now = self.now_ms();
        let idle_s = (self.keep_idle.as_secs() as u32).max(1);
        let now_s = (now / 1000) as u32;
        let Some(Ok(table)) = self.connections.get(shard).map(|s| s.read()) else { return };
        due.extend(
            table
                .iter()
                .filter(|e| {
                    now.saturating_sub(e.confirmed_ms) >= self.due_after_ms(&e.id)
                        && now_s.saturating_sub(e.used_s.load(Ordering::Relaxed)) < idle_s
                })
                .map(|e| Due { id: e.id, hash: self.hash_key(e.key()) }),
        );
    }

    #[cfg(test)]
    fn due_for_confirmation(&self) -> Vec<Due> {
        let mut due = Vec::new();
        for shard in 0..SHARDS {
            self.due_in_shard(shard, &mut due);
        }
        due
    }

    /// Applies a re-read, begun at `read_ms`, of the rows of the entries `asked` about: an
    /// entry whose row still has the version the entry was read at counts its age from
    /// then; one whose row changed or is gone is dropped. Nothing is added.
    fn confirm(&self, read_ms: u64, asked: &[Due], rows: &[RowVersion]) -> (usize, usize) {
        let current: HashMap<Uuid, i64> = rows.iter().map(|r| (r.id, r.xmin)).collect();
        let (mut confirmed, mut dropped) = (0, 0);
        for due in asked {
            let Ok(mut table) = self.shard(due.hash).write() else { continue };
            let Ok(mut found) = table.find_entry(due.hash, |e| e.id == due.id) else { continue };
            if current.get(&due.id) == Some(&i64::from(found.get().xmin)) {
                let e = found.get_mut();
                e.confirmed_ms = e.confirmed_ms.max(read_ms);
                confirmed += 1;
            } else {
                found.remove();
                dropped += 1;
            }
        }
        (confirmed, dropped)
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
        self.connections.iter().map(|s| s.read().map(|t| t.len()).unwrap_or(0)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::OffsetDateTime;

    fn entry() -> CachedConnection {
        CachedConnection {
            id: Uuid::nil(),
            xmin: 100,
            shape: Arc::new(Shape { key_id: "k".into(), token_type: "Bearer".into(), scopes: vec![].into() }),
            access_token_ct: vec![1, 2, 3].into(),
            has_refresh_token: true,
            account_id: None,
            account_login: None,
            access_expires_at: None,
            refreshed_at: None,
            seal_version: Some(1),
        }
    }

    /// The version the confirmer would read back for [`entry`].
    fn row_of(c: &CachedConnection) -> RowVersion {
        RowVersion { id: c.id, xmin: c.xmin }
    }

    /// What the confirmer asks about the entry stored under `t␟s␟p`, due or not.
    fn asked(c: &Caches, id: Uuid) -> Vec<Due> {
        vec![Due { id, hash: c.hash_parts("t", "s", "p") }]
    }

    fn due_ids(c: &Caches) -> Vec<Uuid> {
        c.due_for_confirmation().iter().map(|d| d.id).collect()
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

    #[test]
    fn an_entry_comes_back_as_stored_and_only_under_its_own_key() {
        let c = healthy(Duration::from_secs(5));
        let mut e = entry();
        e.account_id = Some("42".into());
        e.account_login = Some("alice".into());
        e.access_expires_at = Some(OffsetDateTime::UNIX_EPOCH + time::Duration::microseconds(1_795_000_000_123_456));
        e.refreshed_at = Some(OffsetDateTime::UNIX_EPOCH - time::Duration::microseconds(1));
        c.store_connection(c.epoch(), "t", "s", "p", &e);
        let got = c.connection("t", "s", "p").expect("cached");
        assert_eq!(format!("{got:?}"), format!("{e:?}"));
        for (t, s, p) in [("t", "s", "q"), ("t", "sp", ""), ("ts", "", "p"), ("t", "s", "pp"), ("", "t", "s")] {
            assert!(c.connection(t, s, p).is_none(), "{t:?} {s:?} {p:?}");
        }
        // Rows of one shape share it.
        let other = entry();
        c.store_connection(c.epoch(), "t", "s2", "p", &other);
        let (a, b) = (c.connection("t", "s", "p").unwrap(), c.connection("t", "s2", "p").unwrap());
        assert!(Arc::ptr_eq(&a.shape, &b.shape));
    }

    #[test]
    fn nothing_is_served_before_the_listener_proved_itself() {
        let c = Caches::new(true, Duration::from_secs(5), 1000);
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn a_notification_drops_the_entry() {
        let c = healthy(Duration::from_secs(5));
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        assert!(c.connection("t", "s", "p").is_some());
        c.invalidate_connection("t\u{1f}s\u{1f}p");
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn a_read_older_than_an_invalidation_is_not_stored() {
        let c = healthy(Duration::from_secs(5));
        let before = c.epoch();
        c.invalidate_connection("t\u{1f}s\u{1f}p");
        c.store_connection(before, "t", "s", "p", &entry());
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn losing_the_listener_empties_and_bypasses_the_cache() {
        let c = healthy(Duration::from_secs(5));
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        c.set_healthy(false);
        assert!(c.connection("t", "s", "p").is_none());
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        assert!(c.is_empty());
    }

    #[test]
    fn entries_expire_after_the_maximum_age() {
        let (c, clock) = healthy_on_a_clock(Duration::from_millis(20));
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        clock.advance(Duration::from_millis(19));
        assert!(c.connection("t", "s", "p").is_some(), "younger than the maximum age");
        clock.advance(Duration::from_millis(1));
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn the_age_counts_from_before_the_read() {
        let (c, clock) = healthy_on_a_clock(Duration::from_millis(40));
        let before_read = c.epoch();
        clock.advance(Duration::from_millis(50));
        c.store_connection(before_read, "t", "s", "p", &entry());
        assert!(c.connection("t", "s", "p").is_none());
        // The same store from a read just made is served.
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        assert!(c.connection("t", "s", "p").is_some());
    }

    #[test]
    fn a_disabled_cache_never_serves() {
        let c = Caches::new(false, Duration::from_secs(5), 1000);
        c.set_healthy(true);
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn entries_are_due_past_half_their_age_until_left_idle() {
        let clock = Arc::new(crate::domain::ManualClock::default());
        let mut c = Caches::with_clock(true, Duration::from_millis(400), 1000, clock.clone());
        c.set_healthy(true);
        c.keep_idle = Duration::from_secs(1);
        c.store_connection(c.epoch(), "t", "s", "p", &entry());
        assert!(c.due_for_confirmation().is_empty(), "younger than half the maximum age");
        clock.advance(Duration::from_millis(250));
        // Named by id and by the hash its key is stored under (the confirmer finds it by both).
        assert_eq!(c.due_for_confirmation(), asked(&c, Uuid::nil()));
        // Confirmed again and again while nobody asks: after the idle time, no longer.
        let mut rounds = 0;
        while !c.due_for_confirmation().is_empty() {
            rounds += 1;
            assert!(rounds <= 12, "still re-read after 3 s without a request");
            c.confirm(c.now_ms(), &asked(&c, Uuid::nil()), &[row_of(&entry())]);
            clock.advance(Duration::from_millis(250));
        }
        assert!(rounds >= 3, "re-read while in use ({rounds} rounds)");
        // Asked for again: due again once half its age has passed.
        assert!(c.connection("t", "s", "p").is_some());
        clock.advance(Duration::from_millis(250));
        assert_eq!(due_ids(&c), vec![Uuid::nil()]);
    }

    #[test]
    fn entries_fall_due_apart_and_all_before_three_quarters_of_the_maximum_age() {
        let c = healthy(Duration::from_secs(4));
        let due: Vec<u64> = (0..400).map(|_| c.due_after_ms(&Uuid::new_v4())).collect();
        assert!(due.iter().all(|d| (2000..3000).contains(d)), "{due:?}");
        // Spread over the whole quarter: every tenth of it is hit.
        let tenths: std::collections::HashSet<u64> = due.iter().map(|d| (d - 2000) / 100).collect();
        assert_eq!(tenths.len(), 10, "{tenths:?}");
    }

    #[test]
    fn a_confirmed_entry_is_served_past_its_first_maximum_age() {
        let (c, clock) = healthy_on_a_clock(Duration::from_millis(100));
        let e = entry();
        c.store_connection(c.epoch(), "t", "s", "p", &e);
        clock.advance(Duration::from_millis(60));
        let read_ms = c.now_ms();
        assert_eq!(c.confirm(read_ms, &asked(&c, e.id), &[row_of(&e)]), (1, 0));
        clock.advance(Duration::from_millis(60));
        assert!(c.connection("t", "s", "p").is_some(), "120 ms after the store, 60 ms after the re-read");
        clock.advance(Duration::from_millis(60));
        assert!(c.connection("t", "s", "p").is_none(), "the re-read is as old as the maximum age");
    }

    #[test]
    fn a_re_read_that_finds_another_version_drops_the_entry() {
        let e = entry();
        // Another version; a row under another id (the entry's own row is gone); no row.
        let changes: [fn(&mut Vec<RowVersion>); 3] =
            [|r| r[0].xmin += 1, |r| r[0].id = Uuid::from_u128(1), |r| r.clear()];
        for (i, change) in changes.iter().enumerate() {
            let c = healthy(Duration::from_secs(5));
            c.store_connection(c.epoch(), "t", "s", "p", &e);
            let mut rows = vec![row_of(&e)];
            change(&mut rows);
            assert_eq!(c.confirm(c.now_ms(), &asked(&c, e.id), &rows), (0, 1), "change {i}");
            assert!(c.connection("t", "s", "p").is_none(), "change {i}");
        }
    }

    #[test]
    fn a_row_changed_in_memory_is_never_cached() {
        let c = healthy(Duration::from_secs(5));
        let mut e = entry();
        e.xmin = 0;
        c.store_connection(c.epoch(), "t", "s", "p", &e);
        assert!(c.connection("t", "s", "p").is_none());
    }

    #[test]
    fn a_re_read_never_brings_back_a_dropped_entry() {
        let c = healthy(Duration::from_secs(5));
        let e = entry();
        c.store_connection(c.epoch(), "t", "s", "p", &e);
        let read_ms = c.now_ms();
        c.invalidate_connection("t\u{1f}s\u{1f}p");
        assert_eq!(c.confirm(read_ms, &asked(&c, e.id), &[row_of(&e)]), (0, 0));
        assert!(c.connection("t", "s", "p").is_none());
    }
}
