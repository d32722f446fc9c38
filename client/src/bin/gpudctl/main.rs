//! `gpudctl`: operate and inspect gpud.

mod budget;
mod child;
mod cli;
mod exit;
mod exposition;
mod format;
mod mps;
mod preload;
mod run;
mod slurm;
mod waiting;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use gpud_client::Client;

use cli::{Args, Command};

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
        Command::Run(run) if run.enforce == cli::Enforce::Preload => {
            // Host resources are refused here: under preload gpudctl holds no lease.
            run::host_args(&run)?;
            return preload::run(&client, run, &args.socket).await;
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
