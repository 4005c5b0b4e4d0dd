//! Logging setup. Handlers log ids and outcomes; the never-log list (tokens, codes,
//! states, verifiers, keys, cookies, raw bodies, query strings) is kept by construction:
//! secrets live in `secrecy` types and spans name paths, not URLs.

use crate::config::LogFormat;
use tracing_subscriber::EnvFilter;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("MCP_CONNECT_LOG").unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second init (tests, `dev`) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
