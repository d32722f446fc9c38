//! Host CPU utilisation over a cell's window, from two readings of `/proc/stat`.
//!
//! The aggregate `cpu` line counts, per state, the time all cores together spent in it (in
//! clock ticks). Busy is `user + nice + system + irq + softirq`; the total adds `idle`,
//! `iowait` and `steal`. `guest` and `guest_nice` are left out: the kernel already counts them
//! inside `user` and `nice`. The busy fraction of a window is the busy delta over the total
//! delta: 1.0 means every core was busy the whole window, whoever ran there (the provers,
//! gpud, the driver, the CUDA driver's threads). Host-wide rather than per process because the
//! question is what the host has left for other work (synthesis of the next partitions); the
//! provers' own share comes with their reports (`getrusage` over the window).
//!
//! Parsing is pure ([`CpuTimes::parse`]); [`CpuTimes::read`] is the one read of the file.

use serde::{Deserialize, Serialize};

/// The aggregate CPU times of `/proc/stat`, in clock ticks since boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    /// Normal processes in user mode.
    pub user: u64,
    /// Niced processes in user mode.
    pub nice: u64,
    /// Kernel mode.
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Idle while I/O was outstanding.
    pub iowait: u64,
    /// Hardware interrupts.
    pub irq: u64,
    /// Software interrupts.
    pub softirq: u64,
    /// Taken by the hypervisor for other guests.
    pub steal: u64,
    /// Cores: the `cpuN` lines.
    pub cores: usize,
}

impl CpuTimes {
    /// Parses the text of `/proc/stat`: the aggregate `cpu` line (at least user, nice, system,
    /// idle; later fields default to 0 on old kernels) and the number of `cpuN` lines. None
    /// when there is no well-formed `cpu` line.
    pub fn parse(text: &str) -> Option<Self> {
        let mut times = None;
        let mut cores = 0;
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            match fields.next() {
                Some("cpu") => {
                    let v: Vec<u64> = fields.map(str::parse).collect::<Result<_, _>>().ok()?;
                    if v.len() < 4 {
                        return None;
                    }
                    let at = |i: usize| v.get(i).copied().unwrap_or(0);
                    times = Some(Self {
                        user: at(0),
                        nice: at(1),
                        system: at(2),
                        idle: at(3),
                        iowait: at(4),
                        irq: at(5),
                        softirq: at(6),
                        steal: at(7),
                        cores: 0,
                    });
                }
                Some(name)
                    if name.len() > 3
                        && name.starts_with("cpu")
                        && name[3..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    cores += 1
                }
                _ => {}
            }
        }
        times.map(|t| Self { cores, ..t })
    }

    /// Reads `/proc/stat` now; none where it is missing or unreadable (not Linux).
    pub fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Ticks spent busy: user, nice, system, irq and softirq.
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq
    }

    /// All ticks: busy, idle, iowait and steal.
    pub fn total(&self) -> u64 {
        self.busy() + self.idle + self.iowait + self.steal
    }
}

/// What the host's CPUs did over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    /// Busy fraction of all cores over the window (0..1).
    pub busy: f64,
    /// Cores counted.
    pub cores: usize,
}

impl HostCpu {
    /// The busy fraction between two readings (`before` first); none when no time passed or
    /// the counters went backwards (a reading from another boot).
    pub fn between(before: &CpuTimes, after: &CpuTimes) -> Option<Self> {
        let total = after.total().checked_sub(before.total())?;
        let busy = after.busy().checked_sub(before.busy())?;
        (total > 0 && busy <= total).then(|| Self {
            busy: busy as f64 / total as f64,
            cores: after.cores,
        })
    }

    /// Busy cores on average: the fraction times the cores.
    pub fn busy_cores(&self) -> f64 {
        self.busy * self.cores as f64
    }
}

/// User plus system CPU seconds this process has used so far (`getrusage(RUSAGE_SELF)`, every
/// thread); none where the call fails.
pub fn process_cpu_secs() -> Option<f64> {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).ok()?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Some(secs(u.user_time()) + secs(u.system_time()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  4705 150 1120 16250 520 30 45 7 0 0\n\
                        cpu0 2000 100 500 8000 300 20 25 3 0 0\n\
                        cpu1 2705 50 620 8250 220 10 20 4 0 0\n\
                        intr 114930548 113199788 3 0 5 263 0 4 [... 50 more items]\n\
                        ctxt 1990473\nbtime 1062191376\nprocesses 2915\n\
                        procs_running 1\nprocs_blocked 0\n\
                        softirq 183433 0 21755 12 39 1137 231 21459 2263\n";

    #[test]
    fn parses_the_aggregate_line_and_counts_cores() {
        let t = CpuTimes::parse(STAT).unwrap();
        assert_eq!(
            t,
            CpuTimes {
                user: 4705,
                nice: 150,
                system: 1120,
                idle: 16250,
                iowait: 520,
                irq: 30,
                softirq: 45,
                steal: 7,
                cores: 2,
            }
        );
        // Guest time is inside user already: not added again.
        assert_eq!(t.busy(), 4705 + 150 + 1120 + 30 + 45);
        assert_eq!(t.total(), t.busy() + 16250 + 520 + 7);
    }

    #[test]
    fn old_kernels_short_lines_and_garbage() {
        let t = CpuTimes::parse("cpu 10 0 5 85\ncpu0 10 0 5 85\n").unwrap();
        assert_eq!((t.busy(), t.total(), t.cores), (15, 100, 1));
        assert_eq!(CpuTimes::parse("cpu 10 0 5\n"), None);
        assert_eq!(CpuTimes::parse("cpu 10 x 5 85\n"), None);
        assert_eq!(CpuTimes::parse("intr 5\n"), None);
        // `cpufreq`-like names are not cores.
        let t = CpuTimes::parse("cpu 1 1 1 1\ncpux 1 1 1 1\ncpu12 1 1 1 1\n").unwrap();
        assert_eq!(t.cores, 1);
    }

    #[test]
    fn busy_fraction_is_the_busy_delta_over_the_total_delta() {
        let a = CpuTimes::parse("cpu 100 0 50 850 0 0 0 0\ncpu0 0 0 0 0\ncpu1 0 0 0 0\n").unwrap();
        // 400 ticks pass (2 cores × 200): 300 busy (user 250, system 40, softirq 10).
        let b =
            CpuTimes::parse("cpu 350 0 90 940 10 0 10 0\ncpu0 0 0 0 0\ncpu1 0 0 0 0\n").unwrap();
        let h = HostCpu::between(&a, &b).unwrap();
        assert!((h.busy - 300.0 / 400.0).abs() < 1e-12, "{h:?}");
        assert_eq!(h.cores, 2);
        assert!((h.busy_cores() - 1.5).abs() < 1e-12);
        // No time, or counters going backwards: no answer.
        assert_eq!(HostCpu::between(&a, &a), None);
        assert_eq!(HostCpu::between(&b, &a), None);
    }

    #[test]
    fn this_machine_reads_and_its_own_cpu_time_grows_with_work() {
        let before = CpuTimes::read().expect("/proc/stat");
        assert!(before.cores >= 1 && before.total() > 0);
        // Work until this process has used 20 ms more CPU (a loaded machine may give it less
        // than the wall time), for at most 10 s.
        let t0 = process_cpu_secs().unwrap();
        let mut x = 1u64;
        let start = std::time::Instant::now();
        while process_cpu_secs().unwrap() - t0 < 0.02
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        assert!(process_cpu_secs().unwrap() - t0 >= 0.02);
    }
}
