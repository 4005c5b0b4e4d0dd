//! A cached connection: the row as stored (ciphertext, opened per request), packed into one
//! allocation for its key, ciphertext and account, with the parts many rows share (vault
//! key id, token type, scopes, the subject's issuer) kept once as a [`Shape`].

use super::SEP;
use crate::domain::{ConnectionFacts, ConnectionId, ConnectionKey, ConnectionStatus, Scopes};
use crate::store::connections::ConnectionRow;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use time::OffsetDateTime;

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

pub(super) const NONE: i64 = i64::MIN;

pub(super) fn to_us(t: Option<OffsetDateTime>) -> i64 {
    t.and_then(|t| i64::try_from(t.unix_timestamp_nanos() / 1000).ok()).unwrap_or(NONE)
}

pub(super) fn from_us(us: i64) -> Option<OffsetDateTime> {
    (us != NONE).then(|| OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).ok()).flatten()
}

pub(super) const HAS_REFRESH: u8 = 1;
pub(super) const HAS_ACCOUNT_ID: u8 = 2;
pub(super) const HAS_LOGIN: u8 = 4;

/// One cached connection, packed.
pub(super) struct Entry {
    /// `tenant␟subject␟provider`, then the access-token ciphertext, the account id and
    /// the account login, back to back.
    pub(super) data: Box<[u8]>,
    pub(super) key_len: u16,
    pub(super) ct_len: u16,
    pub(super) account_id_len: u16,
    pub(super) flags: u8,
    /// The row version (`xmin`, a 32-bit transaction id) the content was read at.
    pub(super) xmin: u32,
    /// When it was last asked for, in seconds since the change watch began.
    pub(super) used_s: AtomicU32,
    pub(super) id: ConnectionId,
    pub(super) shape: Arc<Shape>,
    /// Unix time in microseconds (PostgreSQL's precision), [`NONE`] for none.
    pub(super) access_expires_us: i64,
    pub(super) refreshed_us: i64,
    /// The seal generation, [`NONE`] for none.
    pub(super) seal_version: i64,
    /// When the read of this content began, in ms since the change watch began (later
    /// confirmations are the watch's, one for all entries).
    pub(super) confirmed_ms: u64,
}

impl Entry {
    pub(super) fn pack(
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
        Some(Self {
            data: data.into_boxed_slice(),
            // Rows too large to pack are simply not cached.
            key_len: key_len.try_into().ok()?,
            ct_len: c.access_token_ct.len().try_into().ok()?,
            account_id_len: account_id.len().try_into().ok()?,
            flags,
            // Rows changed in memory (0) or out of range are never cached.
            xmin: u32::try_from(c.xmin).ok().filter(|x| *x != 0)?,
            used_s: AtomicU32::new(used_s),
            id: c.id,
            shape,
            access_expires_us: to_us(c.access_expires_at),
            refreshed_us: to_us(c.refreshed_at),
            seal_version: c.seal_version.unwrap_or(NONE),
            confirmed_ms,
        })
    }

    pub(super) fn key(&self) -> &[u8] {
        &self.data[..self.key_len as usize]
    }

    pub(super) fn is_key(&self, key: &ConnectionKey) -> bool {
        let (t, s, p) = (key.tenant.as_str(), key.subject.as_str(), key.provider.as_str());
        let k = self.key();
        k.len() == t.len() + s.len() + p.len() + 2
            && k.starts_with(t.as_bytes())
            && k[t.len()] == SEP
            && k[t.len() + 1..].starts_with(s.as_bytes())
            && k[t.len() + 1 + s.len()] == SEP
            && k.ends_with(p.as_bytes())
    }

    pub(super) fn ct(&self) -> &[u8] {
        let start = self.key_len as usize;
        &self.data[start..start + self.ct_len as usize]
    }

    pub(super) fn str_at(&self, from: usize, to: usize) -> &str {
        // Packed from `&str`s at these boundaries.
        std::str::from_utf8(&self.data[from..to]).unwrap_or_default()
    }

    pub(super) fn account_id(&self) -> Option<&str> {
        let from = self.key_len as usize + self.ct_len as usize;
        (self.flags & HAS_ACCOUNT_ID != 0).then(|| self.str_at(from, from + self.account_id_len as usize))
    }

    pub(super) fn account_login(&self) -> Option<&str> {
        let from = self.key_len as usize + self.ct_len as usize + self.account_id_len as usize;
        (self.flags & HAS_LOGIN != 0).then(|| self.str_at(from, self.data.len()))
    }

    pub(super) fn unpack(&self) -> CachedConnection {
        CachedConnection {
            id: self.id,
            xmin: i64::from(self.xmin),
            shape: self.shape.clone(),
            access_token_ct: self.ct().into(),
            has_refresh_token: self.flags & HAS_REFRESH != 0,
            account_id: self.account_id().map(Into::into),
            account_login: self.account_login().map(Into::into),
            access_expires_at: from_us(self.access_expires_us),
            refreshed_at: from_us(self.refreshed_us),
            seal_version: (self.seal_version != NONE).then_some(self.seal_version),
        }
    }
}
