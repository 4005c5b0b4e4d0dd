//! A connection row packed for memory: its key, ciphertext and account back to back after
//! a fixed header, in one reference-counted allocation (a `triomphe::ThinArc`: one pointer,
//! no weak count), with the parts many rows share (vault key id, token type, scopes, the
//! subject's issuer) kept once as a [`Shape`]. The lookup cache holds these; a hand-out
//! audit row of a connection served from the cache holds one more reference, so that the
//! row names the connection's tenant, subject, provider and issuer when it is written
//! without reading the connection's row again (`store::audit::insert_handouts`).

use super::ConnectionRow;
use crate::domain::{ConnectionFacts, ConnectionId, ConnectionKey, ConnectionStatus, Scopes};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use time::OffsetDateTime;

/// Between the parts of a packed key (`tenant␟subject␟provider`): no id may contain it.
pub const SEP: u8 = 0x1f;

/// What many connection rows have in common: one copy is shared by all of them.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub key_id: Box<str>,
    pub token_type: Box<str>,
    /// As granted.
    pub scopes: Scopes,
    /// The issuer of the IdP whose subject holds the connection.
    pub issuer: Box<str>,
}

/// What a hand-out needs from a connection row: ciphertext, never a plaintext token.
#[derive(Debug, Clone)]
pub struct CachedConnection {
    pub id: ConnectionId,
    /// The row version read with it (see [`ConnectionRow::xmin`]): 0 marks a row changed
    /// in memory, which is never cached. (Entries are confirmed by the change log, not by
    /// this version.)
    pub xmin: i64,
    pub shape: Arc<Shape>,
    pub access_token_ct: Box<[u8]>,
    pub has_refresh_token: bool,
    pub account_id: Option<Box<str>>,
    pub account_login: Option<Box<str>>,
    pub access_expires_at: Option<OffsetDateTime>,
    pub refreshed_at: Option<OffsetDateTime>,
    /// The seal generation of the ciphertext (see `vault`).
    pub seal_version: Option<i64>,
    /// The cache's entry this was read from (`None`: read from the database): the hand-out
    /// audit names the connection from it.
    pub packed: Option<PackedConnection>,
}

impl CachedConnection {
    /// Only active rows with a sealed access token and a known issuer are worth caching.
    pub fn of(row: &ConnectionRow) -> Option<Self> {
        if row.status != ConnectionStatus::Active {
            return None;
        }
        Some(Self {
            id: row.id,
            xmin: row.xmin,
            shape: Arc::new(Shape {
                key_id: row.key_id.as_deref()?.into(),
                token_type: row.token_type.as_str().into(),
                scopes: row.scopes.clone(),
                issuer: row.issuer.as_deref()?.into(),
            }),
            access_token_ct: row.access_token_ct.as_deref()?.into(),
            has_refresh_token: row.refresh_token_ct.is_some(),
            account_id: row.account_id.as_deref().map(Into::into),
            account_login: row.account_login.as_deref().map(Into::into),
            access_expires_at: row.access_expires_at,
            refreshed_at: row.refreshed_at,
            seal_version: row.seal_version,
            packed: None,
        })
    }

    /// What the hand-out decides on (`domain::check_handout`): a cached row is active.
    pub fn facts(&self) -> ConnectionFacts<'_> {
        ConnectionFacts {
            status: ConnectionStatus::Active,
            issuer: Some(&self.shape.issuer),
            scopes: &self.shape.scopes,
            access_expires_at: self.access_expires_at,
            has_refresh_token: self.has_refresh_token,
            refreshed_at: self.refreshed_at,
        }
    }
}

const NONE: i64 = i64::MIN;

fn to_us(t: Option<OffsetDateTime>) -> i64 {
    t.and_then(|t| i64::try_from(t.unix_timestamp_nanos() / 1000).ok()).unwrap_or(NONE)
}

fn from_us(us: i64) -> Option<OffsetDateTime> {
    (us != NONE).then(|| OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).ok()).flatten()
}

const HAS_REFRESH: u8 = 1;
const HAS_ACCOUNT_ID: u8 = 2;
const HAS_LOGIN: u8 = 4;

/// A packed connection's fixed part; its bytes follow it in the same allocation:
/// `tenant␟subject␟provider`, then the access-token ciphertext, the account id and the
/// account login, back to back.
pub struct Header {
    key_len: u16,
    ct_len: u16,
    account_id_len: u16,
    flags: u8,
    /// The row version (`xmin`, a 32-bit transaction id) the content was read at.
    xmin: u32,
    /// When it was last asked for, in seconds since the change watch began (the cache's).
    pub used_s: AtomicU32,
    id: ConnectionId,
    shape: Arc<Shape>,
    /// Unix time in microseconds (PostgreSQL's precision), [`NONE`] for none.
    access_expires_us: i64,
    refreshed_us: i64,
    /// The seal generation, [`NONE`] for none.
    seal_version: i64,
    /// When the read of this content began, in ms since the change watch began (later
    /// confirmations are the watch's, one for all entries).
    pub confirmed_ms: u64,
}

/// One connection, packed (see the module). Cloning it takes a reference, not a copy.
#[derive(Clone)]
pub struct PackedConnection(triomphe::ThinArc<Header, u8>);

impl std::fmt::Debug for PackedConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedConnection").field("id", &self.header().id).finish_non_exhaustive()
    }
}

/// The same connection, held by the same person (its id, key and issuer); the contents
/// (token, version) may differ.
impl PartialEq for PackedConnection {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0.ptr(), other.0.ptr()) || (self.id() == other.id() && self.holder() == other.holder())
    }
}

impl Eq for PackedConnection {}

impl PackedConnection {
    /// `None`: a row too large to pack (parts over 64 KiB), or one changed in memory
    /// (`xmin` 0): such rows are simply not cached.
    pub fn pack(
        key: &ConnectionKey,
        c: &CachedConnection,
        shape: Arc<Shape>,
        confirmed_ms: u64,
        used_s: u32,
    ) -> Option<Self> {
        let (t, s, p) = (key.tenant.as_str(), key.subject.as_str(), key.provider.as_str());
        let key_len = t.len() + s.len() + p.len() + 2;
        let account_id = c.account_id.as_deref().unwrap_or("");
        let login = c.account_login.as_deref().unwrap_or("");
        let mut data = Vec::with_capacity(key_len + c.access_token_ct.len() + account_id.len() + login.len());
        for (i, part) in [t, s, p].into_iter().enumerate() {
            if i > 0 {
                data.push(SEP);
            }
            data.extend_from_slice(part.as_bytes());
        }
        data.extend_from_slice(&c.access_token_ct);
        data.extend_from_slice(account_id.as_bytes());
        data.extend_from_slice(login.as_bytes());
        let mut flags = 0;
        for (set, bit) in [
            (c.has_refresh_token, HAS_REFRESH),
            (c.account_id.is_some(), HAS_ACCOUNT_ID),
            (c.account_login.is_some(), HAS_LOGIN),
        ] {
            if set {
                flags |= bit;
            }
        }
        let header = Header {
            key_len: key_len.try_into().ok()?,
            ct_len: c.access_token_ct.len().try_into().ok()?,
            account_id_len: account_id.len().try_into().ok()?,
            flags,
            xmin: u32::try_from(c.xmin).ok().filter(|x| *x != 0)?,
            used_s: AtomicU32::new(used_s),
            id: c.id,
            shape,
            access_expires_us: to_us(c.access_expires_at),
            refreshed_us: to_us(c.refreshed_at),
            seal_version: c.seal_version.unwrap_or(NONE),
            confirmed_ms,
        };
        Some(Self(triomphe::ThinArc::from_header_and_slice(header, &data)))
    }

    pub fn header(&self) -> &Header {
        &self.0.header.header
    }

    fn data(&self) -> &[u8] {
        &self.0.slice
    }

    pub fn id(&self) -> ConnectionId {
        self.header().id
    }

    /// `tenant␟subject␟provider`.
    pub fn key(&self) -> &[u8] {
        &self.data()[..self.header().key_len as usize]
    }

    pub fn is_key(&self, key: &ConnectionKey) -> bool {
        let (t, s, p) = (key.tenant.as_str(), key.subject.as_str(), key.provider.as_str());
        let k = self.key();
        k.len() == t.len() + s.len() + p.len() + 2
            && k.starts_with(t.as_bytes())
            && k[t.len()] == SEP
            && k[t.len() + 1..].starts_with(s.as_bytes())
            && k[t.len() + 1 + s.len()] == SEP
            && k.ends_with(p.as_bytes())
    }

    /// Who holds the connection, as the audit trail names it: tenant, subject, provider
    /// and the subject's issuer (`None` only if the packed key were not three parts).
    pub fn holder(&self) -> Option<(&str, &str, &str, &str)> {
        let mut parts = self.key().splitn(3, |b| *b == SEP).map(std::str::from_utf8);
        let (t, s, p) = (parts.next()?.ok()?, parts.next()?.ok()?, parts.next()?.ok()?);
        Some((t, s, p, &self.header().shape.issuer))
    }

    /// The bytes its allocation takes (the count, the header and the length, the bytes).
    pub fn footprint(&self) -> usize {
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<Header>() + self.data().len()
    }

    fn ct(&self) -> &[u8] {
        let start = self.header().key_len as usize;
        &self.data()[start..start + self.header().ct_len as usize]
    }

    fn str_at(&self, from: usize, to: usize) -> &str {
        // Packed from `&str`s at these boundaries.
        std::str::from_utf8(&self.data()[from..to]).unwrap_or_default()
    }

    fn account_id(&self) -> Option<&str> {
        let h = self.header();
        let from = h.key_len as usize + h.ct_len as usize;
        (h.flags & HAS_ACCOUNT_ID != 0).then(|| self.str_at(from, from + h.account_id_len as usize))
    }

    fn account_login(&self) -> Option<&str> {
        let h = self.header();
        let from = h.key_len as usize + h.ct_len as usize + h.account_id_len as usize;
        (h.flags & HAS_LOGIN != 0).then(|| self.str_at(from, self.data().len()))
    }

    pub fn unpack(&self) -> CachedConnection {
        let h = self.header();
        CachedConnection {
            id: h.id,
            xmin: i64::from(h.xmin),
            shape: h.shape.clone(),
            access_token_ct: self.ct().into(),
            has_refresh_token: h.flags & HAS_REFRESH != 0,
            account_id: self.account_id().map(Into::into),
            account_login: self.account_login().map(Into::into),
            access_expires_at: from_us(h.access_expires_us),
            refreshed_at: from_us(h.refreshed_us),
            seal_version: (h.seal_version != NONE).then_some(h.seal_version),
            packed: Some(self.clone()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{CachedConnection, PackedConnection, Shape};
    use crate::domain::{ConnectionId, ConnectionKey, ProviderId, Scopes, Subject, TenantId};
    use std::sync::Arc;

    /// A connection of `subject` at tenant `acme` and provider `github`, packed.
    pub(crate) fn packed(subject: &str, login: Option<&str>) -> (CachedConnection, PackedConnection) {
        packed_as(ConnectionId::generate(), subject, "https://idp.example", login)
    }

    /// [`packed`] with its id and the subject's issuer.
    pub(crate) fn packed_as(
        id: ConnectionId,
        subject: &str,
        issuer: &str,
        login: Option<&str>,
    ) -> (CachedConnection, PackedConnection) {
        let key = ConnectionKey {
            tenant: TenantId::parse("acme").unwrap(),
            subject: Subject::parse(subject).unwrap(),
            provider: ProviderId::parse("github").unwrap(),
        };
        let shape = Arc::new(Shape {
            key_id: "k1".into(),
            token_type: "Bearer".into(),
            scopes: Scopes::parse(&["read"]).unwrap(),
            issuer: issuer.into(),
        });
        let c = CachedConnection {
            id,
            xmin: 42,
            shape: shape.clone(),
            access_token_ct: vec![7u8; 90].into(),
            has_refresh_token: true,
            account_id: login.map(|_| "4711".into()),
            account_login: login.map(Into::into),
            access_expires_at: Some(time::OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap()),
            refreshed_at: None,
            seal_version: Some(3),
            packed: None,
        };
        let p = PackedConnection::pack(&key, &c, shape, 9, 1).unwrap();
        (c, p)
    }

    #[test]
    fn a_packed_connection_unpacks_as_it_was_and_names_its_holder() {
        for login in [None, Some("octo")] {
            let (c, p) = packed("o'brien+\u{e9}@example.com", login);
            let back = p.unpack();
            assert_eq!(back.id, c.id);
            assert_eq!((back.xmin, back.has_refresh_token, back.seal_version), (42, true, Some(3)));
            assert_eq!(back.access_token_ct, c.access_token_ct);
            assert_eq!((back.account_id, back.account_login), (c.account_id.clone(), c.account_login.clone()));
            assert_eq!((back.access_expires_at, back.refreshed_at), (c.access_expires_at, None));
            assert_eq!(back.packed.as_ref(), Some(&p), "a cached read keeps its entry");
            assert_eq!(p.holder(), Some(("acme", "o'brien+\u{e9}@example.com", "github", "https://idp.example")));
            assert!(p.footprint() > 90 + 24, "the header and the bytes");
            // Another allocation of the same person's connection (refreshed: other bytes)
            // is the same; another issuer (re-granted through another IdP) is not.
            let (_, refreshed) = packed_as(c.id, "o'brien+\u{e9}@example.com", "https://idp.example", Some("x"));
            assert_eq!(refreshed, p);
            let (_, regranted) = packed_as(c.id, "o'brien+\u{e9}@example.com", "https://other.example", login);
            assert_ne!(regranted, p);
        }
    }
}
