//! mcp-connect: obtains downstream OAuth tokens for MCP servers' users through URL-mode
//! elicitation, with the browser user checked against the MCP subject before any grant.

/// API keys of MCP servers and operators: format, hashing, verification cache.
pub mod api_keys;
/// `AppState`: what the flows and handlers share.
pub mod app;
/// The lookup caches: connections and kill switches, and the tasks that keep them honest.
pub mod cache;
/// Values cached from database rows and invalidated by database changes: the one scheme
/// of every cache (maximum age, change-log confirmation, drop counter, capacity rule).
pub mod changes;
/// Command-line entry points (`serve`, `migrate`, `apikey`, `genkey`).
pub mod cli;
/// Typed, validated configuration from TOML and the environment.
pub mod config;
/// Random tokens, lookup hashes, constant-time comparison.
pub mod crypto;
/// `mcp-connect dev`: the loopback demo with built-in IdP and provider (`dev` feature).
#[cfg(feature = "dev")]
pub mod dev;
/// Newtypes for outside values, parsed once at the edge.
pub mod domain;
/// The use cases, one file each: token, connect, callback, login, refresh, revoke, ...
pub mod flows;
/// HTTP surfaces: API, admin, browser pages, health.
pub mod http;
/// The vault's data keys: made, wrapped by the key store, unwrapped into a bounded cache.
pub mod keys;
/// Every call out of the service: the outbound client and its guard, the SSRF policy for
/// providers, IdPs and webhooks, the URL rules.
pub mod net;
/// Discovery and the OAuth code flow with providers and IdPs.
pub mod oauth;
/// The downstream providers: a sum of kinds (OAuth, remote MCP server, typed credential).
pub mod providers;
/// Application assembly shared by `serve` and the tests.
pub mod startup;
/// SQL, one function per query.
pub mod store;
/// Logging setup.
pub mod telemetry;
/// The active tenants every instance serves, read from the database.
pub mod tenants;
/// Sealing tokens at rest, and the key stores that wrap the data keys.
pub mod vault;
/// Webhook events, signatures (Standard Webhooks) and their delivery.
pub mod webhooks;
/// Workload tokens (Kubernetes, SPIFFE, GitHub Actions, OAuth client credentials) in an
/// API key's place.
pub mod workload;

/// What `mcp-connect --version` says: the release and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("MCP_CONNECT_COMMIT"), ")");

/// The commit this binary was built from (`build.rs`: git's, or `MCP_CONNECT_COMMIT` where
/// the build has no git; "unknown" without either).
pub const COMMIT: &str = env!("MCP_CONNECT_COMMIT");
