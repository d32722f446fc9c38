//! gpudctl's command line: the binary parses it, and gpud-cli-docs renders its man pages and
//! shell completions from it.
//!
//! gpud-cli-docs mounts this file in a module of its own, so it names the binary's other
//! modules as `super::NAME` (never `crate::`), and that tool mounts those beside it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gpud_client::LeaseId;
use gpud_client::proto::{Class, Placement, parse_duration, parse_size};

/// Inspect and operate gpud, the GPU lease daemon.
#[derive(Debug, Parser)]
// Name and about are set here, not taken from Cargo: gpud-cli-docs compiles this file too,
// and Cargo's would be that crate's.
#[command(name = "gpudctl", version)]
pub struct Args {
    /// gpud's socket.
    #[arg(long, global = true, value_name = "PATH", env = "GPUD_SOCKET", default_value = gpud_client::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Devices: capacity, reservations, compute holder, queues.
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
    /// Status, refreshed until interrupted.
    Watch {
        /// Refresh period.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
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
    Metrics,
    /// Run a program under a lease: sets CUDA_VISIBLE_DEVICES and GPUD_LEASE_ID, releases when
    /// it exits, and passes its exit status through.
    Run(RunArgs),
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
    /// Priority class.
    #[arg(long, default_value = "normal")]
    pub class: Class,
    /// Give up waiting for the lease after this long.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Label shown in status (default: the program's name).
    #[arg(long)]
    pub label: Option<String>,
    /// Report the grant on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}
