//! The `pkcs11` key store: the key-encryption key is an AES-256 key inside an HSM (any
//! PKCS#11 module: a network HSM's client library, a cloud HSM's, SoftHSM2), marked
//! sensitive and not extractable, so it never leaves the HSM: data keys go in to be wrapped
//! (`CKM_AES_GCM`, a fresh 12-byte IV, the wrap context as additional authenticated data)
//! and come out unwrapped. Through `cryptoki`, the maintained Rust PKCS#11 binding.
//!
//! Blob: `0x01 || iv (12) || ciphertext (32) || tag (16)`. The key is found by its label
//! (`CKA_LABEL`); `kek_id` is that label, so a rotation makes a key with a new label and
//! keeps the old one until `rotate-key` has re-wrapped every data key.
//!
//! PKCS#11 calls block: each runs on tokio's blocking pool, on one of a few sessions kept
//! open (a session serves one thread at a time). `C_Initialize` is once per process for a
//! module (the standard's rule): the loaded modules are kept in one process-wide map, the
//! one global here, because two instances in one process (the tests, `serve` beside a
//! command) must share the module's initialisation.

use super::{KeyStore, KeyStoreError, WrapContext, Wrapped};
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error as CkError, RvError};
use cryptoki::mechanism::Mechanism;
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::object::{Attribute, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use rand::RngCore;
use secrecy::SecretString;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use zeroize::Zeroizing;

pub const PKCS11: &str = "pkcs11";
const BLOB_VERSION: u8 = 1;
const IV_LEN: usize = 12;
const TAG_BITS: u64 = 128;
/// Idle sessions kept open at most, and calls at once.
const SESSIONS: usize = 4;
const CALLS: usize = SESSIONS;
/// The longest a call waits for a session and for the module's answer.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `[vault.pkcs11]`.
#[derive(Clone)]
pub struct Pkcs11Settings {
    /// The PKCS#11 module (a shared library), e.g. `/usr/lib/softhsm/libsofthsm2.so`.
    pub module: PathBuf,
    pub token_label: String,
    /// The label of the key-encryption key new data keys are wrapped under.
    pub key_label: String,
    /// The token's user PIN.
    pub pin: SecretString,
}

impl std::fmt::Debug for Pkcs11Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pkcs11Settings")
            .field("module", &self.module)
            .field("token_label", &self.token_label)
            .field("key_label", &self.key_label)
            .finish_non_exhaustive()
    }
}

struct Inner {
    ctx: Pkcs11,
    slot: Slot,
    pin: SecretString,
    key_label: String,
    token_label: String,
    idle: Mutex<Vec<Session>>,
    calls: Arc<tokio::sync::Semaphore>,
}

/// A key store in an HSM, through its PKCS#11 module.
#[derive(Clone)]
pub struct Pkcs11KeyStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pkcs11KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pkcs11KeyStore")
            .field("token", &self.inner.token_label)
            .field("key", &self.inner.key_label)
            .finish_non_exhaustive()
    }
}

fn refused(reason: impl Into<String>) -> KeyStoreError {
    KeyStoreError::Refused { store: PKCS11, reason: reason.into() }
}

/// A module's error: passing (the device, a session, the token away, the library busy)
/// or an answer (a key or blob that is not right, a wrong PIN).
fn classified(e: CkError) -> KeyStoreError {
    let transient = matches!(
        &e,
        CkError::Pkcs11(
            RvError::DeviceError
                | RvError::DeviceRemoved
                | RvError::DeviceMemory
                | RvError::HostMemory
                | RvError::SessionHandleInvalid
                | RvError::SessionClosed
                | RvError::SessionCount
                | RvError::TokenNotPresent
                | RvError::FunctionFailed,
            _
        )
    );
    let reason = e.to_string();
    if transient { KeyStoreError::Unavailable { store: PKCS11, reason } } else { refused(reason) }
}

/// The process's one context per module (see the module doc).
fn context(module: &Path) -> Result<Pkcs11, KeyStoreError> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Pkcs11>>> = OnceLock::new();
    let mut loaded = LOADED.get_or_init(Mutex::default).lock().map_err(|_| refused("module map poisoned"))?;
    if let Some(ctx) = loaded.get(module) {
        return Ok(ctx.clone());
    }
    let ctx = Pkcs11::new(module).map_err(|e| refused(format!("module {}: {e}", module.display())))?;
    match ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
        Ok(()) | Err(CkError::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
        Err(e) => return Err(refused(format!("module {}: {e}", module.display()))),
    }
    loaded.insert(module.to_owned(), ctx.clone());
    Ok(ctx)
}

impl Pkcs11KeyStore {
    /// Loads the module, finds the token, signs in and checks that the key is there. Blocks:
    /// call it from a blocking context (`open`).
    fn open_blocking(settings: Pkcs11Settings) -> Result<Self, KeyStoreError> {
        let ctx = context(&settings.module)?;
        let slots = ctx.get_slots_with_token().map_err(classified)?;
        let slot = slots
            .into_iter()
            .find(|s| ctx.get_token_info(*s).is_ok_and(|t| t.label() == settings.token_label))
            .ok_or_else(|| {
                refused(format!("no token labelled {:?} in {}", settings.token_label, settings.module.display()))
            })?;
        let store = Self {
            inner: Arc::new(Inner {
                ctx,
                slot,
                pin: settings.pin,
                key_label: settings.key_label,
                token_label: settings.token_label,
                idle: Mutex::default(),
                calls: Arc::new(tokio::sync::Semaphore::new(CALLS)),
            }),
        };
        let label = store.inner.key_label.clone();
        store.with_session(|s| find_key(s, &label))?.ok_or_else(|| {
            refused(format!(
                "no key labelled {label:?} in token {:?}: make one with `mcp-connect keystore create-kek`",
                store.inner.token_label
            ))
        })?;
        Ok(store)
    }

    /// [`Self::open_blocking`] on the blocking pool, then a random key wrapped and unwrapped
    /// once: a module that answers but does not give back what it was given stops the start.
    pub async fn open(settings: Pkcs11Settings) -> Result<Self, KeyStoreError> {
        let store = tokio::task::spawn_blocking(move || Self::open_blocking(settings))
            .await
            .map_err(|e| refused(format!("task: {e}")))??;
        super::probe(&store).await?;
        Ok(store)
    }

    /// Runs `call` on the blocking pool, at most [`CALLS`] at once and for at most
    /// [`CALL_TIMEOUT`]: a module that hangs answers `Unavailable` (its thread is left to
    /// finish) instead of taking every blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> Result<T, KeyStoreError> + Send + 'static,
    ) -> Result<T, KeyStoreError> {
        let unavailable = |reason: &str| KeyStoreError::Unavailable { store: PKCS11, reason: reason.to_owned() };
        let _slot = tokio::time::timeout(CALL_TIMEOUT, self.inner.calls.clone().acquire_owned())
            .await
            .map_err(|_| unavailable("every session busy"))?
            .map_err(|_| unavailable("closed"))?;
        tokio::time::timeout(CALL_TIMEOUT, tokio::task::spawn_blocking(call))
            .await
            .map_err(|_| unavailable("no answer in time"))?
            .map_err(|e| refused(format!("task: {e}")))?
    }

    /// Makes the key-encryption key `key_label` in the token: AES-256, sensitive, never
    /// extractable, for encryption and decryption only. Refused when one of that label exists.
    pub async fn create_kek(settings: Pkcs11Settings) -> Result<(), KeyStoreError> {
        tokio::task::spawn_blocking(move || {
            let ctx = context(&settings.module)?;
            let slot = ctx
                .get_slots_with_token()
                .map_err(classified)?
                .into_iter()
                .find(|s| ctx.get_token_info(*s).is_ok_and(|t| t.label() == settings.token_label))
                .ok_or_else(|| refused(format!("no token labelled {:?}", settings.token_label)))?;
            let session = ctx.open_rw_session(slot).map_err(classified)?;
            login(&session, &settings.pin)?;
            if find_key(&session, &settings.key_label)?.is_some() {
                return Err(refused(format!("a key labelled {:?} exists already", settings.key_label)));
            }
            let template = [
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Sensitive(true),
                Attribute::Extractable(false),
                Attribute::Encrypt(true),
                Attribute::Decrypt(true),
                Attribute::ValueLen(32.into()),
                Attribute::Label(settings.key_label.as_bytes().to_vec()),
            ];
            session.generate_key(&Mechanism::AesKeyGen, &template).map_err(classified)?;
            Ok(())
        })
        .await
        .map_err(|e| refused(format!("task: {e}")))?
    }

    /// Runs `f` on an idle session (or a new one, signed in); a session that failed for
    /// the device's or the session's sake is closed, not kept.
    fn with_session<T>(&self, f: impl FnOnce(&Session) -> Result<T, KeyStoreError>) -> Result<T, KeyStoreError> {
        let taken = self.inner.idle.lock().ok().and_then(|mut idle| idle.pop());
        let session = match taken {
            Some(s) => s,
            None => {
                let s = self.inner.ctx.open_rw_session(self.inner.slot).map_err(classified)?;
                login(&s, &self.inner.pin)?;
                s
            }
        };
        let out = f(&session);
        if !matches!(out, Err(KeyStoreError::Unavailable { .. }))
            && let Ok(mut idle) = self.inner.idle.lock()
            && idle.len() < SESSIONS
        {
            idle.push(session);
        }
        out
    }

    fn key(&self, session: &Session, label: &str) -> Result<ObjectHandle, KeyStoreError> {
        find_key(session, label)?
            .ok_or_else(|| refused(format!("no key labelled {label:?} in token {:?}", self.inner.token_label)))
    }
}

/// Signs the session's application in (once per application and token: a second sign-in
/// is answered "already").
fn login(session: &Session, pin: &SecretString) -> Result<(), KeyStoreError> {
    match session.login(UserType::User, Some(pin)) {
        Ok(()) | Err(CkError::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => Ok(()),
        Err(e) => Err(classified(e)),
    }
}

fn find_key(session: &Session, label: &str) -> Result<Option<ObjectHandle>, KeyStoreError> {
    let template = [
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Label(label.as_bytes().to_vec()),
    ];
    Ok(session.find_objects(&template).map_err(classified)?.into_iter().next())
}

#[async_trait::async_trait]
impl KeyStore for Pkcs11KeyStore {
    fn kind(&self) -> &'static str {
        PKCS11
    }

    fn current_kek(&self) -> &str {
        &self.inner.key_label
    }

    async fn wrap(&self, ctx: &WrapContext<'_>, key: &[u8; 32]) -> Result<Wrapped, KeyStoreError> {
        let (store, aad, plain) = (self.clone(), ctx.associated_data(), Zeroizing::new(*key));
        self.blocking(move || {
            let label = store.inner.key_label.clone();
            store.with_session(|s| {
                let kek = store.key(s, &label)?;
                let mut iv = [0u8; IV_LEN];
                rand::rng().fill_bytes(&mut iv);
                let sealed = {
                    let params = GcmParams::new(&mut iv, &aad, TAG_BITS.into()).map_err(classified)?;
                    s.encrypt(&Mechanism::AesGcm(params), kek, plain.as_slice()).map_err(classified)?
                };
                // The IV as the module used it: an HSM in FIPS mode makes its own and writes
                // it back into the parameters.
                if sealed.len() != 32 + 16 {
                    return Err(refused("the module's AES-GCM answer is not 48 bytes"));
                }
                let blob = [&[BLOB_VERSION][..], &iv, &sealed].concat();
                Ok(Wrapped { kek_id: label.clone(), blob })
            })
        })
        .await
    }

    async fn unwrap(
        &self,
        kek_id: &str,
        ctx: &WrapContext<'_>,
        blob: &[u8],
    ) -> Result<Zeroizing<[u8; 32]>, KeyStoreError> {
        let Some((&BLOB_VERSION, rest)) = blob.split_first() else {
            return Err(refused("not a blob this store wrapped"));
        };
        if rest.len() != IV_LEN + 32 + 16 {
            return Err(refused("not a blob this store wrapped"));
        }
        let (store, aad, label, rest) = (self.clone(), ctx.associated_data(), kek_id.to_owned(), rest.to_vec());
        self.blocking(move || {
            store.with_session(|s| {
                let kek = store.key(s, &label)?;
                let (iv, sealed) = rest.split_at(IV_LEN);
                let mut iv = iv.to_vec();
                let params = GcmParams::new(&mut iv, &aad, TAG_BITS.into()).map_err(classified)?;
                let opened = Zeroizing::new(s.decrypt(&Mechanism::AesGcm(params), kek, sealed).map_err(classified)?);
                super::key_of(PKCS11, &opened)
            })
        })
        .await
    }
}
