//! A lock per key from a map of them ("single flight"): one holder at a time per key, and
//! the map's entry removed when its last user is done, however that user ends (a request
//! dropped while waiting included), so the map holds only keys in use.

use std::collections::HashMap;
use std::sync::Arc;

/// The map a [`Gate`] takes its lock from.
pub type Gates<K> = std::sync::Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>;

/// A user of one key's lock: hold `lock` to be the one; the entry goes when the last
/// user drops its `Gate`.
pub struct Gate<'a, K: std::hash::Hash + Eq + Clone> {
    map: &'a Gates<K>,
    key: K,
    pub lock: Arc<tokio::sync::Mutex<()>>,
}

impl<'a, K: std::hash::Hash + Eq + Clone> Gate<'a, K> {
    pub fn new(map: &'a Gates<K>, key: K) -> Self {
        let lock =
            map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(key.clone()).or_default().clone();
        Self { map, key, lock }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Drop for Gate<'_, K> {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Ours and the map's: nobody else waits for it, the entry can go.
        if Arc::strong_count(&self.lock) <= 2 {
            m.remove(&self.key);
        }
    }
}
