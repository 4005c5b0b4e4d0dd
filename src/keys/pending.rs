//! A key store that did not answer when the service started (an HSM or KMS outage, a
//! network not up yet): the service starts anyway and is not ready (`/readyz` names the
//! store and why) until the store answers; it is tried again every few seconds in the
//! background and on use. A store that answered no (its key is gone, a wrong PIN) stops
//! the start instead: waiting does not fix that.

use crate::vault::kek::{KeyStore, KeyStoreError, WrapContext, Wrapped};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// How often a store that did not answer is tried again, at most.
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// The longest one attempt to open it may take (a hung module or endpoint).
const OPEN_TIMEOUT: Duration = Duration::from_secs(15);

type Opening = Pin<Box<dyn Future<Output = Result<Arc<dyn KeyStore>, KeyStoreError>> + Send>>;

/// A key store still to be opened.
pub struct Pending {
    kind: &'static str,
    /// The store and its key, for messages (`aws-kms key "alias/x"`).
    what: String,
    open: Box<dyn Fn() -> Opening + Send + Sync>,
    opened: tokio::sync::OnceCell<Arc<dyn KeyStore>>,
    /// The last attempt, and why it failed.
    tried: Mutex<(Instant, String)>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("what", &self.what).field("opened", &self.opened.initialized()).finish()
    }
}

impl Pending {
    /// `failed`: why the first attempt (at start) failed.
    pub fn new(
        kind: &'static str,
        what: String,
        failed: &KeyStoreError,
        open: impl Fn() -> Opening + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            kind,
            what,
            open: Box::new(open),
            opened: tokio::sync::OnceCell::new(),
            tried: Mutex::new((Instant::now(), failed.to_string())),
            one_at_a_time: tokio::sync::Mutex::new(()),
        })
    }

    /// Tries to open the store every few seconds until it answers, so that the service
    /// becomes ready without waiting for a request; then runs `opened` (what was left
    /// undone for want of keys at start is done again).
    pub fn spawn_retries(self: &Arc<Self>, opened: impl std::future::Future<Output = ()> + Send + 'static) {
        let pending = self.clone();
        tokio::spawn(async move {
            while !pending.opened.initialized() {
                tokio::time::sleep(RETRY_EVERY).await;
                match pending.store().await {
                    Ok(_) => tracing::info!(store = %pending.what, "key store answers: ready"),
                    Err(e) => tracing::warn!(store = %pending.what, error = %e, "key store still not usable"),
                }
            }
            opened.await;
        });
    }

    pub fn is_open(&self) -> bool {
        self.opened.initialized()
    }

    async fn store(&self) -> Result<&Arc<dyn KeyStore>, KeyStoreError> {
        if let Some(s) = self.opened.get() {
            return Ok(s);
        }
        let unavailable = |reason: String| KeyStoreError::Unavailable { store: self.kind, reason };
        let last = || self.tried.lock().map(|t| t.1.clone()).unwrap_or_default();
        // One attempt at a time; a request meanwhile is answered at once, not made to wait.
        let Ok(_turn) = self.one_at_a_time.try_lock() else { return Err(unavailable(last())) };
        if let Some(s) = self.opened.get() {
            return Ok(s);
        }
        if self.tried.lock().is_ok_and(|t| t.0.elapsed() < RETRY_EVERY) {
            return Err(unavailable(last()));
        }
        let opened = tokio::time::timeout(OPEN_TIMEOUT, (self.open)())
            .await
            .unwrap_or_else(|_| Err(unavailable("no answer in time".to_owned())));
        match opened {
            Ok(store) => Ok(self.opened.get_or_init(|| async { store }).await),
            Err(e) => {
                if let Ok(mut tried) = self.tried.lock() {
                    *tried = (Instant::now(), e.to_string());
                }
                // A refusal now (the key went while the store was away) is reported as it is.
                Err(e)
            }
        }
    }
}

#[async_trait::async_trait]
impl KeyStore for Pending {
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// Empty until opened (nothing is wrapped under it before).
    fn current_kek(&self) -> &str {
        self.opened.get().map_or("", |s| s.current_kek())
    }

    async fn wrap(&self, ctx: &WrapContext<'_>, key: &[u8; 32]) -> Result<Wrapped, KeyStoreError> {
        self.store().await?.wrap(ctx, key).await
    }

    async fn unwrap(
        &self,
        kek_id: &str,
        ctx: &WrapContext<'_>,
        blob: &[u8],
    ) -> Result<Zeroizing<[u8; 32]>, KeyStoreError> {
        self.store().await?.unwrap(kek_id, ctx, blob).await
    }

    /// The store's kind only: `/readyz` is public; the key, the endpoint and the reason
    /// are in the log.
    fn readiness(&self) -> Result<(), String> {
        if self.opened.initialized() {
            return Ok(());
        }
        Err(format!("key store {} not usable yet (the log says why)", self.kind))
    }
}
