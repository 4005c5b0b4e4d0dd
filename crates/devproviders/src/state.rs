//! The state every handler shares, and the minting of tokens, which the HTTP handlers and the
//! [`crate::DevProvider::issue_grant`] helper both need.

use crate::config::{ClientRegistration, DevProviderConfig, Role};
use crate::crypto::{random_token, token_hash};
use crate::grants::{GrantId, GrantStore};
use crate::keys::{SignError, Signing, SigningKeys};
use crate::stats::Stats;
use crate::switches::{IdTokenAlg, SwitchValues, Switches};
use serde_json::json;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use time::OffsetDateTime;

/// Lifetime of an ID token (OIDC Core §2 leaves it to the provider; five minutes is common).
const ID_TOKEN_TTL: time::Duration = time::Duration::minutes(5);

pub(crate) struct ProviderState {
    pub issuer: String,
    pub display_name: String,
    pub role: Role,
    pub switches: Switches,
    pub keys: SigningKeys,
    access_token_ttl: Duration,
    jwt_access_token_audience: Option<String>,
    extra_access_token_audiences: Vec<String>,
    clients: Mutex<Vec<ClientRegistration>>,
    stats: Mutex<Stats>,
    grants: Mutex<GrantStore>,
}

/// Nothing panics while these locks are held, so a poisoned lock still guards whole values.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An ID token's inputs that come from the grant.
pub(crate) struct IdTokenSubject<'a> {
    pub client_id: &'a str,
    /// The key of an HS256 ID token (the tampering switch).
    pub client_secret: &'a str,
    pub username: &'a str,
    pub nonce: Option<&'a str>,
    pub auth_time: OffsetDateTime,
}

impl ProviderState {
    pub(crate) fn new(config: DevProviderConfig, issuer: String, keys: SigningKeys) -> Self {
        Self {
            issuer,
            display_name: config.display_name,
            role: config.role,
            switches: Switches::default(),
            keys,
            access_token_ttl: config.access_token_ttl,
            jwt_access_token_audience: config.jwt_access_token_audience,
            extra_access_token_audiences: config.extra_access_token_audiences,
            clients: Mutex::new(config.clients),
            stats: Mutex::new(Stats::default()),
            grants: Mutex::new(GrantStore::default()),
        }
    }

    pub(crate) fn client(&self, client_id: &str) -> Option<ClientRegistration> {
        lock(&self.clients).iter().find(|c| c.client_id == client_id).cloned()
    }

    /// A registration with a known id replaces the old one, so a test can change redirect URIs.
    pub(crate) fn add_client(&self, client: ClientRegistration) {
        let mut clients = lock(&self.clients);
        clients.retain(|c| c.client_id != client.client_id);
        clients.push(client);
    }

    pub(crate) fn record(&self, update: impl FnOnce(&mut Stats)) {
        update(&mut lock(&self.stats));
    }

    pub(crate) fn stats(&self) -> Stats {
        lock(&self.stats).clone()
    }

    /// Hold the guard only within one statement: never across an `.await`.
    pub(crate) fn grants(&self) -> MutexGuard<'_, GrantStore> {
        lock(&self.grants)
    }

    /// `expires_in` of access tokens, in whole seconds.
    pub(crate) fn access_token_ttl_secs(&self) -> u64 {
        self.access_token_ttl.as_secs()
    }

    fn access_token_expiry(&self, now: OffsetDateTime) -> OffsetDateTime {
        time::Duration::try_from(self.access_token_ttl)
            .ok()
            .and_then(|ttl| now.checked_add(ttl))
            .unwrap_or(OffsetDateTime::new_utc(time::Date::MAX, time::Time::MIDNIGHT))
    }

    /// The audience a JWT access token is minted for when a client names `resource`
    /// (RFC 8707): one of the configured ones, else `None`.
    pub(crate) fn audience_for(&self, resource: &str) -> Option<&str> {
        self.jwt_access_token_audience
            .iter()
            .chain(&self.extra_access_token_audiences)
            .find(|a| a.as_str() == resource)
            .map(String::as_str)
    }

    /// An access token for `grant`: opaque, or an RFC 9068 JWT when the config asks for one.
    pub(crate) fn mint_access_token(
        &self,
        grant: GrantId,
        client_id: &str,
        username: &str,
        scope: &str,
        now: OffsetDateTime,
    ) -> Result<String, SignError> {
        self.mint_access_token_for(grant, client_id, username, scope, None, now)
    }

    /// [`Self::mint_access_token`] for `audience` (one of [`Self::audience_for`]'s) instead
    /// of the first configured one.
    pub(crate) fn mint_access_token_for(
        &self,
        grant: GrantId,
        client_id: &str,
        username: &str,
        scope: &str,
        audience: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<String, SignError> {
        let expires_at = self.access_token_expiry(now);
        let token = match audience.or(self.jwt_access_token_audience.as_deref()) {
            None => random_token(),
            Some(audience) => {
                // RFC 9068 §2.2; the random jti also makes every token distinct.
                let claims = json!({
                    "iss": self.issuer,
                    "sub": username,
                    "aud": audience,
                    "client_id": client_id,
                    "exp": expires_at.unix_timestamp(),
                    "iat": now.unix_timestamp(),
                    "jti": random_token(),
                    "scope": scope,
                });
                self.keys.sign("at+jwt", &claims, Signing::Published, None)?
            }
        };
        self.grants().add_access_token(token_hash(&token), grant, expires_at);
        Ok(token)
    }

    /// An opaque access token even when JWTs are configured: the fallback when signing fails.
    pub(crate) fn mint_opaque_access_token(&self, grant: GrantId, now: OffsetDateTime) -> String {
        let token = random_token();
        self.grants().add_access_token(token_hash(&token), grant, self.access_token_expiry(now));
        token
    }

    pub(crate) fn mint_refresh_token(&self, grant: GrantId) -> String {
        let token = random_token();
        self.grants().add_refresh_token(token_hash(&token), grant);
        token
    }

    /// OIDC Core §2 ID token, bent by the tampering switches.
    pub(crate) fn id_token(
        &self,
        subject: &IdTokenSubject<'_>,
        switches: &SwitchValues,
        now: OffsetDateTime,
    ) -> Result<String, SignError> {
        if switches.id_token_malformed {
            return Ok(random_token());
        }
        let (iat, exp) = match (switches.id_token_times, switches.id_token_expired) {
            (Some((iat, exp)), _) => (now + time::Duration::seconds(iat), now + time::Duration::seconds(exp)),
            // Well past any clock skew a client allows.
            (None, true) => (now - ID_TOKEN_TTL - time::Duration::minutes(10), now - time::Duration::minutes(10)),
            (None, false) => (now, now + ID_TOKEN_TTL),
        };
        let audience = switches.id_token_audience.as_deref().unwrap_or(subject.client_id);
        let mut claims = json!({
            "iss": switches.id_token_issuer.as_deref().unwrap_or(&self.issuer),
            "sub": subject.username,
            "aud": match &switches.id_token_extra_audience {
                Some(extra) => json!([audience, extra]),
                None => json!(audience),
            },
            "exp": exp.unix_timestamp(),
            "iat": iat.unix_timestamp(),
            "auth_time": subject.auth_time.unix_timestamp(),
        });
        if !switches.omit_id_token_azp {
            claims["azp"] = json!(switches.id_token_azp.as_deref().unwrap_or(subject.client_id));
        }
        if let Some(nonce) = switches.id_token_nonce.as_deref().or(subject.nonce) {
            claims["nonce"] = json!(nonce);
        }
        let signing = match switches.id_token_alg {
            Some(IdTokenAlg::Unsigned) => Signing::Unsigned,
            Some(IdTokenAlg::Hs256ClientSecret) => Signing::Hs256(subject.client_secret.as_bytes()),
            None if switches.id_token_wrong_key => Signing::WrongKey,
            None => Signing::Published,
        };
        self.keys.sign("JWT", &claims, signing, switches.id_token_kid.as_deref())
    }
}
