//! Signed webhooks (Standard Webhooks) to the endpoints tenants register: the signing of a
//! delivery (`sign`) and the only HTTP client deliveries may use (`ssrf`), which refuses
//! private, loopback, link-local and other internal addresses on the address it actually
//! connects to.

pub mod sign;
pub mod ssrf;
