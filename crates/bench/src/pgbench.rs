//! The floor: pgbench running the service's own lookup (the SELECT of
//! `store::connections::find_connection`, same columns, same WHERE) as a prepared
//! statement over TCP loopback, with random subject and provider. Nothing the service adds
//! (HTTP, API key, JSON, opening the ciphertext, audit) is in it: it is what Postgres alone
//! does on this machine, and the service is compared against it.
//!
//! The floor is the best of several client counts (on two cores fewer clients often go
//! faster: less switching), over the transport the service uses in the benchmark
//! (`sslmode=disable`), with the same sweep over TLS beside it when the server offers TLS.

use anyhow::{Context, bail};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// One transport's floor: every client count tried, and the best.
#[derive(Debug, Clone, Serialize)]
pub struct FloorSweep {
    /// `disable` or `require`.
    pub sslmode: &'static str,
    pub runs: Vec<Floor>,
}

impl FloorSweep {
    pub fn best(&self) -> Option<&Floor> {
        self.runs.iter().max_by(|a, b| a.tps.total_cmp(&b.tps))
    }

    pub fn best_tps(&self) -> f64 {
        self.best().map_or(0.0, |f| f.tps)
    }
}

/// The floor the service is compared with (no TLS), and the TLS floor beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Floors {
    pub plain: FloorSweep,
    /// `Err`: why there is none (the server has `ssl = off`).
    pub tls: Result<FloorSweep, String>,
}

/// `run` for each client count in `clients`, with `sslmode` set on the URL.
#[expect(clippy::too_many_arguments, reason = "pgbench's knobs, passed through as they are")]
pub async fn sweep(
    db_url: &str,
    sslmode: &'static str,
    dir: &Path,
    subjects: usize,
    providers: usize,
    clients: &[usize],
    threads: usize,
    seconds: u64,
) -> anyhow::Result<FloorSweep> {
    let url = crate::db::with_param(db_url, "sslmode", sslmode)?;
    let mut runs = Vec::with_capacity(clients.len());
    for &c in clients {
        // pgbench refuses more threads than clients.
        runs.push(run(&url, dir, subjects, providers, c, threads.min(c), seconds).await?);
    }
    Ok(FloorSweep { sslmode, runs })
}

#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    pub tps: f64,
    pub latency_avg_ms: Option<f64>,
    pub clients: usize,
    pub threads: usize,
    pub seconds: u64,
    pub transactions: Option<u64>,
    pub failed: Option<u64>,
    pub script: String,
}

pub fn script(subjects: usize, providers: usize) -> String {
    format!(
        r#"\set s random(0, {last_subject})
\set p random(1, {providers})
SELECT id, tenant_id, subject, provider, account_id, account_login, scopes, status, key_id,
       access_token_ct, refresh_token_ct, id_token_ct, token_type, access_expires_at,
       created_at, refreshed_at, version
FROM connections WHERE tenant_id = 'bench' AND subject = 'user' || lpad(:s::text, 5, '0') AND provider = 'p' || :p;
"#,
        last_subject = subjects.saturating_sub(1)
    )
}

/// `pgbench -n -M prepared -c <clients> -j <threads> -T <seconds> -f <script> <url>`.
pub async fn run(
    db_url: &str,
    dir: &Path,
    subjects: usize,
    providers: usize,
    clients: usize,
    threads: usize,
    seconds: u64,
) -> anyhow::Result<Floor> {
    let text = script(subjects, providers);
    let path = dir.join("lookup.sql");
    tokio::fs::write(&path, &text).await?;
    let mut cmd = tokio::process::Command::new("pgbench");
    cmd.args(["-n", "-M", "prepared", "-c", &clients.to_string(), "-j", &threads.to_string()])
        .args(["-T", &seconds.to_string(), "-f"])
        .arg(&path)
        .arg(db_url)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(seconds + 60), cmd.output())
        .await
        .context("pgbench did not finish in time")?
        .context("cannot run pgbench (bench/run.sh installs it)")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("pgbench failed ({}): {}{}", out.status, stdout, String::from_utf8_lossy(&out.stderr));
    }
    parse(&stdout, clients, threads, seconds, text)
}

fn number_after<T: std::str::FromStr>(out: &str, prefix: &str) -> Option<T> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn parse(out: &str, clients: usize, threads: usize, seconds: u64, script: String) -> anyhow::Result<Floor> {
    let tps = number_after::<f64>(out, "tps = ").with_context(|| format!("no tps in pgbench output:\n{out}"))?;
    Ok(Floor {
        tps,
        latency_avg_ms: number_after(out, "latency average = "),
        clients,
        threads,
        seconds,
        transactions: number_after(out, "number of transactions actually processed: ")
            .or_else(|| number_after(out, "number of transactions actually processed:")),
        failed: number_after(out, "number of failed transactions: "),
        script,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_output_is_parsed() {
        let out = "transaction type: lookup.sql\nnumber of transactions actually processed: 123456\n\
                   number of failed transactions: 0 (0.000%)\nlatency average = 2.345 ms\n\
                   initial connection time = 12.3 ms\ntps = 13645.123456 (without initial connection time)\n";
        let f = parse(out, 32, 2, 10, String::new()).unwrap();
        assert!((f.tps - 13645.123456).abs() < 1e-6);
        assert_eq!(f.transactions, Some(123456));
        assert_eq!(f.failed, Some(0));
        assert_eq!(f.latency_avg_ms, Some(2.345));
    }

    #[test]
    fn the_best_floor_is_the_fastest_client_count() {
        let floor = |clients, tps| Floor {
            tps,
            latency_avg_ms: None,
            clients,
            threads: 2,
            seconds: 1,
            transactions: None,
            failed: None,
            script: String::new(),
        };
        let sweep = FloorSweep { sslmode: "disable", runs: vec![floor(4, 10.0), floor(8, 30.0), floor(16, 20.0)] };
        assert_eq!(sweep.best().map(|f| f.clients), Some(8));
        assert_eq!(FloorSweep { sslmode: "disable", runs: Vec::new() }.best_tps(), 0.0);
    }
}
