//! Requests waiting for an elicitation to change (`wait_seconds` on `POST /v1/token` and
//! `GET /v1/elicitations/{id}`). A trigger announces every status change of an
//! elicitation (`mcpc_elicitations`, payload its id) from the transaction that made it,
//! so a waiter on any instance wakes when the connect commits, without polling.
//!
//! A waiter registers *before* it reads the elicitation, so a change that commits between
//! the read and the wait still wakes it: [`Watch::changed`] is armed at registration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use uuid::Uuid;

/// At most this many requests wait at once on one instance; past it they are answered at
/// once, as without `wait_seconds` (a waiting request costs a socket and a few hundred
/// bytes, no database connection).
pub const MAX_WAITERS: usize = 10_000;

/// Metric (catalogue: `telemetry::metrics`): requests waiting now.
pub const WAITING: &str = "mcp_connect_waiting_requests";

#[derive(Default)]
pub struct Waiters {
    by_id: Mutex<HashMap<Uuid, (Arc<Notify>, usize)>>,
    total: Mutex<usize>,
}

/// One request's registration; dropping it unregisters.
pub struct Watch<'a> {
    waiters: &'a Waiters,
    id: Uuid,
    notify: Arc<Notify>,
}

impl Waiters {
    /// Registers a waiter for `id`, or `None` when [`MAX_WAITERS`] already wait.
    pub fn watch(&self, id: Uuid) -> Option<Watch<'_>> {
        let mut total = self.total.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *total >= MAX_WAITERS {
            return None;
        }
        *total += 1;
        metrics::gauge!(WAITING).set(*total as f64);
        let mut map = self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (notify, count) = map.entry(id).or_insert_with(|| (Arc::new(Notify::new()), 0));
        *count += 1;
        Some(Watch { waiters: self, id, notify: notify.clone() })
    }

    /// The listener heard that `payload` (an elicitation id) changed.
    pub fn changed(&self, payload: &str) {
        let Ok(id) = Uuid::parse_str(payload) else { return };
        let map = self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((notify, _)) = map.get(&id) {
            notify.notify_waiters();
        }
    }

    /// Wakes every waiter: the listener lost its connection, so changes may go unheard;
    /// each waiter reads again and answers what it finds.
    pub fn wake_all(&self) {
        let map = self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (notify, _) in map.values() {
            notify.notify_waiters();
        }
    }

    pub fn waiting(&self) -> usize {
        *self.total.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Watch<'_> {
    /// A future that completes at the next change of the elicitation after the watch was
    /// made. Armed here, before the caller reads: `notify_waiters` wakes only futures that
    /// are registered.
    pub fn changed(&self) -> impl std::future::Future<Output = ()> + '_ {
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut map = self.waiters.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, count)) = map.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.id);
            }
        }
        drop(map);
        let mut total = self.waiters.total.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *total = total.saturating_sub(1);
        metrics::gauge!(WAITING).set(*total as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_change_heard_after_the_watch_wakes_it_even_before_the_wait_began() {
        let w = Waiters::default();
        let id = Uuid::new_v4();
        let watch = w.watch(id).unwrap();
        let changed = watch.changed();
        // The change arrives while the caller is still reading, before it awaits.
        w.changed(&id.to_string());
        tokio::time::timeout(Duration::from_secs(1), changed).await.expect("woken");
    }

    #[tokio::test]
    async fn another_elicitations_change_wakes_nobody() {
        let w = Waiters::default();
        let watch = w.watch(Uuid::new_v4()).unwrap();
        let changed = watch.changed();
        w.changed(&Uuid::new_v4().to_string());
        w.changed("not an id");
        assert!(tokio::time::timeout(Duration::from_millis(50), changed).await.is_err());
    }

    #[test]
    fn entries_go_with_their_last_watch_and_the_total_is_capped() {
        let w = Waiters::default();
        let id = Uuid::new_v4();
        let a = w.watch(id).unwrap();
        let b = w.watch(id).unwrap();
        assert_eq!(w.waiting(), 2);
        drop(a);
        assert!(w.by_id.lock().unwrap().contains_key(&id));
        drop(b);
        assert!(w.by_id.lock().unwrap().is_empty());
        assert_eq!(w.waiting(), 0);
        let held: Vec<_> = (0..MAX_WAITERS).map(|_| w.watch(Uuid::new_v4()).unwrap()).collect();
        assert!(w.watch(id).is_none(), "past the cap nobody else waits");
        drop(held);
        assert!(w.watch(id).is_some());
    }
}
