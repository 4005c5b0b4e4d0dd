//! Values cached from database rows and invalidated by database changes: the one scheme
//! behind the connection cache, the kill-switch cache and the API-key cache.
//!
//! A cached value is served only while it is *fresh*: younger than a maximum age, counted
//! from the later of the read that produced it and the last *confirmation*. Two things
//! keep it honest:
//!
//! - **Changes drop it.** Every change that matters writes a row to the change log
//!   (`cache_change_log`) and sends a notification, from the same transaction. The
//!   notification drops the value at once on every instance that hears it; the log is read
//!   a few times per maximum age (`cache::listener::spawn_confirmer`), and what it names is
//!   dropped too. A read of the log sees every change committed since the previous read,
//!   whatever happened to the notifications, so after its drops every value still held is
//!   as good as a read made when that log read began: that moment is the confirmation, one
//!   store for all values ([`ChangeWatch::confirm`]). The database's work is in proportion
//!   to the changes, not to what is cached.
//! - **No read older than a drop is stored after it.** A [`Ticket`] is taken before the
//!   database read and carries the invalidation counter; every drop bumps the counter, and
//!   a value whose ticket is older is not stored ([`ChangeWatch::admits`], checked under the
//!   cache's write lock). So a value stored after a log read was read after the changes that
//!   read found, or is refused.
//!
//! Why both halves together bound staleness: a change committed after a value was read is
//! found by the first log read that begins after the commit, which drops the value (if it
//! is held then) or bumps the counter (so a value whose read began before the drop is not
//! stored). Until that log read is applied, the value is served at most up to the maximum
//! age after the previous one.

use crate::domain::Clock;
use hashbrown::{Equivalent, HashMap};
use std::hash::{Hash, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Entries not asked for this long make room for new ones when a cache is full.
pub const KEEP_IDLE: Duration = Duration::from_secs(60);

/// What every cache of database rows shares (see the module doc): whether changes are
/// heard, the invalidation counter and the last confirmation.
pub struct ChangeWatch {
    clock: Arc<dyn Clock>,
    began: Instant,
    /// The change listener has proved it hears notifications.
    listening: AtomicBool,
    /// Bumped by every drop and every loss of the listener.
    epoch: AtomicU64,
    /// When the last applied read of the change log began, in ms since `began`.
    confirmed_ms: AtomicU64,
}

/// Taken before a database read: the invalidation counter and the time then.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    epoch: u64,
    at_ms: u64,
}

impl Ticket {
    /// When the read began, in ms since the watch began: the value's own confirmation.
    pub fn at_ms(&self) -> u64 {
        self.at_ms
    }
}

impl ChangeWatch {
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            began: clock.now(),
            clock,
            listening: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            confirmed_ms: AtomicU64::new(0),
        })
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.since(self.began).as_millis() as u64
    }

    /// Take before reading what may be cached.
    pub fn ticket(&self) -> Ticket {
        Ticket { epoch: self.epoch.load(Ordering::Acquire), at_ms: self.now_ms() }
    }

    /// Nothing was dropped since `ticket` was taken: its read may be stored. Call under the
    /// write lock of the cache it goes into (drops bump the counter under theirs).
    pub fn admits(&self, ticket: &Ticket) -> bool {
        self.epoch.load(Ordering::Acquire) == ticket.epoch
    }

    /// Something was dropped (or may have been missed): reads begun before now are not
    /// stored.
    pub fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// A read of the change log that began at `read_ms` has been applied: every value held
    /// now is confirmed as of then.
    pub fn confirm(&self, read_ms: u64) {
        self.confirmed_ms.fetch_max(read_ms, Ordering::AcqRel);
    }

    /// Milliseconds since the value read at `at_ms` was last known good.
    pub fn age_ms(&self, at_ms: u64) -> u64 {
        self.age_ms_at(at_ms, self.now_ms())
    }

    /// [`Self::age_ms`] as of `now_ms` (a [`Self::now_ms`] the caller read: one clock read
    /// for all it decides).
    fn age_ms_at(&self, at_ms: u64, now_ms: u64) -> u64 {
        let confirmed = self.confirmed_ms.load(Ordering::Acquire).max(at_ms);
        now_ms.saturating_sub(confirmed)
    }

    pub fn is_fresh(&self, at_ms: u64, max_age: Duration) -> bool {
        self.is_fresh_at(at_ms, max_age, self.now_ms())
    }

    /// [`Self::is_fresh`] as of `now_ms`.
    pub fn is_fresh_at(&self, at_ms: u64, max_age: Duration, now_ms: u64) -> bool {
        u128::from(self.age_ms_at(at_ms, now_ms)) < max_age.as_millis()
    }

    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    pub fn set_listening(&self, up: bool) {
        if !up {
            // Notifications may be missed from now on: nothing read before is stored.
            self.changed();
        }
        self.listening.store(up, Ordering::Release);
    }

    /// Seconds since the watch began, for "last used" marks.
    pub fn now_s(&self) -> u32 {
        Self::seconds(self.now_ms())
    }

    /// [`Self::now_s`] of a [`Self::now_ms`] the caller read.
    pub fn seconds(now_ms: u64) -> u32 {
        (now_ms / 1000) as u32
    }
}

/// A value held by a [`Cached`] map.
struct Held<V> {
    value: V,
    /// When the read that produced (or last re-checked) it began.
    at_ms: u64,
    /// To be re-checked against the database before it is used again.
    due: bool,
    used_s: AtomicU32,
}

/// What a lookup in a [`Cached`] map found.
pub enum Found<V> {
    /// Fresh: use it.
    Fresh(V),
    /// Held but stale or marked due: re-check it (the caller decides how).
    Due(V),
}

/// A bounded map of values invalidated by database changes (see the module doc), for the
/// small caches; the connection cache packs its entries itself but follows the same rules.
pub struct Cached<K, V> {
    watch: Arc<ChangeWatch>,
    max_age: Duration,
    capacity: usize,
    /// SipHash (std's `RandomState`), as std's map: the API-key cache's keys come from
    /// callers. hashbrown's for lookups by a borrowed form of a key ([`Equivalent`]).
    map: RwLock<HashMap<K, Held<V>, RandomState>>,
}

impl<K: Hash + Eq, V: Clone> Cached<K, V> {
    pub fn new(watch: Arc<ChangeWatch>, max_age: Duration, capacity: usize) -> Self {
        Self { watch, max_age, capacity: capacity.max(1), map: RwLock::new(HashMap::with_hasher(RandomState::new())) }
    }

    pub fn watch(&self) -> &ChangeWatch {
        &self.watch
    }

    /// The value held for `key`, or for a borrowed form of it that hashes and compares as
    /// the key does.
    pub fn get<Q: Hash + Equivalent<K> + ?Sized>(&self, key: &Q) -> Option<Found<V>> {
        let map = self.map.read().ok()?;
        let held = map.get(key)?;
        let now_s = self.watch.now_s();
        if held.used_s.load(Ordering::Relaxed) != now_s {
            held.used_s.store(now_s, Ordering::Relaxed);
        }
        Some(if !held.due && self.watch.is_fresh(held.at_ms, self.max_age) {
            Found::Fresh(held.value.clone())
        } else {
            Found::Due(held.value.clone())
        })
    }

    /// Stores a value read under `ticket`, unless something was dropped since or the map is
    /// full of values in use. `false`: not stored.
    pub fn insert(&self, ticket: &Ticket, key: K, value: V) -> bool {
        let Ok(mut map) = self.map.write() else { return false };
        if !self.watch.admits(ticket) {
            return false;
        }
        if map.len() >= self.capacity && !map.contains_key(&key) {
            let now_s = self.watch.now_s();
            map.retain(|_, h| !h.due && keeps(&self.watch, h.at_ms, self.max_age, &h.used_s, now_s));
            if map.len() >= self.capacity {
                return false;
            }
        }
        let used_s = AtomicU32::new(self.watch.now_s());
        map.insert(key, Held { value, at_ms: ticket.at_ms(), due: false, used_s });
        true
    }

    /// Drops the values `drop` picks; the counter moves, so reads begun before are not
    /// stored.
    pub fn remove_where(&self, drop: impl Fn(&K, &V) -> bool) {
        if let Ok(mut map) = self.map.write() {
            self.watch.changed();
            map.retain(|k, h| !drop(k, &h.value));
        }
    }

    pub fn remove(&self, key: &K) {
        if let Ok(mut map) = self.map.write() {
            self.watch.changed();
            map.remove(key);
        }
    }

    /// Marks the values `pick` picks for a re-check before their next use.
    pub fn mark_due_where(&self, pick: impl Fn(&K, &V) -> bool) {
        if let Ok(mut map) = self.map.write() {
            self.watch.changed();
            for (k, h) in map.iter_mut() {
                if pick(k, &h.value) {
                    h.due = true;
                }
            }
        }
    }

    pub fn clear(&self) {
        self.remove_where(|_, _| true);
    }

    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The capacity rule of every cache: when full, what is stale or was not asked for within
/// [`KEEP_IDLE`] makes room; if nothing does, the new value is not stored (a miss costs a
/// read, never memory past the bound).
pub fn keeps(watch: &ChangeWatch, at_ms: u64, max_age: Duration, used_s: &AtomicU32, now_s: u32) -> bool {
    watch.is_fresh(at_ms, max_age) && now_s.saturating_sub(used_s.load(Ordering::Relaxed)) < KEEP_IDLE.as_secs() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ManualClock;

    fn watch() -> (Arc<ChangeWatch>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        (ChangeWatch::new(clock.clone()), clock)
    }

    fn fresh<V: Clone>(f: Option<Found<V>>) -> Option<V> {
        match f {
            Some(Found::Fresh(v)) => Some(v),
            _ => None,
        }
    }

    #[test]
    fn a_value_is_fresh_for_the_maximum_age_after_its_read_or_the_last_confirmation() {
        let (w, clock) = watch();
        let c = Cached::new(w.clone(), Duration::from_millis(100), 10);
        assert!(c.insert(&w.ticket(), "k", 1));
        clock.advance(Duration::from_millis(99));
        assert_eq!(fresh(c.get(&"k")), Some(1));
        clock.advance(Duration::from_millis(1));
        assert!(matches!(c.get(&"k"), Some(Found::Due(1))), "as old as the maximum age");
        // A read of the change log that began now confirms it again, until it too is old.
        w.confirm(w.now_ms());
        clock.advance(Duration::from_millis(99));
        assert_eq!(fresh(c.get(&"k")), Some(1));
        clock.advance(Duration::from_millis(1));
        assert!(fresh(c.get(&"k")).is_none());
    }

    #[test]
    fn a_confirmation_older_than_the_read_does_not_age_the_value() {
        let (w, clock) = watch();
        let c = Cached::new(w.clone(), Duration::from_millis(100), 10);
        w.confirm(w.now_ms());
        clock.advance(Duration::from_millis(50));
        assert!(c.insert(&w.ticket(), "k", 1));
        clock.advance(Duration::from_millis(99));
        assert_eq!(fresh(c.get(&"k")), Some(1), "counts from its own read");
        // Confirmations never move back.
        w.confirm(0);
        assert_eq!(fresh(c.get(&"k")), Some(1));
    }

    #[test]
    fn a_read_begun_before_a_drop_is_not_stored() {
        let (w, _) = watch();
        let c = Cached::new(w.clone(), Duration::from_secs(5), 10);
        let before = w.ticket();
        c.remove(&"other");
        assert!(!c.insert(&before, "k", 1));
        assert!(c.get(&"k").is_none());
        let before = w.ticket();
        w.set_listening(false);
        assert!(!c.insert(&before, "k", 1), "nor one begun before the listener was lost");
        assert!(c.insert(&w.ticket(), "k", 1));
    }

    #[test]
    fn marked_values_are_due_until_stored_again() {
        let (w, _) = watch();
        let c = Cached::new(w.clone(), Duration::from_secs(5), 10);
        c.insert(&w.ticket(), ("t", 1), 1);
        c.insert(&w.ticket(), ("u", 2), 2);
        c.mark_due_where(|k, _| k.0 == "t");
        assert!(matches!(c.get(&("t", 1)), Some(Found::Due(1))));
        assert_eq!(fresh(c.get(&("u", 2))), Some(2));
        c.insert(&w.ticket(), ("t", 1), 1);
        assert_eq!(fresh(c.get(&("t", 1))), Some(1));
        c.remove_where(|_, v| *v == 2);
        assert!(c.get(&("u", 2)).is_none());
    }

    #[test]
    fn a_full_map_makes_room_only_from_stale_or_idle_values() {
        let (w, clock) = watch();
        let c = Cached::new(w.clone(), Duration::from_secs(5), 2);
        assert!(c.insert(&w.ticket(), 1, 1));
        assert!(c.insert(&w.ticket(), 2, 2));
        assert!(!c.insert(&w.ticket(), 3, 3), "both in use and fresh");
        assert!(c.insert(&w.ticket(), 2, 20), "a held key is replaced");
        // Kept confirmed, but 1 is not asked for within a minute while 2 is.
        for _ in 0..13 {
            clock.advance(Duration::from_secs(5));
            w.confirm(w.now_ms());
            assert!(c.get(&2).is_some());
        }
        assert!(c.insert(&w.ticket(), 3, 3));
        assert!(c.get(&1).is_none(), "the idle one made room");
        assert_eq!(fresh(c.get(&2)), Some(20));
    }
}
