//! mcp-connect-client: what an MCP server needs to use mcp-connect. A typed client for
//! `POST /v1/token` and `GET /v1/elicitations/{id}`, and [`RequestStateKey`] to seal the
//! `requestState` an MCP server hands to its client between two rounds of a tool call.
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

/// The JSON shapes of the API, as Rust types.
mod api;
/// The HTTP client: requests, error mapping, bounded retries of 503.
mod client;
/// Sealing and opening the MCP `requestState` (AEAD, bound to the call).
mod request_state;
/// Secret-holding types that redact themselves.
mod secret;

pub use api::{
    Account, CancelReason, Elicitation, ElicitationId, ElicitationInfo, ElicitationStatus, InvalidElicitationId,
    MAX_WAIT_SECONDS, McpUrlElicitation, TokenOutcome, TokenRequest,
};
pub use client::{Client, ClientBuilder, Error, RetryPolicy};
pub use request_state::{
    InvalidRequestStateKey, RequestState, RequestStateError, RequestStateKey, ToolCall, arguments_digest,
};
pub use secret::{AccessToken, ApiKey, SubjectToken};
