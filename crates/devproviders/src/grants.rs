//! Codes, grants and tokens in memory. A grant is the family of every access and refresh
//! token issued from one authorization (or one direct issue); killing a grant kills them all.
//! Every decision takes `now`, so the unit tests below control time.

use crate::crypto::TokenHash;
use crate::pkce;
use crate::stats::TokenKind;
use std::collections::{BTreeSet, HashMap};
use time::OffsetDateTime;

pub(crate) type GrantId = u64;

struct Grant {
    client_id: String,
    username: String,
    scope: String,
    revoked: bool,
}

/// What `/authorize` binds a code to (RFC 6749 §4.1.2, RFC 7636 §4.4).
pub(crate) struct PendingCode {
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub scope: String,
    pub nonce: Option<String>,
    pub username: String,
    pub auth_time: OffsetDateTime,
    pub expires_at: OffsetDateTime,
}

struct CodeRecord {
    pending: PendingCode,
    consumed: bool,
    /// The grant the code's one exchange created, remembered so a replay can kill it.
    grant: Option<GrantId>,
}

struct AccessRecord {
    grant: GrantId,
    expires_at: OffsetDateTime,
    revoked: bool,
}

struct RefreshRecord {
    grant: GrantId,
    /// Replaced by rotation; presenting it again is a replay.
    rotated: bool,
}

/// Why a code or refresh token was refused. All but `ScopeNotGranted` are `invalid_grant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GrantError {
    UnknownCode,
    CodeReplayed,
    CodeExpired,
    WrongClient,
    RedirectUriMismatch,
    PkceFailed,
    UnknownRefreshToken,
    RefreshTokenReplayed,
    GrantRevoked,
    ScopeNotGranted,
}

impl GrantError {
    /// RFC 6749 §5.2 error code.
    pub(crate) fn code(self) -> &'static str {
        match self {
            GrantError::ScopeNotGranted => "invalid_scope",
            _ => "invalid_grant",
        }
    }

    /// Safe to show the client: it names the rule, never a value.
    pub(crate) fn description(self) -> &'static str {
        match self {
            GrantError::UnknownCode => "unknown authorization code",
            GrantError::CodeReplayed => "authorization code already used; tokens issued from it are revoked",
            GrantError::CodeExpired => "authorization code expired",
            GrantError::WrongClient => "issued to another client",
            GrantError::RedirectUriMismatch => "redirect_uri differs from the authorization request",
            GrantError::PkceFailed => "code_verifier does not match the code_challenge",
            GrantError::UnknownRefreshToken => "unknown refresh token",
            GrantError::RefreshTokenReplayed => "refresh token already used; the grant is revoked",
            GrantError::GrantRevoked => "grant revoked",
            GrantError::ScopeNotGranted => "requested scope exceeds the granted scope",
        }
    }
}

/// A successful code exchange: the new grant and what its tokens carry.
#[derive(Debug)]
pub(crate) struct Redeemed {
    pub grant: GrantId,
    pub username: String,
    pub scope: String,
    pub nonce: Option<String>,
    pub auth_time: OffsetDateTime,
}

/// A successful refresh: the scope is the requested narrowing or the grant's own.
#[derive(Debug)]
pub(crate) struct Refreshed {
    pub grant: GrantId,
    pub username: String,
    pub scope: String,
}

/// Who a live access token speaks for.
#[derive(Debug)]
pub(crate) struct AccessInfo {
    pub username: String,
}

#[derive(Default)]
pub(crate) struct GrantStore {
    next_grant: GrantId,
    grants: HashMap<GrantId, Grant>,
    codes: HashMap<TokenHash, CodeRecord>,
    access: HashMap<TokenHash, AccessRecord>,
    refresh: HashMap<TokenHash, RefreshRecord>,
}

impl GrantStore {
    pub(crate) fn insert_code(&mut self, code: TokenHash, pending: PendingCode, now: OffsetDateTime) {
        // Spent and expired codes are only kept while a replay could still arrive.
        self.codes.retain(|_, c| c.pending.expires_at + time::Duration::minutes(10) > now);
        self.codes.insert(code, CodeRecord { pending, consumed: false, grant: None });
    }

    /// RFC 6749 §4.1.3 with RFC 7636 §4.6. The first presentation by the client the code was
    /// issued to consumes it, successful or not, so a verifier cannot be guessed twice. A
    /// second presentation revokes every token of the first exchange (RFC 6749 §4.1.2).
    pub(crate) fn redeem_code(
        &mut self,
        code: &TokenHash,
        client_id: &str,
        redirect_uri: Option<&str>,
        code_verifier: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<Redeemed, GrantError> {
        let record = self.codes.get_mut(code).ok_or(GrantError::UnknownCode)?;
        if record.pending.client_id != client_id {
            return Err(GrantError::WrongClient);
        }
        if record.consumed {
            if let Some(grant) = record.grant.and_then(|id| self.grants.get_mut(&id)) {
                grant.revoked = true;
            }
            return Err(GrantError::CodeReplayed);
        }
        record.consumed = true;
        let pending = &record.pending;
        if now >= pending.expires_at {
            return Err(GrantError::CodeExpired);
        }
        if redirect_uri != Some(pending.redirect_uri.as_str()) {
            return Err(GrantError::RedirectUriMismatch);
        }
        if !code_verifier.is_some_and(|v| pkce::verify_s256(v, &pending.code_challenge)) {
            return Err(GrantError::PkceFailed);
        }
        let grant = self.next_grant;
        self.next_grant += 1;
        self.grants.insert(
            grant,
            Grant {
                client_id: pending.client_id.clone(),
                username: pending.username.clone(),
                scope: pending.scope.clone(),
                revoked: false,
            },
        );
        record.grant = Some(grant);
        Ok(Redeemed {
            grant,
            username: pending.username.clone(),
            scope: pending.scope.clone(),
            nonce: pending.nonce.clone(),
            auth_time: pending.auth_time,
        })
    }

    /// A grant made without an authorization request (dev subject grant, test helper).
    pub(crate) fn new_grant(&mut self, client_id: &str, username: &str, scope: &str) -> GrantId {
        let grant = self.next_grant;
        self.next_grant += 1;
        self.grants.insert(
            grant,
            Grant {
                client_id: client_id.to_owned(),
                username: username.to_owned(),
                scope: scope.to_owned(),
                revoked: false,
            },
        );
        grant
    }

    pub(crate) fn add_access_token(&mut self, token: TokenHash, grant: GrantId, expires_at: OffsetDateTime) {
        self.access.insert(token, AccessRecord { grant, expires_at, revoked: false });
    }

    pub(crate) fn add_refresh_token(&mut self, token: TokenHash, grant: GrantId) {
        self.refresh.insert(token, RefreshRecord { grant, rotated: false });
    }

    /// RFC 6749 §6, with rotation and replay detection as OAuth 2.1 §4.3.1 and the OAuth
    /// security BCP §4.14.2 describe: a rotated-out token presented again kills the family.
    /// With `rotate` the presented token is retired; the caller issues the successor.
    pub(crate) fn refresh(
        &mut self,
        token: &TokenHash,
        client_id: &str,
        requested_scope: Option<&str>,
        rotate: bool,
    ) -> Result<Refreshed, GrantError> {
        let record = self.refresh.get_mut(token).ok_or(GrantError::UnknownRefreshToken)?;
        let grant = self.grants.get_mut(&record.grant).ok_or(GrantError::UnknownRefreshToken)?;
        if grant.client_id != client_id {
            return Err(GrantError::WrongClient);
        }
        if grant.revoked {
            return Err(GrantError::GrantRevoked);
        }
        if record.rotated {
            grant.revoked = true;
            return Err(GrantError::RefreshTokenReplayed);
        }
        // RFC 6749 §6: a narrower scope may be asked for; never a wider one.
        let scope = match requested_scope {
            Some(requested) => {
                let granted: BTreeSet<&str> = grant.scope.split_whitespace().collect();
                if !requested.split_whitespace().all(|s| granted.contains(s)) {
                    return Err(GrantError::ScopeNotGranted);
                }
                requested.split_whitespace().collect::<Vec<_>>().join(" ")
            }
            None => grant.scope.clone(),
        };
        if rotate {
            record.rotated = true;
        }
        Ok(Refreshed { grant: record.grant, username: grant.username.clone(), scope })
    }

    /// A live access token: known, unexpired, not revoked itself or through its grant.
    pub(crate) fn access_token(&self, token: &TokenHash, now: OffsetDateTime) -> Option<AccessInfo> {
        let record = self.access.get(token)?;
        let grant = self.grants.get(&record.grant)?;
        if record.revoked || grant.revoked || now >= record.expires_at {
            return None;
        }
        Some(AccessInfo { username: grant.username.clone() })
    }

    /// RFC 7009 §2.1: an access token is revoked alone; a refresh token takes its whole grant
    /// with it. A token of another client is left alone (the answer is the same, so the
    /// caller learns nothing about tokens it does not own).
    pub(crate) fn revoke(&mut self, token: &TokenHash, client_id: &str) -> TokenKind {
        if let Some(record) = self.access.get_mut(token) {
            if self.grants.get(&record.grant).is_some_and(|g| g.client_id == client_id) {
                record.revoked = true;
            }
            return TokenKind::Access;
        }
        if let Some(record) = self.refresh.get(token) {
            if let Some(grant) = self.grants.get_mut(&record.grant).filter(|g| g.client_id == client_id) {
                grant.revoked = true;
            }
            return TokenKind::Refresh;
        }
        TokenKind::Unknown
    }

    /// What an administrator does when a user's access is withdrawn.
    pub(crate) fn revoke_user(&mut self, username: &str) {
        for grant in self.grants.values_mut().filter(|g| g.username == username) {
            grant.revoked = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::token_hash;

    const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
    const REDIRECT: &str = "http://127.0.0.1:9/callback";

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
    }

    fn store_with_code() -> GrantStore {
        let mut store = GrantStore::default();
        store.insert_code(
            token_hash("code"),
            PendingCode {
                client_id: "app".into(),
                redirect_uri: REDIRECT.into(),
                code_challenge: CHALLENGE.into(),
                scope: "openid repo".into(),
                nonce: Some("n-1".into()),
                username: "alice".into(),
                auth_time: t0(),
                expires_at: t0() + time::Duration::seconds(60),
            },
            t0(),
        );
        store
    }

    fn redeem(store: &mut GrantStore, now: OffsetDateTime) -> Result<Redeemed, GrantError> {
        store.redeem_code(&token_hash("code"), "app", Some(REDIRECT), Some(VERIFIER), now)
    }

    #[test]
    fn a_code_redeems_once_with_the_right_verifier() {
        let mut store = store_with_code();
        let redeemed = redeem(&mut store, t0()).unwrap();
        assert_eq!(redeemed.username, "alice");
        assert_eq!(redeemed.nonce.as_deref(), Some("n-1"));
    }

    #[test]
    fn a_replayed_code_is_refused_and_revokes_the_first_exchanges_tokens() {
        let mut store = store_with_code();
        let redeemed = redeem(&mut store, t0()).unwrap();
        store.add_access_token(token_hash("at"), redeemed.grant, t0() + time::Duration::hours(1));
        store.add_refresh_token(token_hash("rt"), redeemed.grant);
        assert!(store.access_token(&token_hash("at"), t0()).is_some());

        assert_eq!(redeem(&mut store, t0()).unwrap_err(), GrantError::CodeReplayed);
        assert!(store.access_token(&token_hash("at"), t0()).is_none());
        assert_eq!(store.refresh(&token_hash("rt"), "app", None, true).unwrap_err(), GrantError::GrantRevoked);
    }

    #[test]
    fn an_expired_code_is_refused() {
        let mut store = store_with_code();
        assert_eq!(redeem(&mut store, t0() + time::Duration::seconds(60)).unwrap_err(), GrantError::CodeExpired);
    }

    #[test]
    fn a_code_presented_by_another_client_is_refused_and_stays_usable_by_its_owner() {
        let mut store = store_with_code();
        let err = store.redeem_code(&token_hash("code"), "other", Some(REDIRECT), Some(VERIFIER), t0()).unwrap_err();
        assert_eq!(err, GrantError::WrongClient);
        assert!(redeem(&mut store, t0()).is_ok());
    }

    #[test]
    fn a_different_redirect_uri_is_refused() {
        let mut store = store_with_code();
        let err = store.redeem_code(&token_hash("code"), "app", Some("http://127.0.0.1:9/cb2"), Some(VERIFIER), t0());
        assert_eq!(err.unwrap_err(), GrantError::RedirectUriMismatch);
        let mut store = store_with_code();
        let err = store.redeem_code(&token_hash("code"), "app", None, Some(VERIFIER), t0());
        assert_eq!(err.unwrap_err(), GrantError::RedirectUriMismatch);
    }

    #[test]
    fn a_wrong_or_missing_verifier_is_refused_and_consumes_the_code() {
        let mut store = store_with_code();
        let wrong = "x".repeat(43);
        let err = store.redeem_code(&token_hash("code"), "app", Some(REDIRECT), Some(&wrong), t0());
        assert_eq!(err.unwrap_err(), GrantError::PkceFailed);
        assert_eq!(redeem(&mut store, t0()).unwrap_err(), GrantError::CodeReplayed);

        let mut store = store_with_code();
        let err = store.redeem_code(&token_hash("code"), "app", Some(REDIRECT), None, t0());
        assert_eq!(err.unwrap_err(), GrantError::PkceFailed);
    }

    #[test]
    fn an_unknown_code_is_refused() {
        let mut store = store_with_code();
        let err = store.redeem_code(&token_hash("nope"), "app", Some(REDIRECT), Some(VERIFIER), t0());
        assert_eq!(err.unwrap_err(), GrantError::UnknownCode);
    }

    #[test]
    fn a_rotated_out_refresh_token_presented_again_kills_the_family() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo");
        store.add_refresh_token(token_hash("rt1"), grant);
        store.add_access_token(token_hash("at1"), grant, t0() + time::Duration::hours(1));
        store.refresh(&token_hash("rt1"), "app", None, true).unwrap();
        store.add_refresh_token(token_hash("rt2"), grant);

        let err = store.refresh(&token_hash("rt1"), "app", None, true).unwrap_err();
        assert_eq!(err, GrantError::RefreshTokenReplayed);
        assert_eq!(store.refresh(&token_hash("rt2"), "app", None, true).unwrap_err(), GrantError::GrantRevoked);
        assert!(store.access_token(&token_hash("at1"), t0()).is_none());
    }

    #[test]
    fn without_rotation_the_same_refresh_token_keeps_working() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo");
        store.add_refresh_token(token_hash("rt"), grant);
        for _ in 0..3 {
            store.refresh(&token_hash("rt"), "app", None, false).unwrap();
        }
    }

    #[test]
    fn a_refresh_may_narrow_the_scope_but_not_widen_it() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo user");
        store.add_refresh_token(token_hash("rt"), grant);
        let err = store.refresh(&token_hash("rt"), "app", Some("repo admin"), true).unwrap_err();
        assert_eq!(err, GrantError::ScopeNotGranted);
        let narrowed = store.refresh(&token_hash("rt"), "app", Some("user"), true).unwrap();
        assert_eq!(narrowed.scope, "user");
    }

    #[test]
    fn a_refresh_token_of_another_client_is_refused() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo");
        store.add_refresh_token(token_hash("rt"), grant);
        assert_eq!(store.refresh(&token_hash("rt"), "other", None, true).unwrap_err(), GrantError::WrongClient);
    }

    #[test]
    fn an_access_token_expires_at_its_deadline() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo");
        store.add_access_token(token_hash("at"), grant, t0() + time::Duration::seconds(10));
        assert!(store.access_token(&token_hash("at"), t0() + time::Duration::seconds(9)).is_some());
        assert!(store.access_token(&token_hash("at"), t0() + time::Duration::seconds(10)).is_none());
    }

    #[test]
    fn revoking_an_access_token_leaves_the_refresh_token_alive() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo");
        store.add_access_token(token_hash("at"), grant, t0() + time::Duration::hours(1));
        store.add_refresh_token(token_hash("rt"), grant);
        assert_eq!(store.revoke(&token_hash("at"), "app"), TokenKind::Access);
        assert!(store.access_token(&token_hash("at"), t0()).is_none());
        assert!(store.refresh(&token_hash("rt"), "app", None, true).is_ok());
    }

    #[test]
    fn revoking_a_refresh_token_kills_its_grant() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo");
        store.add_access_token(token_hash("at"), grant, t0() + time::Duration::hours(1));
        store.add_refresh_token(token_hash("rt"), grant);
        assert_eq!(store.revoke(&token_hash("rt"), "app"), TokenKind::Refresh);
        assert!(store.access_token(&token_hash("at"), t0()).is_none());
    }

    #[test]
    fn another_clients_revocation_changes_nothing() {
        let mut store = GrantStore::default();
        let grant = store.new_grant("app", "alice", "repo");
        store.add_access_token(token_hash("at"), grant, t0() + time::Duration::hours(1));
        store.add_refresh_token(token_hash("rt"), grant);
        assert_eq!(store.revoke(&token_hash("rt"), "other"), TokenKind::Refresh);
        assert_eq!(store.revoke(&token_hash("at"), "other"), TokenKind::Access);
        assert!(store.access_token(&token_hash("at"), t0()).is_some());
        assert_eq!(store.revoke(&token_hash("zz"), "app"), TokenKind::Unknown);
    }

    #[test]
    fn revoking_a_user_kills_all_their_grants_and_no_one_elses() {
        let mut store = GrantStore::default();
        let a = store.new_grant("app", "alice", "repo");
        let b = store.new_grant("app", "bob", "repo");
        store.add_access_token(token_hash("a"), a, t0() + time::Duration::hours(1));
        store.add_access_token(token_hash("b"), b, t0() + time::Duration::hours(1));
        store.revoke_user("alice");
        assert!(store.access_token(&token_hash("a"), t0()).is_none());
        assert!(store.access_token(&token_hash("b"), t0()).is_some());
    }
}
