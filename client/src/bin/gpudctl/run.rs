//! `gpudctl run`: an unmodified program under a lease.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gpud_client::proto::{Event, RevokeReason};
use gpud_client::{Client, LeaseRequest};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{Enforce, RunArgs};
use crate::exit::{self, Fail};
use crate::format::duration_ms;
use crate::waiting::Progress;

/// Acquires, runs, releases; returns the program's exit status (128 + signal when killed).
pub async fn run(client: &Client, args: RunArgs) -> Result<ExitCode> {
    let vram = args.vram.unwrap_or(0);
    if vram == 0 && !args.compute {
        return Err(Fail::new(
            exit::USAGE,
            "nothing to reserve: give --vram SIZE and/or --compute",
        )
        .into());
    }
    // Checked before the wait: a host without MPS refuses at once.
    if args.enforce != Enforce::Preload && args.policy.is_some() {
        return Err(Fail::new(
            exit::USAGE,
            "--policy is for --enforce preload: under MPS an allocation past the lease fails \
             (the lease cannot grow), and without enforcement nothing is intercepted",
        )
        .into());
    }
    let mps = match args.enforce {
        Enforce::Mps => Some(crate::mps::plan(client, vram).await?),
        // --enforce preload runs through preload::run (main dispatches it there).
        Enforce::None | Enforce::Preload => None,
    };
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
    if let Some(n) = args.devices {
        if n > 1 && args.device != gpud_client::Placement::Any {
            return Err(Fail::new(
                exit::USAGE,
                "--devices N chooses the devices: leave out --device",
            )
            .into());
        }
        request = request.devices(n);
    }
    if let Some(policy) = args.placement {
        request = request.placement(policy);
    }
    let mut interrupt = signal(SignalKind::interrupt()).context("signal handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("signal handler")?;
    let started = Instant::now();
    let mut progress = Progress::new(
        std::io::stderr(),
        std::io::stderr().is_terminal(),
        args.verbose,
        started,
    );
    let (places, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let acquire = client.acquire_hearing_places(&request, places);
    tokio::pin!(acquire);
    // The live line appears once a wait is worth showing, and then counts the seconds.
    let mut ticks = tokio::time::interval_at(
        (started + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    let mut lease = loop {
        tokio::select! {
            lease = &mut acquire => {
                progress.done(Instant::now());
                break lease.context("acquire")?;
            }
            Some(place) = heard.recv() => progress.place(place, Instant::now()),
            _ = ticks.tick() => progress.tick(Instant::now()),
            _ = interrupt.recv() => {
                progress.done(Instant::now());
                return Ok(ExitCode::from(130));
            }
            _ = terminate.recv() => {
                progress.done(Instant::now());
                return Ok(ExitCode::from(143));
            }
        }
    };
    if args.verbose {
        let devices = if lease.parts().is_empty() {
            format!(
                "device {} ({})",
                lease.info().device_index,
                lease.info().device_uuid
            )
        } else {
            let each: Vec<String> = lease
                .parts()
                .iter()
                .map(|p| format!("{} ({})", p.device_index, p.device_uuid))
                .collect();
            format!("devices {}", each.join(", "))
        };
        eprintln!(
            "gpudctl: lease {} on {devices} after {}",
            lease.id(),
            duration_ms(started.elapsed().as_millis() as u64)
        );
    }
    let enforcement = mps
        .map(|plan| plan.environment(&crate::mps::lease_devices(lease.info())))
        .unwrap_or_default();
    let mut child = match tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("CUDA_VISIBLE_DEVICES", lease.cuda_visible_devices())
        .env("GPUD_LEASE_ID", lease.id().to_string())
        .envs(enforcement)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::NOT_EXECUTABLE,
            };
            let _ = lease.release().await;
            return Err(anyhow::Error::new(e)
                .context(Fail::new(code, format!("cannot run {:?}", args.command[0]))));
        }
    };
    let pid = child.id().map(|p| Pid::from_raw(p as i32));
    let forward = |sig: Signal| {
        if let Some(pid) = pid {
            let _ = kill(pid, sig);
        }
    };
    let mut listening = true;
    // Why gpudctl stopped the program, when it did.
    let mut ended: Option<Fail> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.context("wait for the program")?,
            _ = interrupt.recv() => forward(Signal::SIGINT),
            _ = terminate.recv() => forward(Signal::SIGTERM),
            event = lease.next_event(), if listening => match event {
                // The library's word for a lease it could not keep over a lost connection.
                Some(Event::Revoked { reason: RevokeReason::Lost, .. }) | None => {
                    eprintln!("gpudctl: connection to gpud lost; stopping the program");
                    ended = Some(Fail::new(exit::LOST, "the program was stopped: the connection to gpud was lost"));
                    forward(Signal::SIGTERM);
                    listening = false;
                }
                Some(Event::Revoked { reason, .. }) => {
                    let why = serde_json::to_value(reason)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_else(|| format!("{reason:?}"));
                    eprintln!("gpudctl: lease {} revoked ({why}); stopping the program", lease.id());
                    ended = Some(Fail::new(exit::REVOKED, format!("the program was stopped: lease {} was revoked ({why})", lease.id())));
                    forward(Signal::SIGTERM);
                    listening = false;
                }
                Some(_) => {}
            },
        }
    };
    if !lease.is_lost() {
        lease.release().await.context("release")?;
    }
    if let Some(fail) = ended {
        return Err(fail.into());
    }
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
