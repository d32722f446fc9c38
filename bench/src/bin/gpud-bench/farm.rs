//! `gpud-bench farm`: the sharing benchmark's driver. Several prover processes share a GPU through
//! gpud, against the in-process ideal, no coordination and a per-GPU flock, in one run:
//!
//! 1. `farm-prepare`: the workload bundle (fast parameters, witnesses) for the normal and the
//!    critical provers; then the ballast (`farm-ballast`), which leaves `--card` bytes of each
//!    GPU to the provers; then gpud on a private socket (NVML, or `--simulate`).
//! 2. Calibration: one prover alone, no lock: the GPU phase's length sets the modeled CPU tail
//!    (`--tail-ratio` × phase), and NVML shows what an idle prover process holds (its CUDA
//!    context), which each gpud-mode process then leases (`--context-vram auto`).
//! 3. The matrix: every mode (`gpud`, `ideal`, `flock`, `none`) at every N (N by N, the modes of
//!    one N back to back), a window of `--duration` seconds each, all processes started
//!    together by a `go` line.
//! 4. Priority: N normal provers plus a critical prover starting a small proof every
//!    `--critical-every` seconds, under gpud and under flock.
//! 5. `--multi-gpu`: gpud with placement "any" over every GPU against the first GPU alone.
//! 6. `--host-n`: host admission (per-process bounds against gpud host leases).
//! 7. `--g2-compare`: gpud provers computing B_G2 on the GPU (inside the phase) against on the
//!    CPU (in the tail), at each of `--g2-ns`: throughput, GPU busy and host CPU utilisation.
//!
//! Every process's report goes to `OUT/cells/`, the metrics to `OUT/farm.json`, the tables to
//! `OUT/farm.md` (printed last), the plot to `OUT/farm.png` (when a font is found).
//! See `gpud_bench::farm` for what is modeled and why.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use gpud_bench::farm::analysis::{
    Calibration, CellMetrics, CellSpec, Dist, FarmResults, HostInfo, NvmlSample, ProcessOutcome,
    RunConfig,
};
use gpud_bench::farm::cpustat::{CpuTimes, HostCpu};
use gpud_bench::farm::worker::{Outcome, Window, WorkerReport, now_unix_ns};
use gpud_bench::farm::{G2Mode, plot, simvram};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::size;

#[derive(Args)]
pub struct FarmArgs {
    /// Where farm.json, farm.md, farm.png, cells/ and logs/ go [default: $OUT, else ./farm-out].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Scratch directory: the bundle (reused across runs), gpud's socket and state, lock files.
    #[arg(long, default_value = "/tmp/gpud-farm")]
    work_dir: PathBuf,
    /// No GPU: gpud --simulate, the CPU engine, a simulated device memory per GPU; no ballast
    /// and no NVML.
    #[arg(long)]
    simulate: bool,
    /// Simulated GPUs (with --simulate).
    #[arg(long, default_value_t = 1)]
    sim_gpus: usize,
    /// Circuit of the normal provers.
    #[arg(long, default_value = "synthetic")]
    circuit: String,
    /// Its log size.
    #[arg(long, short = 'k', default_value_t = 22)]
    log_size: u32,
    /// Log size of the critical prover's small proofs.
    #[arg(long, default_value_t = 16)]
    critical_log_size: u32,
    /// Numbers of provers.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 8])]
    ns: Vec<usize>,
    /// Modes: gpud, ideal (one process, N threads, one in-process lock), flock, none; gpud2
    /// (gpud with two compute slots per GPU: two phases overlap where their VRAM fits); and
    /// gpud-warm (gpud, each process keeping its bases resident in an evictable lease: its
    /// phase leases are the footprint less the bases).
    #[arg(long, value_delimiter = ',', default_value = "gpud,ideal,flock,none")]
    modes: Vec<String>,
    /// Seconds each cell proves.
    #[arg(long, default_value_t = 15.0)]
    duration: f64,
    /// Device memory left to the provers (the ballast holds the rest; simulated: the device).
    #[arg(long, default_value = "16GiB")]
    card: String,
    /// A partition's footprint: the VRAM formula of its GPU phase plus a pad up to this.
    #[arg(long, default_value = "6GiB")]
    phase_vram: String,
    /// The modeled CPU tail as a fraction of the calibrated GPU phase (field: 0.5 s / 1.8 s).
    #[arg(long, default_value_t = 0.28)]
    tail_ratio: f64,
    /// The modeled CPU tail in milliseconds (skips the calibration's choice).
    #[arg(long)]
    tail_ms: Option<f64>,
    /// Seconds of the calibration run.
    #[arg(long, default_value_t = 4.0)]
    calibrate_secs: f64,
    /// Witnesses synthesized and used in turn.
    #[arg(long, default_value_t = 2)]
    witnesses: usize,
    /// Normal provers in the priority runs (0: no priority runs).
    #[arg(long, default_value_t = 8)]
    priority_n: usize,
    /// Seconds of each priority run.
    #[arg(long, default_value_t = 20.0)]
    priority_duration: f64,
    /// The critical prover starts a proof every this many seconds.
    #[arg(long, default_value_t = 1.0)]
    critical_every: f64,
    /// The critical proof's footprint (its phase padded up to this), e.g. 6GiB: a critical
    /// partition as large as the normal ones, which under gpud-warm must reclaim warm bases
    /// [default: no pad].
    #[arg(long)]
    critical_phase_vram: Option<String>,
    /// With --simulate: the size of each gpud-warm prover's simulated warm bases, e.g. 3GiB
    /// [default: the formula's resident bases, which are small at small sizes].
    #[arg(long)]
    warm_vram: Option<String>,
    /// The priority runs' modes: gpud (one exclusive slot), gpudc (a critical slot beside it),
    /// gpudc-warm (gpudc with the normal provers' bases warm in evictable leases: a critical
    /// partition beside a phase must reclaim them where memory is short), flock.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gpud,gpudc,gpudc-warm,flock"
    )]
    priority_modes: Vec<String>,
    /// Also run gpud with placement "any" over every GPU against the first GPU alone.
    #[arg(long)]
    multi_gpu: bool,
    /// Numbers of provers for --multi-gpu.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize])]
    multi_ns: Vec<usize>,
    /// Skip the mode × N matrix (e.g. a run of the several-GPU experiment only).
    #[arg(long)]
    no_matrix: bool,
    /// VRAM-only lease per GPU that each gpud-mode process holds for its CUDA context: auto
    /// (measured by the calibration through NVML), 0, or a size.
    #[arg(long, default_value = "auto")]
    context_vram: String,
    /// A gpud binary to run [default: gpud from the library inside this binary, in a child
    /// process of its own (`farm-gpud`)].
    #[arg(long)]
    gpud: Option<PathBuf>,
    /// TrueType font for the plot [default: DejaVu Sans where installed].
    #[arg(long)]
    font: Option<PathBuf>,
    /// Seed of the parameters, witnesses and blinding.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Regenerate the bundle even if the work directory has one.
    #[arg(long)]
    fresh: bool,
    /// NVML samples per second.
    #[arg(long, default_value_t = 10.0)]
    nvml_hz: f64,
    /// Leave the prover processes unpinned (by default, on GPUs, each is pinned to the CPUs
    /// NVML names nearest the GPU of its cell, so that every mode's host-side work runs on the
    /// same NUMA node; the several-GPU "any" cells are never pinned).
    #[arg(long)]
    no_pin: bool,
    /// Host admission runs (issue 16): this many prover processes, every partition synthesized
    /// anew, per-process bounds only (`host-bounds`: each process's lanes cap its synthesis)
    /// against gpud host leases (`host-gpud`: each partition leases its host memory and CPUs
    /// from gpud); 0: none.
    #[arg(long, default_value_t = 0)]
    host_n: usize,
    /// Lanes of each host-run prover: the partitions it may synthesize at once.
    #[arg(long, default_value_t = 4)]
    host_lanes: usize,
    /// Seconds of each host cell.
    #[arg(long, default_value_t = 30.0)]
    host_duration: f64,
    /// Run the host pair again inside a cgroup v2 memory limit of this size (memory.max, no
    /// swap), with gpud's `[host] memory` set to the same, e.g. 24GiB: without admission the
    /// kernel's OOM killer ends provers, with it none should. The farm creates the groups
    /// (one per cell, under --cgroup-root) and removes them; it fails at once where cgroups
    /// are not writable. Never the machine's whole memory.
    #[arg(long)]
    host_limit: Option<String>,
    /// Where the farm's cgroups are made (cgroup v2 with the memory controller).
    #[arg(long, default_value = "/sys/fs/cgroup")]
    cgroup_root: PathBuf,
    /// With --host-limit: run only the limited pair.
    #[arg(long)]
    host_limited_only: bool,
    /// Where the provers of every stage but the G2 one get B_G2: precomputed (the witness's
    /// sum from the bundle, no G2 MSM anywhere: the farm's results before the G2 stage), gpu
    /// (the B_G2 MSM inside each GPU phase, under its lease) or cpu (blstrs in each CPU tail).
    #[arg(long, value_enum, default_value = "precomputed")]
    g2: G2Mode,
    /// The G2 stage: gpud provers (one per process, one compute slot) with each of these G2
    /// modes at each of --g2-ns, e.g. gpu,cpu; none by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    g2_compare: Vec<G2Mode>,
    /// Numbers of provers of the G2 stage.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4])]
    g2_ns: Vec<usize>,
    /// Seconds of each G2 cell.
    #[arg(long, default_value_t = 30.0)]
    g2_duration: f64,
    /// Seconds of each G2 cell with G2 on the CPU (its tails are long: a window must hold
    /// several) [default: --g2-duration].
    #[arg(long)]
    g2_cpu_duration: Option<f64>,
}

impl FarmArgs {
    /// The window of a G2 cell in `mode`.
    fn g2_window(&self, mode: G2Mode) -> f64 {
        match mode {
            G2Mode::Cpu => self.g2_cpu_duration.unwrap_or(self.g2_duration),
            G2Mode::Gpu | G2Mode::Precomputed => self.g2_duration,
        }
    }
}

#[derive(Args)]
pub struct PlotArgs {
    /// farm.json of a run.
    results: PathBuf,
    /// The PNG to write.
    out: PathBuf,
    /// TrueType font [default: DejaVu Sans where installed].
    #[arg(long)]
    font: Option<PathBuf>,
}

/// `gpud-bench farm-plot results.json out.png`.
pub fn plot_cmd(a: PlotArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.results)
        .with_context(|| format!("reading {}", a.results.display()))?;
    let results: FarmResults =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", a.results.display()))?;
    let font = plot::find_font(a.font.as_deref())
        .context("no font found: pass --font FILE.ttf (e.g. DejaVuSans.ttf)")?;
    plot::draw(&results, &a.out, &font)?;
    println!("wrote {}", a.out.display());
    Ok(())
}

/// A child that is stopped (SIGTERM, then SIGKILL) when dropped.
struct Guard {
    name: &'static str,
    child: Child,
    _stdin: Option<ChildStdin>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self._stdin.take();
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("farm: {} did not stop on SIGTERM; killing it", self.name);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines of a child's stdout, read on a thread.
fn line_reader(out: std::process::ChildStdout) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    rx
}

/// The next JSON line, before `deadline` (other lines are skipped).
fn next_json(rx: &Receiver<String>, deadline: Instant) -> Result<Value, String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    return Ok(v);
                }
            }
            Err(RecvTimeoutError::Timeout) => return Err("timed out".into()),
            Err(RecvTimeoutError::Disconnected) => return Err("exited".into()),
        }
    }
}

/// The next JSON line with `key` set, before `deadline`.
fn wait_json(rx: &Receiver<String>, key: &str, deadline: Instant) -> Result<Value, String> {
    loop {
        let v = next_json(rx, deadline)?;
        if !v[key].is_null() {
            return Ok(v);
        }
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// One NVML reading: (Unix ns, device UUID, utilization %, memory used).
type RawSample = (u128, String, u32, u64);

/// NVML readings on a thread.
struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<RawSample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(hz: f64) -> Result<Self> {
        let nvml = nvml_wrapper::Nvml::init().context("NVML")?;
        let count = nvml.device_count()?;
        let mut uuids = Vec::new();
        for i in 0..count {
            uuids.push(nvml.device_by_index(i)?.uuid()?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), samples.clone());
        let period = Duration::from_secs_f64(1.0 / hz.clamp(0.5, 100.0));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let t = now_unix_ns();
                for (i, uuid) in uuids.iter().enumerate() {
                    let Ok(d) = nvml.device_by_index(i as u32) else {
                        continue;
                    };
                    let util = d.utilization_rates().map(|u| u.gpu).unwrap_or(0);
                    let used = d.memory_info().map(|m| m.used).unwrap_or(0);
                    out.lock().unwrap_or_else(|e| e.into_inner()).push((
                        t,
                        uuid.clone(),
                        util,
                        used,
                    ));
                }
                std::thread::sleep(period);
            }
        });
        Ok(Self {
            stop,
            samples,
            thread: Some(thread),
        })
    }

    /// Samples between two Unix times, as seconds since `origin`.
    fn between(&self, from: u128, to: u128, origin: u128) -> Vec<NvmlSample> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|s| s.0 >= from && s.0 <= to)
            .map(|s| NvmlSample {
                t: (s.0 as f64 - origin as f64) / 1e9,
                uuid: s.1.clone(),
                util: s.2,
                mem_used: s.3,
            })
            .collect()
    }

    /// The latest memory-used reading of `uuid`.
    fn latest_used(&self, uuid: &str) -> Option<u64> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .rev()
            .find(|s| s.1 == uuid)
            .map(|s| s.3)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One prover process to start in a cell.
struct WorkerSpec {
    name: String,
    critical: bool,
    lock: &'static str,
    lanes: usize,
    index: usize,
    class: &'static str,
    log_size: u32,
    witnesses: usize,
    /// A footprint to pad each phase up to; none: no pad.
    phase_vram: Option<u64>,
    tail_ms: f64,
    interval: Option<f64>,
    device: Option<String>,
    /// The gpud its leases come from ([`Farm::socket`]): "gpud", "gpud2" (two compute slots
    /// per GPU) or "gpudc" (one compute slot and one critical slot per GPU).
    gpud: &'static str,
    /// Keeps its bases warm in an evictable lease (mode gpud-warm).
    warm: bool,
    /// Synthesizes every attempt anew (the host modes).
    synthesize: bool,
    /// Leases its host work from gpud (mode host-gpud).
    host_leases: bool,
    /// The cgroup the process starts in (a host cell with a memory limit).
    cgroup: Option<PathBuf>,
    /// Where it gets B_G2.
    g2: G2Mode,
}

/// The host side of a host-mode cell.
struct HostCell {
    /// The cell's cgroup (a memory limit), removed when the cell is done.
    cgroup: Option<gpud_bench::farm::cgroup::Cgroup>,
    limit: Option<u64>,
    leases: bool,
    lanes: usize,
}

/// Samples the sum of some processes' resident memory (`VmRSS`) on a thread.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, usize)>>,
}

impl RssSampler {
    fn start(pids: Vec<u32>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut peak, mut samples) = (0u64, 0usize);
            while !s.load(Ordering::Relaxed) {
                let sum: u64 = pids
                    .iter()
                    .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
                    .filter_map(|t| gpud_prover::host::rss_of_status(&t))
                    .sum();
                peak = peak.max(sum);
                samples += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            (peak, samples)
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; the peak sum and the number of samples.
    fn finish(mut self) -> (u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or((0, 0))
    }
}

/// The host's CPU busy fraction over `window`: `/proc/stat` read at its start and its end, on a
/// thread (joined after the reports, which come after the end).
fn host_cpu_over(window: Window) -> std::thread::JoinHandle<Option<HostCpu>> {
    std::thread::spawn(move || {
        let sleep_until = |unix_ns: u128| {
            let left = unix_ns.saturating_sub(now_unix_ns());
            std::thread::sleep(Duration::from_nanos(
                u64::try_from(left).unwrap_or(u64::MAX),
            ));
        };
        sleep_until(window.start_unix_ns);
        let before = CpuTimes::read()?;
        sleep_until(window.end_unix_ns);
        let after = CpuTimes::read()?;
        HostCpu::between(&before, &after)
    })
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How the processes of a mode (one process per prover) take the GPU: the worker's lock, and
/// the gpud its leases come from ([`Farm::socket`]).
fn mode_lock(mode: &str) -> Result<(&'static str, &'static str)> {
    Ok(match mode {
        "gpud" | "gpud-warm" => ("gpud", "gpud"),
        "gpud2" => ("gpud", "gpud2"),
        "gpudc" | "gpudc-warm" => ("gpud", "gpudc"),
        "flock" => ("flock", "gpud"),
        "none" => ("none", "gpud"),
        other => {
            bail!(
                "unknown mode {other:?} (gpud, gpud2, gpudc, gpud-warm, gpudc-warm, ideal, flock, none)"
            )
        }
    })
}

struct Proc {
    name: String,
    critical: bool,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

struct Farm {
    a: FarmArgs,
    me: PathBuf,
    out: PathBuf,
    bundle: PathBuf,
    /// This run's scratch: gpud's sockets, state and config, the locks, the simulated VRAM.
    run_dir: PathBuf,
    lock_dir: PathBuf,
    sim_dir: PathBuf,
    logs: PathBuf,
    cells_dir: PathBuf,
    engine: &'static str,
    /// gpud's devices: (UUID, index, name, total bytes).
    devices: Vec<(String, u32, String, u64)>,
    card: u64,
    phase_vram: u64,
    tail_ms: f64,
    context_vram: u64,
    sampler: Option<Sampler>,
    /// Device memory in use with nothing of ours on it (ballast included), per device.
    idle_used: Vec<(String, u64)>,
}

fn utc(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Writes the cells measured so far to `farm.json` and `farm.md`, so that a run cut short (a
/// time limit, a crash in a later cell) still leaves its results.
fn save_partial(results: &FarmResults, out: &Path) {
    let mut partial = results.clone();
    partial.evaluate_targets();
    if let Ok(json) = serde_json::to_vec_pretty(&partial) {
        let _ = std::fs::write(out.join("farm.json"), json);
    }
    let _ = std::fs::write(out.join("farm.md"), partial.markdown());
}

/// The commit of the build: `.gpu/BUILD` beside the binary, else git, else unknown.
fn build_commit(me: &Path) -> String {
    if let Some(build) = me.parent().and_then(Path::parent).map(|d| d.join("BUILD")) {
        if let Ok(text) = std::fs::read_to_string(build) {
            if let Some(line) = text.lines().find(|l| l.starts_with("commit ")) {
                return line.trim_start_matches("commit ").to_owned();
            }
        }
    }
    Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

impl Farm {
    fn cuda(&self) -> bool {
        self.engine == "cuda"
    }

    fn first_device(&self) -> Result<&(String, u32, String, u64)> {
        self.devices.first().context("gpud lists no device")
    }

    /// Runs `gpud-bench farm-prepare` for a size; returns its JSON summary.
    fn prepare(&self, log_size: u32, witnesses: usize) -> Result<Value> {
        let t = Instant::now();
        let mut cmd = Command::new(&self.me);
        cmd.arg("farm-prepare")
            .arg("--bundle")
            .arg(&self.bundle)
            .args(["--circuit", &self.a.circuit])
            .args(["--log-size", &log_size.to_string()])
            .args(["--witnesses", &witnesses.to_string()])
            .args(["--seed", &self.a.seed.to_string()]);
        if self.cuda() {
            cmd.arg("--gpu");
        }
        if self.a.g2.needs_query() || self.a.g2_compare.iter().any(|m| m.needs_query()) {
            cmd.arg("--g2-query");
        }
        if self.a.fresh {
            cmd.arg("--fresh");
        }
        let out = cmd.output().context("running farm-prepare")?;
        if !out.status.success() {
            bail!(
                "farm-prepare 2^{log_size} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let v: Value = String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .context("farm-prepare printed no summary")?;
        println!(
            "bundle 2^{log_size}: {} in {:.1} s",
            if v["reused"].as_bool() == Some(true) {
                "reused".to_owned()
            } else {
                format!(
                    "parameters {:.1} s ({}), {} witnesses {:.1} s",
                    v["params_secs"].as_f64().unwrap_or(0.0),
                    if self.cuda() {
                        "G1 and G2 on the GPU"
                    } else {
                        "CPU"
                    },
                    witnesses,
                    v["witness_secs"].as_f64().unwrap_or(0.0)
                )
            },
            t.elapsed().as_secs_f64()
        );
        Ok(v)
    }

    fn worker_args(&self, w: &WorkerSpec) -> Result<Vec<String>> {
        let (uuid, index, _, _) = self.first_device()?;
        let mut v: Vec<String> = [
            "farm-worker",
            "--sync",
            "--circuit",
            &self.a.circuit,
            "--lock",
            w.lock,
            "--class",
            w.class,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let pairs = [
            ("--bundle", self.bundle.display().to_string()),
            ("--log-size", w.log_size.to_string()),
            ("--witnesses", w.witnesses.to_string()),
            ("--lanes", w.lanes.to_string()),
            ("--tail-ms", format!("{:.3}", w.tail_ms)),
            ("--seed", self.a.seed.to_string()),
            ("--index", w.index.to_string()),
            ("--engine", self.engine.to_string()),
            ("--socket", self.socket(w.gpud).display().to_string()),
            ("--lock-dir", self.lock_dir.display().to_string()),
            ("--gpu", format!("{uuid}:{index}")),
            ("--context-vram", self.context_vram.to_string()),
            ("--g2", w.g2.name().to_string()),
        ];
        for (k, val) in pairs {
            v.push(k.into());
            v.push(val);
        }
        if self.a.simulate {
            v.push("--sim-vram".into());
            v.push(format!("{}:{}", self.sim_dir.display(), self.card));
        }
        if let Some(p) = w.phase_vram {
            v.push("--phase-vram".into());
            v.push(p.to_string());
        }
        if w.synthesize {
            v.push("--synthesize".into());
        }
        if w.host_leases {
            v.push("--host-leases".into());
        }
        if w.warm {
            v.push("--warm".into());
            if let (true, Some(bytes)) = (self.a.simulate, &self.a.warm_vram) {
                v.push("--warm-vram".into());
                v.push(bytes.clone());
            }
        }
        if let Some(i) = w.interval {
            v.push("--interval".into());
            v.push(i.to_string());
        }
        if let Some(d) = &w.device {
            v.push("--device".into());
            v.push(d.clone());
        }
        // The GPU of the cell: the one named, or the only one; none for "any" over several.
        let cell_gpu = match (&w.device, self.devices.len()) {
            (Some(d), _) => Some(d.clone()),
            (None, 1) => Some(uuid.clone()),
            (None, _) => None,
        };
        if let (true, false, Some(gpu)) = (self.cuda(), self.a.no_pin, cell_gpu) {
            v.push("--pin-near".into());
            v.push(gpu);
        }
        Ok(v)
    }

    fn spawn(&self, cell: &str, w: &WorkerSpec) -> Result<Proc> {
        let log = self.logs.join(format!("{cell}-{}.log", w.name));
        let mut cmd = match &w.cgroup {
            // Into the cell's cgroup before anything is allocated: the shell moves itself,
            // then becomes the prover (same pid).
            Some(dir) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
                    .arg(dir)
                    .arg(&self.me);
                c
            }
            None => Command::new(&self.me),
        };
        let mut child = cmd
            .args(self.worker_args(w)?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .env("RUST_BACKTRACE", "1")
            .spawn()
            .context("starting a prover")?;
        let lines = line_reader(child.stdout.take().context("prover stdout")?);
        let stdin = child.stdin.take();
        Ok(Proc {
            name: w.name.clone(),
            critical: w.critical,
            child,
            stdin,
            lines,
            log,
        })
    }

    /// Waits until our processes' device memory is gone (NVML), at most 10 s.
    fn settle(&self) {
        let Some(s) = &self.sampler else {
            std::thread::sleep(Duration::from_millis(100));
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let clean = self.idle_used.iter().all(|(uuid, idle)| {
                s.latest_used(uuid)
                    .is_some_and(|u| u <= idle.saturating_add(64 << 20))
            });
            if clean {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("farm: device memory did not return to idle within 10 s after a cell");
    }

    /// Runs one cell: starts its processes, waits for all to be ready, sends `go`, collects
    /// the reports, computes the metrics.
    fn cell(&self, spec: CellSpec, workers: &[WorkerSpec], duration: f64) -> Result<CellMetrics> {
        self.cell_with(spec, workers, duration, None)
    }

    /// [`Farm::cell`], with the host side of a host-mode cell: the provers' resident memory
    /// sampled, how they ended, the cgroup's counts.
    fn cell_with(
        &self,
        spec: CellSpec,
        workers: &[WorkerSpec],
        duration: f64,
        host: Option<HostCell>,
    ) -> Result<CellMetrics> {
        if self.a.simulate {
            for (_, index, _, _) in &self.devices {
                simvram::reset(&self.sim_dir.join(format!("vram-{index}")))?;
            }
        }
        let ready = |p: &Proc, by: Instant| match wait_json(&p.lines, "ready", by) {
            Ok(_) => None,
            Err(why) => Some(Err(format!(
                "{} {why} before ready: {}",
                p.name,
                log_tail(&p.log)
            ))),
        };
        let mut procs = Vec::new();
        let mut outcomes: Vec<Option<Result<WorkerReport, String>>> = Vec::new();
        if host.is_some() {
            // One after another: a prover loading its key holds it twice for a moment, and
            // eight doing so at once under a memory limit would meet the OOM killer before
            // proving starts.
            for w in workers {
                let p = self.spawn(&spec.name, w)?;
                outcomes.push(ready(&p, Instant::now() + Duration::from_secs(90)));
                procs.push(p);
            }
        } else {
            for w in workers {
                procs.push(self.spawn(&spec.name, w)?);
            }
            let ready_by = Instant::now() + Duration::from_secs(180);
            for p in &procs {
                outcomes.push(ready(p, ready_by));
            }
        }
        // The provers' resident memory from the window's start (their setup is behind them).
        let rss = host
            .as_ref()
            .map(|_| RssSampler::start(procs.iter().map(|p| p.child.id()).collect()));
        let window = Window::starting_in(
            Duration::from_millis(300),
            Duration::from_secs_f64(duration),
        );
        let host_cpu = host_cpu_over(window);
        for (p, o) in procs.iter_mut().zip(&mut outcomes) {
            if o.is_some() {
                continue;
            }
            let sent = p
                .stdin
                .as_mut()
                .map(|s| writeln!(s, "{}", window.go_line()).and_then(|()| s.flush()));
            if !matches!(sent, Some(Ok(()))) {
                *o = Some(Err(format!("{}: could not send go", p.name)));
            }
        }
        let end = Instant::now() + Duration::from_secs_f64(duration + 0.3);
        let report_by = end + Duration::from_secs(60);
        for (p, o) in procs.iter_mut().zip(&mut outcomes) {
            if o.is_some() {
                continue;
            }
            *o = Some(match wait_json(&p.lines, "records", report_by) {
                Ok(v) => serde_json::from_value::<WorkerReport>(v)
                    .map_err(|e| format!("{}: bad report: {e}", p.name)),
                Err(why) => Err(format!(
                    "{} {why} before reporting: {}",
                    p.name,
                    log_tail(&p.log)
                )),
            });
        }
        let exit_by = Instant::now() + Duration::from_secs(10);
        let mut statuses = Vec::new();
        for p in &mut procs {
            p.stdin.take();
            let mut status = None;
            while Instant::now() < exit_by {
                if let Ok(Some(s)) = p.child.try_wait() {
                    status = Some(s);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            statuses.push(status);
        }
        let rss = rss.map(RssSampler::finish);
        let names: Vec<(String, bool)> =
            procs.iter().map(|p| (p.name.clone(), p.critical)).collect();
        drop(procs);
        self.settle();
        let processes: Vec<ProcessOutcome> = names
            .iter()
            .zip(outcomes)
            .map(|((_, critical), o)| ProcessOutcome {
                critical: *critical,
                report: o.unwrap_or_else(|| Err("no outcome".into())),
            })
            .collect();
        let samples = self.sampler.as_ref().map_or_else(Vec::new, |s| {
            s.between(
                window.start_unix_ns,
                window.end_unix_ns,
                window.start_unix_ns,
            )
        });
        let mut metrics =
            gpud_bench::farm::analysis::cell_metrics(&spec, duration, &processes, &samples);
        if let (Some(cpu), Ok(host)) = (metrics.cpu.as_mut(), host_cpu.join()) {
            cpu.host = host;
        }
        if let Some(h) = &host {
            use std::os::unix::process::ExitStatusExt;
            let reports: Vec<&WorkerReport> = processes
                .iter()
                .filter_map(|p| p.report.as_ref().ok())
                .collect();
            let (host_wait, synthesis) = gpud_bench::farm::analysis::host_dists(&reports);
            let (peak_rss_bytes, rss_samples) = rss.unwrap_or((0, 0));
            metrics.host = Some(gpud_bench::farm::analysis::HostMetrics {
                limit_bytes: h.limit,
                host_leases: h.leases,
                lanes: h.lanes,
                partition_bytes: reports
                    .iter()
                    .flat_map(|r| &r.records)
                    .map(|r| r.host_bytes)
                    .max()
                    .unwrap_or(0),
                peak_rss_bytes,
                rss_samples,
                cgroup_peak_bytes: h.cgroup.as_ref().and_then(|c| c.peak()),
                killed: statuses
                    .iter()
                    .filter(|s| s.and_then(|s| s.signal()) == Some(Signal::SIGKILL as i32))
                    .count(),
                cgroup_oom_kills: h.cgroup.as_ref().and_then(|c| c.oom_kills()),
                host_wait,
                synthesis,
            });
        }
        let raw = serde_json::json!({
            "name": spec.name, "mode": spec.mode, "n": spec.n, "placement": spec.placement,
            "devices": spec.devices, "window": [window.start_unix_ns.to_string(), window.end_unix_ns.to_string()],
            "processes": names.iter().zip(&processes).map(|((name, critical), p)| serde_json::json!({
                "name": name, "critical": critical,
                "report": p.report.as_ref().ok(), "error": p.report.as_ref().err(),
            })).collect::<Vec<_>>(),
            "nvml": samples,
            "metrics": metrics,
        });
        std::fs::write(
            self.cells_dir.join(format!("{}.json", spec.name)),
            serde_json::to_vec(&raw)?,
        )?;
        let m = &metrics.normal;
        println!(
            "  {:<18} {:>7.1} partitions/min  busy {:>5.1} %{}{}{}  OOM {:>3}  failed {:>3}  wait p50 {:>7.1} ms p99 {:>7.1} ms  phase {:>6.1} ms{}",
            spec.name,
            m.per_minute,
            100.0 * metrics.gpu_busy,
            metrics
                .cpu
                .and_then(|c| c.host)
                .map_or(String::new(), |h| format!(
                    " (host CPU {:.1} %)",
                    100.0 * h.busy
                )),
            if metrics.phase_overlap > 0.0 {
                format!(" (overlapping {:.1} %)", 100.0 * metrics.phase_overlap)
            } else {
                String::new()
            },
            metrics
                .nvml_util
                .map_or(String::new(), |u| format!(" (NVML {:.1} %)", 100.0 * u)),
            m.oom,
            m.failed,
            1000.0 * m.wait.p50,
            1000.0 * m.wait.p99,
            1000.0 * m.phase.mean,
            metrics.critical.as_ref().map_or(String::new(), |c| format!(
                "; critical: {} proofs, wait p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
                c.proofs,
                1000.0 * c.wait.p50,
                1000.0 * c.wait.p99,
                1000.0 * c.wait.max
            )),
        );
        if let Some(h) = &metrics.host {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            println!(
                "    host: peak RSS {:.2} GiB (sum of {} provers){}, {} killed by SIGKILL{}, host wait p50 {:.1} ms, synthesis {:.1} ms",
                gib(h.peak_rss_bytes),
                spec.n,
                h.cgroup_peak_bytes.map_or(String::new(), |b| format!(
                    ", cgroup peak {:.2} GiB",
                    gib(b)
                )),
                h.killed,
                h.cgroup_oom_kills
                    .map_or(String::new(), |k| format!(" (cgroup oom_kill {k})")),
                1000.0 * h.host_wait.p50,
                1000.0 * h.synthesis.mean,
            );
        }
        for e in &metrics.startup_errors {
            println!("    did not run: {e}");
        }
        let pinning: Vec<String> = names
            .iter()
            .zip(&processes)
            .filter_map(
                |((name, _), p)| match p.report.as_ref().ok()?.pinned.as_ref()? {
                    Ok(_) => None,
                    Err(why) => Some(format!("{name}: {why}")),
                },
            )
            .collect();
        if !pinning.is_empty() {
            println!("    not pinned: {}", pinning.join("; "));
        }
        Ok(metrics)
    }

    fn normal(
        &self,
        name: String,
        lock: &'static str,
        lanes: usize,
        index: usize,
        device: Option<String>,
    ) -> WorkerSpec {
        WorkerSpec {
            name,
            critical: false,
            lock,
            lanes,
            index,
            class: "normal",
            log_size: self.a.log_size,
            witnesses: self.a.witnesses.max(1),
            phase_vram: Some(self.phase_vram),
            tail_ms: self.tail_ms,
            interval: None,
            device,
            gpud: "gpud",
            warm: false,
            synthesize: false,
            host_leases: false,
            cgroup: None,
            g2: self.a.g2,
        }
    }

    /// The processes of a mode at N.
    fn mode_workers(
        &self,
        mode: &str,
        n: usize,
        device: Option<String>,
    ) -> Result<Vec<WorkerSpec>> {
        if mode == "ideal" {
            return Ok(vec![self.normal("p0".into(), "local", n, 0, None)]);
        }
        let (lock, gpud) = mode_lock(mode)?;
        Ok((0..n)
            .map(|i| {
                let mut w = self.normal(format!("p{i}"), lock, 1, i, device.clone());
                w.gpud = gpud;
                w.warm = mode.ends_with("-warm");
                w
            })
            .collect())
    }

    /// The socket of gpud `name` ("gpud"; "gpud2" with two compute slots per GPU; "gpudc" with
    /// one compute slot and one critical slot per GPU).
    fn socket(&self, name: &str) -> PathBuf {
        self.run_dir.join(format!("{name}.sock"))
    }

    /// Starts gpud `name` on [`Farm::socket`] with `compute_slots` and `critical_slots` per GPU
    /// (the library's gpud in a child process of its own, or `--gpud`), and waits until it
    /// answers and, on GPUs, its capacity reflects the ballast (NVML polls), at most 10 s. Its
    /// log goes to `logs/{name}.log`.
    fn start_gpud(
        &self,
        name: &'static str,
        compute_slots: u32,
        critical_slots: u32,
    ) -> Result<(Guard, gpud_client::proto::StatusReport)> {
        self.start_gpud_with(name, compute_slots, critical_slots, "")
    }

    /// [`Farm::start_gpud`] with more of gpud's configuration (whole TOML sections).
    fn start_gpud_with(
        &self,
        name: &'static str,
        compute_slots: u32,
        critical_slots: u32,
        extra: &str,
    ) -> Result<(Guard, gpud_client::proto::StatusReport)> {
        let socket = self.socket(name);
        let state = self.run_dir.join(format!("{name}-state"));
        std::fs::create_dir_all(&state)?;
        let config = self.run_dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "# farm: NVML read often, so capacity follows the ballast and the provers quickly\n\
                 [devices]\npoll_interval = \"200ms\"\ncompute_slots = {compute_slots}\n\
                 critical_slots = {critical_slots}\n{extra}"
            ),
        )?;
        let mut cmd = match &self.a.gpud {
            Some(bin) => {
                let mut c = Command::new(bin);
                c.args(["--dbus", "none"]);
                c
            }
            None => {
                let mut c = Command::new(&self.me);
                c.arg("farm-gpud");
                c
            }
        };
        cmd.arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(&state)
            .arg("--config")
            .arg(&config);
        if self.a.simulate {
            cmd.args([
                "--simulate",
                &format!("{}x{}", self.a.sim_gpus.max(1), self.card),
            ]);
        }
        let log = self.logs.join(format!("{name}.log"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let guard = Guard {
            name,
            child,
            _stdin: None,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        let client = loop {
            match gpud_client::blocking::Client::connect(&socket) {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => {
                    bail!("{name} did not come up ({e}): {}", log_tail(&log))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            let s = client.status()?;
            if self.a.simulate
                || s.devices.iter().all(|d| d.capacity_bytes <= self.card)
                || Instant::now() > deadline
            {
                break s;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        Ok((guard, status))
    }

    /// Returns the calibration, the formula and the pad of a phase.
    fn calibrate(&mut self) -> Result<(Calibration, u64, u64)> {
        let spec = CellSpec {
            name: "calibration".into(),
            mode: "none".into(),
            n: 1,
            placement: "one".into(),
            devices: vec![self.first_device()?.0.clone()],
            g2: self.a.g2,
        };
        let mut w = self.normal("p0".into(), "none", 1, 0, None);
        w.tail_ms = 0.0;
        let uuid = spec.devices[0].clone();
        let before = self.sampler.as_ref().and_then(|s| s.latest_used(&uuid));
        // The process idle (context and kernels loaded, no phase): spawn, wait for ready, read.
        let mut p = self.spawn(&spec.name, &w)?;
        let ready = wait_json(&p.lines, "ready", Instant::now() + Duration::from_secs(180))
            .map_err(|why| anyhow::anyhow!("calibration prover {why}: {}", log_tail(&p.log)))?;
        std::thread::sleep(Duration::from_millis(600));
        let idle = self.sampler.as_ref().and_then(|s| s.latest_used(&uuid));
        let window = Window::starting_in(
            Duration::from_millis(100),
            Duration::from_secs_f64(self.a.calibrate_secs),
        );
        let stdin = p.stdin.as_mut().context("calibration stdin")?;
        writeln!(stdin, "{}", window.go_line())?;
        stdin.flush()?;
        let report = wait_json(
            &p.lines,
            "records",
            Instant::now() + Duration::from_secs_f64(self.a.calibrate_secs + 60.0),
        )
        .map_err(|why| anyhow::anyhow!("calibration prover {why}: {}", log_tail(&p.log)))?;
        let report: WorkerReport = serde_json::from_value(report)?;
        drop(p);
        self.settle();
        let peak = self.sampler.as_ref().and_then(|s| {
            s.between(
                window.start_unix_ns,
                window.end_unix_ns,
                window.start_unix_ns,
            )
            .iter()
            .filter(|x| x.uuid == uuid)
            .map(|x| x.mem_used)
            .max()
        });
        let ok: Vec<f64> = report
            .records
            .iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .filter_map(|r| Some(r.released? - r.granted?))
            .collect();
        if ok.is_empty() {
            let errors: Vec<String> = report
                .records
                .iter()
                .filter_map(|r| r.error.clone())
                .take(3)
                .collect();
            bail!(
                "the calibration made no proof (setup {:.1} s): {}",
                ready["setup_secs"].as_f64().unwrap_or(0.0),
                errors.join("; ")
            );
        }
        let cal = Calibration {
            proofs: ok.len(),
            phase: Dist::of(ok, 0),
            context_bytes: before.zip(idle).map(|(b, i)| i.saturating_sub(b)),
            process_peak_bytes: before.zip(peak).map(|(b, p)| p.saturating_sub(b)),
        };
        println!(
            "calibration: {} proofs, GPU phase mean {:.1} ms (p50 {:.1}, max {:.1}){}{}",
            cal.proofs,
            1000.0 * cal.phase.mean,
            1000.0 * cal.phase.p50,
            1000.0 * cal.phase.max,
            cal.context_bytes.map_or(String::new(), |b| format!(
                "; idle prover holds {:.0} MiB",
                b as f64 / (1 << 20) as f64
            )),
            cal.process_peak_bytes.map_or(String::new(), |b| format!(
                ", {:.2} GiB at its peak",
                b as f64 / (1u64 << 30) as f64
            )),
        );
        Ok((cal, report.formula_bytes, report.pad_bytes))
    }
}

pub fn run(a: FarmArgs) -> Result<()> {
    let started = Instant::now();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    if a.duration <= 0.0 || a.witnesses == 0 {
        bail!("--duration and --witnesses must be positive");
    }
    if a.g2_compare.iter().any(|&m| a.g2_window(m) <= 0.0) {
        bail!("--g2-duration and --g2-cpu-duration must be positive");
    }
    if !a.g2_compare.is_empty() && a.g2_ns.contains(&0) {
        bail!("--g2-ns: every number of provers must be at least 1");
    }
    let me = std::env::current_exe().context("locating gpud-bench")?;
    let out = a
        .out
        .clone()
        .or_else(|| std::env::var_os("OUT").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("farm-out"));
    let work = a.work_dir.clone();
    let run_dir = work.join(format!("run-{}", std::process::id()));
    for d in [&out, &work, &run_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let (logs, cells_dir) = (out.join("logs"), out.join("cells"));
    std::fs::create_dir_all(&logs)?;
    std::fs::create_dir_all(&cells_dir)?;
    let engine = if a.simulate {
        "cpu"
    } else {
        if !gpud_cuda::driver::list_devices().is_ok_and(|d| !d.is_empty()) {
            bail!("no CUDA GPU is visible (use --simulate on machines without one)");
        }
        "cuda"
    };
    let card = size(&a.card)?;
    let phase_vram = size(&a.phase_vram)?;
    let modes: Vec<String> = if a.no_matrix {
        Vec::new()
    } else {
        a.modes.clone()
    };
    // Every mode named is known, before anything starts.
    for m in modes.iter().filter(|m| *m != "ideal") {
        mode_lock(m).context("--modes")?;
    }
    for m in &a.priority_modes {
        if m == "ideal" {
            bail!(
                "--priority-modes: the ideal has no critical prover process; name gpud, gpudc, gpud-warm, gpudc-warm or flock"
            );
        }
        mode_lock(m).context("--priority-modes")?;
    }
    // The host runs' memory limit: cgroups must be writable before anything slow starts.
    let host_limit = match (&a.host_limit, a.host_n) {
        (Some(l), n) if n > 0 => {
            let bytes = size(l).context("--host-limit")?;
            if bytes == 0 {
                bail!("--host-limit must be more than 0");
            }
            gpud_bench::farm::cgroup::check_root(&a.cgroup_root).context("--host-limit")?;
            for stale in gpud_bench::farm::cgroup::remove_stale(&a.cgroup_root) {
                println!("farm: removed the cgroup {stale} of an earlier run");
            }
            Some(bytes)
        }
        (Some(_), _) => bail!("--host-limit needs --host-n (the host runs' provers)"),
        (None, _) => None,
    };
    let host_cells = if a.host_n == 0 {
        0
    } else {
        2 * (usize::from(host_limit.is_none() || !a.host_limited_only)
            + usize::from(host_limit.is_some()))
    };
    let matrix_cells = modes.len() * a.ns.len();
    let estimate = matrix_cells as f64 * (a.duration + 3.0)
        + if a.priority_n > 0 {
            a.priority_modes.len() as f64 * (a.priority_duration + 4.0)
        } else {
            0.0
        }
        + if a.multi_gpu {
            2.0 * a.multi_ns.len() as f64 * (a.duration + 3.0)
        } else {
            0.0
        }
        + host_cells as f64 * (a.host_duration + 8.0)
        + a.g2_ns.len() as f64
            * a.g2_compare
                .iter()
                .map(|&m| a.g2_window(m) + 3.0)
                .sum::<f64>()
        + a.calibrate_secs
        + 10.0;
    println!(
        "farm: {} engine, {} cells of {:.0} s{}{}; about {:.0} s after the bundle and the ballast",
        engine,
        matrix_cells,
        a.duration,
        if a.priority_n > 0 {
            format!(", {} priority runs", a.priority_modes.len())
        } else {
            String::new()
        },
        if a.multi_gpu {
            ", several-GPU runs"
        } else {
            ""
        },
        estimate
    );

    let mut farm = Farm {
        me: me.clone(),
        bundle: work.join("bundle"),
        run_dir: run_dir.clone(),
        lock_dir: run_dir.join("locks"),
        sim_dir: run_dir.join("simvram"),
        logs,
        cells_dir,
        out: out.clone(),
        engine,
        devices: Vec::new(),
        card,
        phase_vram,
        tail_ms: a.tail_ms.unwrap_or(0.0),
        context_vram: 0,
        sampler: None,
        idle_used: Vec::new(),
        a,
    };
    std::fs::create_dir_all(&farm.lock_dir)?;
    std::fs::create_dir_all(&farm.sim_dir)?;

    // 1. The bundles (before the ballast: the parameter generator uses the GPU).
    farm.prepare(farm.a.log_size, farm.a.witnesses)?;
    if farm.a.priority_n > 0 {
        farm.prepare(farm.a.critical_log_size, 1)?;
    }

    // The ballast, then gpud.
    let mut _ballast = None;
    if !farm.a.simulate {
        let mut child = Command::new(&me)
            .args(["farm-ballast", "--leave", &card.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(farm.logs.join("ballast.log"))?)
            .spawn()
            .context("starting the ballast")?;
        let lines = line_reader(child.stdout.take().context("ballast stdout")?);
        let stdin = child.stdin.take();
        let guard = Guard {
            name: "ballast",
            child,
            _stdin: stdin,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        // Its lines: one per GPU (`held_bytes`), then `ready`.
        loop {
            let v = next_json(&lines, deadline).map_err(|why| {
                anyhow::anyhow!(
                    "the ballast {why}: {}",
                    log_tail(&farm.logs.join("ballast.log"))
                )
            })?;
            if let (Some(uuid), Some(held), Some(free)) = (
                v["uuid"].as_str(),
                v["held_bytes"].as_u64(),
                v["free_bytes"].as_u64(),
            ) {
                println!(
                    "ballast: {uuid}: holds {:.1} GiB, {:.2} GiB left free",
                    gib(held),
                    gib(free)
                );
            }
            if v["ready"].as_bool() == Some(true) {
                break;
            }
        }
        println!(
            "ballast up: each GPU keeps {:.1} GiB free for the provers",
            gib(card)
        );
        _ballast = Some(guard);
        farm.sampler = Some(Sampler::start(farm.a.nvml_hz)?);
    }
    let (_gpud, status) = farm.start_gpud("gpud", 1, 0)?;
    // Mode gpud2: a second gpud, two compute slots per GPU, for the cells that ask for it.
    let _gpud2 = if modes.iter().any(|m| m == "gpud2") {
        Some(farm.start_gpud("gpud2", 2, 0)?.0)
    } else {
        None
    };
    // Mode gpudc (the priority runs, or cells that ask for it): one compute slot and one
    // critical slot per GPU.
    let _gpudc = if farm.a.priority_n > 0 || modes.iter().any(|m| m == "gpudc") {
        Some(farm.start_gpud("gpudc", 1, 1)?.0)
    } else {
        None
    };
    // The host runs under a memory limit: a gpud whose host memory is that limit.
    let _gpudh = match host_limit {
        Some(limit) => Some(
            farm.start_gpud_with(
                "gpudh",
                1,
                0,
                &format!(
                    "[host]\nmemory = \"{limit}\"\nmemory_headroom = \"1GiB\"\npinned = \"{}\"\n",
                    limit.saturating_sub(1 << 30)
                ),
            )?
            .0,
        ),
        None => None,
    };
    farm.devices = status
        .devices
        .iter()
        .map(|d| (d.uuid.clone(), d.index, d.name.clone(), d.total_bytes))
        .collect();
    for d in &status.devices {
        println!(
            "gpud ({}): device {} {} ({}), capacity {:.2} GiB of {:.1} GiB, unmanaged {:.1} GiB",
            match &farm.a.gpud {
                Some(b) => b.display().to_string(),
                None => "library, child process".into(),
            },
            d.index,
            d.name,
            d.uuid,
            d.capacity_bytes as f64 / (1u64 << 30) as f64,
            d.total_bytes as f64 / (1u64 << 30) as f64,
            d.unmanaged_bytes as f64 / (1u64 << 30) as f64
        );
    }
    if let Some(s) = &farm.sampler {
        std::thread::sleep(Duration::from_millis(300));
        farm.idle_used = farm
            .devices
            .iter()
            .filter_map(|(uuid, ..)| Some((uuid.clone(), s.latest_used(uuid)?)))
            .collect();
    }

    let mut results = FarmResults {
        date: utc(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)),
        commit: build_commit(&me),
        command,
        host: HostInfo {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            gpus: farm
                .devices
                .iter()
                .map(|(u, _, n, t)| (n.clone(), u.clone(), *t))
                .collect(),
            simulated: farm.a.simulate,
        },
        ..Default::default()
    };

    // 2. Calibration.
    // Each prover computes its pad as --phase-vram minus its engine's formula on this device;
    // the calibration prover's report says what they are.
    let (cal, formula, pad) = farm.calibrate()?;
    println!(
        "a partition's phase: formula {:.3} GiB + pad {:.3} GiB = {:.3} GiB",
        formula as f64 / (1u64 << 30) as f64,
        pad as f64 / (1u64 << 30) as f64,
        (formula + pad) as f64 / (1u64 << 30) as f64
    );
    if farm.a.tail_ms.is_none() {
        farm.tail_ms = 1000.0 * farm.a.tail_ratio * cal.phase.mean;
    }
    farm.context_vram = match farm.a.context_vram.as_str() {
        "auto" if farm.cuda() => cal
            .context_bytes
            .map_or(0, |b| b.div_ceil(2 << 20) * (2 << 20)),
        "auto" => 0,
        s => size(s)?,
    };
    println!(
        "modeled CPU tail {:.1} ms; gpud-mode processes lease {:.0} MiB per GPU for their CUDA context",
        farm.tail_ms,
        farm.context_vram as f64 / (1 << 20) as f64
    );
    results.calibration = Some(cal);
    results.config = RunConfig {
        engine: engine.into(),
        circuit: farm.a.circuit.clone(),
        log_size: farm.a.log_size,
        critical_log_size: farm.a.critical_log_size,
        duration: farm.a.duration,
        priority_duration: farm.a.priority_duration,
        card_bytes: card,
        phase_vram_bytes: phase_vram,
        formula_bytes: formula,
        pad_bytes: pad,
        tail_secs: farm.tail_ms / 1000.0,
        tail_ratio: farm.a.tail_ratio,
        witnesses: farm.a.witnesses,
        context_lease_bytes: farm.context_vram,
        critical_every: farm.a.critical_every,
        g2: farm.a.g2,
    };
    let dev0 = farm.first_device()?.0.clone();
    let all_devices: Vec<String> = farm.devices.iter().map(|d| d.0.clone()).collect();
    // The matrix and the priority runs are about one GPU: with several, gpud's leases name the
    // first (the other modes' locks are the first GPU's too).
    let one_gpu = (farm.devices.len() > 1).then(|| dev0.clone());

    // 3. The matrix.
    if !modes.is_empty() {
        println!("matrix: modes {} × N {:?}", modes.join(", "), farm.a.ns);
    }
    // N outer, modes inner: the cells compared with each other (every mode at one N) run back to
    // back, so that drift over the run (clocks, temperature, the host) weighs on all of them alike.
    for &n in &farm.a.ns {
        for mode in &modes {
            let spec = CellSpec {
                name: format!("{mode}-n{n}"),
                mode: mode.clone(),
                n,
                placement: "one".into(),
                devices: vec![dev0.clone()],
                g2: farm.a.g2,
            };
            let workers = farm.mode_workers(mode, n, one_gpu.clone())?;
            let m = farm.cell(spec, &workers, farm.a.duration)?;
            results.cells.push(m);
            save_partial(&results, &farm.out);
        }
    }

    // 4. Priority.
    if farm.a.priority_n > 0 {
        println!(
            "priority: {} normal provers and a critical 2^{} prover every {} s",
            farm.a.priority_n, farm.a.critical_log_size, farm.a.critical_every
        );
        let critical_phase_vram = farm
            .a
            .critical_phase_vram
            .as_deref()
            .map(size)
            .transpose()?;
        for mode in &farm.a.priority_modes.clone() {
            let mode = mode.as_str();
            let (lock, gpud) = mode_lock(mode)?;
            let spec = CellSpec {
                name: format!("priority-{mode}"),
                mode: mode.into(),
                n: farm.a.priority_n,
                placement: "one".into(),
                devices: vec![dev0.clone()],
                g2: farm.a.g2,
            };
            let mut workers = farm.mode_workers(mode, farm.a.priority_n, one_gpu.clone())?;
            workers.push(WorkerSpec {
                name: "critical".into(),
                critical: true,
                lock,
                lanes: 1,
                index: 0,
                class: "critical",
                log_size: farm.a.critical_log_size,
                witnesses: 1,
                phase_vram: critical_phase_vram,
                tail_ms: 0.0,
                interval: Some(farm.a.critical_every),
                device: one_gpu.clone(),
                gpud,
                warm: false,
                synthesize: false,
                host_leases: false,
                cgroup: None,
                g2: farm.a.g2,
            });
            let m = farm.cell(spec, &workers, farm.a.priority_duration)?;
            results.priority.push(m);
            save_partial(&results, &farm.out);
        }
    }

    // 5. Several GPUs.
    if farm.a.multi_gpu {
        if farm.devices.len() < 2 {
            println!(
                "several GPUs: skipped, gpud sees {} device",
                farm.devices.len()
            );
        } else {
            println!(
                "several GPUs: placement any over {} GPUs vs the first GPU",
                farm.devices.len()
            );
            for &n in &farm.a.multi_ns.clone() {
                for (placement, device, devices) in [
                    ("one", Some(dev0.clone()), vec![dev0.clone()]),
                    ("any", None, all_devices.clone()),
                ] {
                    let spec = CellSpec {
                        name: format!("multi-{placement}-n{n}"),
                        mode: "gpud".into(),
                        n,
                        placement: placement.into(),
                        devices,
                        g2: farm.a.g2,
                    };
                    let workers = farm.mode_workers("gpud", n, device)?;
                    let m = farm.cell(spec, &workers, farm.a.duration)?;
                    results.multi_gpu.push(m);
                    save_partial(&results, &farm.out);
                }
            }
        }
    }

    // 6. Host admission.
    if farm.a.host_n > 0 {
        let (n, lanes) = (farm.a.host_n, farm.a.host_lanes.max(1));
        let mut limits = Vec::new();
        if host_limit.is_none() || !farm.a.host_limited_only {
            limits.push(None);
        }
        if let Some(l) = host_limit {
            limits.push(Some(l));
        }
        println!(
            "host admission: {n} provers × {lanes} lanes, every partition synthesized anew; per-process bounds against gpud host leases{}",
            host_limit.map_or(String::new(), |l| format!(
                ", then inside a {:.1} GiB cgroup memory limit",
                l as f64 / (1u64 << 30) as f64
            ))
        );
        for limit in limits {
            for mode in ["host-bounds", "host-gpud"] {
                let name = match limit {
                    None => format!("{mode}-n{n}"),
                    Some(_) => format!("{mode}-limit-n{n}"),
                };
                let cgroup = match limit {
                    Some(l) => Some(
                        gpud_bench::farm::cgroup::Cgroup::create(
                            &farm.a.cgroup_root,
                            &format!(
                                "{}{}-{name}",
                                gpud_bench::farm::cgroup::PREFIX,
                                std::process::id()
                            ),
                            l,
                        )
                        .context("the host cell's cgroup")?,
                    ),
                    None => None,
                };
                let workers: Vec<WorkerSpec> = (0..n)
                    .map(|i| {
                        let mut w = farm.normal(format!("p{i}"), "gpud", lanes, i, one_gpu.clone());
                        // VRAM is not the question here: phases lease their formula alone.
                        w.phase_vram = None;
                        w.synthesize = true;
                        w.host_leases = mode == "host-gpud";
                        w.gpud = if limit.is_some() { "gpudh" } else { "gpud" };
                        w.cgroup = cgroup.as_ref().map(|c| c.dir().to_path_buf());
                        w
                    })
                    .collect();
                let spec = CellSpec {
                    name,
                    mode: mode.into(),
                    n,
                    placement: "one".into(),
                    devices: vec![dev0.clone()],
                    g2: farm.a.g2,
                };
                let host = HostCell {
                    cgroup,
                    limit,
                    leases: mode == "host-gpud",
                    lanes,
                };
                let m = farm.cell_with(spec, &workers, farm.a.host_duration, Some(host))?;
                results.host_cells.push(m);
                save_partial(&results, &farm.out);
            }
        }
    }

    // 7. B_G2 placement: N outer, the G2 modes of one N back to back (as the matrix).
    if !farm.a.g2_compare.is_empty() {
        println!(
            "B_G2 placement: gpud provers with G2 {} at N {:?}",
            farm.a
                .g2_compare
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(" / "),
            farm.a.g2_ns
        );
        for &n in &farm.a.g2_ns.clone() {
            for &g2 in &farm.a.g2_compare.clone() {
                let spec = CellSpec {
                    name: format!("g2-{}-n{n}", g2.name()),
                    mode: "gpud".into(),
                    n,
                    placement: "one".into(),
                    devices: vec![dev0.clone()],
                    g2,
                };
                let mut workers = farm.mode_workers("gpud", n, one_gpu.clone())?;
                for w in &mut workers {
                    w.g2 = g2;
                }
                let m = farm.cell(spec, &workers, farm.a.g2_window(g2))?;
                results.g2_cells.push(m);
                save_partial(&results, &farm.out);
            }
        }
    }

    results.evaluate_targets();
    results.wall_secs = started.elapsed().as_secs_f64();
    let json_path = farm.out.join("farm.json");
    std::fs::write(&json_path, serde_json::to_vec_pretty(&results)?)?;
    let md = results.markdown();
    std::fs::write(farm.out.join("farm.md"), &md)?;
    let png = farm.out.join("farm.png");
    let plotted = match (
        results.cells.is_empty(),
        plot::find_font(farm.a.font.as_deref()),
    ) {
        (true, _) => "no matrix to plot".to_owned(),
        (false, Some(font)) => match plot::draw(&results, &png, &font) {
            Ok(()) => format!("plot {}", png.display()),
            Err(e) => format!("plot failed: {e}"),
        },
        (false, None) => format!(
            "no font here: `gpud-bench farm-plot {} farm.png` elsewhere",
            json_path.display()
        ),
    };
    drop(_gpud);
    drop(_ballast);
    let _ = std::fs::remove_dir_all(&run_dir);
    println!(
        "\nfarm done in {:.0} s; {} ; {}; commit {}",
        results.wall_secs,
        json_path.display(),
        plotted,
        results.commit
    );
    for line in results.host_lines().into_iter().chain(results.g2_lines()) {
        println!("{line}");
    }
    println!("\n## gpud farm, {}\n\n{md}", results.date);
    Ok(())
}
