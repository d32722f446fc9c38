//! What the driver computes from the processes' reports and the NVML samples of a cell: the
//! per-mode metrics, the benchmark's targets, and the Markdown tables.
//!
//! Definitions (all inside the cell's window `[0, T]`):
//! - **partitions/min**: the rate of verified partition proofs of normal-class lanes (CPU tail
//!   done by `T`), measured between the first and the last completion in the window: `(k − 1)
//!   / (c_k − c_1)` for completion times `c_1 ≤ … ≤ c_k` (`k / T` when `k < 3`). With windows of
//!   ~20 GPU phases, counting `k / T` alone would quantize the rate by ±5 %, more than the
//!   differences measured; the count and `k / T` are reported too. (A Filecoin C2 proof is ten
//!   such partitions.)
//! - **GPU busy (phases)**: the union of every GPU-phase interval `[granted, released]`
//!   (finished or still running at `T`, all processes, all outcomes) per device, over `T`;
//!   averaged over the devices in play. **GPU busy (NVML)**: the mean of
//!   `nvmlDeviceGetUtilizationRates().gpu` sampled during the window (kernel-active time:
//!   uploads and host gaps inside a phase do not count).
//! - **OOM**: attempts whose GPU phase ran out of device memory; **failed**: every attempt
//!   that did not end in a verified proof (OOM, other GPU-phase errors, unverified proofs,
//!   acquire errors), plus processes that did not start or did not report.
//! - **partitions/min (lanes)**: `Σ_lanes 60·k_l / (c_l − s_l)` over every lane with a verified
//!   proof, `k_l` its proofs in the window, `s_l` its first request and `c_l` its last
//!   completion: each lane proves back to back, so this is its rate without the unfinished
//!   partition at the window's end. It stays sound with one or two proofs per lane, where the
//!   steady rate above is not (lanes started together finish their first long CPU tails
//!   together, and `(k − 1) / (c_k − c_1)` over such a cluster is far too high): the G2 table
//!   shows it for that reason.
//! - **CPU**: the host's busy fraction over the window, all cores (`/proc/stat`, see
//!   [`super::cpustat`]), and the prover processes' own CPU seconds over the window (each
//!   process's `getrusage`) as cores: seconds over the window's length.
//! - **wait**: acquire → grant of the lease or lock; waits still open at `T` count as `T −
//!   requested` (a lower bound), so a starving waiter is not left out. Percentiles are
//!   nearest-rank: p99 of fewer than 100 samples is their maximum.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::G2Mode;
use super::cpustat::HostCpu;
use super::worker::{Outcome, PhaseSecs, WorkerReport};

/// One NVML reading of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlSample {
    /// Seconds since the window's start.
    pub t: f64,
    /// The device's UUID.
    pub uuid: String,
    /// Kernel-active percentage over NVML's last sample period.
    pub util: u32,
    /// Device memory in use, bytes.
    pub mem_used: u64,
}

/// A distribution summary (seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// Samples.
    pub n: usize,
    /// Of which still open at the end (lower bounds).
    pub censored: usize,
    /// Mean.
    pub mean: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Dist {
    /// Summarizes `values`, of which `censored` are lower bounds.
    pub fn of(mut values: Vec<f64>, censored: usize) -> Self {
        values.retain(|v| v.is_finite());
        values.sort_by(f64::total_cmp);
        let n = values.len();
        Self {
            n,
            censored,
            mean: if n == 0 {
                0.0
            } else {
                values.iter().sum::<f64>() / n as f64
            },
            p50: percentile(&values, 50.0),
            p99: percentile(&values, 99.0),
            max: values.last().copied().unwrap_or(0.0),
        }
    }
}

/// Length of the union of intervals, clipped to `[0, end]`.
pub fn union_length(mut intervals: Vec<(f64, f64)>, end: f64) -> f64 {
    intervals.retain(|(a, b)| b > a);
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut reach) = (0.0, 0.0f64);
    for (a, b) in intervals {
        let (a, b) = (a.max(reach).max(0.0), b.min(end));
        if b > a {
            total += b - a;
        }
        reach = reach.max(b);
    }
    total
}

/// Length of `[0, end]` covered by two or more of `intervals` at once (phases overlapping on
/// one GPU: what a single compute slot forbids and two slots, or no lock, allow).
pub fn overlap_length(intervals: &[(f64, f64)], end: f64) -> f64 {
    let mut edges: Vec<(f64, i32)> = Vec::with_capacity(2 * intervals.len());
    for &(a, b) in intervals {
        let (a, b) = (a.max(0.0), b.min(end));
        if b > a {
            edges.push((a, 1));
            edges.push((b, -1));
        }
    }
    // Ends before starts at the same instant: a handoff is not an overlap.
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut depth, mut since, mut total) = (0, 0.0, 0.0);
    for (t, step) in edges {
        if depth >= 2 {
            total += t - since;
        }
        depth += step;
        since = t;
    }
    total
}

/// One class's numbers in a cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassMetrics {
    /// Prover processes of this class.
    pub processes: usize,
    /// Lanes (worker threads) in all.
    pub lanes: usize,
    /// Verified partition proofs with their tail done inside the window.
    pub proofs: usize,
    /// Steady rate of verified proofs per minute, between the first and the last completion.
    pub per_minute: f64,
    /// `proofs` per minute of window.
    pub per_minute_window: f64,
    /// Out-of-memory failures.
    pub oom: usize,
    /// Attempts that made no verified proof, and processes that did not start or report.
    pub failed: usize,
    /// Acquire → grant.
    pub wait: Dist,
    /// GPU phases (granted → released) that finished.
    pub phase: Dist,
    /// Medians of the parts of the phases that succeeded (where the engine reported them).
    #[serde(default)]
    pub phase_parts: Option<PhaseSecs>,
    /// The lanes' rates summed (see the module's definitions).
    #[serde(default)]
    pub per_minute_lanes: f64,
    /// CPU tails (release → tail done) of the verified proofs.
    #[serde(default)]
    pub tail: Dist,
    /// The B_G2 MSMs of the verified proofs (in the phase or in the tail; none when
    /// precomputed).
    #[serde(default)]
    pub g2: Dist,
}

/// What the CPUs did in a cell's window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuMetrics {
    /// The whole host, all cores (none where `/proc/stat` could not be read).
    pub host: Option<HostCpu>,
    /// CPU seconds of the prover processes that reported, summed.
    pub provers_secs: f64,
    /// `provers_secs` over the window: the cores they kept busy on average.
    pub provers_cores: f64,
}

/// A device's busy fractions in a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceBusy {
    /// UUID.
    pub uuid: String,
    /// GPU-phase union over the window.
    pub phase_busy: f64,
    /// Mean NVML utilization (0..1), when sampled.
    pub nvml_util: Option<f64>,
    /// Highest device memory in use seen by NVML.
    pub nvml_mem_max: Option<u64>,
    /// GPU phases that started on it.
    pub phases: usize,
    /// Fraction of the window with two or more phases running at once on it.
    #[serde(default)]
    pub overlap: f64,
}

/// One cell: a mode at one N (plus, for the priority runs, the critical prover).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellMetrics {
    /// Unique name (`gpud-n4`, `priority-flock`, `x2-any-n8`).
    pub name: String,
    /// Mode: `gpud`, `gpud2` (two compute slots per GPU), `gpudc` (a critical slot), `gpud-warm`
    /// and `gpudc-warm` (warm bases), `ideal`, `none`, `flock`.
    pub mode: String,
    /// Normal provers (processes, or lanes of the ideal's one process).
    pub n: usize,
    /// Where the phase leases go: `any`, or `one` (the first GPU).
    pub placement: String,
    /// The window, seconds.
    pub duration: f64,
    /// Normal-class provers.
    pub normal: ClassMetrics,
    /// The critical prover, in the priority runs.
    pub critical: Option<ClassMetrics>,
    /// Mean over the devices in play of their GPU-phase busy fraction.
    pub gpu_busy: f64,
    /// Mean over the devices in play of the fraction of the window with two or more phases
    /// running at once (0 under one compute slot or lock).
    #[serde(default)]
    pub phase_overlap: f64,
    /// Mean over the devices in play of NVML utilization, when sampled.
    pub nvml_util: Option<f64>,
    /// Per device.
    pub devices: Vec<DeviceBusy>,
    /// Processes that did not become ready, with their last words.
    pub startup_errors: Vec<String>,
    /// The normal provers' warm state, in a mode that keeps one (`gpud-warm`).
    #[serde(default)]
    pub warm: Option<WarmMetrics>,
    /// The host side, in the host modes (`host-bounds`, `host-gpud`).
    #[serde(default)]
    pub host: Option<HostMetrics>,
    /// Where the provers got B_G2.
    #[serde(default)]
    pub g2: G2Mode,
    /// CPU utilisation over the window.
    #[serde(default)]
    pub cpu: Option<CpuMetrics>,
}

/// The host side of a host-mode cell: what the provers' synthesis held and waited for, and
/// whether the kernel killed any of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostMetrics {
    /// The cgroup memory limit the provers ran under (gpud's `[host] memory` too); none: no
    /// limit.
    pub limit_bytes: Option<u64>,
    /// Whether the provers leased their host work from gpud (`host-gpud`).
    pub host_leases: bool,
    /// Lanes per prover: the partitions each may synthesize at once.
    pub lanes: usize,
    /// The host memory one partition leases (the prover's estimate).
    pub partition_bytes: u64,
    /// The largest sum over the provers of their resident memory (`VmRSS`, sampled).
    pub peak_rss_bytes: u64,
    /// Samples taken.
    pub rss_samples: usize,
    /// The cgroup's own peak (`memory.peak`), where the kernel has it.
    pub cgroup_peak_bytes: Option<u64>,
    /// Provers that ended by SIGKILL (the OOM killer's signal).
    pub killed: usize,
    /// The cgroup's `oom_kill` count (`memory.events`).
    pub cgroup_oom_kills: Option<u64>,
    /// Wait for the host leases before synthesis (0 without them), seconds.
    pub host_wait: Dist,
    /// Synthesis, seconds.
    pub synthesis: Dist,
}

/// The host-lease waits and synthesis times of synthesized attempts.
pub fn host_dists(reports: &[&WorkerReport]) -> (Dist, Dist) {
    let recs = || reports.iter().flat_map(|r| &r.records);
    let waits = recs()
        .filter_map(|r| Some(r.synth_start? - r.host_requested?))
        .collect();
    let synth = recs()
        .filter_map(|r| Some(r.synth_end? - r.synth_start?))
        .collect();
    (Dist::of(waits, 0), Dist::of(synth, 0))
}

/// What the warm state (resident bases in evictable leases) of a cell's normal provers went
/// through, summed over them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WarmMetrics {
    /// Bytes of one prover's warm lease.
    pub vram_bytes: u64,
    /// Uploads of the bases, the first ones (before the window) included.
    pub loads: u32,
    /// Seconds per upload, mean.
    pub load_mean: f64,
    /// Reclaim notices answered by freeing the bases.
    pub evictions: u32,
    /// From a reclaim notice to the release, seconds.
    pub reclaim_answer: Dist,
    /// Phases in the window that ran with the bases resident, and without (after an eviction,
    /// while they did not fit).
    pub warm_phases: usize,
    /// See `warm_phases`.
    pub cold_phases: usize,
    /// Phase leases sized for resident bases that came after they were evicted (given back
    /// and asked for again).
    pub phase_retries: u32,
}

fn warm_metrics(reports: &[&WorkerReport], end: f64) -> Option<WarmMetrics> {
    let warm: Vec<(&WorkerReport, &gpud_prover::warm::WarmReport)> = reports
        .iter()
        .filter_map(|r| Some((*r, r.warm.as_ref()?)))
        .collect();
    if warm.is_empty() {
        return None;
    }
    let mut m = WarmMetrics {
        vram_bytes: warm[0].1.vram_bytes,
        ..WarmMetrics::default()
    };
    let mut answers = Vec::new();
    let mut load_secs = 0.0;
    for (r, w) in &warm {
        m.loads += w.loads;
        load_secs += w.load_seconds;
        m.evictions += w.evictions;
        m.phase_retries += w.phase_retries;
        answers.extend(w.reclaim_answer_seconds.iter().copied());
        for rec in r
            .records
            .iter()
            .filter(|x| x.granted.is_some_and(|g| g <= end))
        {
            match rec.warm {
                Some(true) => m.warm_phases += 1,
                Some(false) => m.cold_phases += 1,
                None => {}
            }
        }
    }
    m.load_mean = if m.loads > 0 {
        load_secs / f64::from(m.loads)
    } else {
        0.0
    };
    m.reclaim_answer = Dist::of(answers, 0);
    Some(m)
}

/// A process of a cell as the driver saw it.
#[derive(Debug, Clone)]
pub struct ProcessOutcome {
    /// Critical class (the priority runs' small prover).
    pub critical: bool,
    /// Its report, or why there is none.
    pub report: Result<WorkerReport, String>,
}

/// How a cell was run.
#[derive(Debug, Clone)]
pub struct CellSpec {
    /// Unique name.
    pub name: String,
    /// Mode.
    pub mode: String,
    /// Normal provers.
    pub n: usize,
    /// `any` or `one`.
    pub placement: String,
    /// The devices in play (UUIDs).
    pub devices: Vec<String>,
    /// Where the provers get B_G2.
    pub g2: G2Mode,
}

fn class_metrics(reports: &[&WorkerReport], startup_failures: usize, end: f64) -> ClassMetrics {
    let mut m = ClassMetrics {
        processes: reports.len() + startup_failures,
        lanes: reports.iter().map(|r| r.lanes).sum(),
        failed: startup_failures,
        ..Default::default()
    };
    let (mut waits, mut censored, mut phases) = (Vec::new(), 0, Vec::new());
    let mut completions = Vec::new();
    let mut parts: Vec<PhaseSecs> = Vec::new();
    let (mut tails, mut g2s) = (Vec::new(), Vec::new());
    for r in reports {
        // Per lane: (first request, last completion, proofs).
        let mut lanes: BTreeMap<usize, (f64, f64, usize)> = BTreeMap::new();
        for rec in &r.records {
            if rec.requested > end {
                continue;
            }
            let lane = lanes
                .entry(rec.lane)
                .or_insert((rec.requested, f64::NEG_INFINITY, 0));
            lane.0 = lane.0.min(rec.requested);
            match rec.outcome {
                Outcome::Ok if rec.tail_end.is_some_and(|t| t <= end) => {
                    m.proofs += 1;
                    completions.extend(rec.tail_end);
                    if let Some(t) = rec.tail_end {
                        lane.1 = lane.1.max(t);
                        lane.2 += 1;
                        tails.extend(rec.released.map(|rel| t - rel));
                    }
                    g2s.extend(rec.g2_secs);
                }
                Outcome::Ok => {}
                Outcome::Oom => {
                    m.oom += 1;
                    m.failed += 1;
                }
                Outcome::Unverified | Outcome::Failed | Outcome::Lease => m.failed += 1,
            }
            if let Some(g) = rec.granted.filter(|&g| g <= end) {
                waits.push(g - rec.requested);
            }
            if let (Some(g), Some(rel)) = (rec.granted, rec.released) {
                phases.push(rel - g);
            }
            parts.extend(rec.phase);
        }
        m.per_minute_lanes += lanes
            .values()
            .filter(|(first, last, k)| *k > 0 && last > first)
            .map(|(first, last, k)| *k as f64 * 60.0 / (last - first))
            .sum::<f64>();
        for o in &r.open {
            match o.granted {
                Some(g) if g <= end => waits.push(g - o.requested),
                Some(_) => {}
                None if o.requested < end => {
                    waits.push(end - o.requested);
                    censored += 1;
                }
                None => {}
            }
            if let (Some(g), Some(rel)) = (o.granted, o.released) {
                phases.push(rel - g);
            }
        }
    }
    m.per_minute_window = if end > 0.0 {
        m.proofs as f64 * 60.0 / end
    } else {
        0.0
    };
    completions.sort_by(f64::total_cmp);
    m.per_minute = match (completions.first(), completions.last()) {
        (Some(first), Some(last)) if completions.len() >= 3 && last > first => {
            (completions.len() - 1) as f64 * 60.0 / (last - first)
        }
        _ => m.per_minute_window,
    };
    m.wait = Dist::of(waits, censored);
    m.phase = Dist::of(phases, 0);
    m.tail = Dist::of(tails, 0);
    m.g2 = Dist::of(g2s, 0);
    m.phase_parts = median_parts(&parts);
    m
}

/// The median of each part over `parts` (each part's own median), none when empty.
fn median_parts(parts: &[PhaseSecs]) -> Option<PhaseSecs> {
    if parts.is_empty() {
        return None;
    }
    let median = |f: fn(&PhaseSecs) -> f64| -> f64 {
        let v: Vec<f64> = parts.iter().map(f).collect();
        Dist::of(v, 0).p50
    };
    Some(PhaseSecs {
        pad: median(|p| p.pad),
        h: median(|p| p.h),
        msms: median(|p| p.msms),
        msm_b_g2: median(|p| p.msm_b_g2),
        finish: median(|p| p.finish),
        engine: median(|p| p.engine),
    })
}

/// The metrics of one cell.
pub fn cell_metrics(
    spec: &CellSpec,
    duration: f64,
    processes: &[ProcessOutcome],
    samples: &[NvmlSample],
) -> CellMetrics {
    let end = duration;
    let ok = |critical: bool| -> Vec<&WorkerReport> {
        processes
            .iter()
            .filter(|p| p.critical == critical)
            .filter_map(|p| p.report.as_ref().ok())
            .collect()
    };
    let failed_starts = |critical: bool| {
        processes
            .iter()
            .filter(|p| p.critical == critical && p.report.is_err())
            .count()
    };
    let normal = class_metrics(&ok(false), failed_starts(false), end);
    let critical = processes
        .iter()
        .any(|p| p.critical)
        .then(|| class_metrics(&ok(true), failed_starts(true), end));

    // GPU-phase intervals per device, every process and outcome.
    let mut per_device: BTreeMap<String, (Vec<(f64, f64)>, usize)> = spec
        .devices
        .iter()
        .map(|d| (d.clone(), (Vec::new(), 0)))
        .collect();
    for p in processes {
        let Ok(r) = &p.report else { continue };
        let recs = r
            .records
            .iter()
            .filter_map(|x| Some((x.device.clone()?, x.granted?, x.released.unwrap_or(end))));
        let open = r
            .open
            .iter()
            .filter_map(|o| Some((o.device.clone()?, o.granted?, o.released.unwrap_or(end))));
        for (dev, a, b) in recs.chain(open) {
            let e = per_device.entry(dev).or_default();
            e.0.push((a, b));
            if a <= end {
                e.1 += 1;
            }
        }
    }
    let devices: Vec<DeviceBusy> = per_device
        .into_iter()
        .map(|(uuid, (iv, phases))| {
            let ours: Vec<&NvmlSample> = samples
                .iter()
                .filter(|s| s.uuid == uuid && s.t >= 0.0 && s.t <= end)
                .collect();
            DeviceBusy {
                overlap: if end > 0.0 {
                    overlap_length(&iv, end) / end
                } else {
                    0.0
                },
                phase_busy: if end > 0.0 {
                    union_length(iv, end) / end
                } else {
                    0.0
                },
                nvml_util: (!ours.is_empty()).then(|| {
                    ours.iter().map(|s| f64::from(s.util)).sum::<f64>() / ours.len() as f64 / 100.0
                }),
                nvml_mem_max: ours.iter().map(|s| s.mem_used).max(),
                phases,
                uuid,
            }
        })
        .collect();
    let in_play: Vec<&DeviceBusy> = devices
        .iter()
        .filter(|d| spec.devices.contains(&d.uuid))
        .collect();
    let mean = |f: &dyn Fn(&DeviceBusy) -> Option<f64>| -> Option<f64> {
        let v: Vec<f64> = in_play.iter().filter_map(|d| f(d)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let startup_errors = processes
        .iter()
        .filter_map(|p| p.report.as_ref().err().cloned())
        .collect();
    let warm = warm_metrics(&ok(false), end);
    let provers_secs: f64 = processes
        .iter()
        .filter_map(|p| p.report.as_ref().ok()?.cpu_secs)
        .sum();
    CellMetrics {
        name: spec.name.clone(),
        mode: spec.mode.clone(),
        n: spec.n,
        placement: spec.placement.clone(),
        duration,
        gpu_busy: mean(&|d| Some(d.phase_busy)).unwrap_or(0.0),
        phase_overlap: mean(&|d| Some(d.overlap)).unwrap_or(0.0),
        nvml_util: mean(&|d| d.nvml_util),
        normal,
        critical,
        devices,
        startup_errors,
        warm,
        host: None,
        g2: spec.g2,
        cpu: Some(CpuMetrics {
            host: None,
            provers_secs,
            provers_cores: if end > 0.0 { provers_secs / end } else { 0.0 },
        }),
    }
}

/// One of the benchmark's targets, as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// What is compared.
    pub name: String,
    /// The measurement.
    pub measured: String,
    /// The target.
    pub target: String,
    /// Met.
    pub met: bool,
}

/// The host and GPUs of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// CPU threads.
    pub cpus: usize,
    /// GPUs: name, UUID, bytes.
    pub gpus: Vec<(String, String, u64)>,
    /// Simulated devices and the CPU engine.
    pub simulated: bool,
}

/// The solo run before the cells: the GPU phase's length, which sets the modeled tail, and
/// what a prover process holds on the device outside any phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Verified proofs in the run.
    pub proofs: usize,
    /// GPU phases (granted → released).
    pub phase: Dist,
    /// Device memory one idle prover process holds (its CUDA context), from NVML.
    pub context_bytes: Option<u64>,
    /// Highest device memory in use during the run minus before it (context + one phase).
    pub process_peak_bytes: Option<u64>,
}

/// The settings every cell ran with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Engine of the GPU phase.
    pub engine: String,
    /// Circuit of the normal provers.
    pub circuit: String,
    /// Its log size.
    pub log_size: u32,
    /// The critical prover's log size.
    pub critical_log_size: u32,
    /// Cell window, seconds.
    pub duration: f64,
    /// The priority runs' window, seconds.
    pub priority_duration: f64,
    /// Memory left free for the provers (the ballast holds the rest; simulated: the device).
    pub card_bytes: u64,
    /// A partition's footprint target: formula + pad.
    pub phase_vram_bytes: u64,
    /// The formula of one phase (no residency).
    pub formula_bytes: u64,
    /// The pad.
    pub pad_bytes: u64,
    /// The modeled CPU tail, seconds.
    pub tail_secs: f64,
    /// Tail over GPU phase when calibrated.
    pub tail_ratio: f64,
    /// Witnesses in use.
    pub witnesses: usize,
    /// VRAM-only lease per device held by each gpud-mode process for its CUDA context.
    pub context_lease_bytes: u64,
    /// The critical prover's interval, seconds.
    pub critical_every: f64,
    /// Where the provers of every stage but the G2 one got B_G2.
    #[serde(default)]
    pub g2: G2Mode,
}

/// Everything a run produced (`farm.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FarmResults {
    /// UTC date and time of the run.
    pub date: String,
    /// The build's commit.
    pub commit: String,
    /// The command line.
    pub command: String,
    /// Host and GPUs.
    pub host: HostInfo,
    /// Settings.
    pub config: RunConfig,
    /// The solo calibration run.
    pub calibration: Option<Calibration>,
    /// The mode × N matrix.
    pub cells: Vec<CellMetrics>,
    /// Normal provers saturating plus a critical prover, per lock.
    pub priority: Vec<CellMetrics>,
    /// Placement "any" on every GPU against one GPU.
    pub multi_gpu: Vec<CellMetrics>,
    /// Host admission: per-process bounds against gpud host leases, with and without a memory
    /// limit.
    #[serde(default)]
    pub host_cells: Vec<CellMetrics>,
    /// B_G2 placement: gpud provers with G2 on the GPU against G2 on the CPU (and any other
    /// [`G2Mode`] asked for), at each N.
    #[serde(default)]
    pub g2_cells: Vec<CellMetrics>,
    /// The benchmark's targets.
    pub targets: Vec<Target>,
    /// Seconds the whole run took.
    pub wall_secs: f64,
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

fn ms(x: f64) -> String {
    format!("{:.1}", 1000.0 * x)
}

impl FarmResults {
    /// One line per host cell with its key numbers (`HOST name=… per_min=… …`), for reading
    /// a run's output tail.
    pub fn host_lines(&self) -> Vec<String> {
        self.host_cells
            .iter()
            .filter_map(|c| {
                let h = c.host.as_ref()?;
                let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
                Some(format!(
                    "HOST {} limit={} host_leases={} per_min={:.1} proofs={} gpu_busy={:.1}% peak_rss_gib={:.2} cgroup_peak_gib={} oom_kills={} cgroup_oom_kill={} host_wait_p50_ms={:.1} failed={} no_report={}",
                    c.name,
                    h.limit_bytes
                        .map_or("none".to_owned(), |b| format!("{:.1}GiB", gib(b))),
                    h.host_leases,
                    c.normal.per_minute,
                    c.normal.proofs,
                    100.0 * c.gpu_busy,
                    gib(h.peak_rss_bytes),
                    h.cgroup_peak_bytes
                        .map_or("-".to_owned(), |b| format!("{:.2}", gib(b))),
                    h.killed,
                    h.cgroup_oom_kills.map_or("-".to_owned(), |k| k.to_string()),
                    1000.0 * h.host_wait.p50,
                    c.normal.failed,
                    c.startup_errors.len(),
                ))
            })
            .collect()
    }

    fn cell(&self, mode: &str, n: usize) -> Option<&CellMetrics> {
        self.cells.iter().find(|c| c.mode == mode && c.n == n)
    }

    /// Evaluates the benchmark's targets on what was measured (a target with nothing measured is
    /// left out).
    pub fn evaluate_targets(&mut self) {
        let mut t = Vec::new();
        let mut ns: Vec<usize> = self.cells.iter().map(|c| c.n).collect();
        ns.sort_unstable();
        ns.dedup();
        for &n in &ns {
            if let (Some(g), Some(i)) = (self.cell("gpud", n), self.cell("ideal", n)) {
                let r = if i.normal.per_minute > 0.0 {
                    g.normal.per_minute / i.normal.per_minute
                } else {
                    0.0
                };
                t.push(Target {
                    name: format!("gpud throughput vs the in-process ideal, N = {n}"),
                    measured: format!(
                        "{r:.3}× ({:.1} vs {:.1} partitions/min)",
                        g.normal.per_minute, i.normal.per_minute
                    ),
                    target: "≥ 0.97×".into(),
                    met: r >= 0.97,
                });
            }
        }
        for &n in ns.iter().filter(|&&n| n >= 2) {
            if let Some(g) = self.cell("gpud", n) {
                t.push(Target {
                    name: format!("GPU busy under gpud, N = {n}"),
                    measured: format!(
                        "{} of phases{}",
                        pct(g.gpu_busy),
                        g.nvml_util
                            .map_or(String::new(), |u| format!(", {} NVML", pct(u)))
                    ),
                    target: "≥ 95 %".into(),
                    met: g.gpu_busy >= 0.95,
                });
            }
        }
        let gpud_cells: Vec<&CellMetrics> = self
            .cells
            .iter()
            .chain(&self.priority)
            .chain(&self.multi_gpu)
            .chain(&self.g2_cells)
            .filter(|c| c.mode.starts_with("gpud"))
            .collect();
        if !gpud_cells.is_empty() {
            let classes = || {
                gpud_cells
                    .iter()
                    .flat_map(|c| std::iter::once(&c.normal).chain(c.critical.as_ref()))
            };
            let oom: usize = classes().map(|m| m.oom).sum();
            let failed: usize = classes().map(|m| m.failed).sum();
            let proofs: usize = classes().map(|m| m.proofs).sum();
            t.push(Target {
                name: "out-of-memory and failed proofs under gpud (every gpud cell)".into(),
                measured: format!("{oom} OOM, {failed} failed, {proofs} verified"),
                target: "0 and 0".into(),
                met: oom == 0 && failed == 0,
            });
        }
        for p in self.priority.iter().filter(|c| c.mode != "flock") {
            if let Some(c) = &p.critical {
                let phase = p.normal.phase.mean;
                t.push(Target {
                    name: format!(
                        "critical wait p99 under {} vs one GPU phase",
                        priority_label(&p.mode)
                    ),
                    measured: format!(
                        "p99 {} ms vs a {} ms phase ({} waits)",
                        ms(c.wait.p99),
                        ms(phase),
                        c.wait.n
                    ),
                    target: "p99 ≤ one GPU phase".into(),
                    met: c.wait.n > 0 && c.wait.p99 <= phase,
                });
            }
        }
        let mut multi_ns: Vec<usize> = self.multi_gpu.iter().map(|c| c.n).collect();
        multi_ns.dedup();
        for n in multi_ns {
            let find = |p: &str| self.multi_gpu.iter().find(|c| c.n == n && c.placement == p);
            if let (Some(any), Some(one)) = (find("any"), find("one")) {
                let r = if one.normal.per_minute > 0.0 {
                    any.normal.per_minute / one.normal.per_minute
                } else {
                    0.0
                };
                t.push(Target {
                    name: format!("{} GPUs (placement any) vs one, N = {n}", any.devices.len()),
                    measured: format!(
                        "{r:.2}× ({:.1} vs {:.1} partitions/min)",
                        any.normal.per_minute, one.normal.per_minute
                    ),
                    target: "≥ 1.9×".into(),
                    met: r >= 1.9,
                });
            }
        }
        self.targets = t;
    }

    /// The tables, in Markdown (what BENCHMARKS.md shows).
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let c = &self.config;
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        s += &format!(
            "{} {}@2^{} partitions, engine {}; {:.1} GiB left to the provers; a partition's \
             footprint {:.2} GiB (formula {:.2} + pad {:.2}); modeled CPU tail {:.0} ms; {} \
             witnesses; windows of {:.1} s (priority runs {:.1} s, a critical proof every {:.1} s).\n\n",
            if self.host.simulated {
                "Simulated device,"
            } else {
                "GPU run,"
            },
            c.circuit,
            c.log_size,
            c.engine,
            gib(c.card_bytes),
            gib(c.formula_bytes + c.pad_bytes),
            gib(c.formula_bytes),
            gib(c.pad_bytes),
            1000.0 * c.tail_secs,
            c.witnesses,
            c.duration,
            c.priority_duration,
            c.critical_every
        );
        if let Some(cal) = &self.calibration {
            s += &format!(
                "Calibration (one prover alone, no lock): GPU phase mean {} ms (p50 {} ms, {} \
                 phases){}{}.\n\n",
                ms(cal.phase.mean),
                ms(cal.phase.p50),
                cal.phase.n,
                cal.context_bytes.map_or(String::new(), |b| format!(
                    "; an idle prover process holds {:.0} MiB on the GPU",
                    b as f64 / (1 << 20) as f64
                )),
                cal.process_peak_bytes.map_or(String::new(), |b| format!(
                    ", {:.2} GiB at its peak",
                    gib(b)
                )),
            );
        }
        if !self.cells.is_empty() {
            s += "| mode | N | partitions/min | × ideal | proofs | GPU busy (phases) | phases overlapping | GPU busy (NVML) | OOM | failed | wait p50 ms | wait p99 ms | GPU phase ms |\n";
            s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
            for cell in &self.cells {
                let ideal = self
                    .cell("ideal", cell.n)
                    .map(|i| i.normal.per_minute)
                    .filter(|&p| p > 0.0);
                let m = &cell.normal;
                s += &format!(
                    "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} | {} |\n",
                    cell.mode,
                    cell.n,
                    m.per_minute,
                    ideal.map_or("–".into(), |i| format!("{:.3}", m.per_minute / i)),
                    m.proofs,
                    pct(cell.gpu_busy),
                    pct(cell.phase_overlap),
                    cell.nvml_util.map_or("–".into(), pct),
                    m.oom,
                    m.failed,
                    ms(m.wait.p50),
                    ms(m.wait.p99),
                    if m.wait.censored > 0 {
                        format!(" ({} open)", m.wait.censored)
                    } else {
                        String::new()
                    },
                    ms(m.phase.mean),
                );
            }
            s += "\n";
        }
        let split: Vec<(&CellMetrics, PhaseSecs)> = self
            .cells
            .iter()
            .filter_map(|c| Some((c, c.normal.phase_parts?)))
            .collect();
        if !split.is_empty() {
            s += "Where a GPU phase's time goes (normal provers, medians of the phases that \
                  succeeded, ms; `other` is the phase held minus the engine and the pad: \
                  allocation, synchronize and trim, the release):\n\n";
            s += "| mode | N | phase held | engine | H | MSMs | pad | other |\n";
            s += "|---|---|---|---|---|---|---|---|\n";
            for (cell, p) in split {
                s += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    cell.mode,
                    cell.n,
                    ms(cell.normal.phase.p50),
                    ms(p.engine),
                    ms(p.h),
                    ms(p.msms),
                    ms(p.pad),
                    ms((cell.normal.phase.p50 - p.engine - p.pad).max(0.0)),
                );
            }
            s += "\n";
        }
        if !self.priority.is_empty() {
            s += "| lock | critical proofs | critical wait p50 ms | p99 ms | max ms | normal GPU phase ms | p99 / phase | normal partitions/min | OOM | failed |\n";
            s += "|---|---|---|---|---|---|---|---|---|---|\n";
            for cell in &self.priority {
                let Some(c) = &cell.critical else { continue };
                let phase = cell.normal.phase.mean;
                s += &format!(
                    "| {} | {} | {} | {} | {}{} | {} | {} | {:.1} | {} | {} |\n",
                    priority_label(&cell.mode),
                    c.proofs,
                    ms(c.wait.p50),
                    ms(c.wait.p99),
                    ms(c.wait.max),
                    if c.wait.censored > 0 {
                        format!(" ({} open)", c.wait.censored)
                    } else {
                        String::new()
                    },
                    ms(phase),
                    if phase > 0.0 {
                        format!("{:.2}", c.wait.p99 / phase)
                    } else {
                        "–".into()
                    },
                    cell.normal.per_minute,
                    cell.normal.oom + c.oom,
                    cell.normal.failed + c.failed,
                );
            }
            s += "\n";
        }
        let warm: Vec<(&CellMetrics, &WarmMetrics)> = self
            .cells
            .iter()
            .chain(&self.priority)
            .filter_map(|c| Some((c, c.warm.as_ref()?)))
            .collect();
        if !warm.is_empty() {
            s += "Warm state (each prover's bases resident in an evictable lease; loads count \
                  the first upload before the window; a reclaim answer is from the notice to \
                  the release):\n\n";
            s += "| cell | warm lease MiB | loads | upload ms | evictions | answer p50 ms | answer max ms | warm phases | cold phases | retried leases |\n";
            s += "|---|---|---|---|---|---|---|---|---|---|\n";
            for (cell, w) in warm {
                s += &format!(
                    "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    cell.name,
                    w.vram_bytes as f64 / (1 << 20) as f64,
                    w.loads,
                    ms(w.load_mean),
                    w.evictions,
                    if w.reclaim_answer.n > 0 {
                        ms(w.reclaim_answer.p50)
                    } else {
                        "–".into()
                    },
                    if w.reclaim_answer.n > 0 {
                        ms(w.reclaim_answer.max)
                    } else {
                        "–".into()
                    },
                    w.warm_phases,
                    w.cold_phases,
                    w.phase_retries,
                );
            }
            s += "\n";
        }
        if !self.multi_gpu.is_empty() {
            s += "| placement | GPUs | N | partitions/min | × one GPU | GPU busy per GPU (phases) | OOM | failed |\n";
            s += "|---|---|---|---|---|---|---|---|\n";
            for cell in &self.multi_gpu {
                let one = self
                    .multi_gpu
                    .iter()
                    .find(|c| c.n == cell.n && c.placement == "one")
                    .map(|c| c.normal.per_minute)
                    .filter(|&p| p > 0.0);
                let busy: Vec<String> = cell.devices.iter().map(|d| pct(d.phase_busy)).collect();
                s += &format!(
                    "| {} | {} | {} | {:.1} | {} | {} | {} | {} |\n",
                    cell.placement,
                    cell.devices.iter().filter(|d| d.phases > 0).count(),
                    cell.n,
                    cell.normal.per_minute,
                    one.map_or("–".into(), |o| format!(
                        "{:.2}",
                        cell.normal.per_minute / o
                    )),
                    busy.join(" / "),
                    cell.normal.oom,
                    cell.normal.failed,
                );
            }
            s += "\n";
        }
        if !self.targets.is_empty() {
            s += "| target | measured | wanted | met |\n|---|---|---|---|\n";
            for t in &self.targets {
                s += &format!(
                    "| {} | {} | {} | {} |\n",
                    t.name,
                    t.measured,
                    t.target,
                    if t.met { "yes" } else { "**no**" }
                );
            }
            s += "\n";
        }
        if !self.host_cells.is_empty() {
            s += "Host admission (every partition synthesized anew; per-process bounds against \
                  gpud host leases):\n\n";
            s += "| cell | memory limit | host leases | provers × lanes | partition GiB | partitions/min | proofs | GPU busy (phases) | peak RSS GiB (sum) | cgroup peak GiB | OOM kills (SIGKILL) | cgroup oom_kill | host wait p50 ms | host wait p99 ms | synthesis ms | failed |\n";
            s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
            for c in &self.host_cells {
                let Some(h) = &c.host else { continue };
                s += &format!(
                    "| {} | {} | {} | {} × {} | {:.2} | {:.1} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} |\n",
                    c.name,
                    h.limit_bytes
                        .map_or("none".to_owned(), |b| format!("{:.1} GiB", gib(b))),
                    if h.host_leases { "yes" } else { "no" },
                    c.n,
                    h.lanes,
                    gib(h.partition_bytes),
                    c.normal.per_minute,
                    c.normal.proofs,
                    pct(c.gpu_busy),
                    gib(h.peak_rss_bytes),
                    h.cgroup_peak_bytes
                        .map_or("–".to_owned(), |b| format!("{:.2}", gib(b))),
                    h.killed,
                    h.cgroup_oom_kills.map_or("–".to_owned(), |k| k.to_string()),
                    ms(h.host_wait.p50),
                    ms(h.host_wait.p99),
                    ms(h.synthesis.mean),
                    c.normal.failed,
                );
            }
            s += "\n";
        }
        if !self.g2_cells.is_empty() {
            s += &self.g2_markdown();
        }
        let errors: Vec<String> = self
            .cells
            .iter()
            .chain(&self.priority)
            .chain(&self.multi_gpu)
            .chain(&self.host_cells)
            .chain(&self.g2_cells)
            .flat_map(|c| {
                c.startup_errors
                    .iter()
                    .map(move |e| format!("- {}: {e}", c.name))
            })
            .collect();
        if !errors.is_empty() {
            s += "Processes without a report (did not start, or died):\n";
            s += &errors.join("\n");
            s += "\n";
        }
        s
    }
}

impl FarmResults {
    /// The B_G2 placement table: throughput, GPU and CPU utilisation per G2 mode and N.
    fn g2_markdown(&self) -> String {
        let mut s = String::from(
            "B_G2 placement (gpud, one compute slot; partitions/min (lanes) is the lanes' \
             back-to-back rate, k/T the proofs over the window; host CPU busy is all cores \
             from /proc/stat, provers' cores their own CPU seconds over the window; B_G2 ms \
             is the MSM's mean, in the phase or in the tail):\n\n",
        );
        s += "| G2 | N | partitions/min (lanes) | × G2 on the GPU | proofs | k/T per min | GPU busy (phases) | GPU busy (NVML) | host CPU busy | busy cores | provers' cores | B_G2 ms | GPU phase ms | CPU tail ms | OOM | failed |\n";
        s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in &self.g2_cells {
            let m = &c.normal;
            let gpu = self
                .g2_cells
                .iter()
                .find(|g| g.g2 == G2Mode::Gpu && g.n == c.n)
                .map(|g| g.normal.per_minute_lanes)
                .filter(|&p| p > 0.0);
            let host = c.cpu.and_then(|u| u.host);
            s += &format!(
                "| {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                c.g2.name(),
                c.n,
                m.per_minute_lanes,
                gpu.map_or("–".into(), |g| format!("{:.2}", m.per_minute_lanes / g)),
                m.proofs,
                m.per_minute_window,
                pct(c.gpu_busy),
                c.nvml_util.map_or("–".into(), pct),
                host.map_or("–".into(), |h| pct(h.busy)),
                host.map_or("–".into(), |h| format!(
                    "{:.1} of {}",
                    h.busy_cores(),
                    h.cores
                )),
                c.cpu
                    .map_or("–".into(), |u| format!("{:.1}", u.provers_cores)),
                if m.g2.n > 0 {
                    ms(m.g2.mean)
                } else {
                    "–".into()
                },
                ms(m.phase.mean),
                ms(m.tail.mean),
                m.oom,
                m.failed,
            );
        }
        s + "\n"
    }

    /// One line per G2 cell (`G2 name=… per_min=… cpu_busy=… …`), for reading a run's tail.
    pub fn g2_lines(&self) -> Vec<String> {
        self.g2_cells
            .iter()
            .map(|c| {
                let host = c.cpu.and_then(|u| u.host);
                format!(
                    "G2 {} g2={} n={} per_min_lanes={:.2} proofs={} gpu_busy={:.1}% cpu_busy={} provers_cores={:.2} g2_ms={:.1} phase_ms={:.1} tail_ms={:.1} oom={} failed={} no_report={}",
                    c.name,
                    c.g2.name(),
                    c.n,
                    c.normal.per_minute_lanes,
                    c.normal.proofs,
                    100.0 * c.gpu_busy,
                    host.map_or("-".into(), |h| format!("{:.1}%", 100.0 * h.busy)),
                    c.cpu.map_or(0.0, |u| u.provers_cores),
                    1000.0 * c.normal.g2.mean,
                    1000.0 * c.normal.phase.mean,
                    1000.0 * c.normal.tail.mean,
                    c.normal.oom,
                    c.normal.failed,
                    c.startup_errors.len(),
                )
            })
            .collect()
    }
}

/// How the priority runs' modes are named in the tables.
fn priority_label(mode: &str) -> &str {
    match mode {
        "gpudc" => "gpud, critical slot",
        "gpud-warm" => "gpud, warm bases",
        "gpudc-warm" => "gpud, critical slot, warm bases",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::farm::LockKind;
    use crate::farm::worker::{OpenAttempt, Record};

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v[..10], 99.0), 10.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        let d = Dist::of(vec![3.0, 1.0, 2.0, f64::NAN], 1);
        assert_eq!(
            (d.n, d.p50, d.max, d.mean, d.censored),
            (3, 2.0, 3.0, 2.0, 1)
        );
    }

    #[test]
    fn union_merges_overlaps_and_clips() {
        assert_eq!(
            union_length(vec![(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)], 10.0),
            3.0
        );
        assert_eq!(union_length(vec![(-1.0, 1.0), (9.0, 12.0)], 10.0), 2.0);
        assert_eq!(union_length(vec![(2.0, 1.0)], 10.0), 0.0);
        assert_eq!(
            union_length(vec![(0.0, 5.0), (1.0, 2.0), (4.0, 6.0)], 10.0),
            6.0
        );
    }

    #[test]
    fn overlap_counts_only_time_with_two_or_more_phases() {
        // A handoff (one ends as the next starts) is no overlap.
        assert_eq!(overlap_length(&[(0.0, 1.0), (1.0, 2.0)], 10.0), 0.0);
        assert_eq!(overlap_length(&[(0.0, 2.0), (1.0, 3.0)], 10.0), 1.0);
        // Three deep counts once; clipped to the window.
        assert_eq!(
            overlap_length(&[(0.0, 4.0), (1.0, 3.0), (2.0, 5.0)], 10.0),
            3.0
        );
        assert_eq!(overlap_length(&[(-2.0, 1.0), (-1.0, 12.0)], 10.0), 1.0);
        assert_eq!(overlap_length(&[(9.0, 12.0), (9.5, 11.0)], 10.0), 0.5);
        assert_eq!(overlap_length(&[], 10.0), 0.0);
    }

    #[test]
    fn phase_parts_are_medians_part_by_part() {
        let p = |x: f64| PhaseSecs {
            pad: x,
            h: 2.0 * x,
            msms: 3.0 * x,
            msm_b_g2: 0.5 * x,
            finish: 5.0 * x,
            engine: 10.0 * x,
        };
        assert_eq!(median_parts(&[]), None);
        let m = median_parts(&[p(3.0), p(1.0), p(2.0)]).unwrap();
        assert_eq!(m, p(2.0));
        // Each part on its own: the medians need not come from one phase.
        let mut odd = p(1.0);
        odd.h = 100.0;
        let m = median_parts(&[odd, p(2.0), p(3.0)]).unwrap();
        assert_eq!((m.pad, m.h, m.engine), (2.0, 6.0, 20.0));
    }

    fn rec(lane: usize, req: f64, g: f64, rel: f64, tail: f64, outcome: Outcome) -> Record {
        Record {
            lane,
            iteration: 0,
            witness: 0,
            requested: req,
            granted: Some(g),
            released: Some(rel),
            tail_end: (outcome == Outcome::Ok).then_some(tail),
            outcome,
            error: None,
            device: Some("GPU-a".into()),
            lease_id: Some(1),
            phase: None,
            warm: None,
            host_requested: None,
            synth_start: None,
            synth_end: None,
            host_bytes: 0,
            synthesis_cpus: Vec::new(),
            g2_secs: None,
        }
    }

    fn report(records: Vec<Record>, open: Vec<OpenAttempt>) -> WorkerReport {
        WorkerReport {
            pid: 1,
            lock: LockKind::Gpud,
            class: "normal".into(),
            lanes: 1,
            engine: "cpu".into(),
            circuit: "synthetic".into(),
            log_size: 10,
            formula_bytes: 1,
            pad_bytes: 0,
            lease_bytes: 1,
            context_lease_bytes: 0,
            tail_secs: 0.1,
            setup_secs: 0.1,
            pinned: None,
            window_secs: 10.0,
            records,
            open,
            warm: None,
            g2: G2Mode::Precomputed,
            cpu_secs: None,
        }
    }

    #[test]
    fn cell_metrics_count_inside_the_window() {
        let a = report(
            vec![
                rec(0, 0.0, 0.0, 2.0, 2.5, Outcome::Ok),
                rec(0, 2.0, 4.0, 6.0, 6.5, Outcome::Ok),
                rec(0, 6.5, 6.5, 7.0, 7.0, Outcome::Oom),
                // Its tail ended after the window: no proof.
                rec(0, 7.0, 8.0, 9.5, 10.5, Outcome::Ok),
            ],
            vec![],
        );
        let b = report(
            vec![rec(0, 0.0, 2.0, 4.0, 4.4, Outcome::Ok)],
            vec![
                // Still waiting at the end since 5.0: a censored 5-s wait.
                OpenAttempt {
                    lane: 0,
                    requested: 5.0,
                    granted: None,
                    released: None,
                    device: None,
                },
            ],
        );
        let c = report(
            vec![],
            vec![OpenAttempt {
                lane: 0,
                requested: 9.0,
                granted: Some(9.5),
                released: None,
                device: Some("GPU-a".into()),
            }],
        );
        let spec = CellSpec {
            name: "gpud-n3".into(),
            mode: "gpud".into(),
            n: 3,
            placement: "any".into(),
            devices: vec!["GPU-a".into()],
            g2: G2Mode::Precomputed,
        };
        let samples = vec![
            NvmlSample {
                t: 1.0,
                uuid: "GPU-a".into(),
                util: 80,
                mem_used: 5,
            },
            NvmlSample {
                t: 2.0,
                uuid: "GPU-a".into(),
                util: 100,
                mem_used: 9,
            },
            NvmlSample {
                t: 11.0,
                uuid: "GPU-a".into(),
                util: 0,
                mem_used: 1,
            },
        ];
        let procs = vec![
            ProcessOutcome {
                critical: false,
                report: Ok(a),
            },
            ProcessOutcome {
                critical: false,
                report: Ok(b),
            },
            ProcessOutcome {
                critical: false,
                report: Ok(c),
            },
            ProcessOutcome {
                critical: false,
                report: Err("CUDA out of memory at start".into()),
            },
        ];
        let m = cell_metrics(&spec, 10.0, &procs, &samples);
        assert_eq!(m.normal.proofs, 3);
        assert_eq!(m.normal.per_minute_window, 18.0);
        // Completions at 2.5, 4.4 and 6.5: two intervals in 4 s.
        assert!(
            (m.normal.per_minute - 30.0).abs() < 1e-9,
            "{}",
            m.normal.per_minute
        );
        assert_eq!(m.normal.oom, 1);
        assert_eq!(m.normal.failed, 2); // the OOM and the process that did not start
        assert_eq!(m.normal.processes, 4);
        // Phases: [0,2] [4,6] [6.5,7] [8,9.5] [2,4] and the open [9.5,10]: 8.5 s of 10.
        assert!((m.gpu_busy - 0.85).abs() < 1e-9, "{}", m.gpu_busy);
        assert_eq!(m.nvml_util, Some(0.9));
        assert_eq!(m.devices[0].nvml_mem_max, Some(9));
        // Waits: 0, 2, 0, 1, 2, 0.5 and the censored 5.
        assert_eq!(m.normal.wait.n, 7);
        assert_eq!(m.normal.wait.censored, 1);
        assert_eq!(m.normal.wait.max, 5.0);
        assert_eq!(m.startup_errors.len(), 1);

        let mut results = FarmResults {
            cells: vec![m.clone(), {
                let mut i = m.clone();
                i.mode = "ideal".into();
                i.normal.per_minute = 30.0 / 0.98;
                i
            }],
            ..Default::default()
        };
        results.evaluate_targets();
        let names: Vec<&str> = results.targets.iter().map(|t| t.name.as_str()).collect();
        assert!(names[0].starts_with("gpud throughput"), "{names:?}");
        assert!(results.targets[0].met);
        assert!(!results.targets[1].met); // 85 % busy
        assert!(!results.targets[2].met); // an OOM under gpud
        let md = results.markdown();
        assert!(
            md.contains("| gpud | 3 | 30.0 | 0.980 | 3 | 85.0 % | 0.0 % | 90.0 % | 1 | 2 |"),
            "{md}"
        );
        assert!(md.contains("(1 open)"), "{md}");
        assert!(md.contains("Processes without a report"), "{md}");
    }

    #[test]
    fn lane_rates_cpu_and_the_g2_table() {
        // Two provers whose long tails end together: lane 0 makes proofs at 6.0 and 12.0 (first
        // request at 0), lane 1 one proof at 6.2 (first request at 0.2).
        let mut a = report(
            vec![
                rec(0, 0.0, 0.0, 1.0, 6.0, Outcome::Ok),
                rec(0, 6.0, 6.0, 7.0, 12.0, Outcome::Ok),
            ],
            vec![],
        );
        a.records[0].g2_secs = Some(4.0);
        a.records[1].g2_secs = Some(5.0);
        a.cpu_secs = Some(30.0);
        a.g2 = G2Mode::Cpu;
        let mut b = report(vec![rec(0, 0.2, 1.0, 2.0, 6.2, Outcome::Ok)], vec![]);
        b.records[0].g2_secs = Some(4.2);
        b.cpu_secs = Some(10.0);
        let spec = CellSpec {
            name: "g2-cpu-n2".into(),
            mode: "gpud".into(),
            n: 2,
            placement: "one".into(),
            devices: vec!["GPU-a".into()],
            g2: G2Mode::Cpu,
        };
        let procs: Vec<ProcessOutcome> = [a, b]
            .into_iter()
            .map(|r| ProcessOutcome {
                critical: false,
                report: Ok(r),
            })
            .collect();
        let mut m = cell_metrics(&spec, 20.0, &procs, &[]);
        // 2 proofs in 12 s and 1 in 6 s: 10 + 10 per minute.
        assert!((m.normal.per_minute_lanes - 20.0).abs() < 1e-9, "{m:?}");
        // The steady rate over the completions 6.0, 6.2, 12.0 is 20/min here, k/T 9/min.
        assert!((m.normal.per_minute_window - 9.0).abs() < 1e-9);
        assert_eq!(m.g2, G2Mode::Cpu);
        assert_eq!(m.normal.g2.n, 3);
        assert!((m.normal.g2.mean - 13.2 / 3.0).abs() < 1e-9);
        // Tails: 5, 5 and 4.2 s; phases [0, 1], [6, 7], [1, 2]: 3 s of 20 busy.
        assert!((m.normal.tail.mean - 14.2 / 3.0).abs() < 1e-9);
        let cpu = m.cpu.expect("cpu metrics");
        assert_eq!((cpu.provers_secs, cpu.provers_cores), (40.0, 2.0));
        m.cpu = Some(CpuMetrics {
            host: Some(HostCpu {
                busy: 0.75,
                cores: 16,
            }),
            ..cpu
        });
        let mut gpu = m.clone();
        gpu.name = "g2-gpu-n2".into();
        gpu.g2 = G2Mode::Gpu;
        gpu.normal.per_minute_lanes = 80.0;
        let mut results = FarmResults {
            g2_cells: vec![gpu, m],
            ..Default::default()
        };
        results.evaluate_targets();
        let md = results.markdown();
        assert!(md.contains("| G2 | N | partitions/min (lanes) |"), "{md}");
        assert!(
            md.contains("| cpu | 2 | 20.0 | 0.25 | 3 | 9.0 | 15.0 % | – | 75.0 % | 12.0 of 16 | 2.0 | 4400.0 | 1000.0 | 4733.3 | 0 | 0 |"),
            "{md}"
        );
        assert!(md.contains("| gpu | 2 | 80.0 | 1.00 |"), "{md}");
        let lines = results.g2_lines();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("G2 g2-cpu-n2 g2=cpu n=2 per_min_lanes=20.00"));
        assert!(lines[1].contains("cpu_busy=75.0%"), "{}", lines[1]);
        // The G2 cells are gpud cells: their failures count against the target.
        assert!(
            results
                .targets
                .iter()
                .any(|t| t.name.starts_with("out-of-memory and failed") && t.met)
        );
    }
}
