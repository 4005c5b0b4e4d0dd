//! HTTP surfaces, split by who calls: `api` for MCP servers, `admin` for operators,
//! `browser` for people, `ops` for load balancers. Each exposes `configure`.

pub mod admin;
pub mod api;
pub mod browser;
pub mod error;
pub mod middleware;
pub mod openapi;
pub mod operator;
pub mod ops;
pub mod schema;
