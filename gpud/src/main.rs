//! `gpud`: the daemon binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Parser;
use gpud::backend::{Backend, nvml::Nvml, simulated::Simulated};
use gpud::config::Config;
use gpud::daemon::Daemon;
use gpud_proto::parse_size;

/// GPU lease daemon: VRAM reservations and compute interlocks for processes sharing GPUs.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Config file (default /etc/gpud/gpud.toml when it exists).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Unix socket to listen on.
    #[arg(long, value_name = "PATH", env = "GPUD_SOCKET")]
    socket: Option<PathBuf>,
    /// Simulated devices instead of NVML, e.g. `2x16GiB` or `16GiB,24GiB`.
    #[arg(long, value_name = "SPEC")]
    simulate: Option<String>,
    /// Memory kept back on every device, e.g. `512MiB` (overrides the config).
    #[arg(long, value_name = "SIZE")]
    headroom: Option<String>,
    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    #[arg(long, default_value = "info", env = "GPUD_LOG")]
    log: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// D-Bus service: system, session, none, or a bus address such as
    /// unix:path=/run/dbus/system_bus_socket. Default: `[dbus] bus`, else the system bus when
    /// it can be reached.
    #[arg(long, value_name = "BUS")]
    dbus: Option<gpud::config::BusChoice>,
    /// Directory of the lease journal (default: `state_dir` from the config, else /var/lib/gpud).
    #[arg(long, value_name = "PATH")]
    state_dir: Option<PathBuf>,
    /// Check the config and exit.
    #[arg(long)]
    check_config: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Where the lease journal lives unless configured.
const DEFAULT_STATE_DIR: &str = "/var/lib/gpud";

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(&args);
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpud: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(args: &Args) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(args: Args) -> Result<()> {
    let mut config = Config::load_or_default(args.config.as_deref())?;
    if let Some(h) = &args.headroom {
        config.headroom_bytes = parse_size(h).context("--headroom")?;
    }
    if let Some(bus) = &args.dbus {
        config.dbus = Some(bus.clone());
    }
    if args.check_config {
        println!("config ok");
        return Ok(());
    }
    let simulate = args.simulate.clone().or_else(|| config.simulate.clone());
    let backend: Box<dyn Backend> = match simulate {
        Some(spec) => Box::new(Simulated::new(&spec).context("--simulate")?),
        None => match Nvml::probe() {
            Ok(nvml) => Box::new(nvml),
            Err(e) => bail!("{e}"),
        },
    };
    if backend.devices().is_empty() {
        bail!("no GPUs found ({} backend)", backend.kind());
    }
    let socket = args
        .socket
        .clone()
        .or_else(|| config.socket.clone())
        .unwrap_or_else(|| PathBuf::from(gpud_proto::DEFAULT_SOCKET));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let state_dir = args
        .state_dir
        .clone()
        .or_else(|| config.state_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let daemon = Daemon {
        state_dir: Some(state_dir),
        config,
        config_path: args.config.clone().or_else(|| {
            let p = PathBuf::from(gpud::config::DEFAULT_CONFIG_PATH);
            p.exists().then_some(p)
        }),
        socket,
        backend,
    };
    runtime.block_on(daemon.run())?;
    Ok(())
}
