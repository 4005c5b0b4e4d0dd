//! Where the two cores went during a phase: the service process, the bench process (the
//! load generator), and everything else (Postgres, in practice), from `/proc`.

use serde::Serialize;

/// A point-in-time reading, in clock ticks.
#[derive(Debug, Clone)]
pub struct CpuSnapshot {
    busy: u64,
    total: u64,
    service: Vec<u64>,
    client: u64,
}

/// Cores used on average over a phase (2.0 = both cores all the time).
#[derive(Debug, Clone, Serialize)]
pub struct CpuShare {
    pub service_cores: f64,
    pub client_cores: f64,
    pub other_cores: f64,
    pub idle_cores: f64,
}

fn proc_ticks(pid: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // After the command name (in parentheses, may hold spaces) field 3 comes first, so
    // utime (field 14) and stime (field 15) are at indices 11 and 12.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let at = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    at(11) + at(12)
}

/// CPU time of one process so far, in clock ticks (0 once it is gone).
pub fn process_ticks(pid: u32) -> u64 {
    proc_ticks(&pid.to_string())
}

/// Linux reports process times in USER_HZ, which is 100 on every architecture it exports
/// to user space (sysconf(_SC_CLK_TCK)).
pub fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / 100.0
}

/// (busy, total) ticks of all CPUs from the first line of `/proc/stat`.
fn machine_ticks() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else { return (0, 0) };
    let Some(line) = stat.lines().next() else { return (0, 0) };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

impl CpuSnapshot {
    pub fn take(service_pids: &[u32]) -> Self {
        let (busy, total) = machine_ticks();
        Self {
            busy,
            total,
            service: service_pids.iter().map(|p| proc_ticks(&p.to_string())).collect(),
            client: proc_ticks("self"),
        }
    }

    /// The share of each part between `self` and `later` (same service pids).
    pub fn share_until(&self, later: &CpuSnapshot) -> CpuShare {
        let total = later.total.saturating_sub(self.total).max(1) as f64;
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
        // Ticks from /proc/stat count every CPU; a process's ticks are CPU time as well.
        let to_cores = |ticks: u64| ticks as f64 / total * cores;
        let service: u64 = later.service.iter().zip(&self.service).map(|(b, a)| b.saturating_sub(*a)).sum();
        let client = later.client.saturating_sub(self.client);
        let busy = later.busy.saturating_sub(self.busy);
        CpuShare {
            service_cores: to_cores(service),
            client_cores: to_cores(client),
            other_cores: to_cores(busy.saturating_sub(service + client)),
            idle_cores: to_cores(later.total.saturating_sub(self.total).saturating_sub(busy)),
        }
    }
}

/// CPU time (user + system, in clock ticks) of each process named `postgres` on the
/// machine: the postmaster, its background workers and every backend.
fn postgres_processes() -> Vec<(u32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres"))
        .map(|pid| (pid, proc_ticks(&pid.to_string())))
        .collect()
}

/// Postgres's CPU time over a stretch, sampled often enough that a backend which exits
/// (the service's sessions end when it stops) still counts with its last reading: the
/// kernel adds a reaped child's time to the postmaster only as `cutime`, which a
/// per-process sum would miss. Sampling every 100 ms loses at most that much of each
/// exiting backend's time.
pub struct PostgresCpu {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl PostgresCpu {
    pub fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let first: std::collections::HashMap<u32, u64> = postgres_processes().into_iter().collect();
            let mut last = first.clone();
            loop {
                for (pid, ticks) in postgres_processes() {
                    last.insert(pid, ticks);
                }
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            last.iter().map(|(pid, t)| t.saturating_sub(first.get(pid).copied().unwrap_or(0))).sum()
        });
        Self { stop, thread }
    }

    /// Seconds of CPU Postgres used since `start`.
    pub fn finish(self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ticks_to_seconds(self.thread.join().unwrap_or(0))
    }
}
