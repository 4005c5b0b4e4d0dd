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
/// One tenant (one leaked key) may hold no more than this share of the slots...
pub const MAX_WAITERS_PER_TENANT: usize = MAX_WAITERS / 10;
/// ...and one elicitation no more than this many: its MCP server retries one call at a
/// time, and a commit must not wake a stampede of reads.
pub const MAX_WAITERS_PER_ELICITATION: usize = 8;

/// Metric (catalogue: `telemetry::metrics`): requests held now (past their first read and
/// waiting for a change; a registration alone is not counted).
pub const WAITING: &str = "mcp_connect_waiting_requests";

#[derive(Default)]
pub struct Waiters {
    inner: Mutex<Inner>,
    held: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<Uuid, (Arc<Notify>, usize)>,
    by_tenant: HashMap<String, usize>,
    total: usize,
}

/// One request's registration; dropping it unregisters.
pub struct Watch<'a> {
    waiters: &'a Waiters,
    tenant: String,
    id: Uuid,
    notify: Arc<Notify>,
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a waiter of `tenant` for elicitation `id`, or `None` when the instance,
    /// the tenant or the elicitation has all the waiters it may have.
    pub fn watch(&self, tenant: &str, id: Uuid) -> Option<Watch<'_>> {
        let mut inner = self.lock();
        let of_tenant = inner.by_tenant.get(tenant).copied().unwrap_or(0);
        let of_id = inner.by_id.get(&id).map_or(0, |(_, n)| *n);
        if inner.total >= MAX_WAITERS || of_tenant >= MAX_WAITERS_PER_TENANT || of_id >= MAX_WAITERS_PER_ELICITATION {
            return None;
        }
        inner.total += 1;
        *inner.by_tenant.entry(tenant.to_owned()).or_insert(0) += 1;
        let (notify, count) = inner.by_id.entry(id).or_insert_with(|| (Arc::new(Notify::new()), 0));
        *count += 1;
        let notify = notify.clone();
        Some(Watch { waiters: self, tenant: tenant.to_owned(), id, notify })
    }

    /// The listener heard that `payload` (an elicitation id) changed.
    pub fn changed(&self, payload: &str) {
        let Ok(id) = Uuid::parse_str(payload) else { return };
        if let Some((notify, _)) = self.lock().by_id.get(&id) {
            notify.notify_waiters();
        }
    }

    /// Wakes every waiter: the listener lost its connection, so changes may go unheard;
    /// each waiter reads again and answers what it finds.
    pub fn wake_all(&self) {
        for (notify, _) in self.lock().by_id.values() {
            notify.notify_waiters();
        }
    }

    pub fn waiting(&self) -> usize {
        self.lock().total
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
        let mut inner = self.waiters.lock();
        if let Some((_, count)) = inner.by_id.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                inner.by_id.remove(&self.id);
            }
        }
        if let Some(n) = inner.by_tenant.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                inner.by_tenant.remove(&self.tenant);
            }
        }
        inner.total = inner.total.saturating_sub(1);
    }
}

/// A request held while it waits for a change ([`Waiters::holding`]); counted in
/// [`WAITING`] until dropped.
pub struct Holding<'a>(&'a Waiters);

impl Waiters {
    /// Counts a request as held from now until the guard drops.
    pub fn holding(&self) -> Holding<'_> {
        let n = self.held.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        metrics::gauge!(WAITING).set(n as f64);
        Holding(self)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let n = self.0.held.fetch_sub(1, std::sync::atomic::Ordering::Relaxed).saturating_sub(1);
        metrics::gauge!(WAITING).set(n as f64);
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
        let watch = w.watch("t", id).unwrap();
        let changed = watch.changed();
        // The change arrives while the caller is still reading, before it awaits.
        w.changed(&id.to_string());
        tokio::time::timeout(Duration::from_secs(1), changed).await.expect("woken");
    }

    #[tokio::test]
    async fn another_elicitations_change_wakes_nobody() {
        let w = Waiters::default();
        let watch = w.watch("t", Uuid::new_v4()).unwrap();
        let changed = watch.changed();
        w.changed(&Uuid::new_v4().to_string());
        w.changed("not an id");
        assert!(tokio::time::timeout(Duration::from_millis(50), changed).await.is_err());
    }

    #[test]
    fn entries_go_with_their_last_watch() {
        let w = Waiters::default();
        let id = Uuid::new_v4();
        let a = w.watch("t", id).unwrap();
        let b = w.watch("t", id).unwrap();
        assert_eq!(w.waiting(), 2);
        drop(a);
        assert!(w.lock().by_id.contains_key(&id));
        drop(b);
        let inner = w.lock();
        assert!(inner.by_id.is_empty() && inner.by_tenant.is_empty());
        assert_eq!(inner.total, 0);
    }

    #[test]
    fn an_elicitation_a_tenant_and_the_instance_each_have_a_cap() {
        let w = Waiters::default();
        let id = Uuid::new_v4();
        let same: Vec<_> = (0..MAX_WAITERS_PER_ELICITATION).map(|_| w.watch("a", id).unwrap()).collect();
        assert!(w.watch("a", id).is_none(), "one elicitation has 8 waiters at most");
        drop(same);
        let tenant_a: Vec<_> = (0..MAX_WAITERS_PER_TENANT).map(|_| w.watch("a", Uuid::new_v4()).unwrap()).collect();
        assert!(w.watch("a", Uuid::new_v4()).is_none(), "one tenant holds a tenth of the slots at most");
        assert!(w.watch("b", Uuid::new_v4()).is_some(), "and another tenant still waits");
        let others: Vec<_> = (0..MAX_WAITERS - MAX_WAITERS_PER_TENANT)
            .map(|i| w.watch(&format!("t{}", i % 20), Uuid::new_v4()).unwrap())
            .collect();
        assert!(w.watch("z", Uuid::new_v4()).is_none(), "past the instance's cap nobody else waits");
        drop((tenant_a, others));
        assert!(w.watch("a", id).is_some());
    }
}
