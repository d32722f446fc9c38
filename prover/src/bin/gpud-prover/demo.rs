//! `gpud-prover demo`: gpud and several provers sharing one device, end to end.
//!
//! Starts gpud (simulated devices unless NVIDIA GPUs are present), then N `gpud-prover prove`
//! processes against it; shows `gpudctl status` while they run and a summary when they finish.
//! The `gpud` binary is the one named by `--gpud` (or `GPUD_BIN`), else the one beside this
//! executable (a workspace build), else the first on `PATH`; the prover does not carry the
//! daemon. `gpudctl` is taken from beside this one too; without it the status comes from the
//! client library.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use gpud_prover::{CircuitSpec, ParamsCache};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

#[derive(Args)]
pub struct DemoArgs {
    /// Prover processes to run at once.
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
    /// Seconds between `gpudctl status` snapshots.
    #[arg(long, default_value_t = 2.0)]
    status_every: f64,
    /// Parameter cache directory (see `prove --help`).
    #[arg(long)]
    params_dir: Option<PathBuf>,
    /// The gpud binary [default: next to this one, else the first gpud on PATH].
    #[arg(long, env = "GPUD_BIN")]
    gpud: Option<PathBuf>,
    /// The gpudctl binary [default: next to this one, else the client library's status].
    #[arg(long)]
    gpudctl: Option<PathBuf>,
}

/// The binary given, else one beside this executable (the same build directory), else none.
fn sibling(name: &str, given: &Option<PathBuf>) -> Result<Option<PathBuf>> {
    if let Some(p) = given {
        if !p.is_file() {
            bail!("{} does not exist", p.display());
        }
        return Ok(Some(p.clone()));
    }
    let exe = std::env::current_exe().context("locating gpud-prover")?;
    let beside = exe.with_file_name(name);
    Ok(beside.is_file().then_some(beside))
}

/// The gpud binary to run: the one given, else beside this executable, else on `PATH`; when
/// there is none, an error that says what to build.
fn gpud_binary(given: &Option<PathBuf>) -> Result<PathBuf> {
    if let Some(bin) = sibling("gpud", given)? {
        return Ok(bin);
    }
    if let Some(bin) = on_path("gpud") {
        return Ok(bin);
    }
    let exe = std::env::current_exe().context("locating gpud-prover")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let release = if dir.ends_with("release") {
        " --release"
    } else {
        ""
    };
    bail!(
        "the demo runs the gpud daemon, and there is no gpud binary beside {} nor on PATH: \
         build it with `cargo build{release} -p gpud -p gpud-client` (gpudctl too), or name one \
         with --gpud or GPUD_BIN",
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

/// `gpudctl status`, or the same facts from the client library when gpudctl is not built.
fn show_status(gpudctl: Option<&Path>, socket: &Path) -> Result<String> {
    if let Some(ctl) = gpudctl {
        let out = Command::new(ctl)
            .arg("--socket")
            .arg(socket)
            .arg("status")
            .output()
            .with_context(|| format!("running {}", ctl.display()))?;
        return Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned());
    }
    let s = gpud_client::blocking::Client::connect(socket)?.status()?;
    let mut out = format!(
        "gpud {} ({} devices, {} sessions, {} leases, {} waiting)",
        s.daemon.version,
        s.daemon.backend,
        s.daemon.sessions,
        s.leases.len(),
        s.waiters.len()
    );
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for d in &s.devices {
        let holder = d.compute_holder.as_ref().map_or("idle".to_owned(), |h| {
            format!(
                "lease {} pid {} {} {} ms",
                h.lease, h.pid, h.class, h.held_ms
            )
        });
        out += &format!(
            "\n  dev {} {}: reserved {:.1} MiB of {:.1} MiB, compute {holder}",
            d.index,
            d.name,
            mib(d.reserved_bytes),
            mib(d.capacity_bytes)
        );
    }
    for l in &s.leases {
        out += &format!(
            "\n  lease {} pid {} {} {:.1} MiB{} held {} ms",
            l.id,
            l.pid,
            l.class,
            mib(l.vram_bytes),
            if l.compute { " +compute" } else { "" },
            l.held_ms
        );
    }
    Ok(out)
}

struct Prover {
    name: String,
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

pub fn run(a: DemoArgs) -> Result<()> {
    if a.provers == 0 || a.circuits.is_empty() {
        bail!("--provers and --circuits must not be empty");
    }
    let started = Instant::now();
    let gpud_bin = gpud_binary(&a.gpud)?;
    let gpudctl = sibling("gpudctl", &a.gpudctl)?;
    if gpudctl.is_none() {
        println!("(no gpudctl beside gpud-prover: status comes from the client library)");
    }
    let me = std::env::current_exe()?;
    let cache = ParamsCache::new(
        a.params_dir
            .clone()
            .unwrap_or_else(ParamsCache::default_dir),
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
    let simulated = a.force_simulate || !real_gpus_present();
    let mut cmd = Command::new(&gpud_bin);
    cmd.arg("--socket")
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
    loop {
        match gpud_client::blocking::Client::connect(&socket) {
            Ok(_) => break,
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
    }
    println!(
        "gpud up on {} ({}), {}, log {}",
        socket.display(),
        if simulated {
            format!("simulated {}", a.simulate)
        } else {
            "NVIDIA GPUs".into()
        },
        gpud_bin.display(),
        log_path.display()
    );

    let mut provers = Vec::new();
    for i in 0..a.provers {
        let spec = specs[i % specs.len()];
        let class = if i == a.provers - 1 && a.provers > 2 {
            "high"
        } else {
            "normal"
        };
        let mut child = Command::new(&me)
            .args(["prove", "--json", "--circuit", spec.kind().name()])
            // Simulated devices have no CUDA device behind their UUIDs.
            .args(["--engine", if simulated { "cpu" } else { "auto" }])
            .args(["--log-size", &a.log_size.to_string()])
            .args(["--proofs", &a.proofs.to_string()])
            .args(["--partitions", &a.partitions.to_string()])
            .args([
                "--class",
                class,
                "--seed",
                &(1000 * (i as u64 + 1)).to_string(),
            ])
            .arg("--socket")
            .arg(&socket)
            .arg("--params-dir")
            .arg(cache.dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting a prover")?;
        let stdout = drain(child.stdout.take().context("prover stdout")?);
        let stderr = drain(child.stderr.take().context("prover stderr")?);
        let name = format!("prover {} ({spec}, {class}, pid {})", i + 1, child.id());
        println!(
            "started {name}: {} proofs × {} partitions",
            a.proofs, a.partitions
        );
        provers.push(Prover {
            name,
            child,
            stdout,
            stderr,
        });
    }

    // `gpudctl status` while they run.
    let every = Duration::from_secs_f64(a.status_every.max(0.2));
    let mut next_status = Instant::now();
    loop {
        let mut running = 0;
        for p in &mut provers {
            if p.child.try_wait()?.is_none() {
                running += 1;
            }
        }
        if running == 0 {
            break;
        }
        if Instant::now() >= next_status {
            println!(
                "\n$ gpudctl status   ({:.1} s, {running} provers running)\n{}",
                started.elapsed().as_secs_f64(),
                show_status(gpudctl.as_deref(), &socket)?
            );
            next_status = Instant::now() + every;
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for p in provers {
        let Prover {
            name,
            mut child,
            stdout,
            stderr,
        } = p;
        let status = child.wait()?;
        let out = stdout.join().unwrap_or_default();
        let err = stderr.join().unwrap_or_default();
        match serde_json::from_str::<Value>(&out) {
            Ok(r) if status.success() => reports.push((name, r)),
            _ => failures.push(format!("{name}: {status}: {}", err.trim())),
        }
    }
    drop(gpud);
    summarize(&reports, started.elapsed().as_secs_f64());
    if failures.is_empty() {
        // Keep the socket directory (and gpud's log) only when something went wrong.
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        bail!(
            "{} prover(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}

fn f(v: &Value, path: &[&str]) -> f64 {
    path.iter().fold(v, |v, k| &v[*k]).as_f64().unwrap_or(0.0)
}

fn summarize(reports: &[(String, Value)], wall: f64) {
    println!("\n== summary ==");
    println!(
        "{:<44} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "prover", "proofs", "wall s", "synth s", "wait s", "GPU s", "tail s", "verified"
    );
    let (mut partitions, mut all_ok) = (0usize, true);
    let mut held: Vec<(u128, u128)> = Vec::new();
    let (mut synth, mut wait, mut gpu, mut tail) = (0.0, 0.0, 0.0, 0.0);
    for (name, r) in reports {
        let n = r["partitions_detail"].as_array().map_or(0, Vec::len);
        partitions += n;
        let ok = r["all_verified"].as_bool().unwrap_or(false);
        all_ok &= ok;
        synth += f(r, &["synthesis", "total"]);
        wait += f(r, &["lease_wait", "total"]);
        gpu += f(r, &["gpu_phase", "total"]);
        tail += f(r, &["cpu_tail", "total"]);
        for p in r["partitions_detail"].as_array().into_iter().flatten() {
            let t = |k: &str| p[k].as_u64().map(u128::from).unwrap_or(0);
            held.push((t("lease_granted_unix"), t("lease_released_unix")));
        }
        println!(
            "{:<44} {:>6} {:>7.2} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8}",
            name,
            r["proofs"].as_u64().unwrap_or(0),
            f(r, &["wall"]),
            f(r, &["synthesis", "mean"]),
            f(r, &["lease_wait", "mean"]),
            f(r, &["gpu_phase", "mean"]),
            f(r, &["cpu_tail", "mean"]),
            if ok { "yes" } else { "NO" }
        );
    }
    // Occupancy: the union of every lease interval over the span from first grant to last
    // release (intervals never overlap on one compute slot, but the union is robust anyway).
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
    let per = |x: f64| {
        if partitions == 0 {
            0.0
        } else {
            x / partitions as f64
        }
    };
    println!(
        "\n{} provers, {partitions} partition proofs in {wall:.1} s; per partition (mean): \
         synthesis {:.3} s, lease wait {:.3} s, GPU phase {:.3} s, CPU tail {:.3} s",
        reports.len(),
        per(synth),
        per(wait),
        per(gpu),
        per(tail)
    );
    println!(
        "GPU-phase occupancy of the device: {:.0} % (leases held {:.2} s of {:.2} s from first grant to last release)",
        if span > 0.0 {
            100.0 * busy as f64 / span
        } else {
            0.0
        },
        busy as f64 / 1e9,
        span / 1e9
    );
    if all_ok && partitions > 0 {
        println!("all {partitions} partition proofs verified");
    } else {
        println!("NOT all proofs verified");
    }
}
