//! The integration tests: the real application on port 0 against a fresh, migrated
//! Postgres database per test. One binary, one module per surface.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_keys;
mod helpers;
mod ops;
mod tenancy;
mod token;
mod vault;
