//! `gpud-prover demo`: gpud and several provers sharing one device, end to end.
//!
//! Starts the real `gpud` (simulated devices unless NVIDIA GPUs are present), then N
//! `gpud-prover prove` processes against it whose GPU phases lease enough VRAM that the device
//! fills up and requests queue; mid-run one critical prover arrives, and the holder it waits for
//! gives its lease back at its next safe point. It shows the real `gpudctl status` while they
//! run and a summary when they finish: the critical request's wait, the yield, and the waits of
//! each class. `gpud` and `gpudctl` are the ones named by `--gpud` (or `GPUD_BIN`) and
//! `--gpudctl`, else the ones beside this executable (a workspace build), else the first on
//! `PATH`; the prover does not carry the daemon.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Args;
use gpud_prover::{CircuitSpec, ParamsCache};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

#[derive(Args)]
pub struct DemoArgs {
    /// Prover processes to run at once (the last is of class high, the others normal).
    #[arg(long, default_value_t = 4)]
    provers: usize,
    /// Circuits, assigned to the provers in turn.
    #[arg(long, value_delimiter = ',', default_value = "synthetic,poseidon")]
    circuits: Vec<String>,
    /// log2 of the constraint count.
    #[arg(long, short = 'k', default_value_t = 14)]
    log_size: u32,
    /// Proofs per prover.
    #[arg(long, default_value_t = 2)]
    proofs: usize,
    /// Partitions per proof.
    #[arg(long, default_value_t = 3)]
    partitions: usize,
    /// Simulated devices for gpud when no NVIDIA GPU is present.
    #[arg(long, default_value = "16GiB")]
    simulate: String,
    /// Always simulate, even with real GPUs.
    #[arg(long)]
    force_simulate: bool,
    /// Compute slots per device (`devices.compute_slots`): how many GPU phases may run on a
    /// device at once.
    #[arg(long, default_value_t = 2)]
    compute_slots: u32,
    /// VRAM each GPU phase leases on simulated devices, as a large partition would on a GPU
    /// (on real GPUs the engine's own need).
    #[arg(long, default_value = "7GiB", value_parser = parse_size)]
    phase_vram: u64,
    /// Seconds into the run after which the critical prover arrives (at a moment when every
    /// compute slot is held, so that it must wait); a negative value: no critical prover.
    #[arg(long, default_value_t = 6.0, allow_negative_numbers = true)]
    critical_after: f64,
    /// Seconds between `gpudctl status` snapshots.
    #[arg(long, default_value_t = 4.0)]
    status_every: f64,
    /// Parameter cache directory (see `prove --help`).
    #[arg(long)]
    params_dir: Option<PathBuf>,
    /// The gpud binary [default: next to this one, else the first gpud on PATH].
    #[arg(long, env = "GPUD_BIN")]
    gpud: Option<PathBuf>,
    /// The gpudctl binary [default: next to this one, else the first gpudctl on PATH].
    #[arg(long)]
    gpudctl: Option<PathBuf>,
}

fn parse_size(s: &str) -> std::result::Result<u64, String> {
    gpud_client::proto::parse_size(s).map_err(|e| e.to_string())
}

/// `n` and the noun, plural unless `n` is 1.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// The binary `name` to run: the one given, else beside this executable (the same build
/// directory), else on `PATH`; when there is none, an error that says what to build.
fn binary(name: &str, given: &Option<PathBuf>, flag: &str) -> Result<PathBuf> {
    if let Some(p) = given {
        if !p.is_file() {
            bail!("{} does not exist", p.display());
        }
        return Ok(p.clone());
    }
    let exe = std::env::current_exe().context("locating gpud-prover")?;
    let beside = exe.with_file_name(name);
    if beside.is_file() {
        return Ok(beside);
    }
    if let Some(bin) = on_path(name) {
        return Ok(bin);
    }
    let dir = exe.parent().unwrap_or(Path::new("."));
    let release = if dir.ends_with("release") {
        " --release"
    } else {
        ""
    };
    bail!(
        "the demo runs {name}, and there is none beside {} nor on PATH: build gpud and gpudctl \
         with `cargo build{release} -p gpud -p gpud-client`, or name one with {flag}",
        exe.display()
    )
}

/// The first executable file called `name` in a directory of `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn real_gpus_present() -> bool {
    Path::new("/dev/nvidiactl").exists()
        && Command::new("nvidia-smi")
            .arg("-L")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// gpud as a child process, stopped with SIGTERM when dropped.
struct Gpud(Child);

impl Drop for Gpud {
    fn drop(&mut self) {
        let child = &mut self.0;
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The real `gpudctl COMMAND` (`status`, `leases`), as an operator would type it.
fn gpudctl_run(gpudctl: &Path, socket: &Path, command: &str) -> Result<String> {
    let out = Command::new(gpudctl)
        .arg("--socket")
        .arg(socket)
        .arg(command)
        .output()
        .with_context(|| format!("running {}", gpudctl.display()))?;
    if !out.status.success() {
        bail!(
            "{} {command} failed: {}",
            gpudctl.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
}

struct Prover {
    /// "prover 2 (poseidon@2^14, pid 123)".
    name: String,
    class: &'static str,
    child: Child,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// How every prover of the demo runs.
struct ProverSetup<'a> {
    exe: PathBuf,
    engine: &'static str,
    log_size: u32,
    phase_vram: Option<u64>,
    socket: &'a Path,
    cache: &'a ParamsCache,
}

impl ProverSetup<'_> {
    fn spawn(
        &self,
        number: usize,
        spec: CircuitSpec,
        class: &'static str,
        proofs: usize,
        partitions: usize,
    ) -> Result<Prover> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(["prove", "--json", "--circuit", spec.kind().name()])
            .args(["--engine", self.engine])
            .args(["--log-size", &self.log_size.to_string()])
            .args(["--proofs", &proofs.to_string()])
            .args(["--partitions", &partitions.to_string()])
            .args(["--class", class])
            .args(["--seed", &(1000 * number as u64).to_string()])
            .arg("--socket")
            .arg(self.socket)
            .arg("--params-dir")
            .arg(self.cache.dir());
        if let Some(bytes) = self.phase_vram {
            cmd.args(["--phase-vram", &bytes.to_string()]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting a prover")?;
        let stdout = drain(child.stdout.take().context("prover stdout")?);
        let stderr = drain(child.stderr.take().context("prover stderr")?);
        Ok(Prover {
            name: format!("prover {number} ({spec}, pid {})", child.id()),
            class,
            child,
            stdout,
            stderr,
        })
    }
}

/// `path` relative to the working directory when it lies below it (`target/debug/gpud`).
fn shown(path: &Path) -> &Path {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok())
        .unwrap_or(path)
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

pub fn run(a: DemoArgs) -> Result<()> {
    if a.provers == 0 || a.circuits.is_empty() {
        bail!("--provers and --circuits must not be empty");
    }
    if a.compute_slots == 0 {
        bail!("--compute-slots must be at least 1");
    }
    let started = Instant::now();
    let started_unix = unix_nanos();
    let gpud_bin = binary("gpud", &a.gpud, "--gpud or GPUD_BIN")?;
    let gpudctl = binary("gpudctl", &a.gpudctl, "--gpudctl")?;
    let cache = ParamsCache::new(
        a.params_dir
            .clone()
            .unwrap_or_else(ParamsCache::default_dir),
    );
    let simulated = a.force_simulate || !real_gpus_present();
    let critical = a.critical_after >= 0.0;
    let cuda = !simulated
        && gpud_prover::engine::EngineChoice::Auto.resolve()
            == gpud_prover::engine::EngineChoice::Cuda;
    println!(
        "gpud-prover demo: {}{} share {} through gpud leases",
        count(a.provers, "prover"),
        if critical {
            " and, mid-run, a critical one,"
        } else {
            ""
        },
        if simulated {
            let devices = a.simulate.replace("GiB", " GiB").replace(',', ", ");
            if a.simulate.contains([',', 'x']) {
                format!("simulated GPUs ({devices})")
            } else {
                format!("a simulated {devices} GPU")
            }
        } else {
            "this host's NVIDIA GPUs".into()
        }
    );
    println!(
        "engine: {}",
        match (simulated, cuda) {
            (true, _) =>
                "CPU on simulated GPUs: gpud simulates the devices and each prover runs its GPU \
                 phase (H polynomial, G1 MSMs) on the host",
            (false, true) => "CUDA on real GPUs: each prover runs its GPU phase on the leased GPU",
            (false, false) =>
                "CPU on real GPUs (no CUDA driver for the provers): gpud manages the GPUs, the \
                 GPU phases run on the host",
        }
    );

    // Parameters first: generation is slow and must not race between provers.
    let specs = a
        .circuits
        .iter()
        .map(|c| CircuitSpec::parse(c, a.log_size))
        .collect::<gpud_prover::Result<Vec<_>>>()?;
    for spec in &specs {
        if cache.load(spec).is_err() {
            println!(
                "generating parameters for {spec} (once; cached in {})",
                cache.dir().display()
            );
            cache.generate(spec, &mut rand::thread_rng())?;
        }
    }

    let dir = std::env::temp_dir().join(format!("gpud-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join("gpud.sock");
    let log_path = dir.join("gpud.log");
    let config = dir.join("gpud.toml");
    std::fs::write(
        &config,
        format!("[devices]\ncompute_slots = {}\n", a.compute_slots),
    )?;
    let mut cmd = Command::new(&gpud_bin);
    cmd.arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--dbus", "none"]);
    if simulated {
        cmd.args(["--simulate", &a.simulate]);
    }
    let log = std::fs::File::create(&log_path)?;
    let mut gpud = Gpud(
        cmd.stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", gpud_bin.display()))?,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let observer = loop {
        match gpud_client::blocking::Client::connect(&socket) {
            Ok(client) => break client,
            // It answered but does not speak our protocol: a gpud from another build.
            Err(
                e @ (gpud_client::ClientError::Refused { .. }
                | gpud_client::ClientError::Protocol(_)),
            ) => {
                bail!(
                    "{e} (is {} from another build? rebuild gpud and gpud-prover together)",
                    gpud_bin.display()
                )
            }
            Err(_) => {}
        }
        if let Some(status) = gpud.0.try_wait()? {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("gpud exited ({status}): {}", log.trim());
        }
        if Instant::now() > deadline {
            bail!("gpud did not start; see {}", log_path.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!(
        "gpud:   {} on {}, {} per device (log {})",
        shown(&gpud_bin).display(),
        socket.display(),
        count(a.compute_slots as usize, "compute slot"),
        log_path.display()
    );
    let capacity = observer
        .status()?
        .devices
        .iter()
        .map(|d| d.capacity_bytes)
        .min()
        .unwrap_or(0);
    let phase_vram = simulated.then_some(a.phase_vram);
    match phase_vram {
        Some(bytes) => {
            let fit = capacity.checked_div(bytes).unwrap_or(0);
            println!(
                "leases: each GPU phase reserves {:.1} GiB and a compute slot; {} in a device's \
                 {:.1} GiB, so the others queue for VRAM",
                gib(bytes),
                if fit == 1 {
                    "one fits".to_owned()
                } else {
                    format!("{fit} fit")
                },
                gib(capacity)
            );
        }
        None => {
            println!("leases: each GPU phase reserves the VRAM its engine needs and a compute slot")
        }
    }

    let setup = ProverSetup {
        exe: std::env::current_exe()?,
        engine: if cuda { "cuda" } else { "cpu" },
        log_size: a.log_size,
        phase_vram,
        socket: &socket,
        cache: &cache,
    };
    let mut provers = Vec::new();
    for i in 0..a.provers {
        let class = if i == a.provers - 1 && a.provers > 2 {
            "high"
        } else {
            "normal"
        };
        let p = setup.spawn(i + 1, specs[i % specs.len()], class, a.proofs, a.partitions)?;
        println!(
            "started {} [{class}]: {} × {}",
            p.name,
            count(a.proofs, "proof"),
            count(a.partitions, "partition")
        );
        provers.push(p);
    }

    // `gpudctl status` while they run; the critical prover once the run is under way.
    let every = Duration::from_secs_f64(a.status_every.max(0.2));
    let mut next_status = Instant::now();
    let mut critical_index = None;
    let mut critical_shown = false;
    loop {
        let mut running = 0;
        for p in &mut provers {
            if p.child.try_wait()?.is_none() {
                running += 1;
            }
        }
        if running == 0 && (critical_index.is_some() || !critical) {
            break;
        }
        let now = started.elapsed().as_secs_f64();
        if critical && critical_index.is_none() && now >= a.critical_after {
            let status = observer.status()?;
            // When every slot is held the critical request has to wait: the case to show.
            let full = status
                .devices
                .iter()
                .all(|d| d.compute_holders.len() as u32 >= d.compute_slots);
            // Once a prover has finished the run winds down: it comes then at the latest.
            if full || running < a.provers {
                let p = setup.spawn(provers.len() + 1, specs[0], "critical", 1, 1)?;
                println!(
                    "\n{now:.1} s: a critical prover arrives, {} [critical]: 1 proof × 1 \
                     partition{}",
                    p.name,
                    if full {
                        "; every compute slot is held"
                    } else {
                        ""
                    }
                );
                critical_index = Some(provers.len());
                provers.push(p);
            }
        }
        // The leases once the critical prover holds its own, as gpudctl shows them.
        if let Some(i) = critical_index.filter(|_| !critical_shown) {
            let pid = provers[i].child.id();
            let status = observer.status()?;
            if status.leases.iter().any(|l| l.pid == pid) {
                println!(
                    "\n$ gpudctl leases   ({:.1} s, the critical prover holds a compute slot)\n{}",
                    started.elapsed().as_secs_f64(),
                    gpudctl_run(&gpudctl, &socket, "leases")?
                );
                critical_shown = true;
                next_status = Instant::now() + every;
            } else if provers[i].child.try_wait()?.is_some() {
                critical_shown = true;
            }
        }
        if Instant::now() >= next_status {
            println!(
                "\n$ gpudctl status   ({:.1} s, {} running)\n{}",
                started.elapsed().as_secs_f64(),
                count(running, "prover"),
                gpudctl_run(&gpudctl, &socket, "status")?
            );
            next_status = Instant::now() + every;
        }
        std::thread::sleep(Duration::from_millis(
            if critical_index.is_some() && !critical_shown {
                5
            } else {
                50
            },
        ));
    }

    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for p in provers {
        let Prover {
            name,
            class,
            mut child,
            stdout,
            stderr,
        } = p;
        let status = child.wait()?;
        let out = stdout.join().unwrap_or_default();
        let err = stderr.join().unwrap_or_default();
        match serde_json::from_str::<Value>(&out) {
            Ok(report) if status.success() => reports.push(Report {
                name,
                class,
                report,
            }),
            _ => failures.push(format!("{name}: {status}: {}", err.trim())),
        }
    }
    drop(observer);
    drop(gpud);
    summarize(&reports, started.elapsed().as_secs_f64(), started_unix);
    if failures.is_empty() {
        // Keep the socket directory (and gpud's log) only when something went wrong.
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        bail!(
            "{} failed:\n{}",
            count(failures.len(), "prover"),
            failures.join("\n")
        );
    }
    Ok(())
}

/// One prover's JSON report (`prove --json`).
struct Report {
    name: String,
    class: &'static str,
    report: Value,
}

fn f(v: &Value, path: &[&str]) -> f64 {
    path.iter().fold(v, |v, k| &v[*k]).as_f64().unwrap_or(0.0)
}

fn nanos(v: &Value, key: &str) -> u128 {
    v[key]
        .as_u64()
        .map(u128::from)
        .or_else(|| v[key].as_f64().map(|x| x as u128))
        .unwrap_or(0)
}

/// A partition's lease: when it was asked for and granted (Unix nanoseconds), and the
/// intervals it was held (split where a yield gave it back).
struct Phase {
    requested: u128,
    granted: u128,
    held: Vec<(u128, u128)>,
}

fn phases(report: &Value) -> Vec<Phase> {
    let mut out = Vec::new();
    for p in report["partitions_detail"].as_array().into_iter().flatten() {
        let granted = nanos(p, "lease_granted_unix");
        let wait = f(p, &["lease_granted"]) - f(p, &["lease_requested"]);
        let requested = granted.saturating_sub((wait.max(0.0) * 1e9) as u128);
        let mut held = Vec::new();
        let mut from = granted;
        for y in p["yields"].as_array().into_iter().flatten() {
            held.push((from, nanos(y, "released_unix")));
            from = nanos(y, "regranted_unix");
        }
        held.push((from, nanos(p, "lease_released_unix")));
        out.push(Phase {
            requested,
            granted,
            held,
        });
    }
    out
}

const CLASSES: [&str; 4] = ["critical", "high", "normal", "background"];

fn summarize(reports: &[Report], wall: f64, started_unix: u128) {
    let at = |unix: u128| unix.saturating_sub(started_unix) as f64 / 1e9;
    println!("\n== summary ==");
    println!(
        "{:<40} {:<8} {:>6} {:>7} {:>7} {:>7} {:>7} {:>8}",
        "prover", "class", "proofs", "wall s", "wait s", "GPU s", "tail s", "verified"
    );
    let (mut partitions, mut all_ok) = (0usize, true);
    let mut held: Vec<(u128, u128)> = Vec::new();
    let mut waits: BTreeMap<usize, (usize, f64, f64)> = BTreeMap::new();
    for r in reports {
        let ok = r.report["all_verified"].as_bool().unwrap_or(false);
        all_ok &= ok;
        let class = CLASSES.iter().position(|c| *c == r.class).unwrap_or(3);
        for phase in phases(&r.report) {
            partitions += 1;
            let wait = phase.granted.saturating_sub(phase.requested) as f64 / 1e9;
            let w = waits.entry(class).or_default();
            *w = (w.0 + 1, w.1 + wait, w.2.max(wait));
            held.extend(phase.held);
        }
        println!(
            "{:<40} {:<8} {:>6} {:>7.2} {:>7.3} {:>7.3} {:>7.3} {:>8}",
            r.name,
            r.class,
            r.report["proofs"].as_u64().unwrap_or(0),
            f(&r.report, &["wall"]),
            f(&r.report, &["lease_wait", "mean"]),
            f(&r.report, &["gpu_phase", "mean"]),
            f(&r.report, &["cpu_tail", "mean"]),
            if ok { "yes" } else { "NO" }
        );
    }

    println!("\nlease waits per class (asked → granted, one lease per GPU phase):");
    println!(
        "  {:<10} {:>7} {:>8} {:>8}",
        "class", "leases", "mean s", "max s"
    );
    for (class, (n, total, max)) in &waits {
        println!(
            "  {:<10} {:>7} {:>8.3} {:>8.3}",
            CLASSES[*class],
            n,
            total / *n as f64,
            max
        );
    }

    // The critical request and the yields it caused.
    for r in reports.iter().filter(|r| r.class == "critical") {
        for phase in phases(&r.report) {
            let wait = phase.granted.saturating_sub(phase.requested) as f64 / 1e9;
            println!(
                "\nthe critical request: {} asked at {:.2} s and had its lease {:.3} s later",
                r.name,
                at(phase.requested),
                wait
            );
            let mut yields = 0;
            for other in reports.iter().filter(|o| o.class != "critical") {
                for p in other.report["partitions_detail"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    for y in p["yields"].as_array().into_iter().flatten() {
                        let noticed = nanos(y, "noticed_unix");
                        // A notice sent for this request: while it waited.
                        if noticed + 50_000_000 < phase.requested || noticed > phase.granted {
                            continue;
                        }
                        yields += 1;
                        println!(
                            "  gpud asked {} to yield: the notice came at {:.2} s, it gave its \
                             lease back after the {} at {:.2} s and had it again at {:.2} s",
                            other.name,
                            at(noticed),
                            y["after"].as_str().unwrap_or("step"),
                            at(nanos(y, "released_unix")),
                            at(nanos(y, "regranted_unix"))
                        );
                    }
                }
            }
            if yields == 0 {
                println!(
                    "  {}",
                    if wait < 0.005 {
                        "a compute slot was free: granted at once"
                    } else {
                        "the holders' phases ended before their next safe point: it took the \
                         slot a phase gave back"
                    }
                );
            }
        }
    }

    // Occupancy: the union of the intervals some lease held a compute slot, over the span from
    // the first grant to the last release.
    held.sort();
    let (mut busy, mut end) = (0u128, 0u128);
    for &(s, e) in &held {
        let s = s.max(end);
        if e > s {
            busy += e - s;
        }
        end = end.max(e);
    }
    let span = match (held.first(), held.iter().map(|h| h.1).max()) {
        (Some(first), Some(last)) if last > first.0 => (last - first.0) as f64,
        _ => 0.0,
    };
    println!(
        "\n{} in {wall:.1} s; some GPU phase ran {:.0} % of the time from the first grant to \
         the last release",
        count(partitions, "partition proof"),
        if span > 0.0 {
            100.0 * busy as f64 / span
        } else {
            0.0
        },
    );
    if all_ok && partitions > 0 {
        println!("all {} verified", count(partitions, "partition proof"));
    } else {
        println!("NOT all proofs verified");
    }
}
