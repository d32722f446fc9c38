//! `gpud`: the daemon binary.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::Parser;
use gpud::backend::{Backend, nvml::Nvml, simulated::Simulated};
use gpud::config::Config;
use gpud::daemon::Daemon;

use cli::{Args, LogFormat};

/// How gpud ends; docs/EXIT-CODES.md is the reference, `--help` repeats it.
mod exit {
    /// Stopped by SIGTERM or SIGINT, or `--check-config` found the configuration valid.
    pub const OK: u8 = 0;
    /// Could not start (socket, state directory, devices, D-Bus) or failed while running.
    pub const FAILED: u8 = 1;
    /// A command-line option or its value is wrong (clap's code).
    pub const USAGE: u8 = 2;
    /// The configuration file cannot be read or is invalid.
    pub const CONFIG: u8 = 3;
}

/// Why gpud stopped with an error, and the code it exits with.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Self {
            code: exit::FAILED,
            error: e.into(),
        }
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    init_logging(&args);
    match run(args) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(Failure { code, error }) => {
            eprintln!("gpud: {}", gpud_proto::report::chain(error.as_ref()));
            ExitCode::from(code)
        }
    }
}

fn init_logging(args: &Args) {
    // `--log` was checked when the options were read.
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

/// The state directory: the option, the config, else the default for this user.
fn state_dir(args: &Args, config: &Config) -> Result<PathBuf> {
    if let Some(dir) = args.state_dir.clone().or_else(|| config.state_dir.clone()) {
        return Ok(dir);
    }
    let env = |k| std::env::var(k).ok();
    gpud::state_dir::default_path(
        nix::unistd::geteuid().as_raw(),
        env("XDG_STATE_HOME").as_deref(),
        env("HOME").as_deref(),
    )
    .ok_or_else(|| {
        anyhow!(
            "no state directory for the lease journal: not root, and neither XDG_STATE_HOME nor HOME is set; pass --state-dir PATH"
        )
    })
}

fn run(args: Args) -> Result<(), Failure> {
    let mut config = Config::load_or_default(args.config.as_deref()).map_err(|e| Failure {
        code: exit::CONFIG,
        error: e.into(),
    })?;
    if let Some(h) = args.headroom {
        config.headroom_bytes = h;
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
        Some(spec) => Box::new(
            Simulated::new(&spec)
                .context("--simulate")?
                .with_topology(|i| config.simulated_topology(i)),
        ),
        None => Box::new(Nvml::probe()?),
    };
    if backend.devices().is_empty() {
        return Err(anyhow!("no GPUs found ({} backend)", backend.kind()).into());
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
    let state_dir = state_dir(&args, &config)?;
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
