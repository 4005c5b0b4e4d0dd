//! The load generator checked against a well-kept one: `oha` (crates.io, installed by
//! bench/run.sh) sends the same `POST /v1/token` over as many keep-alive connections and
//! OS threads for as long, against the same cache-on instance, right after the bench's own
//! closed loop. If the two rates differ by more than a few percent, one of the two
//! generators (not the service) limits what is measured.
//!
//! oha picks each request's body at random from the lines of a file (`-Z`), so it asks
//! for random keys like the bench does. It counts any answer as a success; the status
//! codes it reports are checked here (it cannot check the body for `connected`).

use crate::cpu::{CpuShare, CpuSnapshot};
use crate::http1::Target;
use crate::load::KeySpace;
use anyhow::Context;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Serialize)]
pub struct OhaRun {
    pub version: String,
    pub connections: usize,
    pub threads: usize,
    pub seconds: u64,
    pub rps: f64,
    pub ok_responses: u64,
    /// Answers other than 200, and errors other than requests cut at the deadline.
    pub errors: u64,
    /// Requests in flight when the time was up (oha aborts them and counts them apart).
    pub aborted_at_deadline: u64,
    pub mean_ms: f64,
    pub p99_ms: f64,
    /// Where the cores went while oha ran, its start and its report included (oha is the
    /// load generator): set by [`run`].
    pub cpu: Option<CpuShare>,
}

/// Who answers oha, for where the cores went: the service's processes, or the bench
/// itself (the ceiling's bare handler).
pub enum Serving<'a> {
    Processes(&'a [u32]),
    Bench,
}

impl Serving<'_> {
    /// The service's processes (none where the bench serves).
    pub fn pids(&self) -> &[u32] {
        match self {
            Serving::Processes(pids) => pids,
            Serving::Bench => &[],
        }
    }
}

/// `oha --version`, or `None` when it cannot be run.
pub async fn version(bin: &Path) -> Option<String> {
    let out = tokio::process::Command::new(bin).arg("--version").output().await.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Every key of `keys` as one request body per line.
fn bodies(keys: KeySpace) -> String {
    let mut out = String::with_capacity(keys.len() * 48);
    for i in 0..keys.len() {
        let (subject, provider) = keys.key(i);
        out.push_str(&format!("{{\"subject\":\"{subject}\",\"provider\":\"{provider}\"}}\n"));
    }
    out
}

pub async fn run(
    bin: &Path,
    version: String,
    target: &Target,
    keys: KeySpace,
    dir: &Path,
    (connections, threads, seconds): (usize, usize, u64),
    serving: Serving<'_>,
) -> anyhow::Result<OhaRun> {
    let body_file = dir.join("oha-bodies.txt");
    tokio::fs::write(&body_file, bodies(keys)).await?;
    let mut cmd = tokio::process::Command::new(bin);
    // The API key is on the command line (visible in `ps`): a key of the bench's own
    // tenant in a database that is dropped at the end of the run.
    cmd.args(["--no-tui", "--output-format", "json", "-m", "POST", "-T", "application/json"])
        .args(["-z", &format!("{seconds}s"), "-c", &connections.to_string()])
        .args(["--worker-threads", &threads.to_string()])
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", target.api_key))
        .arg("-Z")
        .arg(&body_file)
        .arg(format!("http://{}/v1/token", target.addr))
        .kill_on_drop(true);
    let pids = serving.pids();
    let cpu0 = CpuSnapshot::take(pids);
    let out = tokio::time::timeout(Duration::from_secs(seconds + 60), cmd.output())
        .await
        .context("oha did not finish in time")?
        .context("cannot run oha")?;
    // `output` has waited for oha: its CPU time is the bench's children's now.
    let cpu = cpu0.share_with_child_generator_until(&CpuSnapshot::take(pids), matches!(serving, Serving::Bench));
    if !out.status.success() {
        anyhow::bail!("oha failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).context("oha's JSON output")?;
    Ok(OhaRun { cpu: Some(cpu), ..parse(&json, version, connections, threads, seconds)? })
}

fn parse(
    json: &serde_json::Value,
    version: String,
    connections: usize,
    threads: usize,
    seconds: u64,
) -> anyhow::Result<OhaRun> {
    let number = |path: &str| json.pointer(path).and_then(serde_json::Value::as_f64);
    let rps = number("/summary/requestsPerSec").context("no summary.requestsPerSec in oha's output")?;
    let count = |path: &str, keep: &dyn Fn(&str) -> bool| -> u64 {
        json.pointer(path)
            .and_then(serde_json::Value::as_object)
            .map(|m| m.iter().filter(|(k, _)| keep(k)).filter_map(|(_, v)| v.as_u64()).sum())
            .unwrap_or(0)
    };
    let deadline = |k: &str| k.contains("deadline");
    Ok(OhaRun {
        version,
        connections,
        threads,
        seconds,
        rps,
        ok_responses: count("/statusCodeDistribution", &|k| k == "200"),
        errors: count("/statusCodeDistribution", &|k| k != "200") + count("/errorDistribution", &|k| !deadline(k)),
        aborted_at_deadline: count("/errorDistribution", &deadline),
        mean_ms: number("/summary/average").unwrap_or(0.0) * 1e3,
        p99_ms: number("/latencyPercentiles/p99").unwrap_or(0.0) * 1e3,
        cpu: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oha_json_gives_rate_statuses_and_deadline_aborts() {
        let json = serde_json::json!({
            "summary": {"requestsPerSec": 12345.5, "average": 0.0025},
            "latencyPercentiles": {"p50": 0.002, "p99": 0.0061},
            "statusCodeDistribution": {"200": 1000, "503": 2},
            "errorDistribution": {"aborted due to deadline": 32, "connection closed": 1}
        });
        let r = parse(&json, "oha 1.16.0".into(), 32, 1, 8).unwrap();
        assert_eq!(r.rps, 12345.5);
        assert_eq!((r.ok_responses, r.errors, r.aborted_at_deadline), (1000, 3, 32));
        assert!((r.p99_ms - 6.1).abs() < 1e-9 && (r.mean_ms - 2.5).abs() < 1e-9);
    }

    #[test]
    fn every_key_is_one_line() {
        let text = bodies(KeySpace { subjects: 2, providers: 2 });
        assert_eq!(text.lines().count(), 4);
        assert_eq!(text.lines().next(), Some(r#"{"subject":"user00000","provider":"p1"}"#));
    }
}
