//! Downstream providers: the registry built from configuration and provider templates.
//! The browser flow (authorize, callback, refresh, revocation) builds on this registry.

pub mod access_token;
pub mod callback;
/// How the client authenticates at token and revocation endpoints (RFC 6749 §2.3.1).
pub mod client_auth;
/// Credentials typed on our page (API keys, passwords) and their check at the provider.
pub mod credential;
pub mod flow;
pub mod id_token;
/// Remote MCP servers as providers: RFC 9728 and RFC 8414 discovery, RFC 7591 registration.
pub mod mcp;
pub mod providers;
pub mod resolve;

pub use providers::{Provider, ProviderKind, ProviderRegistry};
