//! Integration tests: a real provider on 127.0.0.1, driven over HTTP with reqwest and
//! checked with openidconnect, as mcp-connect will drive it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod authorize;
mod code_flow;
mod discovery;
mod helpers;
mod identity;
mod refresh;
mod revoke;
mod switches;
mod userinfo;
