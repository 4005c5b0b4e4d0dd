//! What the provider saw, for tests to assert on. Counters count every call that reached the
//! endpoint's handler with valid client credentials, whether it then succeeded or not.

use std::collections::BTreeMap;

/// A snapshot taken by [`crate::DevProvider::stats`].
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// `grant_type=authorization_code` requests.
    pub authorization_code_exchanges: u64,
    /// `grant_type=refresh_token` requests.
    pub refresh_calls: u64,
    /// The W3C `traceparent` header of each token request, in order (`None`: none sent).
    pub token_traceparents: Vec<Option<String>>,
    /// How the client authenticated on each token request that got past authentication:
    /// `client_secret_basic` or `client_secret_post`.
    pub token_client_auth: Vec<&'static str>,
    /// `/userinfo` requests, authorised or not.
    pub userinfo_calls: u64,
    /// Every `/revoke` call by an authenticated client, in order.
    pub revocations: Vec<Revocation>,
    /// `GET /jwks` requests, answered or not.
    pub jwks_requests: u64,
    /// `GET /authorize` requests, valid or not.
    pub authorize_requests: u64,
    /// The query of the last `GET /authorize` (first value of a repeated name).
    pub last_authorize_params: Option<BTreeMap<String, String>>,
    /// `GET /api/me` requests (the API-key service), valid or not.
    pub credential_checks: u64,
}

/// One `/revoke` call (RFC 7009).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    /// The `token_type_hint` the client sent, if any.
    pub token_type_hint: Option<String>,
    /// What the token actually was, whatever the hint said.
    pub kind: TokenKind,
    pub client_id: String,
}

/// What a presented token turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Access,
    Refresh,
    Unknown,
}
