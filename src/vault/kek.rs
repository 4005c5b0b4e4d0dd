//! Key stores: where the key-encryption key (KEK) lives that wraps the data keys. The KEK
//! never leaves its store: data keys go in to be wrapped and come out unwrapped, each bound
//! to its id and scope ([`WrapContext`]), so a wrapped key copied to another data key's row
//! or another tenant's does not unwrap.
//!
//! `local` is the keyring (`MCP_CONNECT_VAULT_KEYS`): its current key wraps, older keys
//! still unwrap what they wrapped until `rotate-key` has re-wrapped it.

pub mod aws_kms;
pub mod pkcs11;

use super::{KeyRef, Keyring, SealKey};
use std::sync::Arc;
use zeroize::Zeroizing;

/// What a wrapped data key is bound to: its own id and its scope (a tenant's id, or `*` for
/// the service's own secrets).
#[derive(Debug, Clone, Copy)]
pub struct WrapContext<'a> {
    pub data_key: uuid::Uuid,
    pub scope: &'a str,
}

impl WrapContext<'_> {
    /// Length-prefixed like the vault's other associated data; never empty.
    pub fn associated_data(&self) -> Vec<u8> {
        let mut ad = b"mcp-connect/data-key/v1".to_vec();
        for p in [self.data_key.as_bytes().as_slice(), self.scope.as_bytes()] {
            ad.extend_from_slice(&(p.len() as u32).to_be_bytes());
            ad.extend_from_slice(p);
        }
        ad
    }
}

/// A data key as its store wrapped it, and which of the store's keys did.
#[derive(Clone)]
pub struct Wrapped {
    pub kek_id: String,
    pub blob: Vec<u8>,
}

/// Never the wrapped bytes.
impl std::fmt::Debug for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wrapped").field("kek_id", &self.kek_id).finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyStoreError {
    /// The store did not answer (a timeout, a refused connection, throttling): worth a retry.
    #[error("key store {store} unavailable: {reason}")]
    Unavailable { store: &'static str, reason: String },
    /// The store answered no: its key is gone or disabled, or the wrapped key is not its.
    #[error("key store {store} refused: {reason}")]
    Refused { store: &'static str, reason: String },
}

impl KeyStoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, KeyStoreError::Unavailable { .. })
    }
}

#[async_trait::async_trait]
pub trait KeyStore: Send + Sync + std::fmt::Debug {
    /// `local`, `pkcs11`, `aws-kms`: as `data_keys.kek_store` names it.
    fn kind(&self) -> &'static str;
    /// The key new data keys are wrapped under.
    fn current_kek(&self) -> &str;
    async fn wrap(&self, ctx: &WrapContext<'_>, key: &[u8; 32]) -> Result<Wrapped, KeyStoreError>;
    async fn unwrap(
        &self,
        kek_id: &str,
        ctx: &WrapContext<'_>,
        blob: &[u8],
    ) -> Result<Zeroizing<[u8; 32]>, KeyStoreError>;
    /// `Err` with the reason while the store is not usable yet (`keys::pending`).
    fn readiness(&self) -> Result<(), String> {
        Ok(())
    }
}

/// The keyring as key store, for `dev` and small installs: whoever reads the keyring opens
/// everything, as before data keys; the hierarchy still makes rotation re-wrap keys
/// instead of re-sealing rows, and ending a tenant destroy its keys.
#[derive(Debug, Clone)]
pub struct LocalKeyStore {
    keyring: Arc<Keyring>,
}

impl LocalKeyStore {
    pub fn new(keyring: Arc<Keyring>) -> Self {
        Self { keyring }
    }
}

const LOCAL: &str = "local";

#[async_trait::async_trait]
impl KeyStore for LocalKeyStore {
    fn kind(&self) -> &'static str {
        LOCAL
    }

    fn current_kek(&self) -> &str {
        self.keyring.current_id().as_str()
    }

    async fn wrap(&self, ctx: &WrapContext<'_>, key: &[u8; 32]) -> Result<Wrapped, KeyStoreError> {
        let kek = self.keyring.current();
        let blob = kek
            .seal_bytes(&ctx.associated_data(), key)
            .map_err(|e| KeyStoreError::Refused { store: LOCAL, reason: e.to_string() })?;
        Ok(Wrapped { kek_id: self.current_kek().to_owned(), blob })
    }

    async fn unwrap(
        &self,
        kek_id: &str,
        ctx: &WrapContext<'_>,
        blob: &[u8],
    ) -> Result<Zeroizing<[u8; 32]>, KeyStoreError> {
        let refused = |reason: String| KeyStoreError::Refused { store: LOCAL, reason };
        let kek: &SealKey = self
            .keyring
            .get(kek_id)
            .ok_or_else(|| refused(format!("key {kek_id:?} is not in the keyring (MCP_CONNECT_VAULT_KEYS)")))?;
        debug_assert!(matches!(kek.key(), KeyRef::Keyring(_)));
        let opened = kek.open_bytes(&ctx.associated_data(), blob).map_err(|e| refused(e.to_string()))?;
        key_of(LOCAL, &opened)
    }
}

/// A random key wrapped and unwrapped once, as a store is opened: a store that answers but
/// does not give back what it was given is refused.
pub(super) async fn probe(store: &dyn KeyStore) -> Result<(), KeyStoreError> {
    use rand::RngCore;
    let mut key = Zeroizing::new([0u8; 32]);
    rand::rng().fill_bytes(&mut *key);
    let ctx = WrapContext { data_key: uuid::Uuid::new_v4(), scope: "*" };
    let wrapped = store.wrap(&ctx, &key).await?;
    if *store.unwrap(&wrapped.kek_id, &ctx, &wrapped.blob).await? != *key {
        let reason = "a key wrapped and unwrapped by the store came back different".to_owned();
        return Err(KeyStoreError::Refused { store: store.kind(), reason });
    }
    Ok(())
}

/// An unwrapped data key's 32 bytes, from what a store opened (zeroised by the caller).
fn key_of(store: &'static str, opened: &[u8]) -> Result<Zeroizing<[u8; 32]>, KeyStoreError> {
    let mut key = Zeroizing::new([0u8; 32]);
    if opened.len() != key.len() {
        return Err(KeyStoreError::Refused { store, reason: "the unwrapped key is not 32 bytes".into() });
    }
    key.copy_from_slice(opened);
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:HxwdHhscGRobGBcWFRQTEhEQDw4NDAsKCQgHBgUEAwI=";

    fn store(spec: &str) -> LocalKeyStore {
        LocalKeyStore::new(Arc::new(Keyring::parse(spec).unwrap()))
    }

    #[tokio::test]
    async fn a_wrapped_data_key_unwraps_only_for_its_own_id_and_scope() {
        let s = store(K1);
        let (id, other) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let ctx = WrapContext { data_key: id, scope: "acme" };
        let w = s.wrap(&ctx, &[7u8; 32]).await.unwrap();
        assert_eq!(w.kek_id, "k1");
        assert_eq!(*s.unwrap("k1", &ctx, &w.blob).await.unwrap(), [7u8; 32]);
        for moved in [WrapContext { data_key: other, scope: "acme" }, WrapContext { data_key: id, scope: "evil" }] {
            let e = s.unwrap("k1", &moved, &w.blob).await.unwrap_err();
            assert!(matches!(e, KeyStoreError::Refused { .. }), "{e}");
        }
    }

    #[tokio::test]
    async fn an_older_kek_unwraps_and_a_removed_one_is_refused_by_name() {
        let ctx = WrapContext { data_key: uuid::Uuid::new_v4(), scope: "*" };
        let w = store(K1).wrap(&ctx, &[9u8; 32]).await.unwrap();
        let rotated = store(&format!("{K2},{K1}"));
        assert_eq!(rotated.current_kek(), "k2");
        assert_eq!(*rotated.unwrap("k1", &ctx, &w.blob).await.unwrap(), [9u8; 32]);
        let e = store(K2).unwrap("k1", &ctx, &w.blob).await.unwrap_err();
        assert!(e.to_string().contains("\"k1\" is not in the keyring"), "{e}");
    }
}
