//! The use cases, one file each, named after what a caller does: ask for a token, open a
//! connect link, come back from the provider, sign in, refresh, revoke, rotate the vault
//! key, clean up, switch a provider or a tenant off, issue or revoke an API key; and the
//! policy (provider allowed, kill switches) they share. Handlers in `http` and commands in
//! `cli` parse, call one of these, and render.

pub mod api_keys;
pub mod callback;
pub mod cancel;
pub mod cleanup;
pub mod connect;
pub mod credential;
pub mod events;
pub mod fault;
pub mod held;
pub mod kill_switches;
pub mod login;
pub mod policy;
pub mod providers;
pub mod refresh;
pub mod remote;
pub mod revoke;
pub mod rotate;
pub mod subject;
pub mod tenants;
pub mod token;
pub mod wait;
pub mod webhooks;

pub use fault::Fault;
