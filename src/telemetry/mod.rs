//! Logging setup. Handlers log ids and outcomes; the never-log list (tokens, codes,
//! states, verifiers, keys, cookies, raw bodies, query strings) is kept by construction:
//! secrets live in `secrecy` types and spans name paths, not URLs.

mod lines;
pub mod metrics;
pub use lines::{Request, in_request};
pub mod traces;

use crate::config::LogFormat;
use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
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
///
/// Two buffers take turns (`collecting` and `spare`): the buffer written out is kept,
/// emptied, for the next turn. A new buffer per write (256 KiB, about a
/// hundred a second under load, often made on one thread and freed on another) kept
/// memory that mimalloc did not give back: the bench's peak RSS at 100,000 connections
/// was 75.6-81.1 MiB, 62.1 with the buffers reused (60.0 with the hand-out audit's dense
/// rows too), 57.5 with no access lines at all (issue 46).
#[derive(Clone, Default)]
struct Batched {
    /// Where lines go now.
    collecting: Arc<Mutex<Vec<u8>>>,
    /// Set by [`LogGuard::silence`]: later lines are dropped.
    silenced: Arc<std::sync::atomic::AtomicBool>,
    /// The buffer last written out, empty, locked while a write is under way.
    spare: Arc<Mutex<Vec<u8>>>,
}

impl Batched {
    fn flush_out(&self) {
        // Held while writing: one thread writes at a time (as stderr's own lock would have
        // it), and the buffer it wrote is the next to collect. Nothing panics while it is
        // held; were it poisoned all the same, lines would pile up unwritten behind it.
        let mut out = self.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match self.collecting.lock() {
            Ok(mut buf) if !buf.is_empty() => std::mem::swap(&mut *buf, &mut *out),
            _ => return,
        }
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&out);
        let _ = err.flush();
        out.clear();
        // A rare long line may have grown it far past a turn's worth (up to twice that is
        // kept: a buffer doubles as it grows).
        if out.capacity() > 2 * MAX_BUFFERED {
            out.shrink_to(MAX_BUFFERED);
        }
    }
}

impl Write for &Batched {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        // Silenced for the last moments of `dev` (see `LogGuard::silence`).
        if self.silenced.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(line.len());
        }
        let full = match self.collecting.lock() {
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
            b.silenced.store(true, std::sync::atomic::Ordering::Relaxed);
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

/// The lines' timestamps, as tracing-subscriber's `SystemTime` writes them
/// (`2026-12-06T05:20:01.123456Z`, UTC, microseconds), with the part down to the second
/// formatted once a second on each thread. Formatting all of it on every line was 2 % of
/// the service's CPU for a cached hand-out (issue 46's profile: an access line per
/// request), and the library offers no timer that keeps its work.
#[derive(Clone, Copy, Default)]
struct LineTime;

impl FormatTime for LineTime {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        thread_local! {
            static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let kept = SECOND.try_with(|second| {
            let mut second = second.borrow_mut();
            let (at, text) = &mut *second;
            if *at != now.as_secs() {
                *text = to_the_second(now.as_secs());
                *at = now.as_secs();
            }
            write!(w, "{text}.{:06}Z", now.subsec_micros())
        });
        // A line written while the thread's locals are going (its last moments).
        kept.unwrap_or_else(|_| write!(w, "{}.{:06}Z", to_the_second(now.as_secs()), now.subsec_micros()))
    }
}

/// `2026-12-06T05:20:01` for that many seconds since 1970 (UTC).
fn to_the_second(unix: u64) -> String {
    let t = i64::try_from(unix)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The JSON lines, to `writer`: timestamp, level, the event's `fields`, its `target`, and
/// the current span (the request: id, method, path) as `span`; not the list of enclosing
/// spans, which would repeat it at about a tenth of the cost of a request. Written by
/// [`lines::JsonLines`] (see there why by hand). Public for the tests that read every line
/// for secrets.
pub fn json_lines<S, W>(writer: W) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    lines::JsonLines::new(writer, LineTime)
}

/// Set by [`init`] for text lines: tracing-subscriber's layer names a line's request by
/// its span.
static TEXT_LINES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a request gets a span of its own: when spans are exported, or the lines are
/// text. Otherwise (JSON lines, the default) [`in_request`] names it in the lines written
/// inside it, at half the cost.
pub fn request_spans() -> bool {
    traces::enabled() || TEXT_LINES.load(std::sync::atomic::Ordering::Relaxed)
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
    // `MCP_CONNECT_LOG` filters the log lines only: spans are exported whatever it says.
    let registry = tracing_subscriber::registry().with(provider.as_ref().map(traces::layer));
    // A second init (tests, `dev`) keeps the first subscriber.
    let first = match format {
        LogFormat::Json => registry.with(json_lines(batched.clone()).with_filter(filter)).try_init(),
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_timer(LineTime)
                    .with_writer(batched.clone())
                    .with_filter(filter),
            )
            .try_init(),
    };
    if first.is_err() {
        return LogGuard(None, provider);
    }
    TEXT_LINES.store(matches!(format, LogFormat::Text), std::sync::atomic::Ordering::Relaxed);
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
    fn json_lines_carry_the_request_span_inside_a_request_and_the_fields_operators_read() {
        use serde_json::json;
        let out = Batched::default();
        let subscriber = tracing_subscriber::registry().with(json_lines(out.clone()));
        tracing::subscriber::with_default(subscriber, || {
            // As `http::middleware::request_context` makes them.
            let span = tracing::info_span!(
                "request",
                request_id = "00c0ffee00c0ffee",
                method = "POST",
                path = "/v1/token",
                trace_id = tracing::field::Empty,
            );
            span.in_scope(|| tracing::warn!(provider = "github", attempt = 2u64, "inside"));
            tracing::info!(request_id = "00c0ffee00c0ffee", status = 200u64, trace_id = None::<&str>, "request");
        });
        let text = String::from_utf8(out.collecting.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
        let [inside, access] = &lines[..] else { panic!("two lines: {text}") };
        // The keys in alphabetical order (as CHANGELOG tells operators).
        let first = text.lines().next().unwrap();
        let keys = ["fields", "level", "span", "target", "timestamp"];
        let at: Vec<usize> = keys.iter().map(|k| first.find(&format!("\"{k}\":")).expect(k)).collect();
        assert!(at.is_sorted(), "{first}");
        assert_eq!(inside["level"], "WARN");
        assert_eq!(inside["target"], module_path!());
        assert_eq!(inside["fields"], json!({"message": "inside", "provider": "github", "attempt": 2}));
        assert_eq!(
            inside["span"],
            json!({"name": "request", "request_id": "00c0ffee00c0ffee", "method": "POST", "path": "/v1/token"}),
            "the request's span, without the fields it left empty"
        );
        assert_eq!(inside.get("spans"), None, "no list of spans");
        let stamp = inside["timestamp"].as_str().unwrap();
        time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339).expect(stamp);
        assert_eq!(access["level"], "INFO");
        assert_eq!(access["fields"], json!({"message": "request", "request_id": "00c0ffee00c0ffee", "status": 200}));
        assert_eq!(access.get("span"), None, "outside the request's span");
    }

    #[test]
    fn text_lines_keep_a_span_per_request() {
        // Nextest runs each test in a process of its own: this one owns the subscriber.
        let _guard = init(LogFormat::Text, None);
        assert!(request_spans(), "text lines name a line's request by its span");
    }

    #[test]
    fn json_lines_without_exported_spans_make_no_span_per_request() {
        let _guard = init(LogFormat::Json, None);
        assert!(!request_spans(), "the lines carry the request without one (lines::in_request)");
    }

    #[test]
    fn the_two_log_buffers_take_turns_so_that_writing_out_makes_no_new_one() {
        let out = Batched::default();
        let line = [b"{\"fields\":{\"message\":\"request\"}}".as_slice(), &[b' '; 60], b"\n"].concat();
        let ptr = |m: &Mutex<Vec<u8>>| m.lock().unwrap().as_ptr();
        // The first two turns make the two buffers.
        for _ in 0..2 {
            (&out).write_all(&line).unwrap();
            out.flush_out();
        }
        for turn in 0..6 {
            let emptied = ptr(&out.spare);
            (&out).write_all(&line).unwrap();
            out.flush_out();
            assert_eq!(ptr(&out.collecting), emptied, "turn {turn}: the lines went into the buffer written out last");
            let kept = out.spare.lock().unwrap();
            assert!(kept.is_empty() && kept.capacity() >= line.len(), "turn {turn}: written out, emptied, kept");
        }
        // A line longer than a turn's worth: its buffer is not kept at that size.
        (&out).write_all(&vec![b' '; 3 * MAX_BUFFERED]).unwrap();
        out.flush_out();
        assert!(out.spare.lock().unwrap().capacity() <= 2 * MAX_BUFFERED);
        assert!(out.collecting.lock().unwrap().is_empty());
    }

    #[test]
    fn lines_are_written_out_even_after_a_panic_poisoned_the_buffer_not_collecting() {
        let out = Batched::default();
        let held = out.clone();
        let _ = std::thread::spawn(move || {
            let _out = held.spare.lock().unwrap();
            panic!("poisons the lock");
        })
        .join();
        assert!(out.spare.is_poisoned());
        (&out).write_all(b"{}\n").unwrap();
        out.flush_out();
        assert!(out.collecting.lock().unwrap().is_empty(), "written out, not left to pile up");
    }

    #[test]
    fn line_timestamps_read_as_the_library_writes_them() {
        let stamp = |timer: &dyn FormatTime| {
            let mut s = String::new();
            timer.format_time(&mut Writer::new(&mut s)).unwrap();
            s
        };
        for _ in 0..3 {
            let ours = stamp(&LineTime);
            let theirs = stamp(&tracing_subscriber::fmt::time::SystemTime);
            // Both of one second (the loop retries across a second's end): the same text up
            // to the microseconds, and as long.
            if ours[..19] != theirs[..19] {
                continue;
            }
            assert_eq!((ours.len(), &ours[19..20], &ours[26..]), (theirs.len(), ".", "Z"), "{ours} {theirs}");
            let parsed = time::OffsetDateTime::parse(&ours, &time::format_description::well_known::Rfc3339).unwrap();
            assert!((time::OffsetDateTime::now_utc() - parsed).abs() < time::Duration::seconds(2), "{ours}");
            return;
        }
        panic!("three seconds' ends in a row");
    }

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
