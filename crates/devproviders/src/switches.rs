//! Switches that make a running provider misbehave the way real providers sometimes do, so
//! the service's defences can be tested. Defaults describe a well-behaved provider.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What goes into `iss` of an authorization response (RFC 9207).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IssMode {
    /// `iss=<issuer>` in every authorization response, success or error.
    #[default]
    Correct,
    /// No `iss` parameter, as providers that predate RFC 9207 do.
    Missing,
    /// `iss=http://evil.example`, as a mix-up attacker's response would carry.
    Wrong,
}

/// How the token endpoint fails, for both the authorization_code and refresh_token grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenFailure {
    /// HTTP 500 with `{"error":"server_error",...}`.
    ServerError,
    /// HTTP 400 with `{"error":"invalid_grant"}`.
    InvalidGrant,
    /// No answer for an hour, so the caller's own timeout has to fire.
    Timeout,
    /// HTTP 200 with an HTML page, as a proxy's or maintenance page would be.
    Html,
    /// HTTP 200, `application/json`, with a body that is not JSON.
    GarbageJson,
    /// HTTP 200 with a JSON object that has no `access_token`.
    NoAccessToken,
}

/// How an ID token is signed in place of RS256 with the published key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdTokenAlg {
    /// `alg: none` and an empty signature (an Unsecured JWT, RFC 7519 §6).
    Unsigned,
    /// HS256 keyed with the client's secret (OIDC Core §10.1): a MAC that anyone holding the
    /// secret can make.
    Hs256ClientSecret,
}

/// The value the mix-up switch puts into `iss`.
pub(crate) const WRONG_ISSUER: &str = "http://evil.example";

/// A copy of every switch, taken once per request so one request sees one consistent setting.
#[derive(Clone, Debug)]
pub(crate) struct SwitchValues {
    pub iss_mode: IssMode,
    pub advertise_iss: bool,
    pub id_token_audience: Option<String>,
    pub id_token_nonce: Option<String>,
    pub id_token_expired: bool,
    pub id_token_times: Option<(i64, i64)>,
    pub id_token_azp: Option<String>,
    pub id_token_issuer: Option<String>,
    pub id_token_wrong_key: bool,
    pub id_token_kid: Option<String>,
    pub id_token_alg: Option<IdTokenAlg>,
    pub id_token_extra_audience: Option<String>,
    pub omit_id_token_azp: bool,
    pub id_token_malformed: bool,
    pub omit_id_token: bool,
    pub token_delay: Duration,
    pub answer_delay: Duration,
    pub token_failure: Option<TokenFailure>,
    pub omit_refresh_token: bool,
    pub omit_expires_in: bool,
    pub rotate_refresh_tokens: bool,
    pub userinfo_override: Option<serde_json::Value>,
    pub jwks_unavailable: bool,
    pub metadata_override: serde_json::Map<String, serde_json::Value>,
}

impl Default for SwitchValues {
    fn default() -> Self {
        Self {
            iss_mode: IssMode::Correct,
            advertise_iss: true,
            id_token_audience: None,
            id_token_nonce: None,
            id_token_expired: false,
            id_token_times: None,
            id_token_azp: None,
            id_token_issuer: None,
            id_token_wrong_key: false,
            id_token_kid: None,
            id_token_alg: None,
            id_token_extra_audience: None,
            omit_id_token_azp: false,
            id_token_malformed: false,
            omit_id_token: false,
            token_delay: Duration::ZERO,
            answer_delay: Duration::ZERO,
            token_failure: None,
            omit_refresh_token: false,
            omit_expires_in: false,
            rotate_refresh_tokens: true,
            userinfo_override: None,
            jwks_unavailable: false,
            metadata_override: serde_json::Map::new(),
        }
    }
}

/// Shared with the running server: a setter takes effect on the next request.
#[derive(Debug, Default)]
pub struct Switches {
    values: Mutex<SwitchValues>,
}

impl Switches {
    fn values(&self) -> MutexGuard<'_, SwitchValues> {
        // Nothing panics while holding this lock, and plain values cannot be left half-written.
        self.values.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn snapshot(&self) -> SwitchValues {
        self.values().clone()
    }

    /// Back to a well-behaved provider.
    pub fn reset(&self) {
        *self.values() = SwitchValues::default();
    }

    /// `iss` in authorization responses (RFC 9207). Default [`IssMode::Correct`].
    pub fn set_iss_mode(&self, mode: IssMode) {
        self.values().iss_mode = mode;
    }

    /// Discovery's `authorization_response_iss_parameter_supported`. Default true.
    pub fn set_advertise_iss(&self, advertise: bool) {
        self.values().advertise_iss = advertise;
    }

    /// Replaces the ID token's `aud` with this value (`azp` stays the client id).
    pub fn set_id_token_audience(&self, audience: Option<String>) {
        self.values().id_token_audience = audience;
    }

    /// Replaces the ID token's `nonce` with this value.
    pub fn set_id_token_nonce(&self, nonce: Option<String>) {
        self.values().id_token_nonce = nonce;
    }

    /// Puts the ID token's `exp` in the past.
    pub fn set_id_token_expired(&self, expired: bool) {
        self.values().id_token_expired = expired;
    }

    /// Sets the ID token's `iat` and `exp` to now plus these offsets in seconds (a provider
    /// whose clock is off). Overrides [`Self::set_id_token_expired`].
    pub fn set_id_token_times(&self, iat_offset: i64, exp_offset: i64) {
        self.values().id_token_times = Some((iat_offset, exp_offset));
    }

    /// Replaces the ID token's `azp` (normally the client id) with this value.
    pub fn set_id_token_azp(&self, azp: Option<String>) {
        self.values().id_token_azp = azp;
    }

    /// Replaces the ID token's `iss` with this value.
    pub fn set_id_token_issuer(&self, issuer: Option<String>) {
        self.values().id_token_issuer = issuer;
    }

    /// Signs ID tokens with a key that is not in the JWKS (under the published `kid`).
    pub fn set_id_token_wrong_key(&self, wrong_key: bool) {
        self.values().id_token_wrong_key = wrong_key;
    }

    /// Names this `kid` in the ID token's header instead of the published one (the token is
    /// still signed with the published key): a key the JWKS does not have.
    pub fn set_id_token_kid(&self, kid: Option<String>) {
        self.values().id_token_kid = kid;
    }

    /// Signs ID tokens this way instead of RS256. Overrides [`Self::set_id_token_wrong_key`].
    pub fn set_id_token_alg(&self, alg: Option<IdTokenAlg>) {
        self.values().id_token_alg = alg;
    }

    /// Makes the ID token's `aud` an array: the usual audience, then this one.
    pub fn set_id_token_extra_audience(&self, audience: Option<String>) {
        self.values().id_token_extra_audience = audience;
    }

    /// Leaves `azp` out of ID tokens. Overrides [`Self::set_id_token_azp`].
    pub fn set_omit_id_token_azp(&self, omit: bool) {
        self.values().omit_id_token_azp = omit;
    }

    /// Answers with an `id_token` that is not a JWT (an opaque random string).
    pub fn set_id_token_malformed(&self, malformed: bool) {
        self.values().id_token_malformed = malformed;
    }

    /// Leaves `id_token` out of the code exchange's answer even when `openid` was asked for.
    pub fn set_omit_id_token(&self, omit: bool) {
        self.values().omit_id_token = omit;
    }

    /// Sleeps this long before answering authorization_code and refresh_token requests.
    pub fn set_token_delay(&self, delay: Duration) {
        self.values().token_delay = delay;
    }

    /// Sleeps this long *after* an authorization_code or refresh_token request was carried
    /// out (tokens issued, a rotated refresh token retired) and before answering: a slow way
    /// back, during which a client that gives up loses the new tokens.
    pub fn set_answer_delay(&self, delay: Duration) {
        self.values().answer_delay = delay;
    }

    /// Fails authorization_code and refresh_token requests this way, without touching any
    /// code or token (a retry after clearing the switch works).
    pub fn set_token_failure(&self, failure: Option<TokenFailure>) {
        self.values().token_failure = failure;
    }

    /// Issues no refresh token at the code exchange and returns none on refresh (the old one
    /// stays valid then).
    pub fn set_omit_refresh_token(&self, omit: bool) {
        self.values().omit_refresh_token = omit;
    }

    /// Leaves `expires_in` out of token responses (it is only RECOMMENDED by RFC 6749 §5.1).
    pub fn set_omit_expires_in(&self, omit: bool) {
        self.values().omit_expires_in = omit;
    }

    /// Refresh token rotation. Default true: each refresh returns a new refresh token and the
    /// old one becomes a replay tripwire. Off: the same refresh token is returned again.
    pub fn set_rotate_refresh_tokens(&self, rotate: bool) {
        self.values().rotate_refresh_tokens = rotate;
    }

    /// Answers `/jwks` with 503, as a key server that is down would.
    pub fn set_jwks_unavailable(&self, down: bool) {
        self.values().jwks_unavailable = down;
    }

    /// Puts these fields into the discovery document in place of its own (a discovery host
    /// that points an endpoint elsewhere). Empty: its own document.
    pub fn set_metadata_override(&self, fields: serde_json::Map<String, serde_json::Value>) {
        self.values().metadata_override = fields;
    }

    /// Answers `/userinfo` with this JSON instead of the derived profile.
    pub fn set_userinfo_override(&self, body: Option<serde_json::Value>) {
        self.values().userinfo_override = body;
    }
}
