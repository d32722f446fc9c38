//! gpud's command line: the binary parses it (main.rs declares this module; it is not part of
//! the library), and gpud-cli-docs renders its man page and shell completions from it.
//!
//! gpud-cli-docs mounts this file in a module of its own, so it names the binary's other
//! modules as `super::NAME` (never `crate::`), and that tool mounts those beside it.

use std::path::PathBuf;

use clap::Parser;
use gpud_proto::parse_size;

const EXIT_CODES: &str = "\
Exit status:
  0  stopped by SIGTERM or SIGINT, or --check-config found the configuration valid
  1  could not start (socket, state directory, devices, D-Bus) or failed while running
  2  usage: an unknown option or a bad value (--simulate, --headroom, --log, --dbus)
  3  the configuration file cannot be read or is invalid";

/// GPU lease daemon: VRAM reservations and compute interlocks for processes sharing GPUs.
#[derive(Debug, Parser)]
// Name and about are set here, not taken from Cargo: gpud-cli-docs compiles this file too,
// and Cargo's would be that crate's.
#[command(name = "gpud", version, after_help = EXIT_CODES)]
pub struct Args {
    /// Config file (default /etc/gpud/gpud.toml when it exists).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Unix socket to listen on.
    #[arg(long, value_name = "PATH", env = "GPUD_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Simulated devices instead of NVML, e.g. `2x16GiB` or `16GiB,24GiB`.
    #[arg(long, value_name = "SPEC", value_parser = simulation_spec)]
    pub simulate: Option<String>,
    /// Memory kept back on every device, e.g. `512MiB` (overrides the config).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub headroom: Option<u64>,
    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    #[arg(long, default_value = "info", env = "GPUD_LOG", value_parser = log_filter)]
    pub log: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// D-Bus service: system, session, none, or a bus address such as
    /// unix:path=/run/dbus/system_bus_socket. Default: `[dbus] bus`, else the system bus when
    /// it can be reached.
    #[arg(long, value_name = "BUS")]
    pub dbus: Option<gpud::config::BusChoice>,
    /// Directory of the lease journal (default: `state_dir` from the config, else
    /// /var/lib/gpud as root and $XDG_STATE_HOME/gpud or ~/.local/state/gpud otherwise).
    #[arg(long, value_name = "PATH")]
    pub state_dir: Option<PathBuf>,
    /// Check the config (and the options given with it) and exit.
    #[arg(long)]
    pub check_config: bool,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, for people and the journal.
    Text,
    /// One JSON object per event, for log collectors.
    Json,
}

/// `--simulate`: checked when the options are read, so `--check-config` checks it too.
fn simulation_spec(spec: &str) -> Result<String, gpud::config::simulate::SimulationError> {
    gpud::config::simulate::parse_spec(spec).map(|_| spec.to_string())
}

/// `--log`: a filter that does not parse is an error, not a silent `info`.
fn log_filter(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("not a log level or tracing directive: {e}"))
}
