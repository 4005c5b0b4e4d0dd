//! Logging setup. Handlers log ids and outcomes; the never-log list (tokens, codes,
//! states, verifiers, keys, cookies, raw bodies, query strings) is kept by construction:
//! secrets live in `secrecy` types and spans name paths, not URLs.

pub mod metrics;
pub mod traces;

use crate::config::LogFormat;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Lines wait at most this long before they are written.
const EVERY: Duration = Duration::from_millis(100);
/// A thread that finds this much waiting writes it out itself: the buffer stays bounded
/// and nothing is dropped.
const MAX_BUFFERED: usize = 256 * 1024;

/// Log lines collect in one buffer that a writer thread empties every 100 ms: one `write`
/// for many lines, and no thread woken per line (an access-log line per request would
/// otherwise cost a system call or a thread switch on the request path).
#[derive(Clone, Default)]
struct Batched(Arc<Mutex<Vec<u8>>>, Arc<std::sync::atomic::AtomicBool>);

impl Batched {
    fn flush_out(&self) {
        let lines = match self.0.lock() {
            // The next buffer starts at the size this one reached, so that lines are not
            // copied again and again as it grows (a tenth of a second of access-log lines).
            Ok(mut buf) if !buf.is_empty() => {
                let size = buf.len().min(MAX_BUFFERED);
                std::mem::replace(&mut *buf, Vec::with_capacity(size))
            }
            _ => return,
        };
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&lines);
        let _ = err.flush();
    }
}

impl Write for &Batched {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        // Silenced for the last moments of `dev` (see `LogGuard::silence`).
        if self.1.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(line.len());
        }
        let full = match self.0.lock() {
            Ok(mut buf) => {
                buf.extend_from_slice(line);
                buf.len() >= MAX_BUFFERED
            }
            Err(_) => return std::io::stderr().write(line),
        };
        if full {
            self.flush_out();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = &'a Batched;

    fn make_writer(&'a self) -> &'a Batched {
        self
    }
}

/// Writes out what is buffered when dropped (at the end of `serve` or `dev`), after the
/// spans not yet exported (at most 5 s).
#[must_use = "buffered log lines and spans are written out when this is dropped"]
pub struct LogGuard(Option<Batched>, Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl LogGuard {
    /// Writes out what is buffered and drops every later line: for `dev`'s last moments,
    /// after its work has stopped, when stopping its own private PostgreSQL would make
    /// every task still holding a connection report the end of it as a fault.
    pub fn silence(&self) {
        if let Some(b) = &self.0 {
            b.flush_out();
            b.1.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(p) = self.1.take()
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "spans not exported before exit");
        }
        if let Some(b) = &self.0 {
            b.flush_out();
        }
    }
}

/// Where spans go, when they go anywhere.
pub struct TraceExport<'a> {
    pub endpoint: &'a url::Url,
    pub timeout: Duration,
    /// Trusted besides the system's and the built-in roots (`outbound.ca_file`).
    pub cas: &'a [reqwest::Certificate],
}

/// The level filter: `MCP_CONNECT_LOG` as a list of `target=level` and a default `level`
/// (`info,sqlx=warn` when unset or empty), e.g. `warn,mcp_connect=debug`. A list that does
/// not parse is reported on stderr and the default is used.
pub fn filter(var: Option<&str>) -> Targets {
    let default = || Targets::new().with_default(LevelFilter::INFO).with_target("sqlx", LevelFilter::WARN);
    let listed = match var.filter(|s| !s.trim().is_empty()) {
        None => default(),
        Some(s) => s.parse().unwrap_or_else(|e| {
            let d = default();
            eprintln!("mcp-connect: MCP_CONNECT_LOG {s:?} is not a list of target=level ({e}); using {d}");
            d
        }),
    };
    aws_capped(listed)
}

/// The AWS SDK (the `aws-kms` key store) logs whole requests at TRACE, and a KMS `Encrypt`
/// carries a data key in clear: its crates (targets `aws_…`) never log below DEBUG, whatever
/// the list says.
fn aws_capped(listed: Targets) -> Targets {
    let default = listed.default_level().unwrap_or(LevelFilter::OFF);
    let capped = listed.iter().map(|(target, level)| {
        (target.to_owned(), if target.starts_with("aws_") { level.min(LevelFilter::DEBUG) } else { level })
    });
    let mut out = Targets::new().with_targets(capped.collect::<Vec<_>>());
    if listed.default_level().is_some() {
        out = out.with_default(default);
    }
    // Every target the list does not name falls under the default: cap that too.
    out.with_target("aws_", default.min(LevelFilter::DEBUG))
}

/// Logs (and, with `traces`, spans by OTLP). Must run inside the tokio runtime when
/// `traces` is given. An exporter that cannot be built is reported and left off.
pub fn init(format: LogFormat, traces: Option<TraceExport<'_>>) -> LogGuard {
    let filter = filter(std::env::var("MCP_CONNECT_LOG").ok().as_deref());
    let provider = traces.and_then(|t| match traces::provider(t.endpoint, t.timeout, t.cas) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("mcp-connect: tracing.otlp_endpoint: cannot export spans: {e}; traces are off");
            None
        }
    });
    let batched = Batched::default();
    // Colour codes only for a person at a terminal: never into a file or a log collector.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let lines = tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(batched.clone());
    // `MCP_CONNECT_LOG` filters the log lines only: spans are exported whatever it says.
    let registry = tracing_subscriber::registry().with(provider.as_ref().map(traces::layer));
    // A second init (tests, `dev`) keeps the first subscriber.
    let first = match format {
        // The current span (the request: id, method, path) is on every line; the list of
        // enclosing spans would repeat it at about a tenth of the cost of a request.
        LogFormat::Json => registry.with(lines.json().with_span_list(false).with_filter(filter)).try_init(),
        LogFormat::Text => registry.with(lines.with_filter(filter)).try_init(),
    };
    if first.is_err() {
        return LogGuard(None, provider);
    }
    let writer = batched.clone();
    let _ = std::thread::Builder::new().name("log-writer".into()).spawn(move || {
        loop {
            std::thread::sleep(EVERY);
            writer.flush_out();
        }
    });
    LogGuard(Some(batched), provider)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn the_level_filter_defaults_to_info_with_quiet_sqlx_and_takes_a_target_list() {
        let default = filter(None);
        assert!(default.would_enable("mcp_connect::http", &Level::INFO));
        assert!(!default.would_enable("mcp_connect::http", &Level::DEBUG));
        assert!(!default.would_enable("sqlx::query", &Level::INFO));
        assert!(default.would_enable("sqlx::query", &Level::WARN));

        let listed = filter(Some("warn,mcp_connect::cache=debug"));
        assert!(listed.would_enable("mcp_connect::cache", &Level::DEBUG));
        assert!(!listed.would_enable("mcp_connect::http", &Level::INFO));
        assert!(listed.would_enable("mcp_connect::http", &Level::WARN));

        // Empty: the default, not "nothing".
        let empty = filter(Some(" "));
        assert!(empty.would_enable("mcp_connect::http", &Level::INFO));
        assert!(!empty.would_enable("sqlx::query", &Level::INFO));

        // Not a filter: the default, not "everything" or "nothing".
        let bad = filter(Some("mcp_connect=loud"));
        assert!(bad.would_enable("mcp_connect::http", &Level::INFO));
        assert!(!bad.would_enable("sqlx::query", &Level::INFO));
    }

    #[test]
    fn the_aws_sdk_never_logs_at_trace_where_an_encrypt_request_shows_a_data_key() {
        let orchestrator = "aws_smithy_runtime::client::orchestrator";
        for list in ["trace", "aws_smithy_runtime=trace", "info,aws_smithy_runtime::client::orchestrator=trace"] {
            let f = filter(Some(list));
            assert!(!f.would_enable(orchestrator, &Level::TRACE), "{list}");
            assert!(f.would_enable(orchestrator, &Level::DEBUG) || list.starts_with("info"), "{list}");
        }
        let f = filter(Some("trace"));
        assert!(f.would_enable("mcp_connect::http", &Level::TRACE), "only the SDK is capped");
        assert!(!filter(None).would_enable(orchestrator, &Level::DEBUG), "the default stays info");
    }
}
