//! `gpudctl run`: an unmodified program under a lease.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gpud_client::proto::{EnforcedBy, Event, HostArgs, NumaPlacement, RevokeReason};
use gpud_client::{Client, Lease, LeaseRequest};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::signal::unix::{Signal as Stream, SignalKind, signal};

use crate::child::{self, Started};
use crate::cli::{Enforce, RunArgs};
use crate::exit::{self, Fail};
use crate::format::duration_ms;
use crate::waiting::Progress;

/// Acquires, runs, releases; returns the program's exit status (128 + signal when killed), or
/// gpudctl's own outcome when it stopped the program (revoked, lost).
pub async fn run(client: &Client, args: RunArgs) -> Result<ExitCode> {
    let vram = args.vram.unwrap_or(0);
    let host = host_args(&args)?;
    let device_part = vram > 0 || args.compute;
    if !device_part && host.is_none() {
        return Err(Fail::new(
            exit::USAGE,
            "nothing to reserve: give --vram SIZE and/or --compute, or host resources \
             (--host-mem SIZE, --pinned SIZE, --cpus N)",
        )
        .into());
    }
    if !device_part {
        if let Some(why) = device_only(&args) {
            return Err(Fail::new(
                exit::USAGE,
                format!("{why} is about devices: a lease of the host alone has none (add --vram or --compute)"),
            )
            .into());
        }
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
    if let Some(host) = &host {
        request = request
            .host_memory(host.mem_bytes)
            .pinned(host.pinned_bytes)
            .cpus(host.cpus)
            .numa(host.numa);
    }
    let mut signals = Signals::new()?;
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
            sig = signals.recv() => {
                progress.done(Instant::now());
                return Ok(ExitCode::from(128 + sig as u8));
            }
        }
    };
    if args.verbose {
        let devices = if lease.parts().is_empty() && lease.info().device_uuid.is_empty() {
            "the host".to_string()
        } else if lease.parts().is_empty() {
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
        let host = lease
            .host()
            .map(|h| format!(" with {}", crate::format::host_grant(h)))
            .unwrap_or_default();
        eprintln!(
            "gpudctl: lease {} on {devices}{host} after {}",
            lease.id(),
            duration_ms(started.elapsed().as_millis() as u64)
        );
    }
    let cpus: Vec<u32> = lease.host().map(|h| h.cpus.clone()).unwrap_or_default();
    if let Err(e) = may_run_on(&cpus) {
        let _ = lease.release().await;
        return Err(e);
    }
    let mut command = program_command(&args, &lease);
    if let Some(plan) = &mps {
        command.envs(plan.environment(&crate::mps::lease_devices(lease.info())));
    }
    let program = match child::spawn_pinned(command, &cpus) {
        Ok(program) => program,
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
    // What keeps the program within the lease, as status and metrics show it.
    let enforced_by = if mps.is_some() {
        EnforcedBy::Mps
    } else {
        EnforcedBy::Supervised
    };
    attach(&lease, program.pid, enforced_by, args.verbose).await;
    let supervised = supervise(&mut lease, program, &args, &mut signals).await?;
    if !lease.is_lost() {
        lease.release().await.context("release")?;
    }
    if let Some(fail) = supervised.ended {
        return Err(fail.into());
    }
    use std::os::unix::process::ExitStatusExt;
    let status = supervised.status;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// The program's command: its arguments and the environment that names the lease. Ways of
/// enforcing the lease add their own environment to it.
pub fn program_command(args: &RunArgs, lease: &Lease) -> std::process::Command {
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("CUDA_VISIBLE_DEVICES", lease.cuda_visible_devices())
        .env("GPUD_LEASE_ID", lease.id().to_string());
    if let Some(host) = lease.host().filter(|h| !h.cpus.is_empty()) {
        command.env(CPUS_ENV, crate::format::cpu_list(&host.cpus));
    } else {
        // A GPUD_CPUS of an outer lease names CPUs this program was not granted.
        command.env_remove(CPUS_ENV);
    }
    command
}

/// The environment variable that lists the CPUs the program is pinned to (`4-7,12`).
pub const CPUS_ENV: &str = "GPUD_CPUS";

/// The host resources `gpudctl run` asks for, or none; bad combinations are usage errors.
pub fn host_args(args: &RunArgs) -> Result<Option<HostArgs>> {
    let host = HostArgs {
        mem_bytes: args.host_mem.unwrap_or(0),
        pinned_bytes: args.pinned.unwrap_or(0),
        cpus: args.cpus.unwrap_or(0),
        numa: args.numa.unwrap_or_default(),
    };
    if host.is_empty() {
        return Ok(None);
    }
    if host.numa == NumaPlacement::Near && args.vram.unwrap_or(0) == 0 && !args.compute {
        return Err(Fail::new(
            exit::USAGE,
            "--numa near places the CPUs on the node of the leased device: add --vram or --compute, \
             or give --numa any or a node number",
        )
        .into());
    }
    if args.enforce == Enforce::Preload {
        return Err(Fail::new(
            exit::USAGE,
            "host resources (--host-mem, --pinned, --cpus) are leased by gpudctl, and under \
             --enforce preload gpudctl holds no lease: use --enforce none or mps",
        )
        .into());
    }
    Ok(Some(host))
}

/// The first option given that only a device lease takes.
fn device_only(args: &RunArgs) -> Option<&'static str> {
    if args.enforce == Enforce::Mps {
        Some("--enforce mps")
    } else if args.devices.is_some() {
        Some("--devices")
    } else if args.placement.is_some() {
        Some("--placement")
    } else if args.device != gpud_client::Placement::Any {
        Some("--device")
    } else {
        None
    }
}

/// Whether gpudctl (and so the program) may run on the CPUs granted: a cpuset that leaves
/// them out would make sched_setaffinity fail in the child, with a less helpful error.
fn may_run_on(cpus: &[u32]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let Ok(allowed) = nix::sched::sched_getaffinity(Pid::from_raw(0)) else {
        // Unknown: the child's own call decides.
        return Ok(());
    };
    let outside: Vec<u32> = cpus
        .iter()
        .copied()
        .filter(|&c| !allowed.is_set(c as usize).unwrap_or(false))
        .collect();
    if outside.is_empty() {
        return Ok(());
    }
    Err(Fail::new(
        exit::FAILED,
        format!(
            "gpud granted CPUs {}, but gpudctl may not run on {} (its CPU affinity or cpuset \
             leaves them out), so the program cannot be pinned to them",
            crate::format::cpu_list(cpus),
            crate::format::cpu_list(&outside)
        ),
    )
    .into())
}

/// Tells gpud that the program uses the lease, so that gpud ends its process group if
/// gpudctl's session ends without releasing the lease (gpudctl killed with SIGKILL).
async fn attach(lease: &Lease, pid: Pid, enforced_by: EnforcedBy, verbose: bool) {
    if !lease.can_attach() {
        if verbose {
            eprintln!(
                "gpudctl: this gpud does not supervise programs (no attach); if gpudctl dies, only its parent-death signal (SIGTERM) stops the program"
            );
        }
        return;
    }
    if let Err(e) = lease.attach(pid.as_raw() as u32, enforced_by, true).await {
        eprintln!(
            "gpudctl: warning: gpud did not record the program ({e}); if gpudctl dies, only its parent-death signal (SIGTERM) stops it"
        );
    }
}

/// How the program ended: its status, and gpudctl's reason when gpudctl stopped it.
struct Supervised {
    status: std::process::ExitStatus,
    ended: Option<Fail>,
}

/// Waits for the program while forwarding signals and yield notices to its group, and stops
/// it (SIGTERM, SIGKILL after `--kill-after`) when the lease is revoked or lost. What is left
/// of its group once it exited is stopped the same way before the lease is released.
async fn supervise(
    lease: &mut Lease,
    mut program: Started,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<Supervised> {
    let group = program.pid;
    let on_yield = args.on_yield.and_then(|n| Signal::try_from(n).ok());
    let mut listening = true;
    // Why gpudctl stopped the program, when it did.
    let mut ended: Option<Fail> = None;
    let kill_at = tokio::time::sleep(Duration::from_secs(u32::MAX.into()));
    tokio::pin!(kill_at);
    let mut killed = false;
    let mut children = signal(SignalKind::child()).context("signal handler")?;
    // A stop before the handler was there is still waiting to be seen.
    if program.has_terminal() && program.stopped() {
        program.follow_stop();
    }
    let status = loop {
        tokio::select! {
            status = program.child.wait() => break status.context("wait for the program")?,
            _ = children.recv(), if program.has_terminal() => {
                if program.stopped() {
                    program.follow_stop();
                }
            }
            sig = signals.recv() => signal_group(group, sig),
            () = &mut kill_at, if ended.is_some() && !killed => {
                eprintln!(
                    "gpudctl: the program still runs {} after SIGTERM; sending SIGKILL",
                    duration_ms(args.kill_after.as_millis() as u64)
                );
                signal_group(group, Signal::SIGKILL);
                killed = true;
            }
            event = lease.next_event(), if listening => {
                let stop = match event {
                    // The library's word for a lease it could not keep over a lost connection.
                    Some(Event::Revoked { reason: RevokeReason::Lost, .. }) | None => {
                        eprintln!("gpudctl: connection to gpud lost; stopping the program");
                        Some(Fail::new(exit::LOST, "the program was stopped: the connection to gpud was lost"))
                    }
                    Some(Event::Revoked { reason, .. }) => {
                        let why = wire_name(&reason);
                        eprintln!("gpudctl: lease {} revoked ({why}); stopping the program", lease.id());
                        Some(Fail::new(exit::REVOKED, format!("the program was stopped: lease {} was revoked ({why})", lease.id())))
                    }
                    Some(Event::YieldRequested { reason, .. }) => {
                        let why = wire_name(&reason);
                        match on_yield {
                            Some(sig) => {
                                eprintln!("gpudctl: lease {} asked to yield ({why}); sending {sig} to the program", lease.id());
                                signal_group(group, sig);
                            }
                            None => eprintln!("gpudctl: lease {} asked to yield ({why}); ignored (see --on-yield)", lease.id()),
                        }
                        None
                    }
                    Some(_) => None,
                };
                if let Some(fail) = stop {
                    signal_group(group, Signal::SIGTERM);
                    kill_at.as_mut().reset(tokio::time::Instant::now() + args.kill_after);
                    ended = Some(fail);
                    listening = false;
                }
            }
        }
    };
    program.done();
    // Its children in its group go with it: nothing started under the lease outlives it.
    let deadline = if ended.is_some() && !killed {
        Some(kill_at.deadline())
    } else {
        None
    };
    end_group(group, deadline, args.kill_after, killed).await;
    Ok(Supervised { status, ended })
}

/// Stops what is left of the program's process group after the program exited: SIGTERM
/// (unless it had it already, when `term_deadline` says when SIGKILL is due), SIGKILL after the
/// grace. The group id cannot name another group while any of its members lives.
async fn end_group(
    group: Pid,
    term_deadline: Option<tokio::time::Instant>,
    grace: Duration,
    killed: bool,
) {
    let alive = || killpg(group, None).is_ok();
    if killed || !alive() {
        return;
    }
    let deadline = match term_deadline {
        Some(at) => at,
        None => {
            eprintln!("gpudctl: the program exited and left processes in its group; stopping them");
            signal_group(group, Signal::SIGTERM);
            tokio::time::Instant::now() + grace
        }
    };
    while alive() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if alive() {
        signal_group(group, Signal::SIGKILL);
    }
}

/// Sends a signal to the program's process group; a group that is gone already is no error.
fn signal_group(group: Pid, sig: Signal) {
    let _ = killpg(group, sig);
}

/// A reason as the protocol spells it.
fn wire_name<T: serde::Serialize + std::fmt::Debug>(reason: &T) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| format!("{reason:?}"))
}

/// The signals gpudctl forwards to the program: SIGINT, SIGTERM, SIGHUP and SIGQUIT.
struct Signals {
    interrupt: Stream,
    terminate: Stream,
    hangup: Stream,
    quit: Stream,
}

impl Signals {
    fn new() -> Result<Self> {
        let listen = |kind| signal(kind).context("signal handler");
        Ok(Self {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
            quit: listen(SignalKind::quit())?,
        })
    }

    /// The next signal gpudctl got.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}
