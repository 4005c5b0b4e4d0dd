//! The JSON log lines, written straight into the line: each value escaped once, no map
//! built. Written by hand because the libraries do not offer it: tracing-subscriber's
//! `json()` and json-subscriber both turn every field of an event into a
//! `serde_json::Value` in a map and serialize that map. For the access line (one per
//! request, the largest single item of issue 46's profile of a cached hand-out) that took
//! 1.03 µs a line with json-subscriber and 0.96-1.13 µs with tracing-subscriber; this takes
//! 0.18 µs, and a request span 0.16 µs instead of 0.30 and 0.55-0.62 µs (a million of each
//! written into memory, fat LTO, the benchmark machine of issue 46). The lines are the ones
//! tracing-subscriber's `json()` wrote: `fields` (in the order the code names them),
//! `level`, the current span as `span` (its fields in the order they were set, then its
//! `name`, which so wins over a field of that name as it did; no list of spans), `target`
//! (a `log` crate line's own, as with tracing-subscriber; its `log.*` fields left out, as
//! json-subscriber did) and `timestamp` (the timer's text as it is: `LineTime` writes
//! digits and `-:.TZ` only), the top-level keys in that order.

use std::cell::RefCell;
use std::io::Write as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The request whose handling is under way, for the lines written in it when it has no
/// span ([`super::request_spans`]): what its span's fields would be.
#[derive(Default)]
pub struct Request {
    pub id: String,
    pub method: actix_web::http::Method,
    pub path: String,
}

tokio::task_local! {
    static REQUEST: Request;
}

/// Runs `fut` as the handling of `request`: each line it writes carries the request as
/// its `span` (`request_id`, `method`, `path`, `name` `request`, as the span did), unless a
/// span of its own is current. Hands `request` back. Half the cost of a span (made,
/// entered and left at each poll, closed) on a cached hand-out (issue 46), and nothing
/// written unless a line is.
pub async fn in_request<F: std::future::Future>(request: Request, fut: F) -> (F::Output, Request) {
    let mut scoped = std::pin::pin!(REQUEST.scope(request, fut));
    let out = scoped.as_mut().await;
    // Held until taken: always there once the future is done.
    (out, scoped.take_value().unwrap_or_default())
}

/// A layer writing each event as one JSON line to `W`, stamped by `T`.
pub struct JsonLines<W, T> {
    writer: W,
    timer: T,
}

impl<W, T> JsonLines<W, T> {
    pub fn new(writer: W, timer: T) -> Self {
        Self { writer, timer }
    }
}

/// Appends `value` to `out` as a JSON string, quoted and escaped (serde_json's escaping;
/// into a `Vec` it cannot fail).
fn escape_into(out: &mut Vec<u8>, value: &str) {
    let _ = serde_json::to_writer(out, value);
}

/// Appends a field's name as a JSON string: as it is where nothing in it needs escaping
/// (a Rust identifier, dotted: every name the code gives), else escaped. A tenth of an
/// access line's cost was escaping its six names (issue 46).
fn name_into(out: &mut Vec<u8>, name: &str) {
    if name.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
    } else {
        escape_into(out, name);
    }
}

/// Writes one field's value as JSON: the one place values are rendered, for events and
/// spans alike.
struct Json<'a>(&'a mut Vec<u8>);

impl Json<'_> {
    fn str(self, value: &str) {
        escape_into(self.0, value);
    }

    /// A value whose text is its JSON: integers, booleans, finite numbers.
    fn literal(self, value: impl std::fmt::Display) {
        let _ = write!(self.0, "{value}");
    }

    /// An integer, written by serde_json (itoa) without the formatting machinery.
    fn integer(self, value: impl serde::Serialize) {
        let _ = serde_json::to_writer(self.0, &value);
    }

    /// NaN and the infinities have no JSON number: `null`.
    fn f64(self, value: f64) {
        match serde_json::Number::from_f64(value) {
            Some(n) => self.literal(n),
            None => self.0.extend_from_slice(b"null"),
        }
    }

    /// `message`'s format arguments, `%` and `?` values: formatted once, then escaped.
    fn debug(self, value: &dyn std::fmt::Debug) {
        thread_local! {
            static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
        }
        let written = TEXT.try_with(|text| {
            // Busy when a value's formatting logs: that line formats into a string of its own.
            let Ok(mut text) = text.try_borrow_mut() else { return false };
            text.clear();
            let _ = std::fmt::Write::write_fmt(&mut *text, format_args!("{value:?}"));
            escape_into(self.0, &text);
            true
        });
        if written != Ok(true) {
            escape_into(self.0, &format!("{value:?}"));
        }
    }
}

/// A span's fields as JSON members (`"request_id":"…","path":"…"`), each name once: a field
/// recorded again replaces its value.
#[derive(Default)]
struct SpanFields(Vec<(&'static str, Vec<u8>)>);

impl SpanFields {
    fn set(&mut self, name: &'static str, value: Vec<u8>) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name, value)),
        }
    }

    fn render(&mut self, field: &Field, write: impl FnOnce(Json<'_>)) {
        // Room for an id or a path at once: grown from empty, a quoted string reallocates
        // two or three times.
        let mut value = Vec::with_capacity(64);
        write(Json(&mut value));
        self.set(field.name(), value);
    }
}

impl Visit for SpanFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.render(field, |j| j.str(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.render(field, |j| j.integer(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.render(field, |j| j.integer(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.render(field, |j| j.literal(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.render(field, |j| j.f64(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.render(field, |j| j.debug(value));
    }
}

/// Writes an event's fields as JSON members into the line, skipping a `log` line's
/// `log.*` fields.
struct EventFields<'a> {
    line: &'a mut Vec<u8>,
    first: bool,
    skip_log_fields: bool,
}

impl EventFields<'_> {
    /// Writes `field`'s key, and gives the place for its value; `None` for a field left out.
    fn member(&mut self, field: &Field) -> Option<Json<'_>> {
        if self.skip_log_fields && field.name().starts_with("log.") {
            return None;
        }
        if !self.first {
            self.line.push(b',');
        }
        self.first = false;
        name_into(self.line, field.name());
        self.line.push(b':');
        Some(Json(self.line))
    }
}

impl Visit for EventFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if let Some(j) = self.member(field) {
            j.str(value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if let Some(j) = self.member(field) {
            j.integer(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Some(j) = self.member(field) {
            j.integer(value);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if let Some(j) = self.member(field) {
            j.literal(value);
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if let Some(j) = self.member(field) {
            j.f64(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if let Some(j) = self.member(field) {
            j.debug(value);
        }
    }
}

impl<S, W, T> tracing_subscriber::Layer<S> for JsonLines<W, T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
    T: FormatTime + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = SpanFields::default();
        attrs.record(&mut fields);
        let mut ext = span.extensions_mut();
        // Two of these layers on one registry share the span's fields (inserting twice
        // would panic).
        if ext.get_mut::<SpanFields>().is_none() {
            ext.insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        // Formatted before the span's lock is taken: a value whose formatting logs inside
        // the span would otherwise wait on that lock from its own thread.
        let mut recorded = SpanFields::default();
        values.record(&mut recorded);
        let mut ext = span.extensions_mut();
        if let Some(fields) = ext.get_mut::<SpanFields>() {
            for (name, value) in recorded.0 {
                fields.set(name, value);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        thread_local! {
            static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        let write = |line: &mut Vec<u8>| {
            line.clear();
            self.format(event, &ctx, line);
            let _ = self.writer.make_writer_for(event.metadata()).write_all(line);
        };
        // A line written from inside another's formatting (a `Debug` that logs), or while
        // the thread's locals are going, gets a buffer of its own.
        let kept = LINE.try_with(|line| match line.try_borrow_mut() {
            Ok(mut line) => {
                write(&mut line);
                true
            }
            Err(_) => false,
        });
        if kept != Ok(true) {
            write(&mut Vec::new());
        }
    }
}

impl<W, T: FormatTime> JsonLines<W, T> {
    fn format<S>(&self, event: &Event<'_>, ctx: &Context<'_, S>, line: &mut Vec<u8>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        line.extend_from_slice(b"{\"fields\":{");
        event.record(&mut EventFields { line, first: true, skip_log_fields: normalized.is_some() });
        line.extend_from_slice(b"},\"level\":\"");
        line.extend_from_slice(meta.level().as_str().as_bytes());
        line.push(b'"');
        if let Some(span) = ctx.event_span(event) {
            line.extend_from_slice(b",\"span\":{");
            if let Some(fields) = span.extensions().get::<SpanFields>() {
                for (name, value) in &fields.0 {
                    escape_into(line, name);
                    line.push(b':');
                    line.extend_from_slice(value);
                    line.push(b',');
                }
            }
            line.extend_from_slice(b"\"name\":");
            escape_into(line, span.name());
            line.push(b'}');
        } else {
            // A request without a span of its own names itself as its span would.
            let _ = REQUEST.try_with(|r| {
                for (name, value) in [
                    (&b",\"span\":{\"request_id\":"[..], r.id.as_str()),
                    (b",\"method\":", r.method.as_str()),
                    (b",\"path\":", &r.path),
                ] {
                    line.extend_from_slice(name);
                    escape_into(line, value);
                }
                line.extend_from_slice(b",\"name\":\"request\"}");
            });
        }
        line.extend_from_slice(b",\"target\":");
        escape_into(line, meta.target());
        line.extend_from_slice(b",\"timestamp\":\"");
        let mut stamp = Stamp(line);
        let _ = self.timer.format_time(&mut Writer::new(&mut stamp));
        line.extend_from_slice(b"\"}\n");
    }
}

/// The timer's text, appended to the line (it writes through `fmt::Write`).
struct Stamp<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Stamp<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tracing_subscriber::layer::SubscriberExt;

    /// The lines `f` logs, parsed, and as written.
    fn lines_of(f: impl FnOnce()) -> (Vec<serde_json::Value>, String) {
        let out = super::super::Batched::default();
        let subscriber = tracing_subscriber::registry().with(super::super::json_lines(out.clone()));
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(out.collecting.lock().unwrap().clone()).unwrap();
        (text.lines().map(|l| serde_json::from_str(l).expect(l)).collect(), text)
    }

    #[test]
    fn values_come_back_as_logged_whatever_they_hold() {
        let odd = "a \"quoted\" \\ line\nnext\ttab \u{1}\u{1f} é 😀 </script>";
        let (lines, text) = lines_of(|| {
            tracing::info!(text = odd, shown = %odd, debugged = ?odd, n = -3i64, big = u64::MAX, yes = true, "say {odd}");
            tracing::info!(ratio = 0.5f64, nan = f64::NAN, inf = f64::INFINITY, "numbers");
            tracing::info!("odd \"name\"" = 1u64, "dotted.name" = 2u64, "names");
        });
        assert_eq!(text.lines().count(), 3, "one line each: {text}");
        assert_eq!(
            lines[0]["fields"],
            json!({
                "message": format!("say {odd}"), "text": odd, "shown": odd, "debugged": format!("{odd:?}"),
                "n": -3, "big": u64::MAX, "yes": true,
            })
        );
        assert_eq!(lines[1]["fields"], json!({"message": "numbers", "ratio": 0.5, "nan": null, "inf": null}));
        assert_eq!(
            lines[2]["fields"],
            json!({"message": "names", "odd \"name\"": 1, "dotted.name": 2}),
            "a name escaped where it must be"
        );
    }

    #[test]
    fn a_line_written_while_a_request_is_handled_without_a_span_names_the_request_as_its_span_did() {
        let request = super::Request {
            id: "00c0ffee00c0ffee".to_owned(),
            method: actix_web::http::Method::POST,
            path: "/v1/\"odd\"".to_owned(),
        };
        let (lines, text) = lines_of(|| {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let (out, back) = rt.block_on(super::in_request(request, async {
                tracing::warn!("inside");
                // Across an await, as a handler's lines are.
                tokio::task::yield_now().await;
                tracing::info_span!("refresh", provider = "github").in_scope(|| tracing::warn!("in its own span"));
                7
            }));
            assert_eq!((out, back.id.as_str(), back.path.as_str()), (7, "00c0ffee00c0ffee", "/v1/\"odd\""));
            tracing::info!("after");
            // The span the middleware makes for text lines and exported traces.
            tracing::info_span!(
                "request",
                request_id = "00c0ffee00c0ffee",
                method = "POST",
                path = "/v1/\"odd\"",
                trace_id = tracing::field::Empty,
                otel.kind = tracing::field::Empty,
                otel.name = tracing::field::Empty,
                http.response.status_code = tracing::field::Empty,
            )
            .in_scope(|| tracing::warn!("inside"));
        });
        let [inside, own, after, _] = &lines[..] else { panic!("four lines: {lines:?}") };
        assert_eq!(
            inside["span"],
            json!({"request_id": "00c0ffee00c0ffee", "method": "POST", "path": "/v1/\"odd\"", "name": "request"})
        );
        assert_eq!(own["span"], json!({"name": "refresh", "provider": "github"}), "a span of its own wins");
        assert_eq!(after.get("span"), None, "outside the request");
        // Byte for byte what the span writes: up to the timestamp, the two lines are one.
        let upto_time = |l: &str| l[..l.find(",\"timestamp\"").unwrap()].to_owned();
        let raw: Vec<&str> = text.lines().collect();
        assert_eq!(upto_time(raw[0]), upto_time(raw[3]));
    }

    #[test]
    fn a_line_carries_its_innermost_span_with_the_fields_recorded_since_and_a_log_line_its_own_target() {
        let (lines, _) = lines_of(|| {
            let outer = tracing::info_span!("request", request_id = "r1", trace_id = tracing::field::Empty);
            let _o = outer.enter();
            outer.record("trace_id", "t1");
            outer.record("trace_id", "t2");
            tracing::info!("in the request");
            let inner = tracing::info_span!("refresh", provider = "github", attempt = 2u64, name = "shadow");
            inner.in_scope(|| tracing::warn!("in the refresh"));
            // As actix-web logs, through the `log` crate.
            tracing_log::format_trace(
                &log::Record::builder()
                    .args(format_args!("from log"))
                    .level(log::Level::Warn)
                    .target("actix_http::h1")
                    .module_path(Some("actix_http::h1::dispatcher"))
                    .file(Some("dispatcher.rs"))
                    .line(Some(7))
                    .build(),
            )
            .unwrap();
        });
        let [request, refresh, from_log] = &lines[..] else { panic!("three lines: {lines:?}") };
        assert_eq!(request["span"], json!({"name": "request", "request_id": "r1", "trace_id": "t2"}));
        assert_eq!(
            refresh["span"],
            json!({"name": "refresh", "provider": "github", "attempt": 2}),
            "the innermost only; its name wins over a field of that name (written last, as tracing-subscriber did)"
        );
        assert_eq!(refresh["level"], "WARN");
        assert_eq!(from_log["target"], "actix_http::h1", "a log line's own target");
        assert_eq!(from_log["level"], "WARN");
        assert_eq!(from_log["fields"], json!({"message": "from log"}), "without its log.* fields");
    }
}
