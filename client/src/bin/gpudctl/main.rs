//! `gpudctl`: operate and inspect gpud.

mod budget;
mod exit;
mod exposition;
mod format;
mod run;
mod slurm;
mod waiting;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpud_client::proto::{Placement, parse_duration};
use gpud_client::{Client, LeaseId};

/// Inspect and operate gpud, the GPU lease daemon.
// The about is this comment: a bare `about` would take the crate's, the client library's.
#[derive(Debug, Parser)]
#[command(version, after_help = exit::TABLE)]
struct Args {
    /// gpud's socket.
    #[arg(long, global = true, value_name = "PATH", env = "GPUD_SOCKET", default_value = gpud_client::DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Devices: capacity, reservations, compute holder, queues.
    Status {
        /// Machine-readable output (fields documented in docs/PROTOCOL.md).
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
    /// Metrics in the Prometheus text format (names in docs/METRICS.md).
    Metrics {
        /// The samples as JSON: `{"samples": [{name, labels, value, type, help}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Run a program under a lease: sets CUDA_VISIBLE_DEVICES and GPUD_LEASE_ID, releases when
    /// it exits, and passes its exit status through.
    Run(run::RunArgs),
    /// Budgets: jobs' shares of devices that their processes lease from.
    #[command(subcommand)]
    Budget(budget::BudgetCommand),
    /// Slurm integration: GRES lines, prolog, epilog and task prolog (slurm/ has the scripts).
    #[command(subcommand)]
    Slurm(slurm::SlurmCommand),
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

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpudctl: cannot start the runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    match runtime.block_on(dispatch(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpudctl: {}", gpud_client::proto::report::chain(e.as_ref()));
            ExitCode::from(exit::code_of(&e))
        }
    }
}

async fn dispatch(args: Args) -> Result<ExitCode> {
    let client = Client::connect(&args.socket).await?;
    match args.command {
        Command::Status { json } => {
            let status = client.status().await?;
            if json {
                say(&format!("{}\n", serde_json::to_string_pretty(&status)?));
            } else {
                say(&format::status(&status));
            }
        }
        Command::Leases { json } => {
            let status = client.status().await?;
            if json {
                let v = serde_json::json!({ "leases": status.leases, "waiters": status.waiters });
                say(&format!("{}\n", serde_json::to_string_pretty(&v)?));
            } else {
                say(&format::leases(&status));
            }
        }
        Command::Watch { interval, json } => loop {
            let status = client.status().await?;
            if json {
                say(&format!("{}\n", serde_json::to_string(&status)?));
            } else {
                let screen = format!("{}\n{}", format::status(&status), format::leases(&status));
                if std::io::stdout().is_terminal() {
                    // Clear the screen and home the cursor, then draw.
                    say(&format!("\x1b[2J\x1b[H{screen}"));
                } else {
                    // A pipe or file gets each refresh after the last, a blank line between.
                    say(&format!("{screen}\n"));
                }
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = tokio::signal::ctrl_c() => return Ok(ExitCode::from(exit::OK)),
            }
        },
        Command::Drain { device } => {
            client
                .drain(device.clone())
                .await
                .with_context(|| format!("drain {device}"))?;
            say(&format!("device {device} drained\n"));
        }
        Command::Undrain { device } => {
            client
                .undrain(device.clone())
                .await
                .with_context(|| format!("undrain {device}"))?;
            say(&format!("device {device} undrained\n"));
        }
        Command::Revoke { lease } => {
            client
                .revoke(lease)
                .await
                .with_context(|| format!("revoke lease {lease}"))?;
            say(&format!("lease {lease} revoked\n"));
        }
        Command::Metrics { json } => {
            let text = client.metrics().await?;
            if json {
                let v = exposition::to_json(&text).map_err(anyhow::Error::msg)?;
                say(&format!("{}\n", serde_json::to_string_pretty(&v)?));
            } else {
                say(&text);
            }
        }
        Command::Run(run) => return run::run(&client, run).await,
        Command::Budget(command) => budget::run(&client, command, &args.socket).await?,
        Command::Slurm(command) => slurm::run(&client, command, &args.socket).await?,
    }
    Ok(ExitCode::from(exit::OK))
}

/// Writes to stdout; a closed pipe (`gpudctl status | head`) ends the program quietly.
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}
