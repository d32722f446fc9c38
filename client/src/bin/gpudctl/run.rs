//! `gpudctl run`: an unmodified program under a lease.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use gpud_client::proto::Event;
use gpud_client::{Client, LeaseRequest};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::RunArgs;

/// Acquires, runs, releases; returns the program's exit status (128 + signal when killed).
pub async fn run(client: &Client, args: RunArgs) -> Result<ExitCode> {
    let vram = args.vram.unwrap_or(0);
    if vram == 0 && !args.compute {
        bail!("nothing to reserve: give --vram SIZE and/or --compute");
    }
    let mut request = LeaseRequest::new()
        .vram(vram)
        .with_compute(args.compute)
        .device(args.device.clone())
        .class(args.class)
        .label(
            args.label
                .clone()
                .unwrap_or_else(|| args.command[0].clone()),
        );
    if let Some(t) = args.timeout {
        request = request.timeout(t);
    }
    let mut interrupt = signal(SignalKind::interrupt()).context("signal handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("signal handler")?;
    let mut lease = tokio::select! {
        lease = client.acquire(&request) => lease.context("acquire")?,
        _ = interrupt.recv() => return Ok(ExitCode::from(130)),
        _ = terminate.recv() => return Ok(ExitCode::from(143)),
    };
    if args.verbose {
        eprintln!(
            "gpudctl: lease {} on device {} ({})",
            lease.id(),
            lease.info().device_index,
            lease.info().device_uuid
        );
    }
    let mut child = tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("CUDA_VISIBLE_DEVICES", lease.cuda_visible_devices())
        .env("GPUD_LEASE_ID", lease.id().to_string())
        .spawn()
        .with_context(|| format!("cannot run {:?}", args.command[0]))?;
    let pid = child.id().map(|p| Pid::from_raw(p as i32));
    let forward = |sig: Signal| {
        if let Some(pid) = pid {
            let _ = kill(pid, sig);
        }
    };
    let mut listening = true;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.context("wait for the program")?,
            _ = interrupt.recv() => forward(Signal::SIGINT),
            _ = terminate.recv() => forward(Signal::SIGTERM),
            event = lease.next_event(), if listening => match event {
                Some(Event::Revoked { reason, .. }) => {
                    eprintln!("gpudctl: lease {} revoked ({reason:?}); stopping the program", lease.id());
                    forward(Signal::SIGTERM);
                    listening = false;
                }
                Some(_) => {}
                // The connection is gone: the lease no longer protects the program.
                None => {
                    eprintln!("gpudctl: connection to gpud lost; stopping the program");
                    forward(Signal::SIGTERM);
                    listening = false;
                }
            },
        }
    };
    if !lease.is_lost() {
        lease.release().await.context("release")?;
    }
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
