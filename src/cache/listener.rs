//! The tasks that keep the caches honest: the change listener (`LISTEN/NOTIFY`, with a
//! ping that proves it hears before the caches serve) and the confirmer, which reads the
//! change log and confirms every entry at once.

use super::*;

/// Listens for change notifications until the process ends; reconnects on its own.
pub fn spawn_listener(
    pool: Db,
    listen_url: Option<secrecy::SecretString>,
    caches: Arc<Caches>,
    api_keys: Arc<crate::api_keys::ApiKeyVerifier>,
    tenants: Arc<crate::tenants::Tenants>,
    keys: Arc<crate::keys::Keys>,
) {
    // There from the start, 0 until the listener proves it hears: an instance whose listener
    // never comes up shows 0 (an alert on `== 0` fires), not nothing.
    metrics::gauge!(LISTENER_UP).set(0.0);
    tokio::spawn(async move {
        loop {
            let heard = listen(&pool, listen_url.as_ref(), &caches, &api_keys, &tenants, &keys).await;
            if caches.is_closing() {
                return tracing::debug!("change listener stopped: the process is stopping");
            }
            let again = match heard {
                Ok(()) => Duration::from_millis(500),
                Err(ListenError::Database(e)) => {
                    tracing::warn!(error = %e, "change listener failed; caches bypassed until it is back");
                    Duration::from_millis(500)
                }
                // Each LISTEN through a transaction pooler leaves one more server session
                // listening for other clients to receive: try seldom.
                Err(ListenError::Unheard) => {
                    caches.set_unheard(true);
                    tracing::error!(
                        waited_seconds = PING_WAIT.as_secs(),
                        "the change listener did not hear its own test notification: database.listen_url (or, \
                         without it, database.url) does not keep a session, as a transaction pooler does not; \
                         point database.listen_url at PostgreSQL itself. Not ready until it hears"
                    );
                    UNHEARD_AGAIN
                }
            };
            caches.set_healthy(false);
            api_keys.set_listening(false);
            // A tenant ended while we did not hear: its keys are read again, not held on.
            keys.forget_all();
            tokio::time::sleep(again).await;
        }
    });
}

/// How long the listener waits for its own test notification: one that does not arrive
/// went to another session (a transaction pooler gave the `LISTEN` to whichever server
/// session was free, and then that session to other clients).
const PING_WAIT: Duration = Duration::from_secs(10);
/// How long after an unheard test notification the listener tries again.
const UNHEARD_AGAIN: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
enum ListenError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("the test notification was not heard")]
    Unheard,
}

async fn listen(
    pool: &Db,
    listen_url: Option<&secrecy::SecretString>,
    caches: &Caches,
    api_keys: &crate::api_keys::ApiKeyVerifier,
    tenants: &crate::tenants::Tenants,
    keys: &crate::keys::Keys,
) -> Result<(), ListenError> {
    let mut listener = match listen_url {
        Some(url) => sqlx::postgres::PgListener::connect(secrecy::ExposeSecret::expose_secret(url)).await?,
        None => sqlx::postgres::PgListener::connect_with(pool.sqlx_pool()).await?,
    };
    listener.listen_all([CONNECTIONS, KILL_SWITCHES, API_KEYS, ELICITATIONS, PING]).await?;
    // Prove the round trip before serving from the caches.
    let token = crate::crypto::random_token(16);
    let ping = || sqlx::query("SELECT pg_notify($1, $2)").bind(PING).bind(&token).execute(pool);
    // A notification on the pool's own connection (closed with it) means some session the
    // pooler hands out listens: once may be another's leftover, twice is this one's.
    match ping().await {
        Err(sqlx::Error::Protocol(_)) => match ping().await {
            Err(sqlx::Error::Protocol(_)) => return Err(ListenError::Unheard),
            sent => sent?,
        },
        sent => sent?,
    };
    let mut heard = false;
    let unheard_after = tokio::time::Instant::now() + PING_WAIT;
    loop {
        let next = if heard {
            listener.try_recv().await?
        } else {
            tokio::time::timeout_at(unheard_after, listener.try_recv()).await.map_err(|_| ListenError::Unheard)??
        };
        match next {
            None => return Ok(()), // connection lost; the caller flushes and reconnects
            Some(n) => match n.channel() {
                CONNECTIONS => caches.invalidate_connection(n.payload()),
                KILL_SWITCHES => caches.invalidate_kill_switches(),
                ELICITATIONS => caches.waiters.changed(n.payload()),
                API_KEYS => {
                    api_keys.on_notification(n.payload());
                    // A tenant changed (ended, perhaps: its data keys destroyed): its
                    // unwrapped keys are read again before their next use.
                    if let Some(t) = n.payload().strip_prefix("tenant:").and_then(|t| TenantId::parse(t).ok()) {
                        keys.forget_tenant(&t);
                    }
                    // Before the ping is heard the reload would only be repeated by it (and
                    // count against its wait).
                    if heard && (n.payload().starts_with("tenant:") || n.payload().starts_with("provider:")) {
                        tenants.reload(pool).await?;
                    }
                }
                PING if n.payload() == token => {
                    heard = true;
                    caches.set_unheard(false);
                    // Changes made while we were not listening are in the table.
                    tenants.reload(pool).await?;
                    // The key verifier first: once the caches say they listen, all do.
                    api_keys.set_listening(true);
                    caches.set_healthy(true);
                    tracing::info!("change listener ready; caches serving");
                }
                PING => caches.release_barrier(n.payload()),
                _ => {}
            },
        }
    }
}

/// Changes read per round at most: past this many the round drops everything instead
/// (a bulk change, e.g. a key rotation re-sealing every row), which is cheaper than naming
/// each.
const ROUND_LIMIT: i64 = 10_000;
/// Log rows stay until every transaction running this long ago has ended; a reader whose
/// last read is older than half of it (a long outage of the database) starts over.
const LOG_KEPT: Duration = Duration::from_secs(600);
/// How often a round's snapshot is kept as a later prune point.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Reads the change log a few times per maximum age (at most every half second) and
/// applies it to every cache: what it names is dropped, then every value still held counts
/// as confirmed when the read began (`changes::ChangeWatch::confirm`). The database reads
/// only the rows committed since the previous read: its work follows the changes, not the
/// entries cached. A lost notification is caught by the next read; an entry in use stays
/// cached for as long as the reads go on, without its row being read again.
pub fn spawn_confirmer(
    pool: Db,
    caches: Arc<Caches>,
    api_keys: Arc<crate::api_keys::ApiKeyVerifier>,
    tenants: Arc<crate::tenants::Tenants>,
) {
    let every = (caches.max_age / 10).clamp(Duration::from_millis(20), Duration::from_millis(500));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reader = LogReader { pool, caches, api_keys, tenants, last: None, prune_points: Default::default() };
        loop {
            tick.tick().await;
            if reader.caches.is_closing() {
                return;
            }
            reader.round().await;
        }
    });
}

/// Where the reading of the change log stands, and what it applies to.
struct LogReader {
    pool: Db,
    caches: Arc<Caches>,
    api_keys: Arc<crate::api_keys::ApiKeyVerifier>,
    tenants: Arc<crate::tenants::Tenants>,
    /// The snapshot of the last applied read, and when (ms on the change watch) it began.
    last: Option<(String, u64)>,
    /// Snapshots kept as prune points, oldest first, with when they were taken.
    prune_points: std::collections::VecDeque<(String, u64)>,
}

impl LogReader {
    async fn round(&mut self) {
        let read_ms = self.caches.watch().now_ms();
        let Some((since, since_ms)) = self.last.clone() else {
            return self.start(read_ms).await;
        };
        let round = match crate::store::changes::since(&self.pool, &since, ROUND_LIMIT).await {
            Ok(round) => round,
            // Nothing is confirmed: values age out from their last confirmation.
            Err(e) => return tracing::warn!(error = %e, "reading the change log failed"),
        };
        // Measured after the read, which may itself have waited long: rows committed after
        // our last read may have been pruned meanwhile. Start over, trusting nothing.
        if self.caches.watch().now_ms().saturating_sub(since_ms) > LOG_KEPT.as_millis() as u64 / 2 {
            tracing::warn!("change log not read for minutes; reading starts over and the caches are emptied");
            self.last = None;
            return;
        }
        let mut tenants_changed = false;
        if round.changes.len() as i64 >= ROUND_LIMIT {
            self.drop_everything();
            tenants_changed = true;
        } else {
            self.caches.apply_changes(&round.changes);
            for c in &round.changes {
                match c.scope.as_str() {
                    "connection" | "kill_switch" => {}
                    "api_key" => self.api_keys.key_changed(&c.key),
                    "api_key_new" => self.api_keys.key_created(&c.key),
                    "tenant" => {
                        self.api_keys.tenant_changed(&c.key);
                        tenants_changed = true;
                    }
                    // Read with the tenants.
                    "provider" => tenants_changed = true,
                    // A table emptied (`all`), or a scope of a newer release: be safe.
                    _ => {
                        self.drop_everything();
                        tenants_changed = true;
                    }
                }
            }
        }
        if tenants_changed && let Err(e) = self.tenants.reload(&self.pool).await {
            // Read again next round (applying a change twice is harmless).
            return tracing::warn!(error = %e, "reloading tenants after a logged change failed");
        }
        self.caches.watch().confirm(read_ms);
        tracing::debug!(changes = round.changes.len(), "change log read");
        self.keep_prune_point(&round.snapshot, read_ms);
        self.last = Some((round.snapshot, read_ms));
        self.prune(read_ms).await;
    }

    /// Sets where reading begins (at start, and after a gap too long to read across).
    /// Nothing read before that snapshot is covered by a later read of the log, so every
    /// cached value goes or is re-checked once the snapshot is taken, and the tenants are
    /// read again.
    async fn start(&mut self, read_ms: u64) {
        let snapshot = match crate::store::changes::snapshot(&self.pool).await {
            Ok(snapshot) => snapshot,
            Err(e) => return tracing::warn!(error = %e, "reading the change log's snapshot failed"),
        };
        self.drop_everything();
        if let Err(e) = self.tenants.reload(&self.pool).await {
            return tracing::warn!(error = %e, "reloading tenants at the start of the change log failed");
        }
        self.last = Some((snapshot, read_ms));
    }

    fn keep_prune_point(&mut self, snapshot: &str, at_ms: u64) {
        let due =
            self.prune_points.back().is_none_or(|(_, at)| at_ms.saturating_sub(*at) >= PRUNE_EVERY.as_millis() as u64);
        if due {
            self.prune_points.push_back((snapshot.to_owned(), at_ms));
        }
    }

    /// Deletes the log rows older than a snapshot taken [`LOG_KEPT`] ago (every instance
    /// does it; deleting what another already deleted is nothing).
    async fn prune(&mut self, now_ms: u64) {
        let kept = LOG_KEPT.as_millis() as u64;
        let mut point = None;
        while self.prune_points.front().is_some_and(|(_, at)| now_ms.saturating_sub(*at) >= kept) {
            point = self.prune_points.pop_front();
        }
        if let Some((snapshot, _)) = point {
            match crate::store::changes::prune(&self.pool, &snapshot).await {
                Ok(n) => tracing::debug!(deleted = n, "change log pruned"),
                Err(e) => tracing::warn!(error = %e, "pruning the change log failed"),
            }
        }
    }

    /// Every cached value goes (connections, kill switches) or is re-checked before its
    /// next use (API keys).
    fn drop_everything(&self) {
        self.caches.clear_all();
        self.api_keys.mark_all_due();
    }
}
