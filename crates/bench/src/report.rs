//! The results of one run: a table for people, a JSON file for comparing runs.

use crate::apikey::ApiKeyResult;
use crate::audit::AuditWriterResult;
use crate::cpu::CpuShare;
use crate::db::ChangeLogReads;
use crate::load::Summary;
use crate::pgbench::Floors;
use crate::phase::CheckRun;
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
    /// Lookup runs (cache on, then off) in this run.
    pub repeat: usize,
    /// pgbench client counts; the floor is the best of them.
    pub floor_clients: Vec<usize>,
    /// The service's database transport, the same as the floor's.
    pub service_sslmode: &'static str,
    /// The saturating loops' load generator (`--generator`): wrk's version, or the bench's own.
    pub generator: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct LookupRun {
    pub cache_enabled: bool,
    /// Every key once (cache on) or a short closed loop (cache off), before measuring.
    pub warmup: Summary,
    /// From the warm-up's end until its hand-outs were all in the audit table.
    pub audit_wait_seconds: f64,
    pub saturating: Summary,
    /// The service process's CPU time over the saturating phase ÷ its requests.
    pub service_cpu_us_per_request: f64,
    pub half_rate: Summary,
    /// Lookups that reached Postgres during the saturating phase (index scans of the
    /// lookup index), and the share answered from the cache.
    pub db_lookups: Option<i64>,
    pub cache_hit_rate: Option<f64>,
    /// Rows of `connections` read by id (`connections_pkey`: the audit writer's join and
    /// the toucher; the confirmer reads none), and what the confirmer read from the change
    /// log (`None`: no such table), from the start of the saturating phase to the
    /// service's exit; `confirmed_seconds` is the saturating and half-rate phases.
    pub confirmed_rows: Option<i64>,
    pub change_log_reads: Option<ChangeLogReads>,
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

impl LookupRun {
    /// Rows read per second: `connections` by id (the audit writer's join), and the
    /// confirmer's from the change log.
    pub fn confirmer_rates(&self) -> (Option<f64>, Option<f64>) {
        let per_s = |rows: i64| rows as f64 / self.confirmed_seconds.max(1.0);
        (self.confirmed_rows.map(per_s), self.change_log_reads.map(|c| per_s(c.rows)))
    }
}

/// One of `--repeat` runs: the lookups with the cache on, then off, each on a fresh
/// instance.
#[derive(Debug, Clone, Serialize)]
pub struct RepeatRun {
    pub run: usize,
    pub cache_on: LookupRun,
    pub cache_off: LookupRun,
    /// Saturating requests/s ÷ the floor (no TLS) measured before the runs.
    pub ratio_cache_on: f64,
    pub ratio_cache_off: f64,
    /// The floor measured again right after this run's cache-on instance (the better of
    /// pgbench at the first sweep's two best client counts), and the saturating rates ÷ it.
    pub floor_beside: Option<crate::pgbench::Floor>,
    pub ratio_to_floor_beside: Option<f64>,
    pub ratio_off_to_floor_beside: Option<f64>,
    /// The bare handler's saturating rate right after this run's cache-on instance, and
    /// the cached rate ÷ it.
    pub ceiling_beside: Option<Summary>,
    pub ratio_to_ceiling_beside: Option<f64>,
}

/// The lookup with the cache on over a table of `connections` (`--scale-connections`).
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRun {
    pub connections: usize,
    /// `[cache] capacity` given to the service: room for every connection.
    pub cache_capacity: usize,
    pub seed_seconds: f64,
    pub table_bytes: i64,
    pub lookup: LookupRun,
    /// Its saturating rate ÷ the median of the cache-on runs at the first seeding.
    pub ratio_to_first_seeding: f64,
    /// Cache-on runs over the first seeding's keys right before the table grew and right
    /// after this run (their errors count with the run's).
    pub before: LookupRun,
    pub after: LookupRun,
    pub peak_rss_mib: f64,
}

impl ScaleRun {
    /// The saturating rates of [`Self::before`] and [`Self::after`].
    pub fn beside(&self) -> [f64; 2] {
        [self.before.saturating.rps, self.after.saturating.rps]
    }

    /// Its saturating rate ÷ the mean of [`Self::beside`]: what the target judges.
    pub fn ratio_to_beside(&self) -> f64 {
        let [before, after] = self.beside();
        self.lookup.saturating.rps / ((before + after) / 2.0).max(1e-9)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: &'static str,
    pub target: String,
    pub measured: String,
    /// `None`: not judged in this run (stated only, or the phase did not run).
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub started_at: String,
    pub total_seconds: f64,
    pub machine: Machine,
    pub setup: Setup,
    pub floor: Floors,
    pub runs: Vec<RepeatRun>,
    pub check: Option<CheckRun>,
    /// `None`: `--ceiling-phase false`.
    pub ceiling: Option<crate::ceiling::CeilingRun>,
    /// `None`: `--proxy-phase false`.
    pub proxy: Option<crate::proxy::ProxyRun>,
    /// `None`: `--key-store-phase false`.
    pub key_stores: Option<crate::keystores::KeyStoresRun>,
    /// Row 15 (issue 44).
    pub workload: Option<crate::workload::WorkloadRun>,
    pub scale: Option<ScaleRun>,
    pub storm: StormResult,
    pub api_key: ApiKeyResult,
    pub audit_writer: AuditWriterResult,
    /// The highest peak RSS of the cache-on instances at the first seeding.
    pub peak_rss_mib: f64,
    pub targets: Vec<Target>,
}

pub fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1_000.0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub fn thousands(x: f64) -> String {
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

fn pct(x: Option<f64>) -> String {
    x.map_or("n/a".to_owned(), |h| format!("{:.2} %", h * 100.0))
}

fn per_s(x: Option<f64>) -> String {
    x.map_or("n/a".to_owned(), |r| format!("{}/s", thousands(r)))
}

impl Results {
    pub fn first_run(&self) -> Option<&RepeatRun> {
        self.runs.first()
    }

    pub fn table(&self) -> String {
        let mut o = String::new();
        let s = &self.setup;
        let _ = writeln!(
            o,
            "mcp-connect benchmark {}: {} cores, PostgreSQL {}, {} connections ({} subjects × {} providers), \
             {} client connections, {} s per phase, {} run(s)",
            self.started_at,
            self.machine.cores,
            self.machine.postgres,
            thousands(s.connections as f64),
            thousands(s.subjects as f64),
            s.providers,
            s.concurrency,
            s.seconds_per_phase,
            s.repeat
        );
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            " {:<2} {:<34} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6} {:>9}",
            "#", "phase", "req/s", "mean", "p50", "p99", "max", "errors", "in flight"
        );
        self.floor_rows(&mut o);
        if let Some(first) = self.first_run() {
            for (num, name, run) in [("2", "cache on", &first.cache_on), ("3", "cache off", &first.cache_off)] {
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
                " 4  ratio to floor (no TLS): cache on {:.2} ×, cache off {:.2} × (rows 2-3: run 1 of {})",
                first.ratio_cache_on,
                first.ratio_cache_off,
                self.runs.len()
            );
        }
        self.storm_and_key_rows(&mut o);
        self.repeat_rows(&mut o);
        self.check_rows(&mut o);
        self.scale_row(&mut o);
        self.proxy_rows(&mut o);
        self.key_store_rows(&mut o);
        self.workload_rows(&mut o);
        self.ceiling_row(&mut o);
        let _ = writeln!(o);
        let _ = writeln!(o, " details (run 1; every run in the JSON)");
        self.details(&mut o);
        let _ = writeln!(o);
        let _ = writeln!(o, " targets (reported, not asserted)");
        for t in &self.targets {
            let mark = match t.met {
                Some(true) => "met ",
                Some(false) => "MISS",
                None => "n/a ",
            };
            let _ = writeln!(o, "   [{mark}] {:<46} target {:<44} measured {}", t.name, t.target, t.measured);
        }
        let _ = writeln!(o);
        let _ = writeln!(o, " whole run: {:.0} s", self.total_seconds);
        o
    }

    fn floor_rows(&self, o: &mut String) {
        let mut line = |label: String, f: &crate::pgbench::Floor| {
            let _ = writeln!(
                o,
                " {:<2} {:<34} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6} {:>9}",
                if label.starts_with("floor") { "1" } else { "" },
                label,
                thousands(f.tps),
                f.latency_avg_ms.map_or("-".to_owned(), |l| format!("{l:.2} ms")),
                "-",
                "-",
                "-",
                f.failed.map_or("-".to_owned(), |x| x.to_string()),
                f.clients
            );
        };
        if let Some(f) = self.floor.plain.best() {
            line(format!("floor: pgbench, no TLS, -c {}", f.clients), f);
        }
        match &self.floor.tls {
            Ok(tls) => {
                if let Some(f) = tls.best() {
                    line(format!("  with TLS (sslmode=require), -c {}", f.clients), f);
                }
            }
            Err(why) => {
                let _ = writeln!(o, "    {:<34} {:>9}  {why}", "  with TLS (sslmode=require)", "n/a");
            }
        }
    }

    fn storm_and_key_rows(&self, o: &mut String) {
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
        if let Some(on) = self.first_run().map(|r| &r.cache_on) {
            let _ = writeln!(
                o,
                " 7  memory (cache on): peak RSS {:.1} MiB (highest of {} run(s)); run 1: RSS {:.1} MiB after start, \
                 {:.1} MiB after the first request, {:.1} MiB after touching all {} keys",
                self.peak_rss_mib,
                self.runs.len(),
                mib(on.memory_after_start.rss_kib),
                mib(on.memory_after_first_request.rss_kib),
                mib(on.memory_after_warmup.rss_kib),
                thousands(self.setup.connections as f64)
            );
        }
    }

    /// One line per run, and how many runs kept the half-rate p99 within 5 ms.
    fn repeat_rows(&self, o: &mut String) {
        let _ = writeln!(o, " 8  runs (--repeat {}):", self.runs.len());
        let _ = writeln!(
            o,
            "    {:>3} {:>12} {:>7} {:>14} {:>7} {:>12} {:>13} {:>9} {:>14} {:>13}",
            "run",
            "cached req/s",
            "× floor",
            "uncached req/s",
            "× floor",
            "p99 half on",
            "p99 half off",
            "hit rate",
            "PG µs/hand-out",
            "svc µs/req"
        );
        for r in &self.runs {
            let _ = writeln!(
                o,
                "    {:>3} {:>12} {:>7.2} {:>14} {:>7.2} {:>12} {:>13} {:>9} {:>14.1} {:>13.1}",
                r.run,
                thousands(r.cache_on.saturating.rps),
                r.ratio_cache_on,
                thousands(r.cache_off.saturating.rps),
                r.ratio_cache_off,
                ms(r.cache_on.half_rate.p99_us),
                ms(r.cache_off.half_rate.p99_us),
                pct(r.cache_on.cache_hit_rate),
                r.cache_on.postgres_cpu_us_per_handout,
                r.cache_on.service_cpu_us_per_request
            );
        }
        if self.runs.iter().any(|r| r.floor_beside.is_some() || r.ceiling_beside.is_some()) {
            let _ = writeln!(o, "    beside each run (right after its cache-on instance):");
            let _ = writeln!(
                o,
                "    {:>3} {:>12} {:>13} {:>14} {:>13} {:>15} {:>11}",
                "run", "floor tps", "cached × it", "uncached × it", "ceiling req/s", "cached × ceil.", "ceil. × fl."
            );
            let x = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"));
            for r in &self.runs {
                let floor = r.floor_beside.as_ref().map(|f| f.tps);
                let ceiling = r.ceiling_beside.as_ref().map(|c| c.rps);
                let _ = writeln!(
                    o,
                    "    {:>3} {:>12} {:>13} {:>14} {:>13} {:>15} {:>11}",
                    r.run,
                    floor.map_or_else(|| "n/a".to_owned(), thousands),
                    x(r.ratio_to_floor_beside),
                    x(r.ratio_off_to_floor_beside),
                    ceiling.map_or_else(|| "n/a".to_owned(), thousands),
                    x(r.ratio_to_ceiling_beside),
                    x(floor.zip(ceiling).map(|(f, c)| c / f.max(1.0)))
                );
            }
        }
        let (on, off) = self.half_rate_p99_within_5ms();
        let _ = writeln!(
            o,
            "    p99 at half rate ≤ 5 ms: cache on in {on} of {n} runs, cache off in {off} of {n} runs",
            n = self.runs.len()
        );
    }

    /// Runs whose half-rate p99 was within 5 ms: (cache on, cache off).
    pub fn half_rate_p99_within_5ms(&self) -> (usize, usize) {
        let within = |f: fn(&RepeatRun) -> f64| self.runs.iter().filter(|r| f(r) <= 5_000.0).count();
        (within(|r| r.cache_on.half_rate.p99_us), within(|r| r.cache_off.half_rate.p99_us))
    }

    fn check_rows(&self, o: &mut String) {
        let Some(c) = &self.check else {
            let _ = writeln!(o, " 9  PostgreSQL slowed: not run (--slow-phase false, and no oha)");
            return;
        };
        match &c.slowed {
            Some(sl) => {
                let _ = writeln!(
                    o,
                    " 9  PostgreSQL slowed (a query holding a core: {:.1} CPU s in {:.1} s): cache on {} req/s = {:.2} × \
                     the unslowed {} req/s of the same instance; hit rate ≥ {}; p99 {}; errors {}",
                    sl.hog.cpu_seconds,
                    sl.hog.seconds,
                    thousands(sl.saturating.rps),
                    sl.ratio,
                    thousands(c.reference.rps),
                    pct(sl.hit_rate_at_least),
                    ms(sl.saturating.p99_us),
                    sl.saturating.errors
                );
                let _ = writeln!(o, "    slowed: CPU {}", cpu(&sl.cpu, sl.saturating.rps));
            }
            None => {
                let _ = writeln!(o, " 9  PostgreSQL slowed: not run (--slow-phase false)");
            }
        }
        match &c.oha {
            Ok(oh) => {
                let ratio = c.reference.rps / oh.rps.max(1e-9);
                let _ = writeln!(
                    o,
                    " 10 load generator vs {}: {} {} req/s, oha {} req/s ({} ÷ oha {:.2}, {}); \
                     {} connections, {} thread(s), random keys (-Z), same instance back to back; oha p99 {:.2} ms, \
                     {} non-200 or errors, {} cut at the deadline",
                    oh.version,
                    c.reference.generator,
                    thousands(c.reference.rps),
                    thousands(oh.rps),
                    c.reference.generator,
                    ratio,
                    if (ratio - 1.0).abs() <= 0.10 { "within 10 %" } else { "NOT within 10 %" },
                    oh.connections,
                    oh.threads,
                    oh.p99_ms,
                    oh.errors,
                    oh.aborted_at_deadline
                );
                // Which generator leaves cores idle, and whether the service's CPU per
                // request differs between them.
                if let Some(share) = &oh.cpu {
                    let _ = writeln!(o, "    CPU with oha: {}", cpu(share, oh.rps));
                    let generator = if c.reference.generator == "bench" { "the bench's generator" } else { "wrk" };
                    let _ = writeln!(o, "    CPU with {generator}: {}", cpu(&c.cpu_reference, c.reference.rps));
                }
            }
            Err(why) => {
                let _ = writeln!(o, " 10 load generator vs oha: n/a ({why})");
            }
        }
    }

    fn ceiling_row(&self, o: &mut String) {
        let Some(c) = &self.ceiling else {
            let _ = writeln!(o, " 13 framework ceiling: not run (--ceiling-phase false)");
            return;
        };
        row(o, "13", &format!("ceiling: bare handler, {} workers", c.workers), &c.saturating);
        let half = format!("  at half rate ({}/s)", thousands(c.half_rate.offered_rps.unwrap_or(0.0)));
        row(o, "", &half, &c.half_rate);
        let floor = self.floor.plain.best_tps().max(1.0);
        let _ = writeln!(
            o,
            "    the same {}-byte answer; cached lookup {:.2} × the ceiling ({}); this ceiling {:.2} × the floor",
            c.body_bytes,
            c.cached_ratio,
            if c.beside_each_run {
                "median of each run's ratio to the ceiling beside it"
            } else {
                "median run ÷ this row"
            },
            c.saturating.rps / floor
        );
        let _ = match &c.oha {
            Ok(oh) => writeln!(
                o,
                "    {} on the same handler: {} req/s, p99 {:.2} ms, {} non-200 or errors{}",
                oh.version,
                thousands(oh.rps),
                oh.p99_ms,
                oh.errors,
                oh.cpu
                    .as_ref()
                    .map_or(String::new(), |share| format!("; CPU (the handler as service): {}", cpu(share, oh.rps)))
            ),
            Err(why) => writeln!(o, "    oha on the same handler: n/a ({why})"),
        };
    }

    fn proxy_rows(&self, o: &mut String) {
        let Some(p) = &self.proxy else {
            let _ = writeln!(o, " 12 proxy: not run (--proxy-phase false)");
            return;
        };
        row(o, "12", "proxy: straight to the upstream", &p.direct);
        row(o, "", "  through /v1/proxy (cache on)", &p.proxied);
        row(o, "", "  straight, one connection", &p.direct_one);
        row(o, "", "  proxied, one connection", &p.proxied_one);
        let st = &p.stream;
        let _ = writeln!(
            o,
            "    proxied ÷ straight {:.2} ×; added p50 {:.3} ms; {} MiB streamed in {:.1} s: RSS {:.1} → peak {:.1} MiB \
             (+{:.2} MiB)",
            p.ratio,
            p.added_p50_ms,
            st.bytes >> 20,
            st.seconds,
            mib(st.memory_before.rss_kib),
            mib(st.peak_rss_kib),
            st.rss_growth_mib
        );
    }

    fn key_store_rows(&self, o: &mut String) {
        let Some(k) = &self.key_stores else {
            let _ = writeln!(o, " 14 key stores: not run (--key-store-phase false)");
            return;
        };
        for (i, r) in k.runs.iter().enumerate() {
            row(o, if i == 0 { "14" } else { "" }, &format!("key store {}: cache on", r.store), &r.cached);
            row(o, "", &format!("  {}: cache off", r.store), &r.uncached);
        }
        let rounds = |v: &[f64]| v.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ");
        for r in &k.ratios {
            let _ = writeln!(
                o,
                "    {} ÷ local (each loop ÷ the local loops before and after it; median of rounds): cache on {:.2} × ({}), cache off {:.2} × ({})",
                r.store,
                r.cached,
                rounds(&r.rounds_cached),
                r.uncached,
                rounds(&r.rounds_uncached)
            );
        }
        for r in &k.rotations {
            let _ = writeln!(
                o,
                "    KEK rotation, {}: {} data keys re-wrapped in {:.2} s ({:.1} ms each)",
                r.store,
                r.data_keys,
                r.seconds,
                r.seconds * 1_000.0 / (r.data_keys.max(1) as f64)
            );
        }
        for s in &k.skipped {
            let _ = writeln!(o, "    not run: {s}");
        }
    }

    fn workload_rows(&self, o: &mut String) {
        let Some(w) = &self.workload else {
            let _ = writeln!(o, " 15 workload identity: not run (--workload-phase false)");
            return;
        };
        for (i, (what, s)) in w.loops.iter().enumerate() {
            row(o, if i == 0 { "15" } else { "" }, &format!("cached hand-out, {what}"), s);
        }
        let rounds = w.rounds.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ");
        let _ = writeln!(
            o,
            "    workload token ÷ API key (each loop ÷ the key loops before and after it; median of rounds): {:.2} × ({rounds}); bearer {} bytes against {}",
            w.ratio, w.token_bytes, w.key_bytes
        );
    }

    fn scale_row(&self, o: &mut String) {
        let Some(sc) = &self.scale else {
            let _ = writeln!(o, " 11 scale: not run (--scale-connections N)");
            return;
        };
        let l = &sc.lookup;
        let (by_id, log) = l.confirmer_rates();
        let _ = writeln!(
            o,
            " 11 scale, {} connections (cache capacity {}): cache on {} req/s = {:.2} × the runs at {} beside it \
             ({} before the table grew, {} after), {:.2} × row 8's median; \
             half-rate p99 {}; hit rate {}; peak RSS {:.1} MiB; confirmer rows/s: change log {}; connections by id (audit join) {}; \
             seeding {:.0} s",
            thousands(sc.connections as f64),
            thousands(sc.cache_capacity as f64),
            thousands(l.saturating.rps),
            sc.ratio_to_beside(),
            thousands(self.setup.connections as f64),
            thousands(sc.beside()[0]),
            thousands(sc.beside()[1]),
            sc.ratio_to_first_seeding,
            ms(l.half_rate.p99_us),
            pct(l.cache_hit_rate),
            sc.peak_rss_mib,
            per_s(log),
            per_s(by_id),
            sc.seed_seconds
        );
    }

    fn details(&self, o: &mut String) {
        let s = &self.setup;
        let floors = |sweep: &crate::pgbench::FloorSweep| {
            sweep.runs.iter().map(|f| format!("-c {} {}", f.clients, thousands(f.tps))).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(o, "   floor, no TLS (tps): {}", floors(&self.floor.plain));
        match &self.floor.tls {
            Ok(tls) => {
                let _ = writeln!(o, "   floor, TLS (tps): {}", floors(tls));
            }
            Err(why) => {
                let _ = writeln!(o, "   floor, TLS: n/a ({why})");
            }
        }
        let _ = writeln!(o, "   the service's database connections: sslmode={}, as the floor's", s.service_sslmode);
        let _ = writeln!(
            o,
            "   load generator of the saturating loops (rows 2, 3, 8-11, 13): {}; of the warm-ups, open loops and \
             other rows: the bench's own",
            s.generator
        );
        if let Some(first) = self.first_run() {
            for (name, run) in [("cache on", &first.cache_on), ("cache off", &first.cache_off)] {
                lookup_details(o, name, run);
            }
        }
        if let Some(c) = &self.check {
            let _ = writeln!(
                o,
                "   check instance: {} lookups reached Postgres after the warm-up (reference, oha, slowed phase); \
                 reference CPU: {}; service log warnings {}",
                c.db_lookups_after_warmup.map_or("n/a".to_owned(), |d| thousands(d as f64)),
                cpu(&c.cpu_reference, c.reference.rps),
                c.service_warnings
            );
            if let Some(e) = c.slowed.as_ref().and_then(|s| s.saturating.first_error.as_ref()) {
                let _ = writeln!(o, "   slowed: first error: {e}");
            }
        }
        if let Some(sc) = &self.scale {
            lookup_details(o, "scale", &sc.lookup);
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
        if let Some(e) = &self.storm.first_error {
            let _ = writeln!(o, "   storm: first error: {e}");
        }
        let _ = writeln!(
            o,
            "   seeding {} connections: {:.1} s; table with indexes {:.1} MiB",
            thousands(s.connections as f64),
            s.seed_seconds,
            s.table_bytes as f64 / 1_048_576.0
        );
    }
}

fn lookup_details(o: &mut String, name: &str, run: &LookupRun) {
    let sat = &run.saturating;
    let _ = writeln!(
        o,
        "   {name}: Little's law {} / {} req/s = {} vs measured mean {}; p90 {}, p99.9 {}",
        sat.connections,
        thousands(sat.rps),
        ms(sat.little_mean_us),
        ms(sat.mean_us),
        ms(sat.p90_us),
        ms(sat.p999_us)
    );
    if let (Some(db), Some(hit)) = (run.db_lookups, run.cache_hit_rate) {
        let _ = writeln!(
            o,
            "   {name}: {} of {} lookups reached Postgres (cache hit rate {:.2} %)",
            thousands(db as f64),
            thousands((sat.requests + run.half_rate.requests) as f64),
            hit * 100.0
        );
    }
    if run.cache_enabled {
        let (by_id, log) = run.confirmer_rates();
        let entries = run.change_log_reads.map_or(String::new(), |c| {
            format!(" ({} index entries)", thousands(c.index_entries as f64 / run.confirmed_seconds.max(1.0)))
        });
        let _ = writeln!(
            o,
            "   {name}: confirmer over the measured phases ({:.0} s): change log {}{entries}; \
             connections read by id (connections_pkey: the audit writer's join, one per row of a hand-out not served from the cache) {}",
            run.confirmed_seconds,
            log.map_or("n/a (no cache_change_log table)".to_owned(), |r| format!("{} rows/s", thousands(r))),
            by_id.map_or("n/a".to_owned(), |r| format!("{} rows/s", thousands(r)))
        );
    }
    let _ = writeln!(
        o,
        "   {name}: hand-outs not yet in the audit table when the phase ended (their minute still open): {}; \
         waited {:.0} s for the warm-up's audit",
        thousands(run.audit_backlog as f64),
        run.audit_wait_seconds
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
