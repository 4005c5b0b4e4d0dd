//! `mcp-connect-bench`: the performance benchmark (bench/README.md). One run, back to
//! back on this machine: the pgbench floor of the lookup query, `POST /v1/token` with and
//! without the lookup cache, a refresh storm over two instances, the API-key check and the
//! service's memory. Prints a table and writes `bench-results/<UTC timestamp>.json`.

mod apikey;
mod audit;
mod cpu;
mod db;
mod http1;
mod load;
mod pgbench;
mod report;
mod service;
mod storm;

use anyhow::Context;
use clap::Parser;
use cpu::{CpuSnapshot, PostgresCpu};
use http1::Target;
use load::KeySpace;
use mcp_connect::domain::{KeyScope, TenantId};
use mcp_connect::vault::{Keyring, Vault};
use mcp_connect_devproviders::{ClientRegistration, DevProvider, DevProviderConfig, Role};
use report::{LookupRun, Results};
use secrecy::ExposeSecret;
use service::{Service, ServiceSetup};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(name = "mcp-connect-bench", about = "The mcp-connect performance benchmark (see bench/README.md)")]
struct Args {
    /// PostgreSQL server; the bench creates and drops its own database on it.
    #[arg(long, env = "DATABASE_URL", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    database_url: String,
    /// Seconds of each measured phase (pgbench, saturating and half-rate loads).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=120))]
    seconds: u64,
    /// Concurrent clients (pgbench clients, load generator connections).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=512))]
    concurrency: u64,
    #[arg(long, default_value_t = 25_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    subjects: u64,
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=9))]
    providers: u64,
    /// OS threads of the load generator.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=8))]
    client_threads: u64,
    /// Concurrent lookups in the refresh storm.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(2..=1_000))]
    storm_callers: u64,
    /// `[cache] max_age_seconds` for the service (default: the product's default).
    #[arg(long)]
    cache_max_age: Option<u64>,
    /// `MCP_CONNECT_LOG` for the service (default: the product's default, info).
    #[arg(long)]
    service_log: Option<String>,
    /// Extra environment for the service processes, `NAME=VALUE` (repeatable), e.g.
    /// `--service-env MALLOC_ARENA_MAX=2`.
    #[arg(long, value_parser = parse_env)]
    service_env: Vec<(String, String)>,
    /// The `mcp-connect` binary (default: next to this one, i.e. the same release build).
    #[arg(long)]
    service_bin: Option<PathBuf>,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
    /// Keep the bench database (prints its name) instead of dropping it.
    #[arg(long)]
    keep_database: bool,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?}: expected NAME=VALUE"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run_all(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-connect-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn progress(started: Instant, what: &str) {
    eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
}

async fn run_all(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let started_at = time::OffsetDateTime::now_utc();
    let binary = match &args.service_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.parent().context("no directory for the bench binary")?.join("mcp-connect"),
    };
    if !binary.exists() {
        anyhow::bail!("{} not found: build it with cargo build --release -p mcp-connect", binary.display());
    }
    let work = std::env::temp_dir().join(format!("mcpc-bench-{}", uuid::Uuid::new_v4().simple()));
    tokio::fs::create_dir_all(&work).await?;
    let db = db::BenchDb::create(&args.database_url).await?;
    progress(started, &format!("database {}", db.name));
    let outcome = run(&args, &db, &binary, &work, started, started_at).await;
    if args.keep_database {
        eprintln!("kept database {} and {}", db.name, work.display());
    } else {
        if let Err(e) = db.drop_database().await {
            eprintln!("could not drop {}: {e:#}", db.name);
        }
        let _ = tokio::fs::remove_dir_all(&work).await;
    }
    let results = outcome?;
    println!("{}", results.table());
    tokio::fs::create_dir_all(&args.out_dir).await?;
    let stamp =
        started_at.format(&time::macros::format_description!("[year]-[month]-[day]T[hour][minute][second]Z"))?;
    let path = args.out_dir.join(format!("{stamp}.json"));
    tokio::fs::write(&path, serde_json::to_vec_pretty(&results)?).await?;
    println!(" results: {}", path.display());
    Ok(())
}

async fn start_providers(providers: &[String]) -> anyhow::Result<(DevProvider, DevProvider)> {
    let idp = DevProvider::start(DevProviderConfig {
        display_name: "Bench Identity Provider".to_owned(),
        role: Role::IdentityProvider,
        clients: vec![ClientRegistration {
            client_id: service::IDP_CLIENT.to_owned(),
            client_secret: service::IDP_SECRET.to_owned(),
            redirect_uris: Vec::new(),
        }],
        ..DevProviderConfig::default()
    })
    .await?;
    let provider = DevProvider::start(DevProviderConfig {
        display_name: "Bench Provider".to_owned(),
        role: Role::Downstream,
        clients: providers
            .iter()
            .map(|p| ClientRegistration {
                client_id: service::client_id(p),
                client_secret: service::client_secret(p),
                redirect_uris: Vec::new(),
            })
            .collect(),
        ..DevProviderConfig::default()
    })
    .await?;
    Ok((idp, provider))
}

async fn git_commit() -> Option<String> {
    let out = tokio::process::Command::new("git").args(["describe", "--always", "--dirty"]).output().await.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

struct Phase<'a> {
    args: &'a Args,
    keys: KeySpace,
    setup: &'a ServiceSetup,
    pool: &'a mcp_connect::store::PgPool,
    api_key: &'a str,
    started: Instant,
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

    /// Runs a blocking load phase off the async runtime (it has its own).
    async fn load<F>(&self, f: F) -> anyhow::Result<load::Summary>
    where
        F: FnOnce() -> anyhow::Result<load::Summary> + Send + 'static,
    {
        tokio::task::spawn_blocking(f).await?
    }

    /// One service instance: warm-up, saturating closed loop, open loop at half its rate.
    async fn lookup(&self, cache_enabled: bool) -> anyhow::Result<LookupRun> {
        let name = if cache_enabled { "cache-on" } else { "cache-off" };
        let svc = self.setup.start(name, cache_enabled).await?;
        let result = self.measure(&svc, cache_enabled).await;
        let warnings = svc.warnings().await;
        if result.is_err() {
            eprintln!("--- {} (tail) ---\n{}", svc.log_path().display(), svc.log_tail(20).await);
        }
        svc.stop().await;
        let (mut run, counters) = result?;
        // From the saturating phase to the service's exit: the hand-out audit it wrote
        // after the phases (at the minute's end, or at drain) is part of their cost.
        let pg_seconds = counters.postgres_cpu.finish();
        let handouts = (run.saturating.requests + run.half_rate.requests)
            .saturating_sub(run.saturating.errors + run.half_rate.errors);
        run.postgres_cpu_seconds = pg_seconds;
        run.postgres_cpu_us_per_handout = pg_seconds / (handouts.max(1) as f64) * 1e6;
        run.handout_audit_rows = db::handout_rows(self.pool).await? - counters.handout_rows_at_start;
        run.service_warnings = warnings.len();
        run.first_service_warning = warnings.into_iter().next();
        if cache_enabled {
            // A backend publishes its last counters when it exits (an idle one only 10 s
            // later): with the service's sessions gone, its lookups and re-reads are all in.
            progress(self.started, &format!("{name}: waiting for the service's database sessions to end"));
            db::wait_for_service_sessions_to_end(self.pool).await?;
            let scans = db::lookup_index_scans(self.pool).await?;
            let earlier = (run.warmup.requests + counters.first_requests) as i64;
            let measured = run.saturating.requests + run.half_rate.requests;
            run.db_lookups = counters.scans_at_start.zip(scans).map(|(a, b)| (b - a - earlier).max(0));
            run.cache_hit_rate =
                run.db_lookups.filter(|_| measured > 0).map(|d| 1.0 - (d as f64 / measured as f64).min(1.0));
            run.confirmed_rows = counters.by_id_at_start.zip(db::rows_read_by_id(self.pool).await?).map(|(a, b)| b - a);
            run.confirmed_seconds = counters.measured_seconds;
        }
        Ok(run)
    }

    async fn measure(&self, svc: &Service, cache_enabled: bool) -> anyhow::Result<(LookupRun, Counters)> {
        let target = Target { addr: svc.addr, api_key: self.api_key.to_owned() };
        let (keys, conns, threads, duration) = (self.keys, self.conns(), self.threads(), self.duration());
        let memory_after_start = svc.memory()?;
        // Lookups that reached Postgres, counted from here (nothing has asked yet).
        let scans_at_start = db::lookup_index_scans(self.pool).await?;
        let (by_id_at_start, stats_from) = (db::rows_read_by_id(self.pool).await?, Instant::now());
        let handouts_at_start = db::handout_events(self.pool).await?;
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
            let t = target.clone();
            self.load(move || load::closed_loop(&t, keys, conns, threads, Duration::from_secs(2))).await?
        };
        let memory_after_warmup = svc.memory()?;
        // The warm-up's hand-outs are counted in the rows of its minute, written once that
        // minute has closed: wait for that, so that the Postgres CPU measured from here on
        // is the measured phases' own (up to a minute).
        let into_minute = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() % 60;
        progress(
            self.started,
            &format!("{}: waiting {} s for the warm-up's minute to be written", svc.name, 62 - into_minute),
        );
        tokio::time::sleep(Duration::from_secs(62 - into_minute)).await;

        progress(self.started, &format!("{}: closed loop, {} connections, {} s", svc.name, conns, duration.as_secs()));
        let handout_rows_at_start = db::handout_rows(self.pool).await?;
        let postgres_cpu = PostgresCpu::start();
        let cpu0 = CpuSnapshot::take(&[svc.pid]);
        let t = target.clone();
        let saturating = self.load(move || load::closed_loop(&t, keys, conns, threads, duration)).await?;
        let cpu_saturating = cpu0.share_until(&CpuSnapshot::take(&[svc.pid]));
        // Hand-outs answered but not yet in the audit table: counted in the rows of minutes
        // that have not closed yet (written when they close, or at the service's exit).
        let answered =
            first.requests + warmup.requests + saturating.requests - first.errors - warmup.errors - saturating.errors;
        let audit_backlog = answered as i64 - (db::handout_events(self.pool).await? - handouts_at_start);

        let rate = (saturating.rps / 2.0).max(1.0);
        progress(self.started, &format!("{}: open loop at {:.0} req/s, {} s", svc.name, rate, duration.as_secs()));
        let cpu1 = CpuSnapshot::take(&[svc.pid]);
        let t = target.clone();
        let half_rate = self.load(move || load::open_loop(&t, keys, conns, threads, duration, rate)).await?;
        let cpu_half_rate = cpu1.share_until(&CpuSnapshot::take(&[svc.pid]));
        let memory_after_run = svc.memory()?;
        // Every request of the sweep and the first one missed the cache (each key once);
        // the rest of the lookup scans are misses of the two measured phases.
        let counters = Counters {
            scans_at_start,
            by_id_at_start,
            first_requests: first.requests,
            postgres_cpu,
            handout_rows_at_start,
            measured_seconds: stats_from.elapsed().as_secs_f64(),
        };
        let run = LookupRun {
            cache_enabled,
            warmup,
            saturating,
            half_rate,
            db_lookups: None,
            cache_hit_rate: None,
            confirmed_rows: None,
            confirmed_seconds: 0.0,
            cpu_saturating,
            cpu_half_rate,
            memory_after_start,
            memory_after_first_request,
            memory_after_warmup,
            memory_after_run,
            audit_backlog,
            postgres_cpu_seconds: 0.0,
            postgres_cpu_us_per_handout: 0.0,
            handout_audit_rows: 0,
            service_warnings: 0,
            first_service_warning: None,
        };
        Ok((run, counters))
    }
}

/// Postgres's counters when a lookup run began, read again once the service is gone.
struct Counters {
    scans_at_start: Option<i64>,
    by_id_at_start: Option<i64>,
    first_requests: u64,
    /// Postgres's CPU from the saturating phase on, until the service has exited.
    postgres_cpu: PostgresCpu,
    /// Hand-out rows in the audit table before the saturating phase.
    handout_rows_at_start: i64,
    /// From the first counter reading to the end of the half-rate phase.
    measured_seconds: f64,
}

async fn run(
    args: &Args,
    db: &db::BenchDb,
    binary: &std::path::Path,
    work: &std::path::Path,
    started: Instant,
    started_at: time::OffsetDateTime,
) -> anyhow::Result<Results> {
    let keys = KeySpace { subjects: args.subjects as usize, providers: args.providers as usize };
    let providers = db::provider_names(keys.providers);
    let vault_keys = Keyring::generate_entry("bench");
    let vault = Vault::new(Keyring::parse(&vault_keys)?);
    // Named apart from the service's sessions, which the bench waits to see end.
    let pool = mcp_connect::store::connect(&db::with_application_name(&db.url, "mcp-connect-bench")?, 4).await?;
    db::prepare(&pool, &providers).await?;
    let (idp, provider) = start_providers(&providers).await?;

    progress(started, &format!("seeding {} connections", keys.len()));
    let seed_time = db::seed(&pool, &vault, keys.subjects, &providers).await?;
    let storm_provider = providers.first().context("no provider")?.clone();
    let (old_access, refresh) = provider.issue_grant(&service::client_id(&storm_provider), "storm-user", "read");
    let storm_conn = storm::StormConnection {
        id: db::insert_expired(&pool, &vault, "storm", &storm_provider, &old_access, &refresh).await?,
        subject: "storm".to_owned(),
        provider: storm_provider,
        old_access_token: old_access,
    };
    let table_bytes = db::table_size(&pool).await?;

    progress(started, &format!("floor: pgbench, {} clients, {} s", args.concurrency, args.seconds));
    let floor =
        pgbench::run(&db.url, work, keys.subjects, keys.providers, args.concurrency as usize, 2, args.seconds).await?;

    let tenant = TenantId::parse(db::TENANT)?;
    let key = mcp_connect::flows::api_keys::create_api_key(&pool, &tenant, KeyScope::Server, Some("bench")).await?;
    let api_key = key.key.expose_secret().to_owned();
    let setup = ServiceSetup {
        binary: binary.to_owned(),
        dir: work.to_owned(),
        database_url: db.url.clone(),
        vault_keys,
        idp_issuer: idp.issuer(),
        provider_base: provider.base_url(),
        providers: providers.clone(),
        log_filter: args.service_log.clone(),
        cache_max_age: args.cache_max_age,
        extra_env: args.service_env.clone(),
    };
    let phase = Phase { args, keys, setup: &setup, pool: &pool, api_key: &api_key, started };
    let cache_on = phase.lookup(true).await?;
    let cache_off = phase.lookup(false).await?;

    progress(started, &format!("refresh storm: {} callers, 2 instances", args.storm_callers));
    let storm = storm_phase(&phase, &provider, &storm_conn).await?;

    progress(started, "API-key check");
    let api_key_result = apikey::measure(&pool, 20_000, 32).await?;

    progress(started, "audit writer capacity");
    let audit_writer = audit::measure(&pool).await?;

    let peak_rss_mib = cache_on.memory_after_run.hwm_kib as f64 / 1024.0;
    let mut results = Results {
        started_at: started_at.format(&time::format_description::well_known::Rfc3339)?,
        total_seconds: 0.0,
        machine: report::Machine {
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            postgres: db::server_version(&pool).await?,
            git_commit: git_commit().await,
        },
        setup: report::Setup {
            subjects: keys.subjects,
            providers: keys.providers,
            connections: keys.len(),
            concurrency: args.concurrency as usize,
            seconds_per_phase: args.seconds,
            client_threads: args.client_threads as usize,
            cache_max_age_seconds: args.cache_max_age,
            service_log_filter: args.service_log.clone(),
            service_env: args.service_env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            seed_seconds: seed_time.as_secs_f64(),
            table_bytes,
        },
        ratio_cache_on: cache_on.saturating.rps / floor.tps.max(1.0),
        ratio_cache_off: cache_off.saturating.rps / floor.tps.max(1.0),
        floor,
        cache_on,
        cache_off,
        storm,
        api_key: api_key_result,
        audit_writer,
        peak_rss_mib,
        targets: Vec::new(),
    };
    pool.close().await;
    results.targets();
    results.total_seconds = started.elapsed().as_secs_f64();
    Ok(results)
}

/// Two fresh instances, each warmed (API key verified, pool connections open), then the
/// storm.
async fn storm_phase(
    phase: &Phase<'_>,
    provider: &DevProvider,
    conn: &storm::StormConnection,
) -> anyhow::Result<storm::StormResult> {
    let a = phase.setup.start("storm-a", true).await?;
    let b = match phase.setup.start("storm-b", true).await {
        Ok(b) => b,
        Err(e) => {
            a.stop().await;
            return Err(e);
        }
    };
    let result = async {
        for svc in [&a, &b] {
            let t = Target { addr: svc.addr, api_key: phase.api_key.to_owned() };
            let (keys, conns, threads) = (phase.keys, phase.conns(), phase.threads());
            // One request first, so that the key is verified once before 32 arrive.
            let one = t.clone();
            phase.load(move || load::closed_loop(&one, keys, 1, 1, Duration::ZERO)).await?;
            phase.load(move || load::closed_loop(&t, keys, conns, threads, Duration::from_secs(1))).await?;
        }
        storm::run(
            &[&a, &b],
            phase.api_key,
            provider,
            phase.pool,
            conn,
            phase.args.storm_callers as usize,
            Duration::from_millis(50),
        )
        .await
    }
    .await;
    a.stop().await;
    b.stop().await;
    result
}
