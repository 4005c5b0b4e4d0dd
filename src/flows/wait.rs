//! `wait_seconds`: a retry that waits. A request naming a pending elicitation may be held
//! until that elicitation changes (the connect commits, or a decline, cancel or expiry) or
//! the wait runs out, and is then answered afresh. Woken by the change listener
//! (`cache::waiters`), never by polling; without a listener that hears, nobody waits.

use crate::app::AppState;
use crate::cache::waiters::Watch;
use crate::domain::{ElicitationId, TenantId};
use std::future::Future;
use std::time::Duration;
use time::OffsetDateTime;

/// The longest a request may be held (`wait_seconds` at most).
pub const MAX_WAIT_SECONDS: u64 = 30;

/// A registration for changes of `id`, made before the caller reads it; `None` when this
/// request must not wait: the listener is not hearing changes, the instance is draining,
/// or too many requests wait already.
pub fn watch<'a>(state: &'a AppState, tenant: &TenantId, id: &ElicitationId, wait: Duration) -> Option<Watch<'a>> {
    if wait.min(state.lifetimes.max_wait).is_zero()
        || !state.caches.is_listening()
        || state.lifecycle.shutdown.is_draining()
    {
        return None;
    }
    state.caches.waiters.watch(tenant.as_str(), id.as_uuid())
}

/// Waits for `changed`, for at most `wait` (and the configured maximum) and not past the
/// elicitation's `expires_at`. `true`: read again (a change, the end of the wait, or a
/// listener that no longer hears); `false`: the instance began to drain, and the caller
/// answers what it has at once.
pub async fn until(
    state: &AppState,
    changed: impl Future<Output = ()>,
    expires_at: OffsetDateTime,
    wait: Duration,
) -> bool {
    // Checked again now that `changed` is armed: a listener lost between `watch` and the
    // arming woke nobody (this waiter was not yet registered), and changes since go unheard.
    if !state.caches.is_listening() {
        return true;
    }
    let to_expiry = Duration::try_from(expires_at - OffsetDateTime::now_utc()).unwrap_or(Duration::ZERO);
    let _held = state.caches.waiters.holding();
    tokio::select! {
        () = changed => true,
        () = tokio::time::sleep(wait.min(state.lifetimes.max_wait).min(to_expiry)) => true,
        () = state.lifecycle.shutdown.draining() => false,
    }
}
