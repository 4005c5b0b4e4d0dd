//! mcp-connect-client: what an MCP server needs to use mcp-connect. A typed client for
//! `POST /v1/token`, `GET /v1/elicitations/{id}` and `/v1/proxy/{provider}/{path}`, and
//! [`RequestStateKey`] to seal the `requestState` an MCP server hands to its client between
//! two rounds of a tool call.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_connect_client::{ApiKey, Client, TokenOutcome, TokenRequest};
//!
//! let client = Client::new("https://connect.example.com".parse()?, ApiKey::new(std::env::var("MCP_CONNECT_API_KEY")?))?;
//! match client.token(&TokenRequest::new("alice", "github")).await? {
//!     TokenOutcome::Connected { token: Some(token), .. } => { /* call GitHub with token.expose_secret() */ }
//!     TokenOutcome::Connected { token: None, .. } => { /* this tenant hands out nothing: use /v1/proxy */ }
//!     TokenOutcome::ConnectRequired { mcp, .. } => { /* put `mcp` into a URL-mode elicitation */ }
//!     TokenOutcome::Declined { .. } => { /* a normal "not connected" result */ }
//! }
//! # Ok(()) }
//! ```
//!
//! Or the token never reaches this process: mcp-connect's proxy attaches it.
//!
//! ```no_run
//! # async fn run(client: mcp_connect_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_connect_client::{ProxyOutcome, ProxyRequest, reqwest::Method};
//!
//! match client.proxy(ProxyRequest::new("alice", "github", Method::GET, "/user")).await? {
//!     ProxyOutcome::Response(answer) => { let me: serde_json::Value = answer.json().await?; }
//!     ProxyOutcome::ConnectRequired { mcp, .. } => { /* as above, then retry with .elicitation_id() */ }
//!     ProxyOutcome::Declined { .. } => { /* "not connected" */ }
//! }
//! # Ok(()) }
//! ```

/// The JSON shapes of the API, as Rust types.
mod api;
/// The HTTP client: requests, error mapping, bounded retries of 503.
mod client;
/// Proxied calls (`/v1/proxy`): the request, its checks, what it comes back as.
mod proxy;
/// Sealing and opening the MCP `requestState` (AEAD, bound to the call).
mod request_state;
/// Secret-holding types that redact themselves.
mod secret;
/// An API key or a workload token (a file read again when it changes, or a function).
mod token_source;

pub use api::{
    Account, CancelReason, Elicitation, ElicitationId, ElicitationInfo, ElicitationStatus, InvalidElicitationId,
    MAX_WAIT_SECONDS, McpUrlElicitation, TokenOutcome, TokenRequest,
};
pub use client::{Client, ClientBuilder, Error, RetryPolicy};
pub use proxy::{InvalidProxyRequest, ProxyOutcome, ProxyRequest};
pub use request_state::{
    InvalidRequestStateKey, RequestState, RequestStateError, RequestStateKey, ToolCall, arguments_digest,
};
/// The reqwest a proxied call speaks: its `Method`, `header`, `Body` and `Response`.
pub use reqwest;
pub use secret::{AccessToken, ApiKey, SubjectToken};
pub use token_source::{Credential, TokenSource};
