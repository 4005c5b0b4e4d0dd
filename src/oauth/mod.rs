//! OAuth with providers and IdPs: their servers resolved (configured, or by discovery:
//! OpenID, RFC 8414, RFC 9728 for remote MCP servers), the code flow (authorize, the
//! callback's query, the exchange, refresh, revocation) and the ID and access tokens'
//! checks. What a provider is lives in `providers`; every call out goes through `net`.

pub mod access_token;
pub mod callback;
pub mod flow;
pub mod id_token;
/// Remote MCP servers as providers: RFC 9728 and RFC 8414 discovery, RFC 7591 registration.
pub mod mcp;
pub mod resolve;
