//! One prover process of the benchmark: `lanes` worker threads proving continuously inside a
//! time window, each around its mode's lock, with every attempt recorded.
//!
//! A lane's loop: take the next witness (its evaluations copied outside any lock) → ask the
//! [`Leaser`] for `{formula + pad}` bytes and the compute slot → GPU phase: allocate and touch
//! the pad, run the engine's phase in the rest of the lease, free the pad → release → CPU tail:
//! assemble the proof with fresh blinding and the witness's G2 sum, verify it with bellperson,
//! then CPU work until the modeled tail time has passed since the release. A GPU phase that
//! fails (CUDA out of memory above all) is recorded and the lane goes on after the tail's time
//! (as a prover would retry the partition). A critical prover's lane (`interval`) starts one
//! proof per interval instead of back to back.
//!
//! Times are seconds since the window's start, from one clock shared by every process of a
//! cell (Unix time), so the driver can lay all processes' GPU phases on one axis. At the end
//! of the window [`run`] returns what is recorded plus each lane's unfinished state (a wait or
//! a GPU phase still in progress), and the process exits: lanes blocked in a lock are not
//! waited for.
//!
//! With synthesis ([`WorkerOptions::synthesize`], the host modes) each attempt first
//! synthesizes its witness anew from the circuit (the bundle witness's seed, so the witness and
//! its G2 sum are the bundle's): real synthesis time on a CPU and real host memory, the
//! assignment held until the partition's proof is made. With host leases
//! ([`WorkerOptions::host_leases`], mode `host-gpud`) the attempt leases that memory from gpud
//! before synthesizing (held to the end of its tail), then a CPU for the synthesis and one for
//! the tail, each pinned ([`gpud_prover::affinity`]); memory is asked before CPUs, and no one
//! waits while holding CPUs. Without them (mode `host-bounds`) only the process's own lanes
//! bound its synthesis, as before issue 16.
//!
//! B_G2 ([`WorkerOptions::g2`], [`G2Mode`]): the witness's precomputed sum (the default, no G2
//! MSM anywhere), the engine's B_G2 MSM inside the GPU phase under the lease (the key then
//! carries the G2 query and the lease its bases and temporaries), or blstrs's in the CPU tail
//! on the host's cores. Either computed value is compared with the precomputed one before the
//! proof is assembled: a difference is an unverified attempt.
//!
//! With warm state ([`warm_up`], the `gpud-warm` mode) the process keeps the proving key's
//! bases resident in an evictable gpud lease ([`gpud_prover::warm`]): its phase leases are the
//! footprint less the bases, a reclaim notice frees the bases (at once between phases, at the
//! phase's end during one), and later phases put them back up when they fit, running cold (the
//! bases uploaded inside a lease that includes them) meanwhile. Each record says whether its
//! phase ran warm.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use blstrs::Scalar;
use ff::Field;
use gpud_client::{ComputeToken, LeaseId, Reservation};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use super::bundle::{self, FarmWitness};
use super::simvram::{SimAlloc, SimVram};
use super::{FarmResult, G2Mode, LockKind};
use gpud_prover::circuits::CircuitSpec;
use gpud_prover::engine::{Engine, PhaseInput, PhaseOutput};
use gpud_prover::error::ProverError;
use gpud_prover::lease::{HostNeeds, LeaseRequest, Leaser};
use gpud_prover::params::ProvingKey;
use gpud_prover::synthesis::{ProvingAssignment, SynthesisOptions};
use gpud_prover::warm::{Warm, WarmOptions, WarmReport};

/// Now as Unix nanoseconds.
pub fn now_unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The cell's time window, in Unix nanoseconds (shared by all processes of a cell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// When proving starts.
    pub start_unix_ns: u128,
    /// When it ends: nothing after it counts.
    pub end_unix_ns: u128,
}

impl Window {
    /// A window of `duration` starting `delay` from now.
    pub fn starting_in(delay: Duration, duration: Duration) -> Self {
        let start = now_unix_ns() + delay.as_nanos();
        Self {
            start_unix_ns: start,
            end_unix_ns: start + duration.as_nanos(),
        }
    }

    /// The line the driver sends a ready worker: `go START END`.
    pub fn go_line(&self) -> String {
        format!("go {} {}", self.start_unix_ns, self.end_unix_ns)
    }

    /// Parses [`Window::go_line`].
    pub fn parse_go(line: &str) -> Option<Self> {
        let mut it = line.split_whitespace();
        if it.next()? != "go" {
            return None;
        }
        let start = it.next()?.parse().ok()?;
        let end = it.next()?.parse().ok()?;
        (end > start).then_some(Self {
            start_unix_ns: start,
            end_unix_ns: end,
        })
    }

    /// Seconds from start to end.
    pub fn duration(&self) -> f64 {
        (self.end_unix_ns - self.start_unix_ns) as f64 / 1e9
    }
}

/// Seconds since a window's start, read from the monotonic clock after one Unix reading.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    anchor: Instant,
    anchor_rel: f64,
}

impl Clock {
    /// The clock of `window`. Every process of a farm reads its own, and their readings are
    /// compared (phases of different processes must not overlap), so the one Unix reading is
    /// paired with the monotonic clock tightly: it is taken between two monotonic readings,
    /// and of a few tries the pair closest together is kept (a preemption between the two
    /// readings would otherwise shift this process's clock by as long as it lasted).
    pub fn new(window: &Window) -> Self {
        let (anchor, now) = (0..64)
            .map(|_| {
                let before = Instant::now();
                let now = now_unix_ns();
                let after = Instant::now();
                (after - before, before + (after - before) / 2, now)
            })
            .min_by_key(|&(gap, _, _)| gap)
            .map(|(_, anchor, now)| (anchor, now))
            .unwrap_or_else(|| (Instant::now(), now_unix_ns()));
        Self {
            anchor,
            anchor_rel: (now as f64 - window.start_unix_ns as f64) / 1e9,
        }
    }

    /// Seconds since the window's start (negative before it).
    pub fn now(&self) -> f64 {
        self.anchor_rel + self.anchor.elapsed().as_secs_f64()
    }

    /// Sleeps until `t`.
    pub fn sleep_until(&self, t: f64) {
        loop {
            let left = t - self.now();
            if left <= 0.0 {
                return;
            }
            std::thread::sleep(Duration::from_secs_f64(left.min(0.5)));
        }
    }

    /// Keeps this thread's core busy until `t` (the modeled CPU tail).
    pub fn spin_until(&self, t: f64) {
        let mut x = Scalar::from(7u64);
        while self.now() < t {
            for _ in 0..64 {
                x = x.square();
            }
        }
        std::hint::black_box(x);
    }
}

/// How a process's lanes behave.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Worker threads (lanes) in this process.
    pub lanes: usize,
    /// Lease class.
    pub class: String,
    /// Extra device memory allocated and touched during each GPU phase (inside the lease).
    pub vram_pad: u64,
    /// The modeled CPU tail: from the release until this much later, one thread busy.
    pub tail: Duration,
    /// One proof per interval per lane (a critical prover) instead of back to back.
    pub interval: Option<Duration>,
    /// Placement of the phase leases (a device UUID), or any device.
    pub device: Option<String>,
    /// Blinding seed.
    pub seed: u64,
    /// Lane `l` starts with witness `first_witness + l`.
    pub first_witness: usize,
    /// Lease label prefix.
    pub label: String,
    /// Synthesize each attempt's witness anew (the host modes).
    pub synthesize: bool,
    /// With `synthesize`: lease each attempt's host memory and CPUs from the leaser.
    pub host_leases: bool,
    /// Where each proof's B_G2 comes from (the workload's key must carry the G2 query unless
    /// it is precomputed).
    pub g2: G2Mode,
}

/// What the lanes prove: a key and witnesses that fit it.
#[derive(Debug)]
pub struct Workload {
    /// Circuit and size.
    pub spec: CircuitSpec,
    /// The proving key (without the G2 query).
    pub key: ProvingKey,
    /// Synthesized witnesses, used in turn.
    pub witnesses: Vec<FarmWitness>,
}

impl Workload {
    /// Reads a bundle's key (with its G2 query when `g2` needs it) and witnesses
    /// `0..witnesses`, and checks they fit.
    pub fn load(
        dir: &std::path::Path,
        spec: &CircuitSpec,
        witnesses: usize,
        g2: G2Mode,
    ) -> FarmResult<Self> {
        let g2_path = g2.needs_query().then(|| bundle::g2_path(dir, spec));
        let (kspec, key) =
            bundle::read_key_with_g2(&bundle::key_path(dir, spec), g2_path.as_deref())?;
        let mut ws = Vec::with_capacity(witnesses);
        for i in 0..witnesses.max(1) {
            let path = bundle::witness_path(dir, spec, i);
            let (wspec, w) = FarmWitness::read(&path)?;
            if wspec != kspec {
                return Err(super::FarmError::Format {
                    path,
                    reason: format!("witness of {wspec}, key of {kspec}"),
                });
            }
            w.check_fits(&key)?;
            ws.push(w);
        }
        Ok(Self {
            spec: kspec,
            key,
            witnesses: ws,
        })
    }

    /// The domain's log size (every witness has the key's).
    pub fn log_domain(&self) -> u32 {
        self.witnesses
            .first()
            .map_or(self.spec.log_size(), |w| w.domain.log_size())
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The proof was made and bellperson's verifier accepted it.
    Ok,
    /// The proof was made but did not verify.
    Unverified,
    /// The GPU phase ran out of device memory (CUDA `OUT_OF_MEMORY`, or the simulated device).
    Oom,
    /// The GPU phase failed otherwise (an engine error, a lost lease).
    Failed,
    /// The lease or lock could not be acquired.
    Lease,
}

/// Seconds of the parts of one GPU phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSecs {
    /// Allocating and touching the pad (enqueue time).
    pub pad: f64,
    /// The H polynomial.
    pub h: f64,
    /// The MSMs (with B_G2 when it ran in the phase).
    pub msms: f64,
    /// The B_G2 MSM, when it ran in the phase.
    #[serde(default)]
    pub msm_b_g2: f64,
    /// Synchronize, trim and check at the end.
    pub finish: f64,
    /// The engine's whole phase.
    pub engine: f64,
}

/// One attempt at a partition proof.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The lane.
    pub lane: usize,
    /// The lane's attempt number.
    pub iteration: usize,
    /// The witness's seed.
    pub witness: u64,
    /// Lease or lock asked for.
    pub requested: f64,
    /// Granted (none when the acquire failed).
    pub granted: Option<f64>,
    /// Released: the GPU phase's end.
    pub released: Option<f64>,
    /// CPU tail done (proof made and checked), for attempts that made a proof.
    pub tail_end: Option<f64>,
    /// How it ended.
    pub outcome: Outcome,
    /// The error, for failures.
    pub error: Option<String>,
    /// The device the lease was on.
    pub device: Option<String>,
    /// The lease's id (gpud's, or the lock's counter).
    pub lease_id: Option<LeaseId>,
    /// The GPU phase's parts, when it succeeded.
    pub phase: Option<PhaseSecs>,
    /// With warm state: whether the phase ran with the bases resident (none without).
    #[serde(default)]
    pub warm: Option<bool>,
    /// With synthesis: the attempt's host leases were asked for (memory, then a CPU).
    #[serde(default)]
    pub host_requested: Option<f64>,
    /// With synthesis: it started (its leases granted).
    #[serde(default)]
    pub synth_start: Option<f64>,
    /// With synthesis: it ended.
    #[serde(default)]
    pub synth_end: Option<f64>,
    /// With synthesis: the host memory the attempt holds by the prover's estimate (what it
    /// leases with host leases); 0 otherwise.
    #[serde(default)]
    pub host_bytes: u64,
    /// The CPUs its synthesis ran on (granted; empty without host leases).
    #[serde(default)]
    pub synthesis_cpus: Vec<u32>,
    /// Seconds of this proof's B_G2 MSM (inside the phase or in the tail); none when the
    /// precomputed sum was used.
    #[serde(default)]
    pub g2_secs: Option<f64>,
}

/// A lane's unfinished attempt at the end of the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenAttempt {
    /// The lane.
    pub lane: usize,
    /// Asked for at.
    pub requested: f64,
    /// Granted at (still waiting when none).
    pub granted: Option<f64>,
    /// Released at (in the GPU phase when none, in the tail otherwise).
    pub released: Option<f64>,
    /// The device, once granted.
    pub device: Option<String>,
}

/// A prover process's report, printed as one JSON line at the end of the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Process id.
    pub pid: u32,
    /// Its lock.
    pub lock: LockKind,
    /// Lease class.
    pub class: String,
    /// Lanes (worker threads).
    pub lanes: usize,
    /// Engine name.
    pub engine: String,
    /// Circuit and size.
    pub circuit: String,
    /// log2 of the domain.
    pub log_size: u32,
    /// The VRAM formula of a phase (no residency).
    pub formula_bytes: u64,
    /// The pad.
    pub pad_bytes: u64,
    /// What each phase lease asked for (formula + pad).
    pub lease_bytes: u64,
    /// VRAM-only leases held for the process's CUDA contexts (total).
    pub context_lease_bytes: u64,
    /// The modeled tail, seconds.
    pub tail_secs: f64,
    /// Seconds from process start to ready.
    pub setup_secs: f64,
    /// CPUs the process was pinned to (those NVML names nearest its GPU), or why it was not
    /// pinned; none when not asked to.
    #[serde(default)]
    pub pinned: Option<Result<usize, String>>,
    /// The window's length, seconds.
    pub window_secs: f64,
    /// Every finished attempt (some may end after the window; the driver clips).
    pub records: Vec<Record>,
    /// Unfinished attempts at the end of the window.
    pub open: Vec<OpenAttempt>,
    /// What the warm state went through (loads, evictions, cold phases), with warm state.
    #[serde(default)]
    pub warm: Option<WarmReport>,
    /// Where B_G2 came from.
    #[serde(default)]
    pub g2: G2Mode,
    /// CPU seconds (user + system, every thread) the process used inside the window.
    #[serde(default)]
    pub cpu_secs: Option<f64>,
}

/// Where the GPU phase's extra memory comes from.
#[derive(Debug)]
pub enum PhaseMemory {
    /// No pad, no accounting (the pad, if any, is not allocated).
    Plain,
    /// The pad is allocated on the lease's CUDA device from the lease's budget and touched.
    Cuda,
    /// The whole lease (formula + pad) is allocated from a simulated device memory: one per
    /// device index, `dir/vram-{index}`, of `capacity` bytes each.
    Sim {
        /// Directory of the simulated devices' state files.
        dir: std::path::PathBuf,
        /// Each device's memory.
        capacity: u64,
    },
}

/// A part of a lease: the same lease and compute slot, a smaller byte budget (the pad's, or the
/// engine's rest).
struct Part<'a> {
    inner: &'a dyn Reservation,
    bytes: u64,
}

impl Reservation for Part<'_> {
    fn lease_id(&self) -> LeaseId {
        self.inner.lease_id()
    }
    fn device_uuid(&self) -> &str {
        self.inner.device_uuid()
    }
    fn device_index(&self) -> u32 {
        self.inner.device_index()
    }
    fn vram_bytes(&self) -> u64 {
        self.bytes
    }
    fn compute_token(&self) -> Option<ComputeToken<'_>> {
        self.inner.compute_token()
    }
}

fn cuda_oom(e: &gpud_cuda::Error) -> bool {
    matches!(
        e,
        gpud_cuda::Error::Driver(cudarc::driver::DriverError(
            cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
        ))
    )
}

/// Whether an error is the device running out of memory.
pub fn is_oom(e: &ProverError) -> bool {
    match e {
        ProverError::Cuda(c) => cuda_oom(c),
        ProverError::Msm(gpud_cuda::msm::MsmError::Cuda(c)) => cuda_oom(c),
        _ => false,
    }
}

/// A failed phase: how, and the message.
type PhaseFailure = (Outcome, String);

fn failure(e: ProverError) -> PhaseFailure {
    let outcome = if is_oom(&e) {
        Outcome::Oom
    } else {
        Outcome::Failed
    };
    (outcome, e.to_string())
}

impl PhaseMemory {
    /// Runs `phase` under `lease` with `pad` bytes of it allocated (and touched) around it.
    fn run<T>(
        &self,
        lease: &dyn Reservation,
        pad: u64,
        phase: impl FnOnce(&dyn Reservation) -> gpud_prover::Result<T>,
    ) -> Result<(T, f64), PhaseFailure> {
        match self {
            PhaseMemory::Plain => phase(lease).map(|t| (t, 0.0)).map_err(failure),
            PhaseMemory::Sim { dir, capacity } => {
                let sim = SimVram::new(
                    dir.join(format!("vram-{}", lease.device_index())),
                    *capacity,
                );
                let t0 = Instant::now();
                match sim
                    .alloc(lease.vram_bytes())
                    .map_err(|e| (Outcome::Failed, format!("simulated device memory: {e}")))?
                {
                    SimAlloc::Granted(held) => {
                        let pad_secs = t0.elapsed().as_secs_f64();
                        let out = phase(lease);
                        drop(held);
                        out.map(|t| (t, pad_secs)).map_err(failure)
                    }
                    SimAlloc::OutOfMemory {
                        requested,
                        in_use,
                        capacity,
                    } => Err((
                        Outcome::Oom,
                        format!(
                            "simulated device out of memory: {requested} bytes asked, {in_use} of {capacity} in use"
                        ),
                    )),
                }
            }
            PhaseMemory::Cuda if pad == 0 => phase(lease).map(|t| (t, 0.0)).map_err(failure),
            PhaseMemory::Cuda => {
                let t0 = Instant::now();
                let cuda = |e: gpud_cuda::Error| failure(ProverError::Cuda(e));
                let dev =
                    gpud_prover::engine::process_device(lease.device_uuid()).map_err(failure)?;
                let pad_part = Part {
                    inner: lease,
                    bytes: pad,
                };
                let arena = dev.reserve(&pad_part).map_err(cuda)?;
                let len = usize::try_from(pad).map_err(|_| {
                    (
                        Outcome::Failed,
                        format!("a pad of {pad} bytes does not fit usize"),
                    )
                })?;
                let mut buf = arena.alloc::<u8>(len).map_err(cuda)?;
                buf.fill_bytes(0xa5).map_err(cuda)?;
                let pad_secs = t0.elapsed().as_secs_f64();
                let rest = Part {
                    inner: lease,
                    bytes: lease.vram_bytes().saturating_sub(pad),
                };
                let out = phase(&rest);
                drop(buf);
                let token = lease.compute_token().ok_or_else(|| {
                    (
                        Outcome::Failed,
                        "the GPU phase's lease holds no compute slot".to_owned(),
                    )
                })?;
                let closed = arena.close(&token);
                let out = out.map_err(failure)?;
                closed.map_err(cuda)?;
                Ok((out, pad_secs))
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum LaneState {
    Idle,
    Waiting {
        requested: f64,
    },
    Phase {
        requested: f64,
        granted: f64,
    },
    Tail {
        requested: f64,
        granted: f64,
        released: f64,
    },
}

struct Ctx<E: Engine + 'static, L: Leaser + 'static> {
    engine: Arc<E>,
    leaser: Arc<L>,
    work: Arc<Workload>,
    memory: Arc<PhaseMemory>,
    opts: WorkerOptions,
    clock: Clock,
    end: f64,
    lease_bytes: u64,
    /// The host memory each synthesized attempt leases ([`gpud_prover::host::estimate`]).
    partition_bytes: u64,
    /// The process's warm state, when it keeps its bases resident.
    warm: Option<&'static Warm<'static, E, L>>,
    stop: AtomicBool,
    /// Records and lane states under one lock, so a snapshot sees each attempt exactly once
    /// (open, or finished).
    shared: Mutex<Shared>,
}

/// The warm state, locked for the length of a phase.
type WarmGuard<Z> = gpud_prover::warm::WarmGuard<'static, Z>;

/// A phase's lease, with the warm state locked for the phase when there is one.
type HeldPhase<L> = (
    <L as Leaser>::Lease,
    Option<WarmGuard<<L as Leaser>::Lease>>,
);

/// What a synthesized assignment keeps beside a, b, c: what the MSMs take.
struct Rest {
    input: Vec<Scalar>,
    aux: Vec<Scalar>,
    a_aux_density: gpud_prover::synthesis::Density,
    b_input_density: gpud_prover::synthesis::Density,
    b_aux_density: gpud_prover::synthesis::Density,
}

impl Rest {
    fn scalars(&self) -> gpud_prover::engine::G1Scalars<'_> {
        gpud_prover::engine::G1Scalars {
            input: &self.input,
            aux: &self.aux,
            a_aux_density: &self.a_aux_density,
            b_input_density: &self.b_input_density,
            b_aux_density: &self.b_aux_density,
        }
    }
}

/// A synthesized attempt's host side: what its assignment keeps beside a, b, c (the inputs,
/// aux and densities, held like a prover holds them until its tail), its memory lease, and
/// when and where it was synthesized. Dropped when the attempt ends.
struct HostPart<H> {
    rest: Rest,
    _lease: Option<H>,
    bytes: u64,
    requested: f64,
    synth: (f64, f64),
    cpus: Vec<u32>,
}

struct Shared {
    records: Vec<Record>,
    states: Vec<(LaneState, Option<String>)>,
}

impl<E: Engine + 'static, L: Leaser + Sync + 'static> Ctx<E, L>
where
    L::Lease: Send + 'static,
{
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, lane: usize, state: LaneState, device: Option<&str>) {
        let mut s = self.lock();
        s.states[lane].0 = state;
        if let Some(d) = device {
            s.states[lane].1 = Some(d.to_owned());
        }
    }

    /// Records a finished attempt; the lane is idle again.
    fn push(&self, lane: usize, r: Record) {
        let mut s = self.lock();
        s.records.push(r);
        s.states[lane].0 = LaneState::Idle;
    }

    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.clock.now() >= self.end
    }

    fn lane(&self, lane: usize) {
        let clock = &self.clock;
        let (key, witnesses) = (&self.work.key, &self.work.witnesses);
        let tail = self.opts.tail.as_secs_f64();
        let mut next_at = 0.0f64;
        let mut iteration = 0usize;
        loop {
            match self.opts.interval {
                Some(iv) => {
                    clock.sleep_until(next_at.min(self.end));
                    next_at += iv.as_secs_f64();
                }
                None => clock.sleep_until(0.0),
            }
            if self.done() || witnesses.is_empty() {
                return;
            }
            let w = &witnesses[(self.opts.first_witness + lane + iteration) % witnesses.len()];
            let label = format!("{} lane {lane} #{iteration}", self.opts.label);
            // Synthesized anew (the host modes), or copied outside the lock: the engine
            // consumes its a, b, c.
            let (host, (a, b, c)) = if self.opts.synthesize {
                match self.synthesize(w.seed, &label) {
                    Ok((host, abc)) => (Some(host), abc),
                    Err((outcome, message, host_requested)) => {
                        self.push(
                            lane,
                            Record {
                                lane,
                                iteration,
                                witness: w.seed,
                                requested: clock.now(),
                                granted: None,
                                released: None,
                                tail_end: None,
                                outcome,
                                error: Some(message),
                                device: None,
                                lease_id: None,
                                phase: None,
                                warm: None,
                                host_requested: Some(host_requested),
                                synth_start: None,
                                synth_end: None,
                                host_bytes: 0,
                                synthesis_cpus: Vec::new(),
                                g2_secs: None,
                            },
                        );
                        clock.sleep_until(clock.now() + tail.max(0.05));
                        iteration += 1;
                        continue;
                    }
                }
            } else {
                (None, (w.a.clone(), w.b.clone(), w.c.clone()))
            };
            let requested = clock.now();
            self.set(lane, LaneState::Waiting { requested }, None);
            let mut rec = Record {
                lane,
                iteration,
                witness: w.seed,
                requested,
                granted: None,
                released: None,
                tail_end: None,
                outcome: Outcome::Failed,
                error: None,
                device: None,
                lease_id: None,
                phase: None,
                warm: None,
                host_requested: host.as_ref().map(|h| h.requested),
                synth_start: host.as_ref().map(|h| h.synth.0),
                synth_end: host.as_ref().map(|h| h.synth.1),
                host_bytes: host.as_ref().map_or(0, |h| h.bytes),
                synthesis_cpus: host.as_ref().map_or_else(Vec::new, |h| h.cpus.clone()),
                g2_secs: None,
            };
            let (lease, mut warm_state) = match self.acquire(label.clone()) {
                Ok(held) => held,
                Err(e) => {
                    (rec.outcome, rec.error) = match failure(e) {
                        (Outcome::Failed, message) => (Outcome::Lease, Some(message)),
                        (outcome, message) => (outcome, Some(message)),
                    };
                    self.push(lane, rec);
                    clock.sleep_until(clock.now() + tail.max(0.05));
                    iteration += 1;
                    continue;
                }
            };
            rec.warm = warm_state.as_ref().map(|st| st.is_warm());
            let granted = clock.now();
            rec.granted = Some(granted);
            rec.device = Some(lease.device_uuid().to_owned());
            rec.lease_id = Some(lease.lease_id());
            self.set(
                lane,
                LaneState::Phase { requested, granted },
                Some(lease.device_uuid()),
            );
            // The synthesized assignment's (the same values as the bundle's).
            let scalars = host
                .as_ref()
                .map_or_else(|| w.scalars(), |h| h.rest.scalars());
            let result = self.memory.run(&lease, self.opts.vram_pad, |r| {
                let mut out = self.engine.gpu_phase(
                    r,
                    key,
                    PhaseInput {
                        domain: &w.domain,
                        a,
                        b,
                        c,
                        scalars,
                    },
                )?;
                // G2 in the phase from an engine that leaves it to the host (the CPU engine of
                // the simulated runs): computed here, still under the lease.
                if self.opts.g2 == G2Mode::Gpu && out.b_g2.is_none() {
                    let t0 = Instant::now();
                    out.b_g2 = Some(b_g2_of(key, &scalars));
                    out.timings.msm_b_g2 = t0.elapsed().as_secs_f64();
                    out.timings.total += out.timings.msm_b_g2;
                }
                Ok(out)
            });
            let mut lost = self.leaser.lost(&lease);
            if let (Some(w), Some(st)) = (self.warm, warm_state.as_mut()) {
                lost |= w.lost(st);
                // A reclaim that came during the phase: the bases go now, under its lease.
                let answered = w.after_phase(st, &lease);
                if let (Err(e), true) = (answered, result.is_ok()) {
                    rec.error = Some(format!("freeing the warm bases: {e}"));
                }
            }
            drop(warm_state);
            // Taken before the release is sent: [granted, released] lies inside the hold. The
            // lane's state says so before the release too: a snapshot between the release and
            // the state would see this phase still open beside the next one's.
            let released = clock.now();
            rec.released = Some(released);
            self.set(
                lane,
                LaneState::Tail {
                    requested,
                    granted,
                    released,
                },
                None,
            );
            drop(lease);
            let result = match result {
                Ok(_) if lost => Err((
                    Outcome::Failed,
                    "the lease was revoked or lost during the GPU phase".to_owned(),
                )),
                r => r,
            };
            match result {
                Ok((out, pad)) => {
                    rec.phase = Some(phase_secs(&out, pad));
                    let mut rng = ChaCha20Rng::seed_from_u64(
                        self.opts.seed ^ ((lane as u64) << 40) ^ iteration as u64,
                    );
                    let (r, s) = (Scalar::random(&mut rng), Scalar::random(&mut rng));
                    // The host modes' tail leases a CPU and runs pinned there.
                    let cpu = match host.as_ref().filter(|_| self.opts.host_leases) {
                        Some(_) => match self.host_lease(HostNeeds::cpus(1), &label, "tail CPU") {
                            Ok(l) => Some(l),
                            Err(e) => {
                                rec.outcome = Outcome::Lease;
                                rec.error = Some(e.to_string());
                                self.push(lane, rec);
                                iteration += 1;
                                continue;
                            }
                        },
                        None => None,
                    };
                    let cpus = cpu
                        .as_ref()
                        .map_or_else(Vec::new, |c| self.leaser.granted_cpus(c));
                    let pinned = gpud_prover::affinity::pin_thread(&cpus);
                    let (b_g2, g2_secs) = match self.opts.g2 {
                        G2Mode::Precomputed => (Some(w.b_g2.into()), None),
                        G2Mode::Gpu => (out.b_g2, Some(out.timings.msm_b_g2)),
                        G2Mode::Cpu => {
                            let t0 = Instant::now();
                            let sum = b_g2_of(key, &scalars);
                            (Some(sum), Some(t0.elapsed().as_secs_f64()))
                        }
                    };
                    rec.g2_secs = g2_secs;
                    let checked = match b_g2 {
                        None => Err(ProverError::Engine {
                            engine: "farm",
                            message: "the GPU phase returned no B_G2 sum".into(),
                        }),
                        Some(g) if g != blstrs::G2Projective::from(w.b_g2) => Ok(Err(format!(
                            "the B_G2 sum ({} mode) differs from the witness's precomputed one",
                            self.opts.g2.name()
                        ))),
                        Some(g) => gpud_prover::prove::assemble(key, &out.sums, g, r, s)
                            .and_then(|p| key.verify(&p, w.public_inputs()))
                            .map(|ok| {
                                if ok {
                                    Ok(())
                                } else {
                                    Err("the proof did not verify".to_owned())
                                }
                            }),
                    };
                    match checked {
                        Ok(Ok(())) => rec.outcome = Outcome::Ok,
                        Ok(Err(why)) => {
                            rec.outcome = Outcome::Unverified;
                            rec.error = Some(why);
                        }
                        Err(e) => {
                            rec.outcome = Outcome::Failed;
                            rec.error = Some(e.to_string());
                        }
                    }
                    clock.spin_until(released + tail);
                    rec.tail_end = Some(clock.now());
                    drop(pinned);
                    drop(cpu);
                }
                Err((outcome, message)) => {
                    rec.outcome = outcome;
                    rec.error = Some(message);
                    // The partition is retried after the tail's time, as a prover would.
                    clock.sleep_until(released + tail.max(0.01));
                }
            }
            self.push(lane, rec);
            // The partition's memory (its assignment, then its lease) goes with its proof.
            drop(host);
            iteration += 1;
        }
    }

    /// A host-only lease of `needs` for attempt `label`.
    fn host_lease(
        &self,
        needs: HostNeeds,
        label: &str,
        what: &str,
    ) -> gpud_prover::Result<L::Lease> {
        self.leaser.acquire(&LeaseRequest::host_only(
            needs,
            &self.opts.class,
            format!("{label} {what}"),
        ))
    }

    /// Synthesizes the witness of `seed`, under its host leases when the options ask for them:
    /// its memory first (kept in the returned part until the attempt ends), then a CPU for the
    /// synthesis, on which this thread runs pinned. A failure: how, why, and when the leases
    /// were asked for.
    #[allow(clippy::type_complexity)]
    fn synthesize(
        &self,
        seed: u64,
        label: &str,
    ) -> Result<(HostPart<L::Lease>, (Vec<Scalar>, Vec<Scalar>, Vec<Scalar>)), (Outcome, String, f64)>
    {
        let requested = self.clock.now();
        let lease_failed = |e: ProverError| (Outcome::Lease, e.to_string(), requested);
        let bytes = self.partition_bytes;
        let (memory, cpu) = if self.opts.host_leases {
            let memory = self
                .host_lease(HostNeeds::memory(bytes), label, "partition host memory")
                .map_err(lease_failed)?;
            let cpu = self
                .host_lease(HostNeeds::cpus(1), label, "synthesis CPU")
                .map_err(lease_failed)?;
            (Some(memory), Some(cpu))
        } else {
            (None, None)
        };
        let cpus = cpu
            .as_ref()
            .map_or_else(Vec::new, |c| self.leaser.granted_cpus(c));
        let pinned = gpud_prover::affinity::pin_thread(&cpus)
            .map_err(|e| (Outcome::Failed, e.to_string(), requested))?;
        let start = self.clock.now();
        // As the prover's pipeline does: C only for an engine that reads it.
        let cs = gpud_prover::synthesis::synthesize(
            self.work.spec.with_witness(seed),
            SynthesisOptions {
                keep_c: self.engine.needs_c(),
                ..Default::default()
            },
        );
        let end = self.clock.now();
        drop(pinned);
        drop(cpu);
        let cs = cs.map_err(|e| (Outcome::Failed, e.to_string(), requested))?;
        let ProvingAssignment {
            a,
            b,
            c,
            input,
            aux,
            a_aux_density,
            b_input_density,
            b_aux_density,
            ..
        } = cs;
        Ok((
            HostPart {
                rest: Rest {
                    input,
                    aux,
                    a_aux_density,
                    b_input_density,
                    b_aux_density,
                },
                _lease: memory,
                bytes,
                requested,
                synth: (start, end),
                cpus,
            },
            (a, b, c),
        ))
    }

    /// The phase's lease, with the warm state locked for the phase when there is one: the
    /// bases are put back up first when they fit, and a lease sized for resident bases that
    /// were evicted while it was awaited is given back and asked for again, larger.
    fn acquire(&self, label: String) -> gpud_prover::Result<HeldPhase<L>> {
        let (key, log) = (&self.work.key, self.work.log_domain());
        let request = |device: Option<String>| LeaseRequest {
            // Without warm state the engine's size never changes: the one reported.
            vram_bytes: match self.warm {
                Some(_) => phase_formula(self.engine.as_ref(), key, log, self.opts.g2)
                    .saturating_add(self.opts.vram_pad),
                None => self.lease_bytes,
            },
            compute: true,
            device: device.or_else(|| self.opts.device.clone()),
            class: self.opts.class.clone(),
            label: label.clone(),
            evictable: false,
            host: HostNeeds::default(),
        };
        match self.warm {
            Some(w) => {
                let (lease, _, state) = w.phase_lease(request)?;
                Ok((lease, Some(state)))
            }
            None => Ok((self.leaser.acquire(&request(None))?, None)),
        }
    }

    fn snapshot(&self) -> (Vec<Record>, Vec<OpenAttempt>) {
        let s = self.lock();
        let open = s
            .states
            .iter()
            .enumerate()
            .filter_map(|(lane, (state, device))| {
                let (requested, granted, released) = match *state {
                    LaneState::Idle => return None,
                    LaneState::Waiting { requested } => (requested, None, None),
                    LaneState::Phase { requested, granted } => (requested, Some(granted), None),
                    LaneState::Tail {
                        requested,
                        granted,
                        released,
                    } => (requested, Some(granted), Some(released)),
                };
                Some(OpenAttempt {
                    lane,
                    requested,
                    granted,
                    released,
                    device: granted.and(device.clone()),
                })
            })
            .collect();
        (s.records.clone(), open)
    }
}

/// `Σ b_i·B_i` over G2 with blstrs on the host (the key's G2 query).
fn b_g2_of(key: &ProvingKey, s: &gpud_prover::engine::G1Scalars<'_>) -> blstrs::G2Projective {
    gpud_prover::prove::b_g2_sum(
        &key.params().b_g2,
        s.input,
        s.aux,
        s.b_input_density,
        s.b_aux_density,
    )
}

/// The VRAM formula of one phase: the engine's, and with B_G2 in the phase from an engine
/// that leaves it to the host (the CPU engine: the worker computes it inside the phase) what
/// a GPU engine's phase with G2 would lease, so simulated runs lease alike.
pub fn phase_formula<E: Engine>(engine: &E, key: &ProvingKey, log_domain: u32, g2: G2Mode) -> u64 {
    if g2 == G2Mode::Gpu && engine.g2_in_tail(key) {
        gpud_prover::vram::estimate_with_g2(
            &key.shape(),
            log_domain,
            gpud_prover::vram::DEFAULT_MULTIPROCESSORS,
            true,
        )
        .phase_lease(false)
    } else {
        engine.vram_bytes(key, log_domain)
    }
}

fn phase_secs(out: &PhaseOutput, pad: f64) -> PhaseSecs {
    let t = &out.timings;
    PhaseSecs {
        pad,
        h: t.h,
        msms: t.msms(),
        msm_b_g2: t.msm_b_g2,
        finish: t.finish,
        engine: t.total,
    }
}

/// Puts the proving key's bases on the device as warm state, for the process's life: an
/// evictable lease (a plain one when `opts.evictable` is off) and the upload, plus the thread
/// that answers reclaim notices between phases. Done before the window, like the rest of the
/// setup; the process exits at the end without giving anything back (the kernel does).
pub fn warm_up<E, L>(
    engine: &Arc<E>,
    leaser: &Arc<L>,
    work: &Arc<Workload>,
    opts: WarmOptions,
    class: &str,
    label: &str,
) -> FarmResult<&'static Warm<'static, E, L>>
where
    E: Engine + 'static,
    L: Leaser + Send + Sync + 'static,
    L::Lease: Send + 'static,
{
    // Leaked: the warm state and what it borrows live as long as the process.
    let engine: &'static E = Box::leak(Box::new(engine.clone()));
    let leaser: &'static L = Box::leak(Box::new(leaser.clone()));
    let work: &'static Workload = Box::leak(Box::new(work.clone()));
    let request = LeaseRequest::new(
        engine.resident_bytes(&work.key),
        false,
        class,
        format!("{label} warm bases"),
    );
    let warm: &'static Warm<'static, E, L> = Box::leak(Box::new(Warm::new(
        engine, leaser, &work.key, request, opts,
    )));
    warm.load_first()?;
    std::thread::Builder::new()
        .name("farm-reclaimer".into())
        .spawn(move || {
            if let Err(e) = warm.reclaimer() {
                eprintln!("farm-worker: answering a reclaim: {e}");
            }
        })
        .map_err(|e| super::FarmError::Io {
            path: "thread".into(),
            source: e,
        })?;
    Ok(warm)
}

/// The host memory one synthesized attempt holds: the prover's estimate for the bundle's key
/// (its assignment and the phase's scratch, and the G2 MSM's when the tail computes it).
pub fn partition_host_bytes<E: Engine>(work: &Workload, engine: &E, g2: G2Mode) -> u64 {
    let key = &work.key;
    gpud_prover::host::estimate(
        &key.shape(),
        key.vk().ic.len(),
        work.log_domain(),
        g2 == G2Mode::Cpu,
        engine.needs_c(),
    )
    .partition()
}

/// What [`run`] returns at the end of the window.
#[derive(Debug, Clone)]
pub struct LaneResults {
    /// Finished attempts.
    pub records: Vec<Record>,
    /// Unfinished attempts.
    pub open: Vec<OpenAttempt>,
    /// What each phase lease asked for (with warm state: while the bases are resident).
    pub lease_bytes: u64,
    /// The VRAM formula of one phase (with warm state: while the bases are resident).
    pub formula_bytes: u64,
    /// What the warm state went through, with warm state.
    pub warm: Option<WarmReport>,
    /// CPU seconds the process used from the window's start to its end.
    pub cpu_secs: Option<f64>,
}

/// Runs `opts.lanes` lanes from the window's start to its end and returns what they recorded.
/// Lanes are detached threads: the ones blocked in a lock at the end are not waited for (they
/// stop at their next step); the caller is expected to report and exit. `warm`: the warm
/// state from [`warm_up`], or none (bases uploaded in every phase).
pub fn run<E, L>(
    engine: Arc<E>,
    leaser: Arc<L>,
    work: Arc<Workload>,
    memory: Arc<PhaseMemory>,
    opts: WorkerOptions,
    window: Window,
    warm: Option<&'static Warm<'static, E, L>>,
) -> FarmResult<LaneResults>
where
    E: Engine + 'static,
    L: Leaser + Send + Sync + 'static,
    L::Lease: Send + 'static,
{
    let formula_bytes = phase_formula(engine.as_ref(), &work.key, work.log_domain(), opts.g2);
    let lease_bytes = formula_bytes.saturating_add(opts.vram_pad);
    let lanes = opts.lanes.max(1);
    let partition_bytes = partition_host_bytes(&work, engine.as_ref(), opts.g2);
    let ctx = Arc::new(Ctx {
        engine,
        leaser,
        work,
        memory,
        clock: Clock::new(&window),
        end: window.duration(),
        lease_bytes,
        partition_bytes,
        warm,
        stop: AtomicBool::new(false),
        shared: Mutex::new(Shared {
            records: Vec::new(),
            states: vec![(LaneState::Idle, None); lanes],
        }),
        opts,
    });
    for lane in 0..lanes {
        let ctx = ctx.clone();
        std::thread::Builder::new()
            .name(format!("farm-lane-{lane}"))
            .spawn(move || ctx.lane(lane))
            .map_err(|e| super::FarmError::Io {
                path: "thread".into(),
                source: e,
            })?;
    }
    ctx.clock.sleep_until(0.0);
    let cpu_start = super::cpustat::process_cpu_secs();
    ctx.clock.sleep_until(ctx.end);
    let cpu_end = super::cpustat::process_cpu_secs();
    ctx.stop.store(true, Ordering::Relaxed);
    let (records, open) = ctx.snapshot();
    Ok(LaneResults {
        records,
        open,
        lease_bytes,
        formula_bytes,
        warm: warm.map(|w| w.report()),
        cpu_secs: cpu_start.zip(cpu_end).map(|(a, b)| (b - a).max(0.0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::farm::bundle::{g2_path, key_path, witness_path, write_g2_query, write_key};
    use gpud_prover::lease::LocalLeaser;
    use gpud_prover::paramgen::{self, Backend, Toxic};
    use group::{Curve, Group};

    #[test]
    fn go_lines_round_trip() {
        let w = Window::starting_in(Duration::from_millis(5), Duration::from_secs(2));
        assert_eq!(Window::parse_go(&w.go_line()), Some(w));
        assert!((w.duration() - 2.0).abs() < 1e-9);
        assert_eq!(Window::parse_go("go 5 3"), None);
        assert_eq!(Window::parse_go("stop 1 2"), None);
        assert_eq!(Window::parse_go("go x 2"), None);
    }

    fn workload(dir: &std::path::Path) -> Workload {
        workload_with(dir, G2Mode::Precomputed)
    }

    fn workload_with(dir: &std::path::Path, g2: G2Mode) -> Workload {
        let spec = CircuitSpec::parse("synthetic", 8).unwrap();
        let toxic = Toxic::random(&mut ChaCha20Rng::seed_from_u64(9));
        let (params, _) = paramgen::generate(spec.shape(), &toxic, Backend::Cpu).unwrap();
        write_key(&key_path(dir, &spec), &spec, &params).unwrap();
        write_g2_query(&g2_path(dir, &spec), &spec, &params).unwrap();
        for i in 0..2 {
            FarmWitness::synthesize(&spec, &params, 100 + i as u64)
                .unwrap()
                .write(&witness_path(dir, &spec, i), &spec)
                .unwrap();
        }
        Workload::load(dir, &spec, 2, g2).unwrap()
    }

    #[test]
    fn lanes_on_a_local_lock_prove_verified_and_never_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let work = Arc::new(workload(dir.path()));
        let opts = WorkerOptions {
            lanes: 3,
            class: "normal".into(),
            vram_pad: 1 << 30,
            tail: Duration::from_millis(4),
            interval: None,
            device: None,
            seed: 1,
            first_witness: 0,
            label: "test".into(),
            synthesize: false,
            host_leases: false,
            g2: G2Mode::Precomputed,
        };
        let sim = PhaseMemory::Sim {
            dir: dir.path().to_path_buf(),
            capacity: 4 << 30,
        };
        let window = Window::starting_in(Duration::from_millis(20), Duration::from_millis(800));
        let out = run(
            Arc::new(gpud_prover::CpuEngine),
            Arc::new(LocalLeaser::default()),
            work,
            Arc::new(sim),
            opts,
            window,
            None,
        )
        .unwrap();
        let ok: Vec<&Record> = out
            .records
            .iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .collect();
        assert!(ok.len() >= 3, "{:?}", out.records);
        assert!(
            out.records.iter().all(|r| r.outcome == Outcome::Ok),
            "{:?}",
            out.records
        );
        // Both witnesses were used, and by more than one lane.
        let seeds: std::collections::BTreeSet<u64> = ok.iter().map(|r| r.witness).collect();
        assert_eq!(seeds.len(), 2);
        // One lock: GPU phases never overlap; tails do overlap the next phase.
        let mut phases: Vec<(f64, f64)> = out
            .records
            .iter()
            .map(|r| (r.granted.unwrap(), r.released.unwrap()))
            .collect();
        phases.sort_by(|a, b| a.0.total_cmp(&b.0));
        for p in phases.windows(2) {
            assert!(p[0].1 <= p[1].0, "{p:?}");
        }
        assert!(out.lease_bytes == out.formula_bytes + (1 << 30));
        for r in &ok {
            assert!(r.tail_end.unwrap() >= r.released.unwrap() + 0.004);
        }
    }

    #[test]
    fn unlocked_lanes_run_out_of_simulated_memory_and_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let work = Arc::new(workload(dir.path()));
        let opts = WorkerOptions {
            lanes: 3,
            class: "normal".into(),
            // Two phases do not fit in 3 GiB.
            vram_pad: 2 << 30,
            tail: Duration::from_millis(1),
            interval: None,
            device: None,
            seed: 1,
            first_witness: 1,
            label: "test".into(),
            synthesize: false,
            host_leases: false,
            g2: G2Mode::Precomputed,
        };
        let sim = PhaseMemory::Sim {
            dir: dir.path().to_path_buf(),
            capacity: 3 << 30,
        };
        let window = Window::starting_in(Duration::from_millis(20), Duration::from_millis(800));
        let out = run(
            Arc::new(gpud_prover::CpuEngine),
            Arc::new(crate::baseline::UnlockedLeaser::new("sim", 0)),
            work,
            Arc::new(sim),
            opts,
            window,
            None,
        )
        .unwrap();
        let count = |o| out.records.iter().filter(|r| r.outcome == o).count();
        assert!(count(Outcome::Oom) > 0, "{:?}", out.records);
        assert!(count(Outcome::Ok) > 0, "{:?}", out.records);
        assert_eq!(count(Outcome::Failed) + count(Outcome::Unverified), 0);
    }

    fn g2_run(work: Workload, g2: G2Mode) -> LaneResults {
        let opts = WorkerOptions {
            lanes: 2,
            class: "normal".into(),
            vram_pad: 0,
            tail: Duration::from_millis(1),
            interval: None,
            device: None,
            seed: 3,
            first_witness: 0,
            label: "test".into(),
            synthesize: false,
            host_leases: false,
            g2,
        };
        let window = Window::starting_in(Duration::from_millis(20), Duration::from_millis(900));
        run(
            Arc::new(gpud_prover::CpuEngine),
            Arc::new(LocalLeaser::default()),
            Arc::new(work),
            Arc::new(PhaseMemory::Plain),
            opts,
            window,
            None,
        )
        .unwrap()
    }

    #[test]
    fn g2_on_the_gpu_or_the_cpu_computes_the_precomputed_sum_and_proves() {
        let dir = tempfile::tempdir().unwrap();
        let plain = g2_run(workload(dir.path()), G2Mode::Precomputed);
        assert!(plain.records.iter().all(|r| r.g2_secs.is_none()));
        for g2 in [G2Mode::Gpu, G2Mode::Cpu] {
            let work = workload_with(dir.path(), g2);
            assert_eq!(work.key.shape().b_g2, work.key.shape().b_g1);
            let out = g2_run(work, g2);
            assert!(!out.records.is_empty(), "{g2:?}");
            // Every proof verified, and only after its B_G2 equalled the precomputed sum.
            for r in &out.records {
                assert_eq!(r.outcome, Outcome::Ok, "{g2:?}: {r:?}");
                assert!(r.g2_secs.is_some_and(|s| s > 0.0), "{g2:?}: {r:?}");
                let in_phase = r.phase.unwrap().msm_b_g2;
                match g2 {
                    // Inside the phase, under the lease: its time is part of the phase.
                    G2Mode::Gpu => assert_eq!(Some(in_phase), r.g2_secs),
                    _ => assert_eq!(in_phase, 0.0),
                }
            }
            // G2 in the phase leases its bases and temporaries too (the formula with the G2
            // step); in the tail it does not.
            let with_g2 = gpud_prover::vram::estimate_with_g2(
                &workload(dir.path()).key.shape(),
                8,
                gpud_prover::vram::DEFAULT_MULTIPROCESSORS,
                true,
            );
            match g2 {
                // (At 2^8 every buffer is one 2 MiB page: the G2 step need not be the peak.)
                G2Mode::Gpu => assert_eq!(out.lease_bytes, with_g2.phase_lease(false)),
                _ => assert_eq!(out.lease_bytes, plain.lease_bytes),
            }
            assert!(out.cpu_secs.is_some_and(|s| s > 0.0));
        }
    }

    #[test]
    fn a_computed_g2_sum_that_differs_from_the_precomputed_one_is_not_a_proof() {
        let dir = tempfile::tempdir().unwrap();
        let mut work = workload_with(dir.path(), G2Mode::Cpu);
        for w in &mut work.witnesses {
            w.b_g2 = blstrs::G2Projective::from(w.b_g2).double().to_affine();
        }
        let out = g2_run(work, G2Mode::Cpu);
        assert!(!out.records.is_empty());
        for r in &out.records {
            assert_eq!(r.outcome, Outcome::Unverified, "{r:?}");
            assert!(r.error.as_deref().unwrap().contains("differs"), "{r:?}");
        }
    }
}
