//! The keyring: named 256-bit keys from the environment or a file, the first one current.
//!
//! Format: `id:base64key[,id:base64key...]`, e.g. `MCP_CONNECT_VAULT_KEYS=2026-11:...,2026-01:...`.
//! The first key seals; the others only open, until `rotate-key` has re-sealed every row
//! and they can be removed. No key, or a malformed one, is a start-up error: the vault
//! never falls back to plaintext.

use super::{KeyRef, SealKey};
use base64::Engine;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyId(String);

impl KeyId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    #[error("no vault key configured")]
    Empty,
    #[error("entry {0}: expected <key id>:<base64 of 32 bytes>")]
    Format(usize),
    #[error("entry {0}: key id must be 1-32 characters of A-Z, a-z, 0-9, '-', '_' or '.'")]
    BadId(usize),
    #[error("entry {0}: key must be base64 of exactly 32 bytes")]
    BadKey(usize),
    #[error("key id {0:?} appears twice")]
    Duplicate(String),
}

/// Named keys; key material never appears in `Debug`.
pub struct Keyring {
    keys: Vec<(KeyId, SealKey)>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring").field("key_ids", &self.ids().collect::<Vec<_>>()).finish()
    }
}

impl Keyring {
    pub fn parse(spec: &str) -> Result<Self, KeyringError> {
        let mut keys: Vec<(KeyId, SealKey)> = Vec::new();
        for (i, entry) in spec.split([',', '\n']).map(str::trim).filter(|e| !e.is_empty()).enumerate() {
            let n = i + 1;
            let (id, b64) = entry.split_once(':').ok_or(KeyringError::Format(n))?;
            let id = id.trim();
            if !valid_id(id) {
                return Err(KeyringError::BadId(n));
            }
            let mut raw = decode_b64(b64.trim()).ok_or(KeyringError::BadKey(n))?;
            if raw.len() != 32 {
                zeroize::Zeroize::zeroize(&mut raw);
                return Err(KeyringError::BadKey(n));
            }
            let cipher = XChaCha20Poly1305::new_from_slice(&raw).map_err(|_| KeyringError::BadKey(n))?;
            zeroize::Zeroize::zeroize(&mut raw);
            if keys.iter().any(|(k, _)| k.0 == id) {
                return Err(KeyringError::Duplicate(id.to_owned()));
            }
            keys.push((KeyId(id.to_owned()), SealKey::new(KeyRef::Keyring(id.into()), cipher)));
        }
        if keys.is_empty() {
            return Err(KeyringError::Empty);
        }
        Ok(Self { keys })
    }

    /// A fresh random key in the keyring format, for `mcp-connect genkey` and `dev`.
    pub fn generate_entry(id: &str) -> String {
        use rand::RngCore;
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let s = format!("{id}:{}", base64::engine::general_purpose::STANDARD.encode(raw));
        zeroize::Zeroize::zeroize(&mut raw);
        s
    }

    pub fn current_id(&self) -> &KeyId {
        &self.keys[0].0
    }

    /// The key that seals (and, as the local key store's, wraps data keys).
    pub fn current(&self) -> &SealKey {
        &self.keys[0].1
    }

    /// A key by id: the current one or an older one that only opens.
    pub fn get(&self, id: &str) -> Option<&SealKey> {
        self.keys.iter().find(|(k, _)| k.0 == id).map(|(_, c)| c)
    }

    pub fn ids(&self) -> impl Iterator<Item = &KeyId> {
        self.keys.iter().map(|(k, _)| k)
    }
}

/// 1-32 characters of `A-Z`, `a-z`, `0-9`, `-`, `_`, `.`.
pub(super) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 32
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn decode_b64(s: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
    STANDARD.decode(s).or_else(|_| URL_SAFE.decode(s)).or_else(|_| URL_SAFE_NO_PAD.decode(s)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_key_is_current() {
        let k =
            Keyring::parse(&format!("{},{}", Keyring::generate_entry("new"), Keyring::generate_entry("old"))).unwrap();
        assert_eq!(k.current_id().as_str(), "new");
        assert_eq!(k.ids().count(), 2);
    }

    #[test]
    fn bad_keyrings_are_refused() {
        assert_eq!(Keyring::parse("").unwrap_err(), KeyringError::Empty);
        assert_eq!(Keyring::parse("nocolon").unwrap_err(), KeyringError::Format(1));
        assert_eq!(Keyring::parse("k1:c2hvcnQ=").unwrap_err(), KeyringError::BadKey(1));
        assert_eq!(
            Keyring::parse("k 1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap_err(),
            KeyringError::BadId(1)
        );
        let e = Keyring::generate_entry("a");
        assert_eq!(Keyring::parse(&format!("{e},{e}")).unwrap_err(), KeyringError::Duplicate("a".into()));
    }

    #[test]
    fn debug_shows_ids_but_no_key_material() {
        let entry = Keyring::generate_entry("k1");
        let k = Keyring::parse(&entry).unwrap();
        let dbg = format!("{k:?}");
        assert!(dbg.contains("k1"));
        let b64 = entry.split_once(':').unwrap().1;
        assert!(!dbg.contains(b64));
    }
}
