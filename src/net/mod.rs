//! Every call mcp-connect makes out: to providers, IdPs, remote MCP servers and webhook
//! endpoints. One place for what guards them:
//!
//! - `http`: the outbound client for providers and IdPs ([`Outbound`]): no redirects, no
//!   proxy from the environment, short timeouts, bounded bodies, a span per call; the
//!   origins a server's own documents named reached only through the guard ([`Reach`]).
//! - `ssrf`: the one address policy (private, loopback, link-local, metadata addresses),
//!   checked on the URL and again on every address actually connected to.
//! - `metadata`: fetching a server's own documents, admitting the origins they name
//!   ([`metadata::Admission`]): one rule for OpenID discovery, RFC 8414 and RFC 9728.
//! - `delivery`: the webhook deliveries' client, on the same policy.
//! - `forward`: the proxy's client (`/v1/proxy`): streamed both ways, redirects returned.
//! - `urls`: what an endpoint or issuer URL must look like (https, no credentials, IDN
//!   hosts only where allowed).

pub mod delivery;
pub mod forward;
pub mod http;
pub mod metadata;
pub mod ssrf;
pub mod urls;

pub use http::{Guard, Outbound, OutboundError, Reach};
