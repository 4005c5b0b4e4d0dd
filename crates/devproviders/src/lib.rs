//! A real OAuth 2.0 + OpenID Connect provider on 127.0.0.1, for mcp-connect's integration
//! tests (with switches for misbehaviour) and for `mcp-connect dev` (built-in identity and
//! downstream provider). The service under test reaches it over HTTP exactly as it reaches
//! GitHub or Google: real endpoints, real PKCE checks, real RS256-signed tokens.

/// Who may use the provider, what it shows, how long its tokens live.
pub mod config;
/// Randomness, hashing and comparison for secrets, in one place.
mod crypto;
/// Codes, grants and tokens in memory; every decision takes `now`.
mod grants;
/// HTTP endpoints: discovery, JWKS, authorize, token, userinfo, revoke.
mod http;
/// The RSA signing key, its JWKS and JWT signing.
mod keys;
/// PKCE (RFC 7636) verification.
mod pkce;
/// Starting, observing and stopping a provider.
mod server;
/// The state every handler shares: clients, grants, keys, switches, stats; token minting.
mod state;
/// Counters and records that tests assert on.
pub mod stats;
/// Runtime switches that make the provider misbehave on purpose.
pub mod switches;

pub use config::{ClientRegistration, DEV_SUBJECT_GRANT_TYPE, DevProviderConfig, Role};
pub use server::{DevProvider, Forgery};
pub use stats::{Revocation, Stats, TokenKind};
pub use switches::{IdTokenAlg, IssMode, Switches, TokenFailure};
