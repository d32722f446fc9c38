//! `gpud`: the daemon binary.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Parser;
use gpud::backend::{Backend, nvml::Nvml, simulated::Simulated};
use gpud::config::Config;
use gpud::daemon::Daemon;
use gpud_proto::parse_size;

use cli::{Args, LogFormat};

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
