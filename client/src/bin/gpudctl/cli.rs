//! gpudctl's command line: the binary parses it, and gpud-cli-docs renders its man pages and
//! shell completions from it.
//!
//! gpud-cli-docs mounts this file in a module of its own, so it names the binary's other
//! modules as `super::NAME` (never `crate::`), and that tool mounts those beside it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gpud_client::LeaseId;
use gpud_client::proto::{
    Class, NumaPlacement, Placement, PlacementPolicy, parse_duration, parse_size,
};

/// Inspect and operate gpud, the GPU lease daemon.
#[derive(Debug, Parser)]
// Name and about are set here, not taken from Cargo: gpud-cli-docs compiles this file too,
// and Cargo's would be that crate's.
#[command(name = "gpudctl", version, after_help = super::exit::TABLE)]
pub struct Args {
    /// gpud's socket.
    #[arg(long, global = true, value_name = "PATH", env = "GPUD_SOCKET", default_value = gpud_client::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Devices and the host's memory, page-locked memory and CPUs: capacity, reservations,
    /// compute holder, queues.
    Status {
        /// Machine-readable output (its fields: docs/PROTOCOL.md in the documentation, which FILES in
        /// gpudctl(1) locates).
        #[arg(long)]
        json: bool,
    },
    /// Granted leases and waiting requests.
    Leases {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Status, refreshed until interrupted (redrawn in place on a terminal, appended in a pipe).
    Watch {
        /// Refresh period, at least 100ms.
        #[arg(long, default_value = "1s", value_parser = watch_interval)]
        interval: Duration,
        /// One JSON status document per line instead of a screen.
        #[arg(long)]
        json: bool,
    },
    /// Stop new grants on a device (existing leases run on). Needs admin rights.
    Drain {
        /// Device index or UUID.
        device: Placement,
    },
    /// Resume grants on a drained device. Needs admin rights.
    Undrain {
        /// Device index or UUID.
        device: Placement,
    },
    /// Take a lease away from its holder. Needs admin rights.
    Revoke {
        /// Lease id (see `gpudctl leases`).
        lease: LeaseId,
    },
    /// Metrics in the Prometheus text format (names: docs/METRICS.md in the documentation, see
    /// gpudctl(1)).
    Metrics {
        /// The samples as JSON: `{"samples": [{name, labels, value, type, help}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Run a program under a lease of devices and/or host resources: sets CUDA_VISIBLE_DEVICES
    /// and GPUD_LEASE_ID (and GPUD_CPUS, pinning it, with --cpus), releases when it exits, and
    /// passes its exit status through. The program runs in its own process group, which is
    /// stopped (SIGTERM, then SIGKILL) when the lease is revoked or lost, and which gpud ends if
    /// gpudctl dies.
    Run(RunArgs),
    /// Budgets: jobs' shares of devices that their processes lease from.
    #[command(subcommand)]
    Budget(BudgetCommand),
    /// Slurm integration: GRES lines, prolog, epilog and task prolog (the scripts in slurm/).
    #[command(subcommand)]
    Slurm(SlurmCommand),
}

/// Shorter refreshes only load gpud (and `0s` was a busy loop).
const MIN_WATCH_INTERVAL: Duration = Duration::from_millis(100);

fn watch_interval(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < MIN_WATCH_INTERVAL {
        return Err(format!(
            "{text} is below the minimum of {}ms",
            MIN_WATCH_INTERVAL.as_millis()
        ));
    }
    Ok(d)
}

/// Signals a program may be sent on a yield notice, by name, with their Linux numbers.
const SIGNALS: [(&str, i32); 9] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("WINCH", 28),
];

/// A signal by name (`SIGUSR1`, `usr1`) or number (`10`).
pub fn signal_number(text: &str) -> Result<i32, String> {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let known = |n: i32| SIGNALS.iter().any(|&(_, m)| m == n);
    match name.parse::<i32>() {
        Ok(n) if known(n) => Ok(n),
        _ => SIGNALS
            .iter()
            .find(|(s, _)| *s == name)
            .map(|&(_, n)| n)
            .ok_or_else(|| {
                let names: Vec<String> = SIGNALS.iter().map(|(s, _)| format!("SIG{s}")).collect();
                format!("{text:?} is not one of {}", names.join(", "))
            }),
    }
}

/// Arguments of `gpudctl run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// VRAM to reserve, e.g. `12GiB`.
    #[arg(long, value_parser = parse_size)]
    pub vram: Option<u64>,
    /// Take the device's compute slot.
    #[arg(long)]
    pub compute: bool,
    /// Device index or UUID (default: any).
    #[arg(long, default_value = "any")]
    pub device: Placement,
    /// Lease this many devices at once, each with --vram and --compute: granted on all of
    /// them together or not at all; CUDA_VISIBLE_DEVICES lists them in the granted order.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub devices: Option<u32>,
    /// How gpud chooses the device(s): best-fit (default), spread (least loaded first), pack
    /// (most loaded that fits first) or near (all on one NVLink island or NUMA node).
    #[arg(long, value_name = "POLICY")]
    pub placement: Option<PlacementPolicy>,
    /// Host memory to reserve with the lease, e.g. `64GiB`: what the program and its
    /// children keep resident, page-locked memory included (docs/HOST.md). Without --vram and
    /// --compute the lease is of the host alone (CUDA_VISIBLE_DEVICES is then empty).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub host_mem: Option<u64>,
    /// Page-locked (pinned) host memory to reserve, e.g. `2GiB`: CUDA staging buffers,
    /// registered memory. It counts as host memory too (at least this much is reserved there).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub pinned: Option<u64>,
    /// Take N CPUs of one NUMA node: the program (and what it starts) is pinned to them with
    /// sched_setaffinity, and GPUD_CPUS lists them in the kernel's list format (`4-7`).
    /// Without it the program is not pinned.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub cpus: Option<u32>,
    /// Which NUMA node the --cpus come from: any (the node with room, the default), near (the
    /// node of the leased device; needs --vram or --compute) or a node number.
    #[arg(long, value_name = "NODE", requires = "cpus")]
    pub numa: Option<NumaPlacement>,
    /// Priority class.
    #[arg(long, default_value = "normal")]
    pub class: Class,
    /// Give up waiting for the lease after this long.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Label shown in status (default: the program's name).
    #[arg(long)]
    pub label: Option<String>,
    /// Report the wait (a line each time the place in the queue changes) and the grant on
    /// stderr. On a terminal the wait is always shown, on one line that goes at the grant.
    #[arg(short, long)]
    pub verbose: bool,
    /// How the lease is enforced. none: gpudctl holds the lease for the program. preload:
    /// libgpud_preload.so inside the program, where each CUDA process leases its own memory
    /// at its first CUDA call (of --vram) and an allocation past its lease grows it or fails
    /// (--policy), and --compute takes the interlock before a kernel launch and gives it back
    /// once the program is idle; gpudctl then holds no lease. mps: the program runs as a
    /// client of gpud's MPS control daemon, and an allocation past its lease fails with
    /// out-of-memory (the lease cannot grow).
    #[arg(long, value_enum, default_value = "none", value_name = "HOW")]
    pub enforce: Enforce,
    /// With --enforce preload: what an allocation past the lease does. grow: wait in gpud's
    /// queue for a larger lease (the default); fail: CUDA_ERROR_OUT_OF_MEMORY at once.
    #[arg(long, value_enum)]
    pub policy: Option<GrowPolicy>,
    /// With --enforce preload: the interposer (default: libgpud_preload.so beside gpudctl,
    /// or in ../lib/gpud from it).
    #[arg(long, value_name = "PATH")]
    pub preload_lib: Option<PathBuf>,
    /// Forward a yield notice (a critical request waits, or the lease's maximum hold passed)
    /// to the program's process group as this signal, e.g. SIGUSR1; without it a notice is
    /// logged and ignored.
    #[arg(long, value_name = "SIGNAL", value_parser = signal_number)]
    pub on_yield: Option<i32>,
    /// When the lease is revoked or lost, the program gets SIGTERM, and SIGKILL this long
    /// after if it still runs.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub kill_after: Duration,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How `gpudctl run` enforces the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Enforce {
    /// gpudctl holds the lease; the program is trusted to stay within it.
    None,
    /// libgpud_preload.so in the program's processes.
    Preload,
    /// Hard per-device limits through gpud's MPS control daemon.
    Mps,
}

/// What an allocation past a preloaded program's lease does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GrowPolicy {
    /// Grow the lease, waiting in gpud's queue.
    Grow,
    /// Fail with CUDA_ERROR_OUT_OF_MEMORY.
    Fail,
}

/// `gpudctl budget`.
#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// Reserve a job's share of a device; waits until it fits. Needs admin rights.
    Create {
        /// The job it is for (a scheduler's job id).
        #[arg(long)]
        job: String,
        /// The uid whose processes may lease from it.
        #[arg(long)]
        uid: u32,
        /// Device memory it reserves (e.g. 8GiB).
        #[arg(long, value_parser = parse_size, default_value = "0")]
        vram: u64,
        /// Compute slots its leases may hold at once.
        #[arg(long, default_value_t = 0)]
        compute_slots: u32,
        /// The class of every lease inside it.
        #[arg(long, default_value = "normal")]
        class: Class,
        /// Device index or UUID; any device by default.
        #[arg(long, default_value = "any")]
        device: Placement,
        /// Processes in this cgroup lease from it without naming it.
        #[arg(long)]
        cgroup: Option<String>,
        /// Give up waiting after this long.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// Print the budget as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a budget, or every budget of a job: what is inside is revoked. Needs admin rights.
    End {
        /// The budget's id.
        #[arg(required_unless_present = "job", conflicts_with = "job")]
        budget: Option<LeaseId>,
        /// Every budget of this job (none is not an error).
        #[arg(long)]
        job: Option<String>,
    },
    /// The budgets.
    List {
        /// Only this job's.
        #[arg(long)]
        job: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Shell `export` lines that make a job's processes lease from its budget.
    Env {
        /// The job.
        #[arg(long)]
        job: String,
    },
}

/// `gpudctl slurm`.
#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Print gres.conf lines and the node's `Gres=` value from gpud's capacity.
    Gres {
        /// The node's name in slurm.conf (default: this host's name).
        #[arg(long)]
        node: Option<String>,
        /// Jobs that may hold a compute share of one device at once (they queue for the
        /// interlock inside gpud).
        #[arg(long, default_value_t = 4)]
        compute_shares: u32,
    },
    /// Slurm Prolog (root, on the job's node): create the job's budget from its GRES.
    Prolog {
        /// Longest wait for the budget to fit (it waits when gpud has less room than Slurm
        /// believed, e.g. memory used outside gpud).
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
        /// The job's cgroup, with {uid} and {job} replaced (e.g. /slurm/uid_{uid}/job_{job}):
        /// processes in it lease from the budget without its handle.
        #[arg(long)]
        cgroup: Option<String>,
    },
    /// Slurm Epilog (root): end the job's budgets and everything leased from them.
    Epilog,
    /// Slurm TaskProlog (the job's uid): `export` lines for the job's processes.
    TaskProlog,
}

#[cfg(test)]
mod tests {
    use super::signal_number;

    #[test]
    fn yield_signals_are_named_either_way_or_numbered() {
        assert_eq!(signal_number("SIGUSR1"), Ok(10));
        assert_eq!(signal_number("usr2"), Ok(12));
        assert_eq!(signal_number("15"), Ok(15));
        assert!(
            signal_number("SIGKILL").is_err(),
            "not one a program can handle"
        );
        assert!(signal_number("99").is_err());
        assert!(signal_number("").is_err());
    }
}
