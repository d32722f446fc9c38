//! The partition pipeline: synthesis → lease → GPU phase → release → CPU tail.
//!
//! A run proves `proofs × partitions` circuit instances (one Groth16 proof per partition, as a
//! Filecoin C2 proof is ten partition proofs). Three kinds of thread overlap:
//!
//! ```text
//! synthesis workers (bounded) ──▶ GPU-phase thread ──▶ CPU-tail thread
//!                                  acquire {vram, compute}
//!                                  H + G1 MSMs
//!                                  release
//! ```
//!
//! The GPU-phase thread holds a lease only around the GPU phase, so partition `i`'s CPU tail
//! (G2 MSM, assembly, verification) runs while partition `i+1` holds the device: the "single
//! lock" design that kept a SupraSeal C2 GPU 85–91 % busy. Leases come through the
//! [`Leaser`] seam (see [`crate::lease`]).
//!
//! An engine that keeps the proving key's bases on the device ([`Engine::resident_bytes`] > 0)
//! gets one more, long-lived lease: VRAM only, acquired before the first partition and held
//! for the whole run; every partition lease then asks for that device and only the working
//! memory ([`crate::vram`]). At the end the resident memory is trimmed and checked under a
//! short compute lease of that device, and the resident lease is released.
//!
//! **Host leases** ([`HostLeasing`], docs/HOST.md): with them on, gpud admits the host work
//! too. The run first leases the process's resident footprint (its memory now, at least the
//! proving key's bases, plus the page-locked memory the engine keeps: [`Engine::host_pinned`])
//! for its whole length. Each partition then leases, before it is synthesized, the host memory
//! it will hold ([`crate::host::estimate`]: its assignment and the scratch of its phase or
//! tail), kept until its CPU tail is done; and a CPU for the synthesis alone, on which the
//! synthesis worker's thread is pinned ([`crate::affinity`]). The CPU tail leases its CPUs
//! (one, or all the process may use when it computes the G2 MSM) around its work. So
//! `synthesis_workers` is a cap, the number of partitions this process may synthesize at once,
//! and gpud decides how many of all processes' partitions are admitted. Memory is always asked
//! before CPUs and no one waits while holding CPUs, so the leases cannot deadlock; the GPU
//! phase asks for nothing on the host (its page-locked staging is in the resident lease), so a
//! phase never waits for memory that partitions queued for the GPU hold. Off, the pipeline is
//! what it was: per-process bounds only.
//!
//! A yield notice (gpud asks a compute holder to make way for a critical request) is acted on
//! at the engine's next safe point inside the phase ([`Engine::gpu_phase_with_safe_points`]):
//! the lease is released there and the same request asked for again; the phase goes on once it
//! is granted. An engine without safe points gives the lease back when its phase ends, as it
//! always does.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use blstrs::Scalar;
use ff::Field;
use gpud_client::{LeaseId, Reservation};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::Serialize;

use crate::affinity;
use crate::circuits::CircuitSpec;
use crate::engine::{Engine, PhaseLease, PhaseTimings};
use crate::error::{ProverError, Result};
use crate::host::{self, HostEstimate};
use crate::lease::{HostNeeds, LeaseRequest, Leaser};
use crate::params::ProvingKey;
use crate::prove::{self, GpuPhaseOutput, Synthesized};
use crate::synthesis::SynthesisOptions;
use crate::warm::{Warm, WarmOptions, WarmReport};

/// What to prove.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Circuit and size.
    pub spec: CircuitSpec,
    /// Partitions per proof.
    pub partitions: usize,
    /// Proofs.
    pub proofs: usize,
    /// Concurrent synthesis workers (synthesized partitions waiting for the GPU are bounded
    /// by the same number, which bounds memory).
    pub synthesis_workers: usize,
    /// Lease class.
    pub class: String,
    /// Witness seeds are `seed + job index`; blinding comes from a generator seeded by it too.
    pub seed: u64,
    /// Label for the leases.
    pub label: String,
    /// Each GPU phase's lease reserves at least this much VRAM (0: what the engine needs). A
    /// run of the CPU engine on simulated devices uses it to lease as a larger partition on a
    /// GPU would.
    pub min_phase_vram: u64,
    /// How resident bases (an engine that keeps them) are kept: warm state gpud may reclaim.
    pub warm: WarmOptions,
    /// Whether (and how) the host work is leased from gpud too.
    pub host: HostLeasing,
}

/// Host leases of a run (see the module docs). The default is off: per-process bounds only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostLeasing {
    /// Lease host memory and CPUs for synthesis and the CPU tail, and the process's resident
    /// footprint for the run.
    pub enabled: bool,
    /// CPUs of each CPU tail's lease; 0: one when the engine computes G2 in the phase, else as
    /// many as this process may run on (blst's G2 MSM uses them all).
    pub tail_cpus: u32,
}

impl HostLeasing {
    /// Host leases on, tail CPUs chosen by the engine.
    pub fn on() -> Self {
        Self {
            enabled: true,
            tail_cpus: 0,
        }
    }
}

/// One yield of a partition's lease: gpud asked for the compute slot back, the phase gave the
/// lease back at a safe point and went on once it had it again. Times as in
/// [`PartitionRecord`].
#[derive(Debug, Clone, Serialize)]
pub struct YieldRecord {
    /// The step after which the lease went back (e.g. `"H MSM"`).
    pub after: String,
    /// The yield notice arrived.
    pub noticed: f64,
    /// The lease was released.
    pub released: f64,
    /// The same request was granted again.
    pub regranted: f64,
    /// `noticed` as Unix nanoseconds.
    pub noticed_unix: u128,
    /// `released` as Unix nanoseconds.
    pub released_unix: u128,
    /// `regranted` as Unix nanoseconds.
    pub regranted_unix: u128,
    /// The lease the phase went on under.
    pub lease_id: LeaseId,
}

/// Timestamps and facts of one partition. Times are seconds since the run started;
/// `*_unix` fields are absolute (nanoseconds since the epoch), for comparing processes.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionRecord {
    /// Proof index.
    pub proof: usize,
    /// Partition index within the proof.
    pub partition: usize,
    /// Constraints (with input constraints).
    pub constraints: usize,
    /// Synthesis start.
    pub synth_start: f64,
    /// Synthesis end.
    pub synth_end: f64,
    /// Lease asked for.
    pub lease_requested: f64,
    /// Lease granted.
    pub lease_granted: f64,
    /// Lease released (GPU phase done).
    pub lease_released: f64,
    /// CPU tail start.
    pub tail_start: f64,
    /// CPU tail end (proof assembled and verified).
    pub tail_end: f64,
    /// `lease_granted` as Unix nanoseconds.
    pub lease_granted_unix: u128,
    /// `lease_released` as Unix nanoseconds.
    pub lease_released_unix: u128,
    /// `tail_start` as Unix nanoseconds.
    pub tail_start_unix: u128,
    /// `tail_end` as Unix nanoseconds.
    pub tail_end_unix: u128,
    /// The lease's id.
    pub lease_id: LeaseId,
    /// The device it was on.
    pub device_uuid: String,
    /// Whether bellperson's verifier accepted the proof.
    pub verified: bool,
    /// The engine's split of the GPU phase.
    pub stages: PhaseTimings,
    /// Times the lease was given back inside the phase (yield notices), in order.
    pub yields: Vec<YieldRecord>,
    /// The partition's host leases were asked for (its memory, then a CPU for synthesis);
    /// `synth_start` without host leases.
    pub host_requested: f64,
    /// Host memory the partition leased, from synthesis to the end of its tail (0: none).
    pub host_bytes: u64,
    /// The CPUs its synthesis ran on (granted; empty without a daemon or host leases).
    pub synthesis_cpus: Vec<u32>,
    /// The CPU tail's CPUs were asked for (`tail_start` is their grant).
    pub tail_requested: f64,
    /// The CPUs the tail ran on.
    pub tail_cpus: Vec<u32>,
}

impl PartitionRecord {
    /// Seconds synthesis waited for its host leases.
    pub fn host_wait(&self) -> f64 {
        self.synth_start - self.host_requested
    }
    /// Seconds spent synthesizing.
    pub fn synthesis(&self) -> f64 {
        self.synth_end - self.synth_start
    }
    /// Seconds waiting for the lease.
    pub fn lease_wait(&self) -> f64 {
        self.lease_granted - self.lease_requested
    }
    /// Seconds of GPU phase (lease held: without the time it was given back by yields).
    pub fn gpu_phase(&self) -> f64 {
        self.lease_released - self.lease_granted - self.yielded()
    }
    /// Seconds inside the phase without the lease, from each yield's release to its new grant.
    pub fn yielded(&self) -> f64 {
        self.yields.iter().map(|y| y.regranted - y.released).sum()
    }
    /// Seconds of CPU tail.
    pub fn cpu_tail(&self) -> f64 {
        self.tail_end - self.tail_start
    }
}

/// Sum, mean and max of one stage over the partitions.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StageStats {
    /// Total seconds.
    pub total: f64,
    /// Mean seconds per partition.
    pub mean: f64,
    /// Longest partition, seconds.
    pub max: f64,
}

impl StageStats {
    fn of(values: impl Iterator<Item = f64>) -> Self {
        let (mut total, mut max, mut n) = (0.0, 0.0f64, 0usize);
        for v in values {
            total += v;
            max = max.max(v);
            n += 1;
        }
        Self {
            total,
            mean: if n == 0 { 0.0 } else { total / n as f64 },
            max,
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    /// Circuit name.
    pub circuit: String,
    /// log2 of the domain.
    pub log_size: u32,
    /// Proofs asked for.
    pub proofs: usize,
    /// Partitions per proof.
    pub partitions: usize,
    /// Engine that ran the GPU phase.
    pub engine: String,
    /// VRAM each partition's lease reserved.
    pub vram_bytes: u64,
    /// VRAM of the long-lived lease holding the resident bases (0: none).
    pub resident_vram_bytes: u64,
    /// What the resident bases went through (loads, evictions, cold phases); `None` for an
    /// engine that keeps nothing resident.
    pub resident: Option<WarmReport>,
    /// Wall-clock seconds of the run.
    pub wall: f64,
    /// Synthesis per partition.
    pub synthesis: StageStats,
    /// Lease wait per partition.
    pub lease_wait: StageStats,
    /// GPU phase per partition.
    pub gpu_phase: StageStats,
    /// CPU tail per partition.
    pub cpu_tail: StageStats,
    /// Whether host leases were on.
    pub host_leases: bool,
    /// The host memory estimate the leases were sized by (with host leases).
    pub host: Option<HostEstimate>,
    /// Bytes of host memory (and of it page-locked) the process's resident lease held.
    pub host_resident: (u64, u64),
    /// Wait for the host leases before synthesis, per partition.
    pub host_wait: StageStats,
    /// Fraction of the wall time some partition of this run held the lease.
    pub gpu_occupancy: f64,
    /// Every partition proof verified.
    pub all_verified: bool,
    /// Per-partition detail, in completion order.
    pub partitions_detail: Vec<PartitionRecord>,
}

#[derive(Clone, Copy)]
struct Clock {
    start: Instant,
    start_unix: u128,
}

impl Clock {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            start_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        }
    }
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
    fn unix(&self, t: f64) -> u128 {
        self.start_unix + (t * 1e9) as u128
    }
}

/// A partition's host side: its memory lease (held until the tail is done) and what its
/// synthesis was given.
struct HostPart<H> {
    /// The memory lease; none without host leases.
    lease: Option<H>,
    bytes: u64,
    requested: f64,
    cpus: Vec<u32>,
}

struct SynthDone<H> {
    job: usize,
    syn: Synthesized,
    start: f64,
    end: f64,
    host: HostPart<H>,
}

struct GpuDone<H> {
    job: usize,
    out: GpuPhaseOutput,
    constraints: usize,
    synth: (f64, f64),
    lease: (f64, f64, f64),
    lease_id: LeaseId,
    device_uuid: String,
    yields: Vec<YieldRecord>,
    host: HostPart<H>,
}

/// What the host leases of a run ask for.
#[derive(Debug, Clone, Copy)]
struct HostPlan {
    estimate: HostEstimate,
    /// The process's resident footprint.
    resident: HostNeeds,
    /// CPUs of a tail's lease.
    tail_cpus: u32,
}

impl HostPlan {
    fn new<E: Engine>(engine: &E, key: &ProvingKey, cfg: &PipelineConfig) -> Self {
        let shape = key.shape();
        let log_domain = (shape.h + 1).next_power_of_two().trailing_zeros();
        let g2_in_tail = engine.g2_in_tail(key);
        let estimate = host::estimate(
            &shape,
            key.vk().ic.len(),
            log_domain,
            g2_in_tail,
            engine.needs_c(),
        );
        // What the process holds now (the key, the engine's context, code) or at least the
        // key, and the staging buffers that phases will lock on top.
        let resident = host::resident_needs(estimate.key, engine.host_pinned(key));
        let tail_cpus = match cfg.host.tail_cpus {
            0 if g2_in_tail => std::thread::available_parallelism()
                .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
            0 => 1,
            n => n,
        };
        Self {
            estimate,
            resident,
            tail_cpus,
        }
    }
}

/// A partition's lease during its GPU phase: at the engine's safe points it is given back when
/// gpud asked for it, and the same request is asked for again on the same device.
struct YieldingLease<'a, L: Leaser> {
    leaser: &'a L,
    request: LeaseRequest,
    /// `None` only between a release at a safe point and the new grant.
    lease: Option<L::Lease>,
    clock: Clock,
    /// When the first notice about the current lease arrived: nanoseconds since the clock's
    /// start, plus one (0: none yet).
    noticed: Arc<AtomicU64>,
    yields: Vec<YieldRecord>,
}

impl<'a, L: Leaser> YieldingLease<'a, L> {
    fn new(leaser: &'a L, request: LeaseRequest, lease: L::Lease, clock: Clock) -> Self {
        let mut held = Self {
            leaser,
            request,
            lease: None,
            clock,
            noticed: Arc::default(),
            yields: Vec::new(),
        };
        held.hold(lease);
        held
    }

    /// Holds `lease` and notes when its first notice arrives.
    fn hold(&mut self, lease: L::Lease) {
        let noticed = Arc::new(AtomicU64::new(0));
        let (seen, start) = (noticed.clone(), self.clock.start);
        self.leaser.on_notice(
            &lease,
            Box::new(move || {
                let at = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                let _ = seen.compare_exchange(
                    0,
                    at.saturating_add(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }),
        );
        self.noticed = noticed;
        self.lease = Some(lease);
    }

    fn current(&self) -> Option<&L::Lease> {
        self.lease.as_ref()
    }
}

impl<L: Leaser> PhaseLease for YieldingLease<'_, L> {
    fn reservation(&self) -> &dyn Reservation {
        // `safe_point` puts a lease back before it returns Ok, and the engine stops at its Err.
        self.lease
            .as_ref()
            .expect("a partition's lease is held between safe points")
    }

    fn safe_point(&mut self, after: &'static str) -> Result<()> {
        let Some(lease) = self.lease.as_ref() else {
            return Err(ProverError::Lease("the phase's lease is not held".into()));
        };
        if self.leaser.lost(lease) {
            return Err(ProverError::Lease(format!(
                "lease {} was revoked during the GPU phase",
                lease.lease_id()
            )));
        }
        if !self.leaser.yield_requested(lease) {
            return Ok(());
        }
        let released = self.clock.now();
        let noticed = match self.noticed.load(Ordering::Acquire) {
            0 => released,
            at => (at - 1) as f64 / 1e9,
        };
        // Back on the same device: the engine may go on with what it has there.
        self.request.device = Some(lease.device_uuid().to_owned());
        self.lease = None;
        let lease = self.leaser.acquire(&self.request)?;
        let regranted = self.clock.now();
        let c = self.clock;
        self.yields.push(YieldRecord {
            after: after.to_owned(),
            noticed,
            released,
            regranted,
            noticed_unix: c.unix(noticed),
            released_unix: c.unix(released),
            regranted_unix: c.unix(regranted),
            lease_id: lease.lease_id(),
        });
        self.hold(lease);
        Ok(())
    }
}

/// What every thread of one run shares.
struct Run<'a> {
    key: &'a ProvingKey,
    cfg: &'a PipelineConfig,
    /// Whether synthesis keeps the C evaluations: only for an engine that reads them.
    keep_c: bool,
    host: Option<HostPlan>,
    clock: Clock,
    jobs: usize,
    next_job: AtomicUsize,
    stop: AtomicBool,
    first_error: Mutex<Option<ProverError>>,
}

impl Run<'_> {
    /// Records the first error and tells every thread to stop.
    fn fail(&self, e: ProverError) {
        self.stop.store(true, Ordering::Relaxed);
        let mut slot = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(e);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Runs the pipeline; `progress` is called as each partition's proof is verified.
pub fn run<E: Engine, L: Leaser + Sync>(
    engine: &E,
    leaser: &L,
    key: &ProvingKey,
    cfg: &PipelineConfig,
    progress: &(dyn Fn(&PartitionRecord) + Sync),
) -> Result<PipelineReport>
where
    L::Lease: Send,
{
    let jobs = cfg.proofs * cfg.partitions;
    let workers = cfg.synthesis_workers.max(1);
    // Measured choices first: every later question to the engine (leases, host memory, where
    // the tail's G2 runs) gets the answer they make.
    if let Some(vram) = engine.calibration_vram(key) {
        let label = format!("{} {} calibration", cfg.label, cfg.spec);
        let lease = leaser.acquire(&LeaseRequest::new(vram, true, &cfg.class, label))?;
        engine.calibrate(key, &lease)?;
    }
    let host = cfg.host.enabled.then(|| HostPlan::new(engine, key, cfg));
    // The process's resident footprint, leased for the whole run.
    let resident_host = match &host {
        Some(plan) => Some(leaser.acquire(&LeaseRequest::host_only(
            plan.resident,
            &cfg.class,
            format!("{} {} resident host memory", cfg.label, cfg.spec),
        ))?),
        None => None,
    };
    let run = Run {
        key,
        cfg,
        keep_c: engine.needs_c(),
        host,
        clock: Clock::new(),
        jobs,
        next_job: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        first_error: Mutex::new(None),
    };
    let mut records = Vec::with_capacity(jobs);
    let mut vram = (0u64, None);

    std::thread::scope(|scope| {
        // Bounded queues: at most `workers` synthesized partitions wait for the GPU, and one
        // finished GPU phase waits for the tail, which bounds memory.
        let (syn_tx, syn_rx) = sync_channel::<SynthDone<L::Lease>>(workers);
        let (gpu_tx, gpu_rx) = sync_channel::<GpuDone<L::Lease>>(1);
        for _ in 0..workers {
            let syn_tx = syn_tx.clone();
            let run = &run;
            scope.spawn(move || synthesis_worker(run, leaser, &syn_tx));
        }
        drop(syn_tx);
        let tail = {
            let run = &run;
            scope.spawn(move || tail_worker(run, leaser, gpu_rx, progress))
        };
        vram = gpu_worker(&run, engine, leaser, syn_rx, gpu_tx);
        match tail.join() {
            Ok(r) => records = r,
            Err(_) => run.fail(ProverError::Engine {
                engine: "pipeline",
                message: "CPU-tail thread panicked".into(),
            }),
        }
    });

    let wall = run.clock.now();
    let host_resident = run
        .host
        .map_or((0, 0), |p| (p.resident.mem_bytes, p.resident.pinned_bytes));
    let estimate = run.host.map(|p| p.estimate);
    drop(resident_host);
    if let Some(e) = run
        .first_error
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
    {
        return Err(e);
    }
    let mut report = report(engine, cfg, vram.0, vram.1, wall, records);
    report.host = estimate;
    report.host_resident = host_resident;
    Ok(report)
}

/// Acquires a host-only lease of `needs`.
fn host_lease<L: Leaser>(
    leaser: &L,
    run: &Run<'_>,
    needs: HostNeeds,
    what: String,
) -> Result<L::Lease> {
    let label = format!("{} {} {what}", run.cfg.label, run.cfg.spec);
    leaser.acquire(&LeaseRequest::host_only(needs, &run.cfg.class, label))
}

fn synthesis_worker<L: Leaser>(run: &Run<'_>, leaser: &L, tx: &SyncSender<SynthDone<L::Lease>>) {
    let (key, cfg, clock) = (run.key, run.cfg, &run.clock);
    while !run.stopped() {
        let job = run.next_job.fetch_add(1, Ordering::Relaxed);
        if job >= run.jobs {
            return;
        }
        let requested = clock.now();
        let what = |w: &str| {
            format!(
                "proof {} partition {} {w}",
                job / cfg.partitions,
                job % cfg.partitions
            )
        };
        // Memory first (held until the tail is done), then a CPU for the synthesis alone.
        let leased = run.host.map(|plan| {
            let bytes = plan.estimate.partition();
            let memory = host_lease(leaser, run, HostNeeds::memory(bytes), what("host memory"))?;
            let cpu = host_lease(leaser, run, HostNeeds::cpus(1), what("synthesis CPU"))?;
            Ok::<_, ProverError>((memory, bytes, cpu))
        });
        let (memory, bytes, cpu) = match leased.transpose() {
            Ok(Some((m, b, c))) => (Some(m), b, Some(c)),
            Ok(None) => (None, 0, None),
            Err(e) => return run.fail(e),
        };
        let cpus = cpu
            .as_ref()
            .map_or_else(Vec::new, |c| leaser.granted_cpus(c));
        let pinned = match affinity::pin_thread(&cpus) {
            Ok(p) => p,
            Err(e) => return run.fail(e),
        };
        let start = clock.now();
        let circuit = cfg.spec.with_witness(cfg.seed.wrapping_add(job as u64));
        // Parallel synthesis runs on rayon's pool, outside this thread's CPU lease: a worker
        // with a CPU lease synthesizes on its own (pinned) thread.
        let opts = SynthesisOptions {
            parallel: cpus.is_empty(),
            keep_c: run.keep_c,
            ..Default::default()
        };
        let syn = prove::synthesize(key, circuit, opts);
        let end = clock.now();
        drop(pinned);
        drop(cpu);
        match syn {
            Ok(syn) => {
                let host = HostPart {
                    requested: if memory.is_some() { requested } else { start },
                    lease: memory,
                    bytes,
                    cpus,
                };
                if tx
                    .send(SynthDone {
                        job,
                        syn,
                        start,
                        end,
                        host,
                    })
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => return run.fail(e),
        }
    }
}

/// The GPU-phase thread. Returns the VRAM of the partition leases and what the resident bases
/// went through.
fn gpu_worker<E: Engine, L: Leaser + Sync>(
    run: &Run<'_>,
    engine: &E,
    leaser: &L,
    rx: Receiver<SynthDone<L::Lease>>,
    tx: SyncSender<GpuDone<L::Lease>>,
) -> (u64, Option<WarmReport>)
where
    L::Lease: Send,
{
    let (key, cfg) = (run.key, run.cfg);
    let resident_bytes = engine.resident_bytes(key);
    if resident_bytes == 0 {
        return (phases(run, engine, leaser, None, rx, tx), None);
    }
    // Resident bases: warm state in a VRAM-only lease, on the device every partition lease then
    // asks for while they are there.
    let request = LeaseRequest::new(
        resident_bytes,
        false,
        &cfg.class,
        format!("{} {} resident bases", cfg.label, cfg.spec),
    );
    let warm = Warm::new(engine, leaser, key, request, cfg.warm);
    if let Err(e) = warm.load_first() {
        run.fail(e);
        return (0, Some(warm.finish().1));
    }
    std::thread::scope(|scope| {
        let reclaimer = scope.spawn(|| warm.reclaimer());
        let vram = phases(run, engine, leaser, Some(&warm), rx, tx);
        let (lease, report) = warm.finish();
        match reclaimer.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => run.fail(e),
            Err(_) => run.fail(ProverError::Engine {
                engine: "pipeline",
                message: "the resident bases' reclaimer thread panicked".into(),
            }),
        }
        if let Some(lease) = lease {
            // The resident arena is trimmed and checked under a compute lease of its device,
            // then its lease is released.
            let mut request = LeaseRequest::new(
                0,
                true,
                &cfg.class,
                format!("{} {} releasing resident bases", cfg.label, cfg.spec),
            );
            request.device = Some(lease.device_uuid().to_owned());
            let unloaded = match leaser.acquire(&request) {
                Ok(closer) => engine.unload_resident(key, Some(&closer)),
                Err(e) => engine.unload_resident(key, None).and(Err(e)),
            };
            drop(lease);
            if let Err(e) = unloaded {
                run.fail(e);
            }
        }
        (vram, Some(report))
    })
}

/// The partitions' GPU phases, each under its own {VRAM + compute} lease.
fn phases<E: Engine, L: Leaser + Sync>(
    run: &Run<'_>,
    engine: &E,
    leaser: &L,
    warm: Option<&Warm<'_, E, L>>,
    rx: Receiver<SynthDone<L::Lease>>,
    tx: SyncSender<GpuDone<L::Lease>>,
) -> u64
where
    L::Lease: Send,
{
    let mut vram = 0;
    for item in rx {
        if run.stopped() {
            break;
        }
        let done = match phase(run, engine, leaser, warm, item, &mut vram) {
            Ok(done) => done,
            Err(e) => {
                run.fail(e);
                break;
            }
        };
        if tx.send(done).is_err() {
            break;
        }
    }
    vram
}

/// One partition's GPU phase: warm when the resident bases are (or can be put back) on the
/// device, cold otherwise.
fn phase<E: Engine, L: Leaser + Sync>(
    run: &Run<'_>,
    engine: &E,
    leaser: &L,
    warm: Option<&Warm<'_, E, L>>,
    item: SynthDone<L::Lease>,
    vram: &mut u64,
) -> Result<GpuDone<L::Lease>>
where
    L::Lease: Send,
{
    let (key, cfg, clock) = (run.key, run.cfg, &run.clock);
    let constraints = item.syn.num_constraints();
    let requested = clock.now();
    let label = format!(
        "{} {} proof {} partition {}",
        cfg.label,
        cfg.spec,
        item.job / cfg.partitions,
        item.job % cfg.partitions
    );
    // Sized by the engine: with the bases when they are not resident right now.
    let make_request = |device: Option<String>| {
        let mut request = LeaseRequest::new(
            engine
                .vram_bytes(key, item.syn.log_domain())
                .max(cfg.min_phase_vram),
            true,
            &cfg.class,
            label.clone(),
        );
        request.device = device;
        request
    };
    let (lease, request, mut state) = match warm {
        Some(w) => {
            let (lease, request, state) = w.phase_lease(make_request)?;
            (lease, request, Some(state))
        }
        None => {
            let request = make_request(None);
            (leaser.acquire(&request)?, request, None)
        }
    };
    *vram = request.vram_bytes;
    let granted = clock.now();
    let (lease_id, device_uuid) = (lease.lease_id(), lease.device_uuid().to_owned());
    let mut held = YieldingLease::new(leaser, request, lease, *clock);
    let out = prove::gpu_phase_with_safe_points(engine, &mut held, key, item.syn);
    let out = out.and_then(|out| {
        // A revoked lease protected nothing: a GPU engine's results are suspect.
        if held.current().is_none_or(|l| leaser.lost(l)) {
            Err(ProverError::Lease(format!(
                "lease {lease_id} was revoked during the GPU phase"
            )))
        } else if matches!((warm, state.as_ref()), (Some(w), Some(st)) if w.lost(st)) {
            Err(ProverError::Lease(
                "the resident bases' lease was revoked".into(),
            ))
        } else {
            Ok(out)
        }
    });
    // A reclaim that came during the phase: the bases go now, under the phase's compute lease.
    let out = match (warm, state.as_mut(), held.current()) {
        (Some(w), Some(st), Some(l)) => out.and_then(|o| w.after_phase(st, l).map(|()| o)),
        _ => out,
    };
    drop(state);
    // Recorded before the release is sent, so [granted, released] lies inside the time the
    // daemon saw the lease held. Released before the CPU tail: that is what lets the next GPU
    // phase overlap it.
    let released = clock.now();
    let yields = std::mem::take(&mut held.yields);
    drop(held);
    Ok(GpuDone {
        job: item.job,
        out: out?,
        constraints,
        synth: (item.start, item.end),
        lease: (requested, granted, released),
        lease_id,
        device_uuid,
        yields,
        host: item.host,
    })
}

fn tail_worker<L: Leaser>(
    run: &Run<'_>,
    leaser: &L,
    rx: Receiver<GpuDone<L::Lease>>,
    progress: &(dyn Fn(&PartitionRecord) + Sync),
) -> Vec<PartitionRecord> {
    let (key, cfg, clock) = (run.key, run.cfg, &run.clock);
    let mut records = Vec::new();
    for done in rx {
        if run.stopped() {
            break;
        }
        let tail_requested = clock.now();
        let cpu = match run.host {
            Some(plan) => {
                let what = format!(
                    "proof {} partition {} CPU tail",
                    done.job / cfg.partitions,
                    done.job % cfg.partitions
                );
                match host_lease(leaser, run, HostNeeds::cpus(plan.tail_cpus), what) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        run.fail(e);
                        break;
                    }
                }
            }
            None => None,
        };
        let tail_cpus = cpu
            .as_ref()
            .map_or_else(Vec::new, |c| leaser.granted_cpus(c));
        let pinned = match affinity::pin_thread(&tail_cpus) {
            Ok(p) => p,
            Err(e) => {
                run.fail(e);
                break;
            }
        };
        let tail_start = clock.now();
        // Fresh blinding per proof, reproducible from the run's seed.
        let mut rng = ChaCha20Rng::seed_from_u64(cfg.seed ^ (done.job as u64).rotate_left(32));
        let (r, s) = (Scalar::random(&mut rng), Scalar::random(&mut rng));
        let inputs = done.out.public_inputs().to_vec();
        let stages = done.out.timings;
        let verified = prove::cpu_tail(key, done.out, r, s).and_then(|p| key.verify(&p, &inputs));
        drop(pinned);
        drop(cpu);
        let verified = match verified {
            Ok(v) => v,
            Err(e) => {
                run.fail(e);
                break;
            }
        };
        let tail_end = clock.now();
        // The partition's memory is free now (its assignment went with the tail's input).
        let HostPart {
            lease: host_lease,
            bytes: host_bytes,
            requested: host_requested,
            cpus: synthesis_cpus,
        } = done.host;
        drop(host_lease);
        let (requested, granted, released) = done.lease;
        let record = PartitionRecord {
            proof: done.job / cfg.partitions,
            partition: done.job % cfg.partitions,
            constraints: done.constraints,
            synth_start: done.synth.0,
            synth_end: done.synth.1,
            lease_requested: requested,
            lease_granted: granted,
            lease_released: released,
            tail_start,
            tail_end,
            lease_granted_unix: clock.unix(granted),
            lease_released_unix: clock.unix(released),
            tail_start_unix: clock.unix(tail_start),
            tail_end_unix: clock.unix(tail_end),
            lease_id: done.lease_id,
            device_uuid: done.device_uuid,
            verified,
            stages,
            yields: done.yields,
            host_requested,
            host_bytes,
            synthesis_cpus,
            tail_requested,
            tail_cpus,
        };
        progress(&record);
        records.push(record);
    }
    records
}

fn report<E: Engine>(
    engine: &E,
    cfg: &PipelineConfig,
    vram: u64,
    resident: Option<WarmReport>,
    wall: f64,
    records: Vec<PartitionRecord>,
) -> PipelineReport {
    let held: f64 = records.iter().map(PartitionRecord::gpu_phase).sum();
    PipelineReport {
        circuit: cfg.spec.kind().name().to_owned(),
        log_size: cfg.spec.log_size(),
        proofs: cfg.proofs,
        partitions: cfg.partitions,
        engine: engine.name().to_owned(),
        vram_bytes: vram,
        resident_vram_bytes: resident.as_ref().map_or(0, |r| r.vram_bytes),
        resident,
        wall,
        synthesis: StageStats::of(records.iter().map(PartitionRecord::synthesis)),
        lease_wait: StageStats::of(records.iter().map(PartitionRecord::lease_wait)),
        gpu_phase: StageStats::of(records.iter().map(PartitionRecord::gpu_phase)),
        cpu_tail: StageStats::of(records.iter().map(PartitionRecord::cpu_tail)),
        host_leases: cfg.host.enabled,
        host: None,
        host_resident: (0, 0),
        host_wait: StageStats::of(records.iter().map(PartitionRecord::host_wait)),
        gpu_occupancy: if wall > 0.0 { held / wall } else { 0.0 },
        all_verified: records.len() == cfg.proofs * cfg.partitions
            && records.iter().all(|r| r.verified),
        partitions_detail: records,
    }
}
