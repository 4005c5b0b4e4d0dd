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
    /// The bench's reaped children's CPU time (`cutime` + `cstime`): a child process that
    /// was the load generator (`oha`) counts here once the bench has waited for it.
    children: u64,
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
    // utime (field 14) and stime (field 15).
    stat_ticks(pid, 11)
}

/// The fields of `/proc/{pid}/stat` from field 3 (the state, index 0) on; none once the
/// process is gone.
fn stat_fields(pid: &str) -> Vec<String> {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Vec::new() };
    // After the command name (in parentheses, may hold spaces) field 3 comes first.
    stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect()).unwrap_or_default()
}

/// The sum of two adjacent fields of [`stat_fields`], from index `first`.
fn sum_at(fields: &[String], first: usize) -> u64 {
    let at = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    at(first) + at(first + 1)
}

/// The sum of two adjacent fields of `/proc/{pid}/stat`, counted from field 3 (index 0).
fn stat_ticks(pid: &str, first: usize) -> u64 {
    sum_at(&stat_fields(pid), first)
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
            // cutime (field 16) and cstime (field 17).
            children: stat_ticks("self", 13),
        }
    }

    /// As [`Self::share_until`] for a load generator that ran as a child process of the
    /// bench and was waited for before `later`: its CPU time is the load generator's. The
    /// bench's own counts as the service's where the bench serves (the ceiling's bare
    /// handler), else as other.
    pub fn share_with_child_generator_until(&self, later: &CpuSnapshot, bench_serves: bool) -> CpuShare {
        let mut share = self.share_until(later);
        let bench = share.client_cores;
        let child = self.cores_until(later)(later.children.saturating_sub(self.children));
        share.client_cores = child;
        share.other_cores = (share.other_cores - child).max(0.0);
        if bench_serves {
            share.service_cores += bench;
        } else {
            share.other_cores += bench;
        }
        share
    }

    /// Ticks of CPU time between `self` and `later`, as cores used on average.
    fn cores_until(&self, later: &CpuSnapshot) -> impl Fn(u64) -> f64 {
        let total = later.total.saturating_sub(self.total).max(1) as f64;
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
        // Ticks from /proc/stat count every CPU; a process's ticks are CPU time as well.
        move |ticks| ticks as f64 / total * cores
    }

    /// The share of each part between `self` and `later` (same service pids).
    pub fn share_until(&self, later: &CpuSnapshot) -> CpuShare {
        let to_cores = self.cores_until(later);
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

/// The postmasters on this machine: processes named `postgres` whose parent is not one.
fn postmasters() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let comm = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim() == "postgres");
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| comm(&pid.to_string()).unwrap_or(false))
        .filter(|pid| !comm(&parent(*pid).to_string()).unwrap_or(false))
        .collect()
}

/// The parent's pid (field 4 of `/proc/{pid}/stat`), 0 when unknown.
fn parent(pid: u32) -> u32 {
    stat_fields(&pid.to_string()).get(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The live children of `pid` (of each of its threads).
fn children(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

/// CPU time of `pid` and all of its children so far, in clock ticks: its own (utime +
/// stime), its reaped children's (cutime + cstime: the kernel adds a child's time there
/// when it is waited for), and each live child's, with the child's own reaped children.
/// A child's time moves from the last part to the second when it exits and is reaped, so
/// the sum only grows and two readings give the exact time between them, a backend that
/// came and went between them included. Read again when a child was reaped during the
/// reading (the second part changed).
fn tree_ticks(pid: u32) -> u64 {
    // utime + stime from index 11, cutime + cstime from 13: each process's stat read once.
    let pid_s = pid.to_string();
    let mut sum = 0;
    for _ in 0..5 {
        let own = stat_fields(&pid_s);
        let reaped = sum_at(&own, 13);
        let live: u64 = children(pid)
            .iter()
            .map(|c| {
                let f = stat_fields(c);
                sum_at(&f, 11) + sum_at(&f, 13)
            })
            .sum();
        sum = sum_at(&own, 11) + reaped + live;
        if stat_ticks(&pid_s, 13) == reaped {
            break;
        }
    }
    sum
}

/// Postgres's CPU time over a stretch: the postmasters' trees ([`tree_ticks`]) read when
/// it starts and when it ends. It was a thread that listed every process of the machine
/// every 100 ms (so that a backend which exited still counted with its last reading):
/// 1.6-2.4 ms of a core each time and once 11.9 ms, at normal priority on the two cores
/// the measured phases share, where `perf sched` showed an actix worker waiting 7.7 ms
/// for the core behind it in a half-rate phase's burst of slow requests.
pub struct PostgresCpu {
    postmasters: Vec<u32>,
    start: u64,
}

impl PostgresCpu {
    pub fn start() -> Self {
        let postmasters = postmasters();
        let start = postmasters.iter().map(|p| tree_ticks(*p)).sum();
        Self { postmasters, start }
    }

    /// Seconds of CPU Postgres used since `start`.
    pub fn finish(self) -> f64 {
        let now: u64 = self.postmasters.iter().map(|p| tree_ticks(*p)).sum();
        ticks_to_seconds(now.saturating_sub(self.start))
    }
}

#[cfg(test)]
mod tests {
    use super::{CpuSnapshot, stat_fields, tree_ticks};

    #[test]
    fn a_trees_time_counts_a_child_while_it_runs_and_once_after_it_is_reaped() {
        let me = std::process::id();
        let start = tree_ticks(me);
        let mut busy = std::process::Command::new("yes").stdout(std::process::Stdio::null()).spawn().expect("yes");
        std::thread::sleep(std::time::Duration::from_millis(600));
        // Stopped before it is read, so that it gains no time between the readings.
        let pid = busy.id();
        let stopped = std::process::Command::new("sh").args(["-c", &format!("kill -STOP {pid}")]).status();
        assert!(stopped.is_ok_and(|s| s.success()), "SIGSTOP");
        for _ in 0..100 {
            if stat_fields(&pid.to_string()).first().is_some_and(|state| state == "T") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let running = tree_ticks(me);
        busy.kill().expect("kill");
        busy.wait().expect("reaped");
        let reaped = tree_ticks(me);
        // `yes` spins: on two busy cores it still gets a tenth of a second in 0.6 s.
        assert!(running >= start + 10, "a live child's time counts: {start} -> {running}");
        // Reaping moves its time into our cutime: neither lost nor counted twice (a tick
        // or two of our own).
        assert!(reaped >= running && reaped <= running + 2, "across the reap: {running} -> {reaped}");
    }

    fn snapshot(busy: u64, total: u64, service: u64, client: u64, children: u64) -> CpuSnapshot {
        CpuSnapshot { busy, total, service: vec![service], client, children }
    }

    #[test]
    fn a_child_generators_time_is_the_load_generators_and_the_bench_serves_or_is_other() {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
        let share = |ticks: f64| ticks / 200.0 * cores;
        // 200 ticks in all, 150 busy: the service 60, the bench 10, its child 50, others 30.
        let (a, b) = (snapshot(1_000, 5_000, 300, 40, 7), snapshot(1_150, 5_200, 360, 50, 57));
        let s = a.share_with_child_generator_until(&b, false);
        let near = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(near(s.client_cores, share(50.0)), "the child is the load generator: {s:?}");
        assert!(near(s.service_cores, share(60.0)), "{s:?}");
        assert!(near(s.other_cores, share(40.0)), "others and the waiting bench: {s:?}");
        assert!(near(s.idle_cores, share(50.0)), "{s:?}");
        let s = a.share_with_child_generator_until(&b, true);
        assert!(near(s.service_cores, share(70.0)) && near(s.other_cores, share(30.0)), "the bench serves: {s:?}");
        // Without the child, the bench's own time is the load generator's, as before.
        let s = a.share_until(&b);
        assert!(near(s.client_cores, share(10.0)) && near(s.other_cores, share(80.0)), "{s:?}");
    }
}
