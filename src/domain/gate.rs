//! A lock per key from a map of them ("single flight"): one holder at a time per key, and
//! the map's entry removed when its last user is done, however that user ends (a request
//! dropped while waiting included), so the map holds only keys in use.

use std::collections::HashMap;
use std::sync::Arc;

/// The map a [`Gate`] takes its lock from.
pub type Gates<K> = std::sync::Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>;

/// A user of one key's lock: [`Gate::acquire`] to be the one; the entry goes when the last
/// user drops its `Gate`.
pub struct Gate<'a, K: std::hash::Hash + Eq + Clone> {
    map: &'a Gates<K>,
    key: K,
    /// `None` only while being dropped.
    lock: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl<'a, K: std::hash::Hash + Eq + Clone> Gate<'a, K> {
    pub fn new(map: &'a Gates<K>, key: K) -> Self {
        let lock =
            map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(key.clone()).or_default().clone();
        Self { map, key, lock: Some(lock) }
    }

    /// Waits until this user holds the key's lock.
    pub async fn acquire(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        Some(self.lock.as_ref()?.lock().await)
    }
}

impl<K: std::hash::Hash + Eq + Clone> Drop for Gate<'_, K> {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Ours goes first, under the map's lock: of two users dropped at once, the second
        // then sees the map's copy alone and removes it.
        drop(self.lock.take());
        if m.get(&self.key).is_some_and(|l| Arc::strong_count(l) == 1) {
            m.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_entry_goes_with_its_last_user_however_it_ends() {
        let map: Gates<u8> = Gates::default();
        let (a, b) = (Gate::new(&map, 1), Gate::new(&map, 1));
        let held = a.acquire().await;
        // b waits, and is dropped while waiting (a request that went away).
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), b.acquire()).await.is_err();
        assert!(waited);
        drop(b);
        assert_eq!(map.lock().unwrap().len(), 1, "a still uses it");
        drop(held);
        drop(a);
        assert!(map.lock().unwrap().is_empty());
    }
}
