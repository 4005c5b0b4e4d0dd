//! The results of one run: a table for people, a JSON file for comparing runs.

use crate::apikey::ApiKeyResult;
use crate::audit::AuditWriterResult;
use crate::cpu::CpuShare;
use crate::load::Summary;
use crate::pgbench::Floor;
use crate::service::Memory;
use crate::storm::StormResult;
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub postgres: String,
    pub git_commit: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub subjects: usize,
    pub providers: usize,
    pub connections: usize,
    pub concurrency: usize,
    pub seconds_per_phase: u64,
    pub client_threads: usize,
    /// `None`: the product default.
    pub cache_max_age_seconds: Option<u64>,
    pub service_log_filter: Option<String>,
    pub service_env: Vec<String>,
    pub seed_seconds: f64,
    pub table_bytes: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LookupRun {
    pub cache_enabled: bool,
    /// Every key once (cache on) or a short closed loop (cache off), before measuring.
    pub warmup: Summary,
    pub saturating: Summary,
    pub half_rate: Summary,
    /// Lookups that reached Postgres during the saturating phase (index scans of the
    /// lookup index), and the share answered from the cache.
    pub db_lookups: Option<i64>,
    pub cache_hit_rate: Option<f64>,
    /// Rows the cache's confirmer re-read (by id) from the start of the run to the end of
    /// the saturating phase's statistics, and over how many seconds.
    pub confirmed_rows: Option<i64>,
    pub confirmed_seconds: f64,
    pub cpu_saturating: CpuShare,
    pub cpu_half_rate: CpuShare,
    pub memory_after_start: Memory,
    /// After one request (one API-key verification).
    pub memory_after_first_request: Memory,
    pub memory_after_warmup: Memory,
    pub memory_after_run: Memory,
    /// Hand-outs answered but not yet written to the audit table when the saturating
    /// phase ended (counted in open minutes' rows, written when the minute closes).
    pub audit_backlog: i64,
    /// CPU seconds of every Postgres process from the start of the saturating phase until
    /// the service exited (SIGTERM, drain), and that per hand-out of the two measured
    /// phases: with the cache on, what a cached hand-out costs the database.
    pub postgres_cpu_seconds: f64,
    pub postgres_cpu_us_per_handout: f64,
    /// Rows the hand-outs of the measured phases left in the audit table.
    pub handout_audit_rows: i64,
    pub service_warnings: usize,
    pub first_service_warning: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: &'static str,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub started_at: String,
    pub total_seconds: f64,
    pub machine: Machine,
    pub setup: Setup,
    pub floor: Floor,
    pub cache_on: LookupRun,
    pub cache_off: LookupRun,
    pub ratio_cache_on: f64,
    pub ratio_cache_off: f64,
    pub storm: StormResult,
    pub api_key: ApiKeyResult,
    pub audit_writer: AuditWriterResult,
    pub peak_rss_mib: f64,
    pub targets: Vec<Target>,
}

fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1_000.0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let s = n.unsigned_abs().to_string();
    let mut out = if n < 0 { "-".to_owned() } else { String::new() };
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn row(out: &mut String, num: &str, label: &str, s: &Summary) {
    let _ = writeln!(
        out,
        " {num:<2} {label:<34} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6} {:>9.1}",
        thousands(s.rps),
        ms(s.mean_us),
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us),
        s.errors,
        s.in_flight_little,
    );
}

/// Cores per part, and the service's and Postgres's CPU time per request.
fn cpu(c: &CpuShare, rps: f64) -> String {
    let per_request = |cores: f64| if rps > 0.0 { cores / rps * 1e6 } else { 0.0 };
    format!(
        "service {:.2}, load generator {:.2}, Postgres+other {:.2}, idle {:.2} cores \
         (per request: service {:.0} µs, Postgres+other {:.0} µs)",
        c.service_cores,
        c.client_cores,
        c.other_cores,
        c.idle_cores,
        per_request(c.service_cores),
        per_request(c.other_cores)
    )
}

impl Results {
    pub fn targets(&mut self) {
        let on = &self.cache_on;
        let half_p99 = on.half_rate.p99_us.max(self.cache_off.half_rate.p99_us);
        let errors = on.saturating.errors
            + on.half_rate.errors
            + self.cache_off.saturating.errors
            + self.cache_off.half_rate.errors
            + self.storm.errors as u64;
        self.targets = vec![
            Target {
                name: "lookup with cache vs floor",
                target: "≥ 1.00 × floor".into(),
                measured: format!("{:.2} ×", self.ratio_cache_on),
                met: self.ratio_cache_on >= 1.0,
            },
            Target {
                name: "p99 at half the saturating rate",
                target: "≤ 5 ms".into(),
                measured: format!(
                    "{} cache on, {} cache off",
                    ms(on.half_rate.p99_us),
                    ms(self.cache_off.half_rate.p99_us)
                ),
                met: half_p99 <= 5_000.0,
            },
            Target { name: "errors", target: "0".into(), measured: errors.to_string(), met: errors == 0 },
            Target {
                name: "lookup without cache vs floor",
                target: "≥ 0.35 × floor".into(),
                measured: format!("{:.2} ×", self.ratio_cache_off),
                met: self.ratio_cache_off >= 0.35,
            },
            Target {
                name: "refresh storm",
                target: "1 refresh call, every caller the new token".into(),
                measured: format!(
                    "{} call(s), {}/{} new token",
                    self.storm.refresh_calls, self.storm.got_new_token, self.storm.callers
                ),
                met: self.storm.refresh_calls == 1 && self.storm.got_new_token == self.storm.callers,
            },
            Target {
                name: "cached API-key check",
                target: "≤ 50 µs".into(),
                measured: format!("{:.1} µs median", self.api_key.cached_median_us),
                met: self.api_key.cached_median_us <= 50.0,
            },
            Target {
                name: "first API-key check",
                target: "one argon2 verify".into(),
                measured: format!(
                    "{} argon2 run(s), {:.1} ms (one verify alone {:.1} ms)",
                    self.api_key.first_argon2_runs, self.api_key.first_ms, self.api_key.argon2_verify_ms
                ),
                met: self.api_key.first_argon2_runs == 1,
            },
            Target {
                name: "unknown API-key ids under a flood",
                target: "no argon2 run".into(),
                measured: format!(
                    "{} argon2 run(s) for {} first verifications of new keys",
                    self.api_key.flood_argon2_runs, self.api_key.flood_first_keys
                ),
                met: self.api_key.flood_argon2_runs <= self.api_key.flood_first_keys as u64,
            },
            Target {
                name: "peak RSS, 100,000 connections cached",
                target: "≤ 64 MiB".into(),
                measured: format!("{:.1} MiB", self.peak_rss_mib),
                met: self.peak_rss_mib <= 64.0,
            },
        ];
    }

    pub fn table(&self) -> String {
        let mut o = String::new();
        let s = &self.setup;
        let _ = writeln!(
            o,
            "mcp-connect benchmark {}: {} cores, PostgreSQL {}, {} connections ({} subjects × {} providers), \
             {} client connections, {} s per phase",
            self.started_at,
            self.machine.cores,
            self.machine.postgres,
            thousands(s.connections as f64),
            thousands(s.subjects as f64),
            s.providers,
            s.concurrency,
            s.seconds_per_phase
        );
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            " {:<2} {:<34} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6} {:>9}",
            "#", "phase", "req/s", "mean", "p50", "p99", "max", "errors", "in flight"
        );
        let f = &self.floor;
        let _ = writeln!(
            o,
            " {:<2} {:<34} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6} {:>9}",
            "1",
            "floor: pgbench -M prepared",
            thousands(f.tps),
            f.latency_avg_ms.map_or("-".to_owned(), |l| format!("{l:.2} ms")),
            "-",
            "-",
            "-",
            f.failed.map_or("-".to_owned(), |x| x.to_string()),
            f.clients
        );
        for (num, name, run) in [("2", "cache on", &self.cache_on), ("3", "cache off", &self.cache_off)] {
            row(&mut o, num, &format!("lookup, {name}"), &run.saturating);
            row(
                &mut o,
                "",
                &format!("  at half rate ({}/s)", thousands(run.half_rate.offered_rps.unwrap_or(0.0))),
                &run.half_rate,
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            " 4  ratio to floor: cache on {:.2} ×, cache off {:.2} ×",
            self.ratio_cache_on, self.ratio_cache_off
        );
        let st = &self.storm;
        let _ = writeln!(
            o,
            " 5  refresh storm: {} callers on {} instances, provider {} ms: {} refresh call(s), {}/{} got the new token \
             ({} distinct), p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, errors {}",
            st.callers,
            st.instances,
            st.provider_delay_ms,
            st.refresh_calls,
            st.got_new_token,
            st.callers,
            st.distinct_tokens,
            st.p50_ms,
            st.p99_ms,
            st.max_ms,
            st.errors
        );
        let a = &self.api_key;
        let _ = writeln!(
            o,
            " 6  API key: first {:.1} ms, {} argon2 run (one verify alone {:.1} ms); cached median {:.2} µs, \
             p99 {:.2} µs; re-check after the interval {:.0} µs; {} first requests at once: {} argon2 runs, {:.0} ms",
            a.first_ms,
            a.first_argon2_runs,
            a.argon2_verify_ms,
            a.cached_median_us,
            a.cached_p99_us,
            a.recheck_median_us,
            a.herd,
            a.herd_argon2_runs,
            a.herd_wall_ms
        );
        let _ = writeln!(
            o,
            "    API key under {} unknown-key checks/s ({} sent): {} argon2 runs in the phase (at most one per \
             first verification of a new key, none from unknown ids); valid cached key p99 {:.2} µs; {} first \
             verifications of new valid keys p99 {:.1} ms",
            a.flood_rate,
            a.flood_requests,
            a.flood_argon2_runs,
            a.flood_cached_p99_us,
            a.flood_first_keys,
            a.flood_first_p99_ms
        );
        let on = &self.cache_on;
        let _ = writeln!(
            o,
            " 7  memory (cache on): peak RSS {:.1} MiB; RSS {:.1} MiB after start, {:.1} MiB after the first request, \
             {:.1} MiB after touching all {} keys",
            self.peak_rss_mib,
            mib(on.memory_after_start.rss_kib),
            mib(on.memory_after_first_request.rss_kib),
            mib(on.memory_after_warmup.rss_kib),
            thousands(s.connections as f64)
        );
        let _ = writeln!(o);
        let _ = writeln!(o, " details");
        for (name, run) in [("cache on", &self.cache_on), ("cache off", &self.cache_off)] {
            let sat = &run.saturating;
            let _ = writeln!(
                o,
                "   {name}: Little's law 32 / {} req/s = {} vs measured mean {}; p90 {}, p99.9 {}",
                thousands(sat.rps),
                ms(sat.little_mean_us),
                ms(sat.mean_us),
                ms(sat.p90_us),
                ms(sat.p999_us)
            );
            if let (Some(db), Some(hit)) = (run.db_lookups, run.cache_hit_rate) {
                let _ = writeln!(
                    o,
                    "   {name}: {} of {} lookups reached Postgres (cache hit rate {:.1} %)",
                    thousands(db as f64),
                    thousands((sat.requests + run.half_rate.requests) as f64),
                    hit * 100.0
                );
            }
            if let Some(rows) = run.confirmed_rows {
                let _ = writeln!(
                    o,
                    "   {name}: the confirmer re-read {} rows in batches over {:.0} s ({}/s) to keep entries in use cached",
                    thousands(rows as f64),
                    run.confirmed_seconds,
                    thousands(rows as f64 / run.confirmed_seconds.max(1.0))
                );
            }
            let _ = writeln!(
                o,
                "   {name}: hand-outs not yet in the audit table when the phase ended (their minute still open): {}",
                thousands(run.audit_backlog as f64)
            );
            let _ = writeln!(
                o,
                "   {name}: Postgres CPU per hand-out: {:.1} µs ({:.1} s in all, to the service's exit); {} audit rows for {} hand-outs",
                run.postgres_cpu_us_per_handout,
                run.postgres_cpu_seconds,
                thousands(run.handout_audit_rows as f64),
                thousands((sat.requests + run.half_rate.requests) as f64)
            );
            let _ = writeln!(o, "   {name}: CPU at saturation: {}", cpu(&run.cpu_saturating, sat.rps));
            let _ = writeln!(o, "   {name}: CPU at half rate:  {}", cpu(&run.cpu_half_rate, run.half_rate.rps));
            let w = &run.warmup;
            let _ = writeln!(
                o,
                "   {name}: warm-up {} requests at {} req/s, p99 {}, errors {}; service log warnings {}",
                thousands(w.requests as f64),
                thousands(w.rps),
                ms(w.p99_us),
                w.errors,
                run.service_warnings
            );
            if let Some(w) = &run.first_service_warning {
                let _ = writeln!(o, "   {name}: first service warning: {}", w.chars().take(400).collect::<String>());
            }
            if let Some(e) = sat.first_error.as_ref().or(run.half_rate.first_error.as_ref()) {
                let _ = writeln!(o, "   {name}: first error: {e}");
            }
        }
        let aw = &self.audit_writer;
        let _ = writeln!(
            o,
            "   audit writer alone, batches of {} minute rows: insert {:.1} ms ({} rows/s at most), touch {:.1} ms",
            thousands(aw.batch as f64),
            aw.insert_median_ms,
            thousands(aw.events_per_second),
            aw.touch_median_ms
        );
        if let Some(e) = &st.first_error {
            let _ = writeln!(o, "   storm: first error: {e}");
        }
        let _ = writeln!(
            o,
            "   seeding {} connections: {:.1} s; table with indexes {:.1} MiB",
            thousands(s.connections as f64),
            s.seed_seconds,
            s.table_bytes as f64 / 1_048_576.0
        );
        let _ = writeln!(o);
        let _ = writeln!(o, " targets (reported, not asserted)");
        for t in &self.targets {
            let _ = writeln!(
                o,
                "   [{}] {:<38} target {:<44} measured {}",
                if t.met { "met " } else { "MISS" },
                t.name,
                t.target,
                t.measured
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(o, " whole run: {:.0} s", self.total_seconds);
        o
    }
}
