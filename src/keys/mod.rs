//! The data keys the vault seals with (docs/keys.md): one per tenant and generation, and one
//! for the service's own secrets, each stored only wrapped by the key store's
//! key-encryption key (`vault::kek`). What a flow seals it seals with [`Keys::sealing`] of
//! its scope; what it opens, with [`Keys::opening`] of the key id its row names.
//!
//! Unwrapped data keys live in memory only, in a bounded cache, each for at most the
//! configured time from its unwrap (`[vault] data_key_cache_seconds`): a hit reads nothing
//! and calls no key store; a miss reads the wrapped key and has the store unwrap it. So a
//! destroyed key (an ended tenant) opens nothing on any instance once that time has passed,
//! and at once on the instance that destroyed it.
//!
//! Until `vault_state.data_keys_on` is set (a database with sealed values of the release
//! before, until `rotate-key`), sealing uses the keyring's current key as before; the switch
//! is re-read every few seconds while off, so instances follow it without a restart.

pub mod client_keys;
pub mod pending;

use crate::domain::{Clock, TenantId};
use crate::store::{self, Db, data_keys::DataKeyRow};
use crate::vault::kek::{KeyStore, KeyStoreError, WrapContext, Wrapped};
use crate::vault::{KeyRef, Keyring, SealKey, VaultError};
use rand::RngCore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// Whose secrets a data key seals.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// A tenant's connections, webhook secrets and pending states: destroyed when it ends.
    Tenant(&'a TenantId),
    /// The service's own: providers' client secrets, remote MCP registrations, login cookies.
    Service,
}

/// The scope a wrapped service key is bound to (no tenant id is `*`).
const SERVICE_SCOPE: &str = "*";

impl Scope<'_> {
    fn tenant(&self) -> Option<&TenantId> {
        match self {
            Scope::Tenant(t) => Some(t),
            Scope::Service => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Store(#[from] KeyStoreError),
    #[error(transparent)]
    Vault(#[from] VaultError),
}

/// How long and how many unwrapped data keys are kept.
#[derive(Debug, Clone, Copy)]
pub struct CacheBound {
    pub ttl: Duration,
    pub capacity: usize,
}

impl Default for CacheBound {
    fn default() -> Self {
        Self { ttl: Duration::from_secs(300), capacity: 10_000 }
    }
}

/// Metric (catalogue: `telemetry::metrics`): key-store calls by `store`, `op` (`wrap`,
/// `unwrap`) and `result` (`ok`, `unavailable`, `refused`), with their time. Only misses and
/// new keys call the store: a cached hand-out makes no call.
pub const KEY_STORE_CALLS: &str = "mcp_connect_key_store_seconds";

/// Metric: values not yet under their scope's active data key, plus data keys not under
/// the current KEK, as this instance's last background re-seal pass (`flows::rotate`)
/// counted them (0: a tenant's rotated data key is done with; a KEK's needs `rotate-key`).
pub const RESEAL_REMAINING: &str = "mcp_connect_vault_reseal_remaining";
/// Metric: values the background re-seal passes moved.
pub const RESEALED: &str = "mcp_connect_vault_resealed_total";
/// Metric: values (or whole tables) a background re-seal pass could not move (a value that
/// does not open, a key store that does not answer), left for the next pass.
pub const RESEAL_FAILURES: &str = "mcp_connect_vault_reseal_failures_total";

/// Times a key-store call and counts its result.
async fn measured<T>(
    store: &'static str,
    op: &'static str,
    call: impl std::future::Future<Output = Result<T, KeyStoreError>>,
) -> Result<T, KeyStoreError> {
    let started = Instant::now();
    let out = call.await;
    let result = match &out {
        Ok(_) => "ok",
        Err(e) if e.is_transient() => "unavailable",
        Err(_) => "refused",
    };
    metrics::histogram!(KEY_STORE_CALLS, "store" => store, "op" => op, "result" => result)
        .record(started.elapsed().as_secs_f64());
    out
}

/// While data keys are off, how often the switch is read again.
const SWITCH_RECHECK: Duration = Duration::from_secs(5);

struct Loaded {
    key: SealKey,
    /// Its tenant (`None`: the service's scope).
    tenant: Option<Box<str>>,
    at: Instant,
}

pub struct Keys {
    pool: Db,
    store: Arc<dyn KeyStore>,
    keyring: Arc<Keyring>,
    /// The keyring as a store, for data keys wrapped by it before the install moved to
    /// another store.
    local: crate::vault::kek::LocalKeyStore,
    clock: Arc<dyn Clock>,
    bound: CacheBound,
    loaded: RwLock<HashMap<uuid::Uuid, Loaded>>,
    /// Each scope's active data key (`None`: the service's), as last read.
    active: RwLock<HashMap<Option<TenantId>, (uuid::Uuid, Instant)>>,
    /// Data keys on; else when the switch was last read off.
    on: RwLock<Result<(), Instant>>,
    /// Bumped by every forget: a key read before it is not kept after it (a load racing an
    /// ended tenant's forget would keep a destroyed key for the whole bound).
    epoch: AtomicU64,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").field("store", &self.store.kind()).field("keyring", &self.keyring).finish()
    }
}

impl Keys {
    pub fn new(
        pool: Db,
        store: Arc<dyn KeyStore>,
        keyring: Arc<Keyring>,
        clock: Arc<dyn Clock>,
        bound: CacheBound,
    ) -> Self {
        let long_ago = clock.now().checked_sub(SWITCH_RECHECK * 2).unwrap_or_else(|| clock.now());
        Self {
            pool,
            store,
            local: crate::vault::kek::LocalKeyStore::new(keyring.clone()),
            keyring,
            clock,
            bound,
            loaded: RwLock::default(),
            active: RwLock::default(),
            on: RwLock::new(Err(long_ago)),
            epoch: AtomicU64::new(0),
        }
    }

    /// The keyring as key store (`[vault] store = "local"`).
    pub fn local(pool: Db, keyring: Keyring, clock: Arc<dyn Clock>, bound: CacheBound) -> Self {
        let keyring = Arc::new(keyring);
        let store = Arc::new(crate::vault::kek::LocalKeyStore::new(keyring.clone()));
        Self::new(pool, store, keyring, clock, bound)
    }

    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    pub fn store(&self) -> &dyn KeyStore {
        &*self.store
    }

    /// The key new secrets of `scope` are sealed with: its active data key (made on first
    /// use), or the keyring's current key while data keys are off.
    pub async fn sealing(&self, scope: Scope<'_>) -> Result<SealKey, KeysError> {
        if !self.data_keys_on().await? {
            return Ok(self.keyring.current().clone());
        }
        let tenant = scope.tenant().cloned();
        let ticket = self.epoch.load(Ordering::Acquire);
        let known = self.active.read().ok().and_then(|a| a.get(&tenant).copied());
        if let Some((id, at)) = known
            && self.clock.since(at) < self.bound.ttl
            && let Some(Ok(key)) = self.fresh(&id, scope.tenant().map(TenantId::as_str), SealKey::clone)
        {
            return Ok(key);
        }
        let key = match store::data_keys::active(&self.pool, scope.tenant()).await? {
            Some(row) => self.unwrap_row(&row, ticket).await?,
            None => self.create(scope, ticket).await?,
        };
        if let (Ok(mut active), KeyRef::Data(id)) = (self.active.write(), key.key())
            && self.epoch.load(Ordering::Acquire) == ticket
        {
            active.insert(tenant, (*id, self.clock.now()));
        }
        Ok(key)
    }

    /// `f` of the key a row's `key_id` names when it is at hand (the keyring's, or a data
    /// key held and fresh), on the key as held: `opening` clones it, and a clone is two
    /// reference counts that every request on every worker writes. `None`: not at hand
    /// ([`Self::using`] unwraps it then); `Some(Err)`: held, but not of `scope`, as `using` says.
    pub fn with_held<R>(
        &self,
        key_id: &str,
        scope: Scope<'_>,
        f: impl FnOnce(&SealKey) -> R,
    ) -> Option<Result<R, VaultError>> {
        match KeyRef::parse(key_id)? {
            KeyRef::Keyring(id) => self.keyring.get(&id).map(|k| Ok(f(k))),
            KeyRef::Data(id) => self.fresh(&id, scope.tenant().map(TenantId::as_str), f),
        }
    }

    /// `f` of the key a row's `key_id` names: on the key as held when it is at hand
    /// ([`Self::with_held`]: nothing cloned), else on the key read and unwrapped. A data key
    /// only if it is of `scope` (a row moved to another tenant, or a cookie naming a
    /// tenant's key, opens nothing, and has nothing unwrapped).
    pub async fn using<R>(&self, key_id: &str, scope: Scope<'_>, f: impl Fn(&SealKey) -> R) -> Result<R, KeysError> {
        match self.with_held(key_id, scope, &f) {
            Some(held) => Ok(held?),
            None => Ok(f(&self.load(key_id, scope).await?)),
        }
    }

    /// The key a row's `key_id` names, to open what it sealed, as [`Self::using`] finds it.
    pub async fn opening(&self, key_id: &str, scope: Scope<'_>) -> Result<SealKey, KeysError> {
        self.using(key_id, scope, SealKey::clone).await
    }

    /// The key `key_id` names when it is not at hand: a data key read, checked against
    /// `scope` and unwrapped; a keyring's id not in the keyring (or no key id) is unknown.
    async fn load(&self, key_id: &str, scope: Scope<'_>) -> Result<SealKey, KeysError> {
        let unknown = || VaultError::UnknownKey(key_id.to_owned());
        let Some(KeyRef::Data(id)) = KeyRef::parse(key_id) else {
            return Err(unknown().into());
        };
        let ticket = self.epoch.load(Ordering::Acquire);
        let row = store::data_keys::get(&self.pool, id).await?.ok_or_else(unknown)?;
        if row.tenant_id.as_deref() != scope.tenant().map(TenantId::as_str) {
            return Err(VaultError::Open.into());
        }
        self.unwrap_row(&row, ticket).await
    }

    /// Forgets the unwrapped keys of a tenant (it changed, perhaps ended: its keys are read
    /// again before their next use).
    pub fn forget_tenant(&self, tenant: &TenantId) {
        if let Ok(mut active) = self.active.write() {
            active.remove(&Some(tenant.clone()));
        }
        if let Ok(mut loaded) = self.loaded.write() {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            loaded.retain(|_, l| l.tenant.as_deref() != Some(tenant.as_str()));
        }
    }

    /// Drops every unwrapped data key held (their ciphers zeroise the bytes).
    pub fn forget_all(&self) {
        if let Ok(mut loaded) = self.loaded.write() {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            loaded.clear();
        }
        if let Ok(mut active) = self.active.write() {
            active.clear();
        }
    }

    /// Turns data keys on for a database with nothing sealed yet (a new install never writes
    /// a value of the releases before). Whether they are on.
    pub async fn switch_on_if_new(&self) -> Result<bool, sqlx::Error> {
        let on = store::data_keys::switch_on(&self.pool, store::SCHEMA_LEVEL, true).await?;
        self.remember_switch(on);
        Ok(on)
    }

    /// Turns data keys on (`rotate-key`, once every instance runs this release).
    pub async fn switch_on(&self) -> Result<(), sqlx::Error> {
        let on = store::data_keys::switch_on(&self.pool, store::SCHEMA_LEVEL, false).await?;
        self.remember_switch(on);
        Ok(())
    }

    /// Whether data keys are on (read again every few seconds while off).
    pub async fn are_on(&self) -> Result<bool, sqlx::Error> {
        self.data_keys_on().await
    }

    async fn data_keys_on(&self) -> Result<bool, sqlx::Error> {
        match self.on.read().map(|on| *on) {
            Ok(Ok(())) => return Ok(true),
            Ok(Err(read_at)) if self.clock.since(read_at) < SWITCH_RECHECK => return Ok(false),
            _ => {}
        }
        let on = store::data_keys::data_keys_on(&self.pool).await?;
        self.remember_switch(on);
        Ok(on)
    }

    fn remember_switch(&self, on: bool) {
        if let Ok(mut held) = self.on.write() {
            *held = if on { Ok(()) } else { Err(self.clock.now()) };
        }
    }

    /// `f` of a held data key younger than the bound; `Err` when it is another tenant's
    /// than `tenant` (`None`: the service's).
    fn fresh<R>(
        &self,
        id: &uuid::Uuid,
        tenant: Option<&str>,
        f: impl FnOnce(&SealKey) -> R,
    ) -> Option<Result<R, VaultError>> {
        let loaded = self.loaded.read().ok()?;
        let held = loaded.get(id)?;
        if self.clock.since(held.at) >= self.bound.ttl {
            return None;
        }
        Some(if held.tenant.as_deref() == tenant { Ok(f(&held.key)) } else { Err(VaultError::Open) })
    }

    /// Keeps an unwrapped key read under `ticket`, unless a forget came since.
    fn remember(&self, key: &SealKey, tenant: Option<&str>, ticket: u64) {
        let KeyRef::Data(id) = key.key() else { return };
        let Ok(mut loaded) = self.loaded.write() else { return };
        if self.epoch.load(Ordering::Acquire) != ticket {
            return;
        }
        if loaded.len() >= self.bound.capacity && !loaded.contains_key(id) {
            loaded.retain(|_, l| self.clock.since(l.at) < self.bound.ttl);
            // Still full of live keys: the oldest makes room (it is unwrapped again if asked).
            if loaded.len() >= self.bound.capacity
                && let Some(oldest) = loaded.iter().min_by_key(|(_, l)| l.at).map(|(k, _)| *k)
            {
                loaded.remove(&oldest);
            }
        }
        loaded.insert(*id, Loaded { key: key.clone(), tenant: tenant.map(Into::into), at: self.clock.now() });
    }

    async fn unwrap_row(&self, row: &DataKeyRow, ticket: u64) -> Result<SealKey, KeysError> {
        let wrapped = match (&row.wrapped, row.is_destroyed()) {
            (Some(w), false) => w,
            _ => return Err(VaultError::Shredded(KeyRef::Data(row.id).column()).into()),
        };
        let bytes = self.unwrapped(row, wrapped).await?;
        let key = SealKey::data(row.id, &bytes);
        self.remember(&key, row.tenant_id.as_deref(), ticket);
        Ok(key)
    }

    /// A stored data key's bytes, unwrapped by the store that wrapped it, in its context.
    async fn unwrapped(&self, row: &DataKeyRow, wrapped: &[u8]) -> Result<Zeroizing<[u8; 32]>, KeyStoreError> {
        let store = self.unwrapping(row)?;
        let ctx = WrapContext { data_key: row.id, scope: row.tenant_id.as_deref().unwrap_or(SERVICE_SCOPE) };
        measured(store.kind(), "unwrap", store.unwrap(&row.kek_id, &ctx, wrapped)).await
    }

    /// A new data key for `scope` (a tenant's id, or the service's): its id, its bytes, and
    /// them wrapped by the configured store.
    async fn made(&self, scope: &str) -> Result<(uuid::Uuid, Zeroizing<[u8; 32]>, Wrapped), KeyStoreError> {
        let id = uuid::Uuid::new_v4();
        let mut bytes = Zeroizing::new([0u8; 32]);
        rand::rng().fill_bytes(&mut *bytes);
        let ctx = WrapContext { data_key: id, scope };
        let wrapped = measured(self.store.kind(), "wrap", self.store.wrap(&ctx, &bytes)).await?;
        Ok((id, bytes, wrapped))
    }

    /// The store that unwraps `row`: the configured one, or the keyring for a key wrapped
    /// before the install moved to another store (`rotate-key` re-wraps it).
    fn unwrapping(&self, row: &DataKeyRow) -> Result<&dyn KeyStore, KeyStoreError> {
        match row.kek_store.as_str() {
            kind if kind == self.store.kind() => Ok(&*self.store),
            "local" => Ok(&self.local),
            other => Err(KeyStoreError::Refused {
                store: self.store.kind(),
                reason: format!("data key {} is wrapped by the {other} key store, not this one", row.id),
            }),
        }
    }

    /// A new data key for `scope`, wrapped and stored; another instance's if it stored one
    /// first.
    async fn create(&self, scope: Scope<'_>, ticket: u64) -> Result<SealKey, KeysError> {
        let tenant = scope.tenant();
        let (id, bytes, wrapped) = self.made(tenant.map_or(SERVICE_SCOPE, TenantId::as_str)).await?;
        if store::data_keys::insert_active(&self.pool, id, tenant, self.store.kind(), &wrapped.kek_id, &wrapped.blob)
            .await?
        {
            let key = SealKey::data(id, &bytes);
            self.remember(&key, tenant.map(TenantId::as_str), ticket);
            return Ok(key);
        }
        let row = store::data_keys::active(&self.pool, tenant).await?.ok_or(sqlx::Error::RowNotFound)?;
        self.unwrap_row(&row, ticket).await
    }

    /// Makes a new data key the tenant's active one, in one transaction with retiring the
    /// one before: new values are sealed under the new key (every instance is told at once),
    /// the retired one still opens what it sealed until `rotate-key` has re-sealed that
    /// under the new key and destroyed it. The new key's id.
    pub async fn rotate_tenant(&self, tenant: &TenantId) -> Result<String, KeysError> {
        let (id, _, wrapped) = self.made(tenant.as_str()).await?;
        let mut tx = store::begin(&self.pool).await?;
        store::data_keys::retire_active(&mut tx, tenant).await?;
        let kind = self.store.kind();
        if !store::data_keys::insert_active(&mut *tx, id, Some(tenant), kind, &wrapped.kek_id, &wrapped.blob).await? {
            return Err(sqlx::Error::RowNotFound.into());
        }
        tx.commit().await?;
        self.forget_tenant(tenant);
        Ok(KeyRef::Data(id).column())
    }

    /// Re-wraps every data key not under the store's current key-encryption key, one
    /// statement each (no sealed row changes). How many it re-wrapped.
    pub async fn rewrap_all(&self, batch: i64) -> Result<u64, KeysError> {
        let (kind, current) = (self.store.kind(), self.store.current_kek().to_owned());
        let (mut done, mut after) = (0u64, uuid::Uuid::nil());
        loop {
            let rows = store::data_keys::not_under_kek(&self.pool, kind, &current, after, batch).await?;
            let Some(last) = rows.last() else { return Ok(done) };
            after = last.id;
            for row in &rows {
                let Some(wrapped) = &row.wrapped else { continue };
                let bytes = self.unwrapped(row, wrapped).await?;
                let ctx = WrapContext { data_key: row.id, scope: row.tenant_id.as_deref().unwrap_or(SERVICE_SCOPE) };
                let again = measured(self.store.kind(), "wrap", self.store.wrap(&ctx, &bytes)).await?;
                // Over the version read: one re-wrapped or destroyed meanwhile is left as it is.
                if store::data_keys::store_rewrapped(&self.pool, row, kind, &again.kek_id, &again.blob).await? {
                    done += 1;
                }
            }
        }
    }

    /// Data keys still wrapped under another key-encryption key than the current one.
    pub async fn not_under_current_kek(&self) -> Result<i64, sqlx::Error> {
        store::data_keys::count_not_under_kek(&self.pool, self.store.kind(), self.store.current_kek()).await
    }
}
