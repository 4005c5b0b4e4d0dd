//! Sealing and opening of tokens at rest (DESIGN.md invariant 2).
//!
//! XChaCha20-Poly1305 with a random 192-bit nonce per field; the nonce is stored in front
//! of the ciphertext. The associated data binds each ciphertext to its row and field
//! (tenant, subject, provider, connection id, field name), so a ciphertext copied to
//! another row or another column fails to open, and to the row's seal generation, which
//! every write of new ciphertexts raises: an older ciphertext of the same row (a rotated-out
//! refresh token) put back no longer opens, and the database refuses to lower the
//! generation (a trigger). Rows sealed before generations existed (`None`) open under the
//! first associated-data format until `rotate-key` re-seals them. Every row names the key
//! id it was sealed under, so keys rotate: the current key seals, older keys only open.
//!
//! A row that names the person's issuer (`connections.issuer`) binds it too (the third
//! format, its ciphertexts marked by [`ISSUER_BOUND`] in front): a database writer who
//! changes a row's issuer does not hand one IdP's person's grant to another IdP's namesake,
//! the ciphertext no longer opens. Rows sealed before (no mark) open under the second
//! format until `rotate-key` re-seals them; then the database refuses unmarked ones.

pub mod kek;
mod keyring;

pub use keyring::{KeyId, Keyring, KeyringError};

use crate::domain::{ConnectionId, ProviderId, Subject, TenantId};
use chacha20poly1305::aead::KeyInit;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};

const NONCE_LEN: usize = 24;

/// In front of a ciphertext sealed with the issuer in its associated data (the third
/// format). Eight fixed bytes: a random nonce of an older ciphertext begins with them once
/// in 2^64. Stripping it does not make such a ciphertext open without the issuer: the tag
/// was made over the third format's associated data.
pub const ISSUER_BOUND: &[u8; 8] = b"mcpc:v3:";

/// Which column a ciphertext belongs to; part of the associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    AccessToken,
    RefreshToken,
    IdToken,
}

impl Field {
    fn as_str(self) -> &'static str {
        match self {
            Field::AccessToken => "access_token",
            Field::RefreshToken => "refresh_token",
            Field::IdToken => "id_token",
        }
    }
}

/// The row a ciphertext belongs to, and its seal generation (`connections.seal_version`;
/// `None` for a row sealed before generations existed).
#[derive(Debug, Clone, Copy)]
pub struct RowBinding<'a> {
    pub tenant: &'a TenantId,
    pub subject: &'a Subject,
    pub provider: &'a ProviderId,
    pub connection: ConnectionId,
    pub generation: Option<i64>,
    /// The issuer of the IdP whose subject holds the row (`None`: not recorded; such a row
    /// is sealed in the second format).
    pub issuer: Option<&'a str>,
}

/// The generation a new row's ciphertexts are sealed at.
pub const FIRST_GENERATION: i64 = 1;

/// The generation the next write of new ciphertexts seals at, after `current` (`None`: a
/// new row, or one sealed before generations).
pub fn next_generation(current: Option<i64>) -> i64 {
    current.map_or(FIRST_GENERATION, |g| g.saturating_add(1))
}

/// `prefix`, each part length-prefixed (a part given in pieces counts them together), then
/// the generation as 8 bytes where there is one: every format's associated data, built in
/// one allocation of its final size (every cached hand-out opens with it: grown from the
/// prefix, with the id and the issuer in strings of their own, it was three allocations and
/// two moves, ~1,000 instructions a hand-out; issue 46).
fn length_prefixed(prefix: &[u8], parts: &[&[&[u8]]], generation: Option<i64>) -> Vec<u8> {
    let len = |p: &[&[u8]]| p.iter().map(|b| b.len()).sum::<usize>();
    let generation = generation.map(i64::to_be_bytes);
    let size = prefix.len() + parts.iter().map(|p| 4 + len(p)).sum::<usize>() + generation.map_or(0, |g| g.len());
    let mut ad = Vec::with_capacity(size);
    ad.extend_from_slice(prefix);
    for p in parts {
        ad.extend_from_slice(&(len(p) as u32).to_be_bytes());
        for b in *p {
            ad.extend_from_slice(b);
        }
    }
    if let Some(g) = generation {
        ad.extend_from_slice(&g);
    }
    ad
}

impl RowBinding<'_> {
    /// Length-prefixed, so that no two different bindings encode to the same bytes; the
    /// generation (v2) last, as 8 bytes; the issuer (v3) before it.
    fn associated_data(&self, field: Field, with_issuer: Option<&str>) -> Vec<u8> {
        let mut connection = uuid::Uuid::encode_buffer();
        let connection = self.connection.as_uuid().hyphenated().encode_lower(&mut connection);
        let (prefix, issuer): (&[u8], Option<&str>) = match (self.generation, with_issuer) {
            (Some(_), Some(issuer)) => (b"mcp-connect/vault/v3", Some(issuer)),
            (Some(_), None) => (b"mcp-connect/vault/v2", None),
            (None, _) => (b"mcp-connect/vault/v1", None),
        };
        let parts: [&[&[u8]]; 6] = [
            &[self.tenant.as_str().as_bytes()],
            &[self.subject.as_str().as_bytes()],
            &[self.provider.as_str().as_bytes()],
            &[connection.as_bytes()],
            &[field.as_str().as_bytes()],
            &[issuer.unwrap_or_default().as_bytes()],
        ];
        let parts = if issuer.is_some() { &parts[..] } else { &parts[..5] };
        length_prefixed(prefix, parts, self.generation)
    }

    /// The fourth format, a data key's: every part of the third, the issuer always (a
    /// presence byte first: an unbound row and one naming an empty issuer differ), the data
    /// key's id, then the generation. `None`: no generation (a data key seals none without
    /// one).
    fn associated_data_v4(&self, field: Field, issuer: Option<&str>, data_key: &uuid::Uuid) -> Option<Vec<u8>> {
        let generation = self.generation?;
        let mut connection = uuid::Uuid::encode_buffer();
        let connection = self.connection.as_uuid().hyphenated().encode_lower(&mut connection);
        let (present, issuer): (&[u8], &str) = match issuer {
            Some(i) => (b"\x01", i),
            None => (b"\x00", ""),
        };
        let parts: [&[&[u8]]; 7] = [
            &[self.tenant.as_str().as_bytes()],
            &[self.subject.as_str().as_bytes()],
            &[self.provider.as_str().as_bytes()],
            &[connection.as_bytes()],
            &[field.as_str().as_bytes()],
            &[present, issuer.as_bytes()],
            &[data_key.as_bytes()],
        ];
        Some(length_prefixed(b"mcp-connect/vault/v4", &parts, Some(generation)))
    }

    /// The issuer a new ciphertext of this row binds: its own, where it has a generation.
    fn binds_issuer(&self) -> Option<&str> {
        self.generation.and(self.issuer)
    }
}

/// Whether a stored ciphertext was sealed with the issuer bound (the third format).
pub fn is_issuer_bound(sealed: &[u8]) -> bool {
    sealed.starts_with(ISSUER_BOUND)
}

#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("ciphertext was sealed under key id {0:?}, which is not in the keyring nor a known data key")]
    UnknownKey(String),
    #[error("the data key {0} was destroyed (its tenant was ended): what it sealed opens no more")]
    Shredded(String),
    #[error("ciphertext does not open: tampered, moved to another row, or wrong key")]
    Open,
    #[error("sealing failed")]
    Seal,
    #[error("opened plaintext is not UTF-8")]
    Encoding,
}

/// Which key a sealed value names (its row's `key_id`): a key of the keyring (values sealed
/// before data keys, and the keyring's own use as the local key-encryption key), or a data
/// key (`dk:` and the 32 hex digits of its id: `:` is outside the keyring's alphabet and the
/// length over its 32, so the two never collide).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyRef {
    Keyring(Box<str>),
    Data(uuid::Uuid),
}

const DATA_KEY_PREFIX: &str = "dk:";

impl KeyRef {
    /// `None`: neither a keyring id nor a data key's.
    pub fn parse(key_id: &str) -> Option<Self> {
        match key_id.strip_prefix(DATA_KEY_PREFIX) {
            Some(hex) if hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                uuid::Uuid::try_parse(hex).ok().map(KeyRef::Data)
            }
            Some(_) => None,
            None => keyring::valid_id(key_id).then(|| KeyRef::Keyring(key_id.into())),
        }
    }

    /// As stored in a row's `key_id`.
    pub fn column(&self) -> String {
        match self {
            KeyRef::Keyring(id) => id.to_string(),
            KeyRef::Data(id) => format!("{DATA_KEY_PREFIX}{}", id.simple()),
        }
    }
}

/// One key that seals and opens: a keyring key or an unwrapped data key. Cheap to clone
/// (the cipher is shared); the key bytes live only in the cipher, which zeroises them when
/// the last clone is dropped.
#[derive(Clone)]
pub struct SealKey {
    key: KeyRef,
    column: std::sync::Arc<str>,
    cipher: std::sync::Arc<XChaCha20Poly1305>,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealKey").field("key_id", &self.column).finish()
    }
}

impl SealKey {
    pub fn new(key: KeyRef, cipher: XChaCha20Poly1305) -> Self {
        Self { column: key.column().into(), key, cipher: std::sync::Arc::new(cipher) }
    }

    /// A data key from its 32 bytes (zeroised by the caller's `Zeroizing`).
    pub fn data(id: uuid::Uuid, bytes: &[u8; 32]) -> Self {
        Self::new(KeyRef::Data(id), XChaCha20Poly1305::new(bytes.into()))
    }

    /// What a row sealed with it stores in `key_id`.
    pub fn key_id(&self) -> &str {
        &self.column
    }

    pub fn key(&self) -> &KeyRef {
        &self.key
    }

    fn data_key(&self) -> Option<&uuid::Uuid> {
        match &self.key {
            KeyRef::Data(id) => Some(id),
            KeyRef::Keyring(_) => None,
        }
    }

    /// Returns `nonce || ciphertext+tag`, with [`ISSUER_BOUND`] in front where the row binds
    /// its issuer. A data key seals in the fourth format (its id bound too), and only at a
    /// generation.
    pub fn seal(&self, row: &RowBinding<'_>, field: Field, plaintext: &SecretString) -> Result<Vec<u8>, VaultError> {
        let issuer = row.binds_issuer();
        let ad = match self.data_key() {
            Some(dk) => row.associated_data_v4(field, issuer, dk).ok_or(VaultError::Seal)?,
            None => row.associated_data(field, issuer),
        };
        let sealed = self.seal_bytes(&ad, plaintext.expose_secret().as_bytes())?;
        Ok(match issuer {
            Some(_) => [ISSUER_BOUND.as_slice(), &sealed].concat(),
            None => sealed,
        })
    }

    /// Opens a ciphertext sealed with this key for exactly this row and field.
    pub fn open(&self, row: &RowBinding<'_>, field: Field, sealed: &[u8]) -> Result<SecretString, VaultError> {
        // Marked: opened with the row's issuer (a row without one cannot open it); else in
        // the format it was sealed in before issuers were bound. A data key's (new since
        // issuers are bound) is marked exactly when its row names an issuer.
        let (issuer, rest) = match sealed.strip_prefix(ISSUER_BOUND.as_slice()) {
            Some(rest) => (Some(row.binds_issuer().ok_or(VaultError::Open)?), rest),
            None => (None, sealed),
        };
        let ad = match self.data_key() {
            Some(_) if issuer != row.binds_issuer() => return Err(VaultError::Open),
            Some(dk) => row.associated_data_v4(field, issuer, dk).ok_or(VaultError::Open)?,
            None => row.associated_data(field, issuer),
        };
        let mut pt = self.open_bytes(&ad, rest)?;
        let s = String::from_utf8(std::mem::take(&mut *pt)).map_err(|e| {
            let mut bytes = e.into_bytes();
            zeroize::Zeroize::zeroize(&mut bytes);
            VaultError::Encoding
        })?;
        Ok(SecretString::from(s))
    }

    /// Seals a secret that is not a token (a PKCE verifier, a nonce, a client secret), bound
    /// to `purpose` and to the bytes that identify its record (e.g. the state hash).
    pub fn seal_aux(&self, purpose: &str, binding: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, VaultError> {
        self.seal_bytes(&aux_ad(purpose, binding, self.data_key()), plaintext)
    }

    pub fn open_aux(
        &self,
        purpose: &str,
        binding: &[u8],
        sealed: &[u8],
    ) -> Result<zeroize::Zeroizing<Vec<u8>>, VaultError> {
        self.open_bytes(&aux_ad(purpose, binding, self.data_key()), sealed)
    }

    pub(crate) fn seal_bytes(&self, ad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, VaultError> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let ct = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plaintext, aad: ad })
            .map_err(|_| VaultError::Seal)?;
        let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    pub(crate) fn open_bytes(&self, ad: &[u8], sealed: &[u8]) -> Result<zeroize::Zeroizing<Vec<u8>>, VaultError> {
        if sealed.len() < NONCE_LEN + 16 {
            return Err(VaultError::Open);
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        let pt = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: ad })
            .map_err(|_| VaultError::Open)?;
        Ok(zeroize::Zeroizing::new(pt))
    }
}

/// The second format binds the data key too; the first (a keyring key's) does not.
fn aux_ad(purpose: &str, binding: &[u8], data_key: Option<&uuid::Uuid>) -> Vec<u8> {
    let mut ad = match data_key {
        Some(_) => b"mcp-connect/aux/v2".to_vec(),
        None => b"mcp-connect/aux/v1".to_vec(),
    };
    let dk = data_key.map(|id| *id.as_bytes());
    for p in [purpose.as_bytes(), binding].into_iter().chain(dk.as_ref().map(|b| b.as_slice())) {
        ad.extend_from_slice(&(p.len() as u32).to_be_bytes());
        ad.extend_from_slice(p);
    }
    ad
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (TenantId, Subject, ProviderId) {
        (TenantId::parse("acme").unwrap(), Subject::parse("alice").unwrap(), ProviderId::parse("github").unwrap())
    }

    fn vault(spec: &str) -> Keyring {
        Keyring::parse(spec).unwrap()
    }

    /// A new row at the first generation.
    fn row_of<'a>(t: &'a TenantId, s: &'a Subject, p: &'a ProviderId) -> RowBinding<'a> {
        RowBinding {
            tenant: t,
            subject: s,
            provider: p,
            connection: ConnectionId::generate(),
            generation: Some(1),
            issuer: Some("https://idp.example"),
        }
    }

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:HxwdHhscGRobGBcWFRQTEhEQDw4NDAsKCQgHBgUEAwI=";

    #[test]
    fn each_formats_associated_data_is_each_part_length_prefixed_in_order_then_the_generation() {
        let (t, s, p) = ids();
        let id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let dk = uuid::Uuid::from_u128(0xfeed_0000_0000_0000_0000_0000_0000_beef);
        let row = RowBinding {
            tenant: &t,
            subject: &s,
            provider: &p,
            connection: ConnectionId::from_uuid(id),
            generation: Some(7),
            issuer: None,
        };
        let part = |b: &[u8]| [&(b.len() as u32).to_be_bytes()[..], b].concat();
        let expected = |issuer: &[u8]| {
            [
                b"mcp-connect/vault/v4".to_vec(),
                part(b"acme"),
                part(b"alice"),
                part(b"github"),
                part(b"01234567-89ab-cdef-0123-456789abcdef"),
                part(Field::AccessToken.as_str().as_bytes()),
                part(issuer),
                part(dk.as_bytes()),
                7i64.to_be_bytes().to_vec(),
            ]
            .concat()
        };
        let ad = |issuer| row.associated_data_v4(Field::AccessToken, issuer, &dk).unwrap();
        assert_eq!(ad(Some("https://idp.example")), expected(b"\x01https://idp.example"));
        assert_eq!(ad(Some("")), expected(b"\x01"), "an empty issuer is not none");
        assert_eq!(ad(None), expected(b"\x00"));
        let ungenerated = RowBinding { generation: None, ..row };
        assert_eq!(ungenerated.associated_data_v4(Field::AccessToken, None, &dk), None);
        // The earlier formats, as rows sealed before data keys hold them.
        let old = |version: &[u8], issuer: Option<&[u8]>, generation: Option<i64>| {
            [
                [b"mcp-connect/vault/".as_slice(), version].concat(),
                part(b"acme"),
                part(b"alice"),
                part(b"github"),
                part(b"01234567-89ab-cdef-0123-456789abcdef"),
                part(Field::AccessToken.as_str().as_bytes()),
                issuer.map(part).unwrap_or_default(),
                generation.map(|g| g.to_be_bytes().to_vec()).unwrap_or_default(),
            ]
            .concat()
        };
        let idp = Some("https://idp.example");
        assert_eq!(row.associated_data(Field::AccessToken, idp), old(b"v3", Some(b"https://idp.example"), Some(7)));
        assert_eq!(row.associated_data(Field::AccessToken, Some("")), old(b"v3", Some(b""), Some(7)));
        assert_eq!(row.associated_data(Field::AccessToken, None), old(b"v2", None, Some(7)));
        assert_eq!(ungenerated.associated_data(Field::AccessToken, idp), old(b"v1", None, None));
    }

    #[test]
    fn a_sealed_token_opens_for_its_own_row_and_field() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.current().seal(&row, Field::AccessToken, &SecretString::from("gho_secret")).unwrap();
        assert!(!ct.windows(10).any(|w| w == b"gho_secret"));
        let pt = v.get("k1").unwrap().open(&row, Field::AccessToken, &ct).unwrap();
        assert_eq!(pt.expose_secret(), "gho_secret");
    }

    #[test]
    fn a_ciphertext_does_not_open_for_another_row_or_field() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.current().seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        let other_conn = RowBinding { connection: ConnectionId::generate(), ..row };
        assert!(matches!(v.get("k1").unwrap().open(&other_conn, Field::AccessToken, &ct), Err(VaultError::Open)));
        let bob = Subject::parse("bob").unwrap();
        let other_subject = RowBinding { subject: &bob, ..row };
        assert!(matches!(v.get("k1").unwrap().open(&other_subject, Field::AccessToken, &ct), Err(VaultError::Open)));
        let other_tenant_id = TenantId::parse("evil").unwrap();
        let other_tenant = RowBinding { tenant: &other_tenant_id, ..row };
        assert!(matches!(v.get("k1").unwrap().open(&other_tenant, Field::AccessToken, &ct), Err(VaultError::Open)));
        let gl = ProviderId::parse("gitlab").unwrap();
        let other_provider = RowBinding { provider: &gl, ..row };
        assert!(matches!(v.get("k1").unwrap().open(&other_provider, Field::AccessToken, &ct), Err(VaultError::Open)));
        assert!(matches!(v.get("k1").unwrap().open(&row, Field::RefreshToken, &ct), Err(VaultError::Open)));
    }

    #[test]
    fn a_ciphertext_opens_only_at_the_generation_it_was_sealed_at() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let at = |g: Option<i64>| RowBinding {
            tenant: &t,
            subject: &s,
            provider: &p,
            connection: ConnectionId::from_uuid(uuid::Uuid::nil()),
            generation: g,
            issuer: None,
        };
        let older = v.current().seal(&at(Some(2)), Field::RefreshToken, &SecretString::from("rotated-out")).unwrap();
        let legacy =
            v.current().seal(&at(None), Field::RefreshToken, &SecretString::from("before generations")).unwrap();
        assert_eq!(
            v.get("k1").unwrap().open(&at(Some(2)), Field::RefreshToken, &older).unwrap().expose_secret(),
            "rotated-out"
        );
        // Put back into the row after a later write (generation 3): it does not open.
        for g in [Some(3), Some(1), Some(i64::MAX), None] {
            assert!(
                matches!(v.get("k1").unwrap().open(&at(g), Field::RefreshToken, &older), Err(VaultError::Open)),
                "{g:?}"
            );
        }
        // A row sealed before generations opens only as such.
        assert_eq!(
            v.get("k1").unwrap().open(&at(None), Field::RefreshToken, &legacy).unwrap().expose_secret(),
            "before generations"
        );
        for g in [Some(0), Some(1)] {
            assert!(
                matches!(v.get("k1").unwrap().open(&at(g), Field::RefreshToken, &legacy), Err(VaultError::Open)),
                "{g:?}"
            );
        }
    }

    #[test]
    fn a_ciphertext_opens_only_for_the_issuer_it_was_sealed_for_and_its_mark_cannot_be_stripped() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.current().seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        assert!(is_issuer_bound(&ct));
        assert_eq!(v.get("k1").unwrap().open(&row, Field::AccessToken, &ct).unwrap().expose_secret(), "tok");
        // Another IdP's namesake, or a row whose issuer was taken away.
        for issuer in [Some("https://other-idp.example"), Some("https://idp.example/"), None] {
            let other = RowBinding { issuer, ..row };
            assert!(
                matches!(v.get("k1").unwrap().open(&other, Field::AccessToken, &ct), Err(VaultError::Open)),
                "{issuer:?}"
            );
        }
        // Without its mark it is no ciphertext of the second format either.
        let stripped = &ct[ISSUER_BOUND.len()..];
        for issuer in [Some("https://idp.example"), None] {
            let as_v2 = RowBinding { issuer, ..row };
            assert!(v.get("k1").unwrap().open(&as_v2, Field::AccessToken, stripped).is_err(), "{issuer:?}");
        }
        // A row sealed before issuers were bound still opens, whatever issuer it names now.
        let before = RowBinding { issuer: None, ..row };
        let old = v.current().seal(&before, Field::AccessToken, &SecretString::from("old")).unwrap();
        assert!(!is_issuer_bound(&old));
        assert_eq!(v.get("k1").unwrap().open(&row, Field::AccessToken, &old).unwrap().expose_secret(), "old");
    }

    #[test]
    fn a_tampered_ciphertext_does_not_open() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.current().seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        for i in 0..ct.len() {
            let mut bad = ct.clone();
            bad[i] ^= 0x01;
            assert!(v.get("k1").unwrap().open(&row, Field::AccessToken, &bad).is_err(), "bit flip at {i} opened");
        }
        assert!(v.get("k1").unwrap().open(&row, Field::AccessToken, &ct[..10]).is_err());
    }

    #[test]
    fn old_keys_open_and_the_current_key_seals() {
        let (t, s, p) = ids();
        let row = row_of(&t, &s, &p);
        let old = vault(K1);
        let ct = old.current().seal(&row, Field::RefreshToken, &SecretString::from("r1")).unwrap();
        let rotated = vault(&format!("{K2},{K1}"));
        assert_eq!(rotated.current_id().as_str(), "k2");
        assert_eq!(rotated.get("k1").unwrap().open(&row, Field::RefreshToken, &ct).unwrap().expose_secret(), "r1");
        let ct2 = rotated.current().seal(&row, Field::RefreshToken, &SecretString::from("r2")).unwrap();
        assert!(rotated.get("k1").unwrap().open(&row, Field::RefreshToken, &ct2).is_err());
        assert_eq!(rotated.get("k2").unwrap().open(&row, Field::RefreshToken, &ct2).unwrap().expose_secret(), "r2");
    }

    #[test]
    fn aux_secrets_open_only_for_their_purpose_and_binding() {
        let v = vault(K1);
        let ct = v.current().seal_aux("oauth_state", b"hash-1", b"verifier").unwrap();
        assert_eq!(&*v.get("k1").unwrap().open_aux("oauth_state", b"hash-1", &ct).unwrap(), b"verifier");
        assert!(v.get("k1").unwrap().open_aux("oauth_state", b"hash-2", &ct).is_err());
        assert!(v.get("k1").unwrap().open_aux("login_state", b"hash-1", &ct).is_err());
    }

    #[test]
    fn key_ids_parse_as_a_keyring_id_or_a_data_key_and_nothing_else() {
        let id = uuid::Uuid::new_v4();
        let column = KeyRef::Data(id).column();
        assert_eq!(column.len(), 35);
        assert_eq!(KeyRef::parse(&column), Some(KeyRef::Data(id)));
        assert_eq!(KeyRef::parse("k-old"), Some(KeyRef::Keyring("k-old".into())));
        for bad in
            ["", "dk:", "dk:xyz", &format!("dk:{}", id.hyphenated()), &format!("dk:{}0", id.simple()), "k 1", "a:b"]
        {
            assert_eq!(KeyRef::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_data_key_seals_in_the_fourth_format_bound_to_its_id_and_only_at_a_generation() {
        let (t, s, p) = ids();
        let row = row_of(&t, &s, &p);
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let dk = SealKey::data(a, &[5u8; 32]);
        assert_eq!(dk.key_id(), KeyRef::Data(a).column());
        let ct = dk.seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        assert!(is_issuer_bound(&ct));
        assert_eq!(dk.open(&row, Field::AccessToken, &ct).unwrap().expose_secret(), "tok");
        // The same bytes under another id (a row's key_id pointed at another data key), and a
        // keyring key with the same bytes: neither opens it.
        assert!(matches!(SealKey::data(b, &[5u8; 32]).open(&row, Field::AccessToken, &ct), Err(VaultError::Open)));
        let same_bytes = vault("k1:BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU=");
        assert!(same_bytes.current().open(&row, Field::AccessToken, &ct).is_err());
        // Another row, field, issuer or generation; its mark stripped.
        let other_issuer = RowBinding { issuer: Some("https://other.example"), ..row };
        let later = RowBinding { generation: Some(2), ..row };
        for r in [other_issuer, later, RowBinding { connection: ConnectionId::generate(), ..row }] {
            assert!(matches!(dk.open(&r, Field::AccessToken, &ct), Err(VaultError::Open)));
        }
        assert!(dk.open(&row, Field::RefreshToken, &ct).is_err());
        assert!(dk.open(&row, Field::AccessToken, &ct[ISSUER_BOUND.len()..]).is_err());
        // No generation, no data-key seal.
        let legacy = RowBinding { generation: None, ..row };
        assert!(matches!(dk.seal(&legacy, Field::AccessToken, &SecretString::from("x")), Err(VaultError::Seal)));
        // A row that names no issuer: unmarked, and opens only so.
        let unbound = RowBinding { issuer: None, ..row };
        let ct = dk.seal(&unbound, Field::IdToken, &SecretString::from("id")).unwrap();
        assert!(!is_issuer_bound(&ct));
        assert_eq!(dk.open(&unbound, Field::IdToken, &ct).unwrap().expose_secret(), "id");
        assert!(dk.open(&row, Field::IdToken, &ct).is_err());
    }

    #[test]
    fn a_data_keys_aux_secret_opens_only_under_that_data_key() {
        let id = uuid::Uuid::new_v4();
        let dk = SealKey::data(id, &[3u8; 32]);
        let ct = dk.seal_aux("oauth_state", b"hash-1", b"verifier").unwrap();
        assert_eq!(&*dk.open_aux("oauth_state", b"hash-1", &ct).unwrap(), b"verifier");
        assert!(SealKey::data(uuid::Uuid::new_v4(), &[3u8; 32]).open_aux("oauth_state", b"hash-1", &ct).is_err());
        assert!(
            vault("k1:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=")
                .current()
                .open_aux("oauth_state", b"hash-1", &ct)
                .is_err()
        );
    }
}
