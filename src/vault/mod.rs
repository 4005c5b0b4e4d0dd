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

mod keyring;

pub use keyring::{KeyId, Keyring, KeyringError};

use crate::domain::{ConnectionId, ProviderId, Subject, TenantId};
use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead, Payload};
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

impl RowBinding<'_> {
    /// Length-prefixed, so that no two different bindings encode to the same bytes; the
    /// generation (v2) last, as 8 bytes; the issuer (v3) before it.
    fn associated_data(&self, field: Field, with_issuer: Option<&str>) -> Vec<u8> {
        let connection = self.connection.to_string();
        let mut parts: Vec<&[u8]> = vec![
            self.tenant.as_str().as_bytes(),
            self.subject.as_str().as_bytes(),
            self.provider.as_str().as_bytes(),
            connection.as_bytes(),
            field.as_str().as_bytes(),
        ];
        let mut ad = match (self.generation, with_issuer) {
            (Some(_), Some(issuer)) => {
                parts.push(issuer.as_bytes());
                b"mcp-connect/vault/v3".to_vec()
            }
            (Some(_), None) => b"mcp-connect/vault/v2".to_vec(),
            (None, _) => b"mcp-connect/vault/v1".to_vec(),
        };
        for p in parts {
            ad.extend_from_slice(&(p.len() as u32).to_be_bytes());
            ad.extend_from_slice(p);
        }
        if let Some(g) = self.generation {
            ad.extend_from_slice(&g.to_be_bytes());
        }
        ad
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
    #[error("ciphertext was sealed under key id {0:?}, which is not in the keyring")]
    UnknownKey(String),
    #[error("ciphertext does not open: tampered, moved to another row, or wrong key")]
    Open,
    #[error("sealing failed")]
    Seal,
    #[error("opened plaintext is not UTF-8")]
    Encoding,
}

/// Seals and opens token fields with the keyring.
#[derive(Debug, Clone)]
pub struct Vault {
    keyring: std::sync::Arc<Keyring>,
}

impl Vault {
    pub fn new(keyring: Keyring) -> Self {
        Self { keyring: std::sync::Arc::new(keyring) }
    }

    /// Id of the key new ciphertexts are sealed under.
    pub fn current_key_id(&self) -> &KeyId {
        self.keyring.current_id()
    }

    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// Seals under the current key. Returns `nonce || ciphertext+tag`, with [`ISSUER_BOUND`]
    /// in front where the row binds its issuer.
    pub fn seal(&self, row: &RowBinding<'_>, field: Field, plaintext: &SecretString) -> Result<Vec<u8>, VaultError> {
        let issuer = row.binds_issuer();
        let sealed = self.seal_bytes(&row.associated_data(field, issuer), plaintext.expose_secret().as_bytes())?;
        Ok(match issuer {
            Some(_) => [ISSUER_BOUND.as_slice(), &sealed].concat(),
            None => sealed,
        })
    }

    /// Opens a ciphertext sealed under `key_id` for exactly this row and field.
    pub fn open(
        &self,
        key_id: &str,
        row: &RowBinding<'_>,
        field: Field,
        sealed: &[u8],
    ) -> Result<SecretString, VaultError> {
        // Marked: opened with the row's issuer (a row without one cannot open it); else in
        // the format it was sealed in before issuers were bound.
        let mut pt = match sealed.strip_prefix(ISSUER_BOUND.as_slice()) {
            Some(rest) => {
                let issuer = row.binds_issuer().ok_or(VaultError::Open)?;
                self.open_bytes(key_id, &row.associated_data(field, Some(issuer)), rest)?
            }
            None => self.open_bytes(key_id, &row.associated_data(field, None), sealed)?,
        };
        let s = String::from_utf8(std::mem::take(&mut *pt)).map_err(|e| {
            let mut bytes = e.into_bytes();
            zeroize::Zeroize::zeroize(&mut bytes);
            VaultError::Encoding
        })?;
        Ok(SecretString::from(s))
    }

    /// Seals a short-lived secret that is not a token (a PKCE verifier, a nonce), bound to
    /// `purpose` and to the bytes that identify its record (e.g. the state hash).
    pub fn seal_aux(&self, purpose: &str, binding: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, VaultError> {
        self.seal_bytes(&aux_ad(purpose, binding), plaintext)
    }

    pub fn open_aux(
        &self,
        key_id: &str,
        purpose: &str,
        binding: &[u8],
        sealed: &[u8],
    ) -> Result<zeroize::Zeroizing<Vec<u8>>, VaultError> {
        self.open_bytes(key_id, &aux_ad(purpose, binding), sealed)
    }

    fn seal_bytes(&self, ad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, VaultError> {
        let cipher = self.keyring.current_cipher();
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let ct = cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plaintext, aad: ad })
            .map_err(|_| VaultError::Seal)?;
        let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    fn open_bytes(&self, key_id: &str, ad: &[u8], sealed: &[u8]) -> Result<zeroize::Zeroizing<Vec<u8>>, VaultError> {
        let cipher = self.keyring.cipher(key_id).ok_or_else(|| VaultError::UnknownKey(key_id.to_owned()))?;
        if sealed.len() < NONCE_LEN + 16 {
            return Err(VaultError::Open);
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        let pt =
            cipher.decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: ad }).map_err(|_| VaultError::Open)?;
        Ok(zeroize::Zeroizing::new(pt))
    }
}

fn aux_ad(purpose: &str, binding: &[u8]) -> Vec<u8> {
    let mut ad = b"mcp-connect/aux/v1".to_vec();
    for p in [purpose.as_bytes(), binding] {
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

    fn vault(spec: &str) -> Vault {
        Vault::new(Keyring::parse(spec).unwrap())
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
    fn a_sealed_token_opens_for_its_own_row_and_field() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.seal(&row, Field::AccessToken, &SecretString::from("gho_secret")).unwrap();
        assert!(!ct.windows(10).any(|w| w == b"gho_secret"));
        let pt = v.open("k1", &row, Field::AccessToken, &ct).unwrap();
        assert_eq!(pt.expose_secret(), "gho_secret");
    }

    #[test]
    fn a_ciphertext_does_not_open_for_another_row_or_field() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        let other_conn = RowBinding { connection: ConnectionId::generate(), ..row };
        assert!(matches!(v.open("k1", &other_conn, Field::AccessToken, &ct), Err(VaultError::Open)));
        let bob = Subject::parse("bob").unwrap();
        let other_subject = RowBinding { subject: &bob, ..row };
        assert!(matches!(v.open("k1", &other_subject, Field::AccessToken, &ct), Err(VaultError::Open)));
        let other_tenant_id = TenantId::parse("evil").unwrap();
        let other_tenant = RowBinding { tenant: &other_tenant_id, ..row };
        assert!(matches!(v.open("k1", &other_tenant, Field::AccessToken, &ct), Err(VaultError::Open)));
        let gl = ProviderId::parse("gitlab").unwrap();
        let other_provider = RowBinding { provider: &gl, ..row };
        assert!(matches!(v.open("k1", &other_provider, Field::AccessToken, &ct), Err(VaultError::Open)));
        assert!(matches!(v.open("k1", &row, Field::RefreshToken, &ct), Err(VaultError::Open)));
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
        let older = v.seal(&at(Some(2)), Field::RefreshToken, &SecretString::from("rotated-out")).unwrap();
        let legacy = v.seal(&at(None), Field::RefreshToken, &SecretString::from("before generations")).unwrap();
        assert_eq!(v.open("k1", &at(Some(2)), Field::RefreshToken, &older).unwrap().expose_secret(), "rotated-out");
        // Put back into the row after a later write (generation 3): it does not open.
        for g in [Some(3), Some(1), Some(i64::MAX), None] {
            assert!(matches!(v.open("k1", &at(g), Field::RefreshToken, &older), Err(VaultError::Open)), "{g:?}");
        }
        // A row sealed before generations opens only as such.
        assert_eq!(
            v.open("k1", &at(None), Field::RefreshToken, &legacy).unwrap().expose_secret(),
            "before generations"
        );
        for g in [Some(0), Some(1)] {
            assert!(matches!(v.open("k1", &at(g), Field::RefreshToken, &legacy), Err(VaultError::Open)), "{g:?}");
        }
    }

    #[test]
    fn a_ciphertext_opens_only_for_the_issuer_it_was_sealed_for_and_its_mark_cannot_be_stripped() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        assert!(is_issuer_bound(&ct));
        assert_eq!(v.open("k1", &row, Field::AccessToken, &ct).unwrap().expose_secret(), "tok");
        // Another IdP's namesake, or a row whose issuer was taken away.
        for issuer in [Some("https://other-idp.example"), Some("https://idp.example/"), None] {
            let other = RowBinding { issuer, ..row };
            assert!(matches!(v.open("k1", &other, Field::AccessToken, &ct), Err(VaultError::Open)), "{issuer:?}");
        }
        // Without its mark it is no ciphertext of the second format either.
        let stripped = &ct[ISSUER_BOUND.len()..];
        for issuer in [Some("https://idp.example"), None] {
            let as_v2 = RowBinding { issuer, ..row };
            assert!(v.open("k1", &as_v2, Field::AccessToken, stripped).is_err(), "{issuer:?}");
        }
        // A row sealed before issuers were bound still opens, whatever issuer it names now.
        let before = RowBinding { issuer: None, ..row };
        let old = v.seal(&before, Field::AccessToken, &SecretString::from("old")).unwrap();
        assert!(!is_issuer_bound(&old));
        assert_eq!(v.open("k1", &row, Field::AccessToken, &old).unwrap().expose_secret(), "old");
    }

    #[test]
    fn a_tampered_ciphertext_does_not_open() {
        let (t, s, p) = ids();
        let v = vault(K1);
        let row = row_of(&t, &s, &p);
        let ct = v.seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        for i in 0..ct.len() {
            let mut bad = ct.clone();
            bad[i] ^= 0x01;
            assert!(v.open("k1", &row, Field::AccessToken, &bad).is_err(), "bit flip at {i} opened");
        }
        assert!(v.open("k1", &row, Field::AccessToken, &ct[..10]).is_err());
    }

    #[test]
    fn old_keys_open_and_the_current_key_seals() {
        let (t, s, p) = ids();
        let row = row_of(&t, &s, &p);
        let old = vault(K1);
        let ct = old.seal(&row, Field::RefreshToken, &SecretString::from("r1")).unwrap();
        let rotated = vault(&format!("{K2},{K1}"));
        assert_eq!(rotated.current_key_id().as_str(), "k2");
        assert_eq!(rotated.open("k1", &row, Field::RefreshToken, &ct).unwrap().expose_secret(), "r1");
        let ct2 = rotated.seal(&row, Field::RefreshToken, &SecretString::from("r2")).unwrap();
        assert!(rotated.open("k1", &row, Field::RefreshToken, &ct2).is_err());
        assert_eq!(rotated.open("k2", &row, Field::RefreshToken, &ct2).unwrap().expose_secret(), "r2");
    }

    #[test]
    fn aux_secrets_open_only_for_their_purpose_and_binding() {
        let v = vault(K1);
        let ct = v.seal_aux("oauth_state", b"hash-1", b"verifier").unwrap();
        assert_eq!(&*v.open_aux("k1", "oauth_state", b"hash-1", &ct).unwrap(), b"verifier");
        assert!(v.open_aux("k1", "oauth_state", b"hash-2", &ct).is_err());
        assert!(v.open_aux("k1", "login_state", b"hash-1", &ct).is_err());
    }

    #[test]
    fn an_unknown_key_id_is_an_error_not_a_guess() {
        let (t, s, p) = ids();
        let row = row_of(&t, &s, &p);
        let v = vault(K1);
        let ct = v.seal(&row, Field::AccessToken, &SecretString::from("tok")).unwrap();
        assert!(matches!(v.open("k9", &row, Field::AccessToken, &ct), Err(VaultError::UnknownKey(_))));
    }
}
