//! The measured closed loops' load generator: [wrk](https://github.com/wg/wrk), Debian's
//! package (bench/run.sh installs it). Issue 46: the bench's own generator and `oha` gave
//! the cached lookup different ratios to the framework's ceiling, so the saturating loops
//! the targets are judged on are sent by a well-kept generator, not a hand-written one.
//! wrk is C on epoll: the cheapest of the three per request, so on two cores it takes the
//! least from what it measures.
//!
//! A Lua script the bench writes asks for random keys like the bench's generator does (a
//! body per request, from a per-thread random sequence) and writes wrk's summary as JSON to
//! a file in its `done` hook. wrk counts answers with a status over 399 as errors; it does
//! not read bodies (a Lua `response` hook would cost a call per answer), so the bench's own
//! sweep before each loop is what checks that every key answers `connected`.
//!
//! The open loops (the half-rate p99) stay with the bench's generator: wrk has no
//! constant-rate mode (wrk2 has, and is not packaged).

use crate::http1::Target;
use crate::load::{KeySpace, Summary};
use anyhow::Context;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `wrk -v` (which exits with 1 after printing it), or `None` when it cannot be run.
pub fn version(bin: &Path) -> Option<String> {
    let out = std::process::Command::new(bin).arg("-v").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next()?.trim();
    first.starts_with("wrk ").then(|| first.split(" Copyright").next().unwrap_or(first).trim().to_owned())
}

/// The script: `POST /v1/token` for a random key of `keys` per request, and the summary as
/// JSON into `out` at the end.
fn script(target: &Target, keys: KeySpace, out: &Path) -> String {
    let prefix = format!(
        "POST /v1/token HTTP/1.1\\r\\nHost: {}\\r\\nAuthorization: Bearer {}\\r\\n\
         Content-Type: application/json\\r\\nContent-Length: ",
        lua_escaped(&target.addr.to_string()),
        lua_escaped(&target.api_key)
    );
    format!(
        r#"-- Written by mcp-connect-bench (crates/bench/src/wrk.rs).
local keys, providers = {keys}, {providers}
local prefix = "{prefix}"
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function init(args)
  math.randomseed(0x6d637063 + 7919 * id)
end
function request()
  local i = math.random(0, keys - 1)
  local body = string.format('{{"subject":"user%05d","provider":"p%d"}}', math.floor(i / providers), i % providers + 1)
  return prefix .. #body .. "\r\n\r\n" .. body
end
function done(summary, latency, requests)
  local e = summary.errors
  local f = assert(io.open("{out}", "w"))
  f:write(string.format(
    '{{"duration_us":%d,"requests":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"mean_us":%.3f,"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d}}',
    summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
  f:close()
end
"#,
        keys = keys.len(),
        providers = keys.providers,
        out = lua_escaped(&out.display().to_string()),
    )
}

/// `s` for inside a Lua string in double quotes.
fn lua_escaped(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// What the script's `done` hook writes.
#[derive(Debug, serde::Deserialize)]
struct Report {
    duration_us: u64,
    requests: u64,
    connect: u64,
    read: u64,
    write: u64,
    status: u64,
    timeout: u64,
    mean_us: f64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
}

/// A closed loop of `conns` connections over `threads` threads for `duration` (whole
/// seconds, at least one), blocking: run it off the async runtime.
pub fn closed_loop(
    bin: &Path,
    dir: &Path,
    target: &Target,
    keys: KeySpace,
    conns: usize,
    threads: usize,
    duration: Duration,
) -> anyhow::Result<Summary> {
    let id = uuid::Uuid::new_v4().simple();
    let files = Files { script: dir.join(format!("wrk-{id}.lua")), report: dir.join(format!("wrk-{id}.json")) };
    // The script holds the API key: readable by this user only, and removed however the
    // run ends (`Files`' drop).
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&files.script)?
        .write_all(script(target, keys, &files.report).as_bytes())?;
    let seconds = duration.as_secs().max(1);
    // wrk opens connections ÷ threads on each thread: the connections are rounded down to a
    // multiple of the threads, so that the summary says how many were open.
    let threads = threads.clamp(1, conns.max(1));
    let conns = conns / threads * threads;
    let status = std::process::Command::new(bin)
        .args(["-c", &conns.to_string(), "-t", &threads.to_string(), "-d", &format!("{seconds}s")])
        // A slow answer is measured, not cut: only one that takes longer than this is an error.
        .args(["--timeout", "30s", "-s"])
        .arg(&files.script)
        .arg(format!("http://{}/v1/token", target.addr))
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    anyhow::ensure!(status.success(), "wrk failed ({status})");
    let text = std::fs::read_to_string(&files.report).context("wrk wrote no report")?;
    let report: Report = serde_json::from_str(&text).context("wrk's report")?;
    Ok(summary(&report, conns, threads))
}

/// The script and the report of one run, removed when dropped.
struct Files {
    script: PathBuf,
    report: PathBuf,
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.script);
        let _ = std::fs::remove_file(&self.report);
    }
}

fn summary(r: &Report, conns: usize, threads: usize) -> Summary {
    // wrk's `requests` are the answers it read (those over 399 among them); a request that
    // failed on the socket or timed out is not one of them. `Summary::requests` counts
    // every request, failed or not, as the bench's generator does, so that requests −
    // errors is what was answered.
    let failed = r.connect + r.read + r.write + r.timeout;
    let errors = failed + r.status;
    let first_error = (errors > 0).then(|| {
        format!(
            "wrk: {} connect, {} read, {} write, {} timeout errors, {} answers over 399",
            r.connect, r.read, r.write, r.timeout, r.status
        )
    });
    let seconds = r.duration_us as f64 / 1e6;
    let rps = if seconds > 0.0 { r.requests as f64 / seconds } else { 0.0 };
    Summary {
        mode: "closed",
        generator: "wrk",
        connections: conns,
        client_threads: threads,
        seconds,
        requests: r.requests + failed,
        errors,
        first_error,
        rps,
        offered_rps: None,
        mean_us: r.mean_us,
        p50_us: r.p50_us,
        p90_us: r.p90_us,
        p99_us: r.p99_us,
        p999_us: r.p999_us,
        max_us: r.max_us,
        in_flight_little: rps * r.mean_us / 1e6,
        little_mean_us: if rps > 0.0 { conns as f64 / rps * 1e6 } else { 0.0 },
        slow_windows: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_the_rate_over_wrks_own_duration_and_every_error_kind() {
        let r: Report = serde_json::from_str(
            r#"{"duration_us":8000000,"requests":400000,"connect":0,"read":1,"write":0,"status":2,"timeout":0,
                "mean_us":640.5,"p50_us":600,"p90_us":900,"p99_us":1500,"p999_us":3000,"max_us":9000}"#,
        )
        .unwrap();
        let s = summary(&r, 32, 1);
        // The read error's request is one wrk did not count: answered = requests − errors.
        assert_eq!((s.generator, s.mode, s.requests, s.errors), ("wrk", "closed", 400_001, 3));
        assert_eq!(s.requests - s.errors, 400_000 - 2);
        assert!((s.rps - 50_000.0).abs() < 1e-6 && (s.little_mean_us - 640.0).abs() < 1e-6);
        assert!((s.in_flight_little - 32.025).abs() < 1e-9);
        assert_eq!(
            s.first_error.as_deref(),
            Some("wrk: 0 connect, 1 read, 0 write, 0 timeout errors, 2 answers over 399")
        );
        assert!(summary(&Report { read: 0, status: 0, ..r }, 32, 1).first_error.is_none());
    }

    #[test]
    fn the_script_asks_for_every_key_as_the_bench_names_it() {
        let target = Target::token("127.0.0.1:8080".parse().unwrap(), "mcpc_k_abc");
        let text = script(&target, KeySpace { subjects: 25_000, providers: 4 }, Path::new("/tmp/x.json"));
        assert!(text.contains("local keys, providers = 100000, 4"));
        // Lua's %05d and provider numbering as KeySpace::key: subject i / providers, provider i % providers + 1.
        assert!(
            text.contains(r#"'{"subject":"user%05d","provider":"p%d"}', math.floor(i / providers), i % providers + 1"#)
        );
        assert!(text.contains(r"Host: 127.0.0.1:8080\r\nAuthorization: Bearer mcpc_k_abc\r\n"));
        assert!(text.contains(r#"io.open("/tmp/x.json", "w")"#));
    }

    #[test]
    fn a_quote_or_backslash_cannot_end_the_scripts_strings() {
        assert_eq!(lua_escaped(r#"/tmp/a"b\c"#), r#"/tmp/a\"b\\c"#);
        let target = Target::token("127.0.0.1:8080".parse().unwrap(), "k");
        let text = script(&target, KeySpace { subjects: 1, providers: 1 }, Path::new(r#"/tmp/"x".json"#));
        assert!(text.contains(r#"io.open("/tmp/\"x\".json", "w")"#));
    }
}
