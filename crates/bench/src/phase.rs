//! One service instance under load. A lookup run (`Phase::lookup`): warm-up, a saturating
//! closed loop, an open loop at half its rate, then Postgres's counters once the service
//! has exited. The check run (`Phase::check`): the same warm-up, a closed loop as the
//! reference, `oha` against the same instance, and a closed loop while PostgreSQL is
//! slowed.

use crate::cpu::{CpuShare, CpuSnapshot, PostgresCpu};
use crate::db::{self, ChangeLogReads};
use crate::http1::Target;
use crate::load::{self, KeySpace, Summary};
use crate::oha::{self, OhaRun, Serving};
use crate::pgbench::{self, Floor, FloorSweep};
use crate::report::LookupRun;
use crate::service::{Memory, Service, ServiceSetup};
use crate::slowdown::{Hog, HogResult};
use crate::wrk;
use crate::{Args, Generator, progress};
use mcp_connect::store::PgPool;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};
use time::OffsetDateTime;

pub struct Phase<'a> {
    pub args: &'a Args,
    pub keys: KeySpace,
    pub setup: &'a ServiceSetup,
    pub pool: &'a PgPool,
    pub api_key: &'a str,
    pub started: Instant,
}

/// What the warm-up left: its numbers, and the counters read before it.
struct Warm {
    first: Summary,
    warmup: Summary,
    memory_after_start: Memory,
    memory_after_first_request: Memory,
    memory_after_warmup: Memory,
    scans_at_start: Option<i64>,
    /// Hand-out rows from here on are this instance's (their `at` is their minute).
    audit_since: OffsetDateTime,
    handouts_at_start: i64,
    audit_wait_seconds: f64,
}

impl Warm {
    /// Requests of the warm-up (and the first one alone): with the cache on each is a
    /// miss, one index scan each.
    fn requests(&self) -> u64 {
        self.first.requests + self.warmup.requests
    }

    fn answered(&self) -> u64 {
        self.requests() - self.first.errors - self.warmup.errors
    }
}

/// Postgres's counters when the saturating phase began, read again once the service is
/// gone.
struct Counters {
    by_id_at_start: Option<i64>,
    change_log_at_start: Option<ChangeLogReads>,
    /// Postgres's CPU from the saturating phase on, until the service has exited.
    postgres_cpu: PostgresCpu,
    handout_rows_at_start: i64,
    /// From the start of the saturating phase to the end of the half-rate phase.
    measured_seconds: f64,
}

/// The cross-check and resilience instance (cache on).
#[derive(Debug, Clone, Serialize)]
pub struct CheckRun {
    pub warmup: Summary,
    /// The bench's closed loop, unslowed: what oha and the slowed phase are compared with.
    pub reference: Summary,
    pub cpu_reference: CpuShare,
    /// `Err`: why oha did not run.
    pub oha: Result<OhaRun, String>,
    pub slowed: Option<SlowedRun>,
    /// Lookups that reached Postgres after the warm-up (reference, oha and slowed phase).
    pub db_lookups_after_warmup: Option<i64>,
    pub service_warnings: usize,
    pub first_service_warning: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SlowedRun {
    pub saturating: Summary,
    pub cpu: CpuShare,
    pub hog: HogResult,
    /// Slowed rate ÷ the reference rate of the same instance.
    pub ratio: f64,
    /// The cache hit rate of the slowed phase, counting every lookup that reached Postgres
    /// after the warm-up against it (the counters of a phase are exact only once the
    /// service's sessions have ended): a lower bound.
    pub hit_rate_at_least: Option<f64>,
}

impl Phase<'_> {
    fn conns(&self) -> usize {
        self.args.concurrency as usize
    }

    fn threads(&self) -> usize {
        self.args.client_threads as usize
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(self.args.seconds)
    }

    fn target(&self, svc: &Service) -> Target {
        Target::token(svc.addr, self.api_key)
    }

    /// Runs a blocking load phase off the async runtime (it has its own).
    pub async fn load<F>(&self, f: F) -> anyhow::Result<Summary>
    where
        F: FnOnce() -> anyhow::Result<Summary> + Send + 'static,
    {
        tokio::task::spawn_blocking(f).await?
    }

    async fn closed_loop(&self, target: &Target, duration: Duration) -> anyhow::Result<Summary> {
        let (t, keys, conns, threads) = (target.clone(), self.keys, self.conns(), self.threads());
        self.load(move || load::closed_loop(&t, keys, conns, threads, duration)).await
    }

    /// A saturating closed loop whose rate a target judges, sent by `--generator`, and
    /// where the cores went meanwhile (`serving`: who answers it).
    pub async fn saturate(
        &self,
        target: &Target,
        duration: Duration,
        serving: Serving<'_>,
    ) -> anyhow::Result<(Summary, CpuShare)> {
        let pids = serving.pids();
        let cpu0 = CpuSnapshot::take(pids);
        match self.args.generator {
            Generator::Bench => {
                let summary = self.closed_loop(target, duration).await?;
                Ok((summary, cpu0.share_until(&CpuSnapshot::take(pids))))
            }
            Generator::Wrk => {
                let (bin, dir, t) = (self.args.wrk.clone(), self.setup.dir.clone(), target.clone());
                let (keys, conns, threads) = (self.keys, self.conns(), self.threads());
                let summary =
                    self.load(move || wrk::closed_loop(&bin, &dir, &t, keys, conns, threads, duration)).await?;
                // wrk has been waited for: its CPU time is the bench's children's now.
                let bench_serves = matches!(serving, Serving::Bench);
                Ok((summary, cpu0.share_with_child_generator_until(&CpuSnapshot::take(pids), bench_serves)))
            }
        }
    }

    /// The floor again beside one run, on a quiet server: pgbench (no TLS, the service's
    /// transport) at the two client counts that did best in the first sweep, for as many
    /// seconds each, the better counting, so that it is the same statistic as the first
    /// sweep's best (a best of one run would come out lower on average). `None` when
    /// pgbench failed (said in the progress lines): a floor missing beside one run does
    /// not end a bench run of half an hour.
    pub async fn floor_again(&self, first: &FloorSweep, run: usize) -> anyhow::Result<Option<Floor>> {
        let mut ranked: Vec<&Floor> = first.runs.iter().collect();
        ranked.sort_by(|a, b| b.tps.total_cmp(&a.tps));
        ranked.truncate(2);
        if ranked.is_empty() {
            return Ok(None);
        }
        let quiet = db::quiet_note(db::quiet(self.pool).await?);
        let counts: Vec<usize> = ranked.iter().map(|f| f.clients).collect();
        progress(
            self.started,
            &format!(
                "floor-{run}: pgbench sslmode={}, clients {counts:?}, {} s each ({quiet})",
                first.sslmode, self.args.seconds
            ),
        );
        let url = db::with_param(&self.setup.database_url, "sslmode", first.sslmode)?;
        let (subjects, providers) = (self.keys.subjects, self.keys.providers);
        let mut best: Option<Floor> = None;
        for f in ranked {
            match pgbench::run(&url, &self.setup.dir, subjects, providers, f.clients, f.threads, self.args.seconds)
                .await
            {
                Ok(again) if best.as_ref().is_none_or(|b| again.tps > b.tps) => best = Some(again),
                Ok(_) => {}
                Err(e) => progress(self.started, &format!("floor-{run}: pgbench -c {} failed: {e:#}", f.clients)),
            }
        }
        Ok(best)
    }

    /// One service instance: warm-up, saturating closed loop, open loop at half its rate.
    pub async fn lookup(&self, name: &str, cache_enabled: bool) -> anyhow::Result<LookupRun> {
        let svc = self.setup.start(name, cache_enabled).await?;
        let result = self.measure(&svc, cache_enabled).await;
        let warnings = svc.warnings().await;
        if result.is_err() {
            eprintln!("--- {} (tail) ---\n{}", svc.log_path().display(), svc.log_tail(20).await);
        }
        svc.stop().await;
        let (mut run, warm, counters) = result?;
        // From the saturating phase to the service's exit: the hand-out audit it wrote
        // after the phases (at the minute's end, or at drain) is part of their cost.
        let pg_seconds = counters.postgres_cpu.finish();
        let handouts = (run.saturating.requests + run.half_rate.requests)
            .saturating_sub(run.saturating.errors + run.half_rate.errors);
        run.postgres_cpu_seconds = pg_seconds;
        run.postgres_cpu_us_per_handout = pg_seconds / (handouts.max(1) as f64) * 1e6;
        run.handout_audit_rows = db::handout_rows(self.pool, warm.audit_since).await? - counters.handout_rows_at_start;
        run.service_warnings = warnings.len();
        run.first_service_warning = warnings.into_iter().next();
        if cache_enabled {
            // A backend publishes its last counters when it exits (an idle one only 10 s
            // later): with the service's sessions gone, its lookups and re-reads are all in.
            progress(self.started, &format!("{name}: waiting for the service's database sessions to end"));
            db::wait_for_service_sessions_to_end(self.pool).await?;
            let scans = db::lookup_index_scans(self.pool).await?;
            let measured = run.saturating.requests + run.half_rate.requests;
            run.db_lookups = warm.scans_at_start.zip(scans).map(|(a, b)| (b - a - warm.requests() as i64).max(0));
            run.cache_hit_rate =
                run.db_lookups.filter(|_| measured > 0).map(|d| 1.0 - (d as f64 / measured as f64).min(1.0));
            run.confirmed_rows = counters.by_id_at_start.zip(db::rows_read_by_id(self.pool).await?).map(|(a, b)| b - a);
            run.change_log_reads =
                counters.change_log_at_start.zip(db::change_log_reads(self.pool).await?).map(|(a, b)| ChangeLogReads {
                    rows: b.rows - a.rows,
                    index_entries: b.index_entries - a.index_entries,
                });
            run.confirmed_seconds = counters.measured_seconds;
        }
        Ok(run)
    }

    /// Start memory, one request alone, the warm-up (every key once with the cache on),
    /// then a wait until the warm-up's hand-outs are in the audit table.
    async fn warm(&self, svc: &Service, cache_enabled: bool) -> anyhow::Result<Warm> {
        let target = self.target(svc);
        let (keys, conns, threads) = (self.keys, self.conns(), self.threads());
        let memory_after_start = svc.memory()?;
        // Lookups that reached Postgres, counted from here (nothing has asked yet).
        let scans_at_start = db::lookup_index_scans(self.pool).await?;
        let audit_since = OffsetDateTime::now_utc() - time::Duration::minutes(2);
        let handouts_at_start = db::handout_events(self.pool, audit_since).await?;
        // One request alone first, so that the key is verified (argon2) once before the
        // load and the memory after that verification is known.
        let t = target.clone();
        let first = self.load(move || load::closed_loop(&t, keys, 1, 1, Duration::ZERO)).await?;
        if first.errors > 0 {
            anyhow::bail!("the first request failed: {}", first.first_error.unwrap_or_default());
        }
        let memory_after_first_request = svc.memory()?;
        let warmup = if cache_enabled {
            progress(self.started, &format!("{}: touching all {} keys", svc.name, keys.len()));
            let t = target.clone();
            self.load(move || load::sweep(&t, keys, conns, threads)).await?
        } else {
            progress(self.started, &format!("{}: warm-up 2 s", svc.name));
            self.closed_loop(&target, Duration::from_secs(2)).await?
        };
        let memory_after_warmup = svc.memory()?;
        let mut warm = Warm {
            first,
            warmup,
            memory_after_start,
            memory_after_first_request,
            memory_after_warmup,
            scans_at_start,
            audit_since,
            handouts_at_start,
            audit_wait_seconds: 0.0,
        };
        warm.audit_wait_seconds = self.wait_for_warmup_audit(svc, &warm).await?;
        Ok(warm)
    }

    /// The warm-up's hand-outs are counted in the rows of its minute, written once that
    /// minute has closed: wait for the minute to close and for every row to be written
    /// (100,000 rows take the writer seconds, a million a minute or more), so that the
    /// Postgres CPU measured from here on is the measured phases' own and the audit
    /// writer does not compete with them.
    async fn wait_for_warmup_audit(&self, svc: &Service, warm: &Warm) -> anyhow::Result<f64> {
        let waiting = Instant::now();
        let into_minute = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() % 60;
        progress(
            self.started,
            &format!("{}: waiting {} s for the warm-up's minute to be written", svc.name, 62 - into_minute),
        );
        tokio::time::sleep(Duration::from_secs(62 - into_minute)).await;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let written = db::handout_events(self.pool, warm.audit_since).await? - warm.handouts_at_start;
            if written >= warm.answered() as i64 {
                break;
            }
            if Instant::now() > deadline {
                progress(
                    self.started,
                    &format!(
                        "{}: {written} of {} warm-up hand-outs written after 5 min; going on",
                        svc.name,
                        warm.answered()
                    ),
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(waiting.elapsed().as_secs_f64())
    }

    async fn measure(&self, svc: &Service, cache_enabled: bool) -> anyhow::Result<(LookupRun, Warm, Counters)> {
        let target = self.target(svc);
        let (keys, conns, threads, duration) = (self.keys, self.conns(), self.threads(), self.duration());
        let warm = self.warm(svc, cache_enabled).await?;

        progress(self.started, &format!("{}: closed loop, {} connections, {} s", svc.name, conns, duration.as_secs()));
        let handout_rows_at_start = db::handout_rows(self.pool, warm.audit_since).await?;
        // The confirmer's reads are counted over the measured phases (a busy backend
        // publishes its counters about once a second, so up to a second's worth of the
        // wait before may count in).
        let by_id_at_start = db::rows_read_by_id(self.pool).await?;
        let change_log_at_start = db::change_log_reads(self.pool).await?;
        let window = Instant::now();
        let postgres_cpu = PostgresCpu::start();
        let (saturating, cpu_saturating) = self.saturate(&target, duration, Serving::Processes(&[svc.pid])).await?;
        // Hand-outs answered but not yet in the audit table: counted in the rows of minutes
        // that have not closed yet (written when they close, or at the service's exit).
        let answered = warm.answered() + saturating.requests.saturating_sub(saturating.errors);
        let audit_backlog =
            answered as i64 - (db::handout_events(self.pool, warm.audit_since).await? - warm.handouts_at_start);

        let rate = (saturating.rps / 2.0).max(1.0);
        progress(self.started, &format!("{}: open loop at {:.0} req/s, {} s", svc.name, rate, duration.as_secs()));
        let cpu1 = CpuSnapshot::take(&[svc.pid]);
        let t = target.clone();
        let half_rate = self.load(move || load::open_loop(&t, keys, conns, threads, duration, rate)).await?;
        let cpu_half_rate = cpu1.share_until(&CpuSnapshot::take(&[svc.pid]));
        let windows: Vec<String> = half_rate
            .slow_windows
            .iter()
            .map(|w| format!("{} {} (max {:.1} ms)", w.at, w.slow, w.max_us / 1e3))
            .collect();
        progress(
            self.started,
            &format!(
                "{}: half rate, 100 ms windows with most requests over {} ms: {}",
                svc.name,
                load::SLOW.as_millis(),
                windows.join(", ")
            ),
        );
        let memory_after_run = svc.memory()?;
        let counters = Counters {
            by_id_at_start,
            change_log_at_start,
            postgres_cpu,
            handout_rows_at_start,
            measured_seconds: window.elapsed().as_secs_f64(),
        };
        let run = LookupRun {
            cache_enabled,
            warmup: warm.warmup.clone(),
            audit_wait_seconds: warm.audit_wait_seconds,
            service_cpu_us_per_request: cpu_saturating.service_cores / saturating.rps.max(1e-9) * 1e6,
            saturating,
            half_rate,
            db_lookups: None,
            cache_hit_rate: None,
            confirmed_rows: None,
            change_log_reads: None,
            confirmed_seconds: 0.0,
            cpu_saturating,
            cpu_half_rate,
            memory_after_start: warm.memory_after_start,
            memory_after_first_request: warm.memory_after_first_request,
            memory_after_warmup: warm.memory_after_warmup,
            memory_after_run,
            audit_backlog,
            postgres_cpu_seconds: 0.0,
            postgres_cpu_us_per_handout: 0.0,
            handout_audit_rows: 0,
            service_warnings: 0,
            first_service_warning: None,
        };
        Ok((run, warm, counters))
    }

    /// The cross-check and resilience instance (cache on): warm-up as for a lookup run,
    /// the bench's closed loop (the reference), oha for as long, then the closed loop
    /// again while a query holds one core of PostgreSQL's.
    pub async fn check(&self, oha_bin: Option<(&Path, String)>, slowed: bool) -> anyhow::Result<CheckRun> {
        let svc = self.setup.start("check", true).await?;
        let result = self.check_on(&svc, oha_bin, slowed).await;
        let warnings = svc.warnings().await;
        if result.is_err() {
            eprintln!("--- {} (tail) ---\n{}", svc.log_path().display(), svc.log_tail(20).await);
        }
        svc.stop().await;
        let (mut run, warm) = result?;
        progress(self.started, "check: waiting for the service's database sessions to end");
        db::wait_for_service_sessions_to_end(self.pool).await?;
        let scans = db::lookup_index_scans(self.pool).await?;
        run.db_lookups_after_warmup =
            warm.scans_at_start.zip(scans).map(|(a, b)| (b - a - warm.requests() as i64).max(0));
        if let (Some(s), Some(db)) = (run.slowed.as_mut(), run.db_lookups_after_warmup)
            && s.saturating.requests > 0
        {
            s.hit_rate_at_least = Some(1.0 - (db as f64 / s.saturating.requests as f64).min(1.0));
        }
        run.service_warnings = warnings.len();
        run.first_service_warning = warnings.into_iter().next();
        Ok(run)
    }

    async fn check_on(
        &self,
        svc: &Service,
        oha_bin: Option<(&Path, String)>,
        slowed: bool,
    ) -> anyhow::Result<(CheckRun, Warm)> {
        let target = self.target(svc);
        let (conns, threads, duration) = (self.conns(), self.threads(), self.duration());
        let warm = self.warm(svc, true).await?;
        progress(self.started, &format!("check: reference closed loop, {} s", duration.as_secs()));
        let (reference, cpu_reference) = self.saturate(&target, duration, Serving::Processes(&[svc.pid])).await?;
        let oha = match oha_bin {
            Some((bin, version)) => {
                progress(self.started, &format!("check: {version}, {} s", duration.as_secs()));
                let shape = (conns, threads, duration.as_secs());
                oha::run(bin, version, &target, self.keys, &self.setup.dir, shape, oha::Serving::Processes(&[svc.pid]))
                    .await
                    .map_err(|e| format!("{e:#}"))
            }
            None => Err("oha not found (bench/run.sh installs it; --oha names it)".to_owned()),
        };
        let slowed = if slowed {
            progress(self.started, &format!("check: closed loop with PostgreSQL slowed, {} s", duration.as_secs()));
            // The backstop: the phase, plus time to start and stop.
            let hog = Hog::start(&self.setup.database_url, self.pool, duration + Duration::from_secs(60)).await?;
            let hog_started = Instant::now();
            let saturating = self.saturate(&target, duration, Serving::Processes(&[svc.pid])).await;
            let hog = hog.stop(self.pool, hog_started).await?;
            let (saturating, cpu) = saturating?;
            let ratio = saturating.rps / reference.rps.max(1e-9);
            Some(SlowedRun { saturating, cpu, hog, ratio, hit_rate_at_least: None })
        } else {
            None
        };
        let run = CheckRun {
            warmup: warm.warmup.clone(),
            reference,
            cpu_reference,
            oha,
            slowed,
            db_lookups_after_warmup: None,
            service_warnings: 0,
            first_service_warning: None,
        };
        Ok((run, warm))
    }
}
