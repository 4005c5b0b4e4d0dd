//! The integration tests: the real application on port 0 against a fresh, migrated
//! Postgres database per test. One binary, one module per surface.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admin;
mod api_keys;
mod audit;
mod backup;
mod cache;
mod cli;
mod connect_flow;
mod connections_page;
mod crash;
mod credentials;
mod data_keys;
mod deploy;
mod dev_command;
mod discovery;
mod e2e;
mod failover;
mod faults;
mod harness;
mod idps;
mod interop;
mod lifecycle;
mod logs;
mod metrics;
mod openapi;
mod operator;
mod ops;
mod pooler;
mod proxy;
mod remote_mcp;
mod remote_mcp_sdk;
mod schemathesis;
mod sdks;
mod serve;
mod snippets;
mod subject_token;
mod support;
mod tenancy;
mod token;
mod trust;
mod upgrade;
mod vault;
mod wait;
mod webhook_events;
mod webhooks;
