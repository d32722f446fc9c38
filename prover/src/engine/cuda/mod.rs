//! The CUDA engine: the H polynomial, the four G1 MSMs and the G2 MSM for B on a GPU, under the
//! partition's lease.
//!
//! - The CUDA context lives for the process: devices are opened once ([`gpud_cuda::Device`],
//!   kept in a process-wide registry) and every lease becomes an [`Arena`] borrowed from its
//!   device, charged against that lease's VRAM.
//! - A GPU phase ([`phase`]): `a` and `b` are uploaded and turned into `h` on the device
//!   (C made there as `a · b`, [`CudaOptions::c_on_device`]); `h` stays there for the H MSM;
//!   the L, A and B_G1 scalars are uploaded for their MSMs, in the order the phase's plan
//!   gives ([`crate::plan::PhaseOrder`]); then the arena is closed under the lease's compute
//!   token (synchronize, trim the pool, check the memory went back) before the lease is
//!   released.
//! - Resident bases ([`CudaOptions::resident_bases`], on by default): the proving key's G1
//!   queries live in an arena of a separate VRAM-only lease ([`Engine::load_resident`]), so a
//!   phase uploads only scalars. Without residency each MSM uploads its query's bases into the
//!   phase's own arena (the phase lease then includes them; see [`crate::vram`]), from the
//!   proving key's own vectors, page-locked in place once per process
//!   ([`CudaOptions::pin_bases`]): a direct DMA instead of the driver's staged copy.
//! - G2 ([`CudaOptions::g2`]): on the GPU, the B_G2 MSM runs after the G1 MSMs inside the same
//!   phase and lease, over the same B scalars as B_G1; its bases are resident with the G1 ones
//!   (or uploaded like them), its temporaries are part of the phase lease ([`crate::vram`]).
//!   On the CPU it is left to the tail.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use blstrs::{G1Affine, G2Affine, G2Projective};
use gpud_client::Reservation;
use gpud_cuda::driver::{self, normalize_uuid};
use gpud_cuda::hpoly::CSource;
use gpud_cuda::msm::{ChunkBases, G1Bases, G2, G2Bases, MsmEngine, MsmError};
use gpud_cuda::{Arena, Device, RegisteredVec, kernels, nvrtc};

use super::calibration::{self, G2Speeds, g2_on_gpu_auto};
use super::{
    Engine, G1Sums, G2Placement, PhaseInput, PhaseOutput, PhaseTimings, free_in_background,
};
use crate::error::{ProverError, Result};
use crate::params::ProvingKey;
use crate::plan::{self, BasesAt, PhasePlan, PlanError, PlanInput};
use phase::{PhaseBases, PhaseScalars};

pub mod phase;
use crate::vram::{self, VramEstimate};

/// How the CUDA engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaOptions {
    /// Keep each proving key's G1 bases on the device under a long-lived VRAM-only lease
    /// (default). Off, every phase uploads them under its own lease: for cards too small to
    /// hold every prover's resident copy.
    pub resident_bases: bool,
    /// Without residency: page-lock the proving key's G1 bases in host memory (in place, once
    /// per process and key, [`CudaEngine::pin_bases`]), so that every phase's upload of them is
    /// a direct DMA. Costs page-locked host memory of the bases' size per process (default
    /// on). Where the driver refuses, uploads go on from ordinary memory.
    pub pin_bases: bool,
    /// Where the G2 MSM for B runs (default [`G2Placement::Auto`]: on the GPU when the phase
    /// with it fits the smallest visible GPU, see [`CudaEngine::g2_on_gpu`]).
    pub g2: G2Placement,
    /// The phase lease to plan for, in bytes (default none: the unchunked plan). The phase
    /// always plans within the lease it is given ([`crate::plan`]); this sets what the lease
    /// asks for, so a smaller budget runs the MSMs in more chunks, and a larger one may let
    /// the copies of a and b overlap the other MSMs ([`crate::plan::PhaseOrder`]).
    pub vram_budget: Option<u64>,
    /// Make the C evaluations on the device as `a · b` (default on): every constraint of a
    /// satisfied system asserts exactly that, so C need not cross the host link (a quarter of
    /// the phase's scalar bytes). Off, C is copied like A and B; the proofs are the same.
    pub c_on_device: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            resident_bases: true,
            pin_bases: true,
            g2: G2Placement::Auto,
            vram_budget: None,
            c_on_device: true,
        }
    }
}

/// The device with this UUID, opened once per process and kept for its lifetime (the CUDA
/// context must outlive every lease, and resident data outlives single phases).
pub fn process_device(uuid: &str) -> Result<&'static Device> {
    static DEVICES: OnceLock<Mutex<Vec<&'static Device>>> = OnceLock::new();
    let mut devices = DEVICES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let want = normalize_uuid(uuid);
    if let Some(d) = devices
        .iter()
        .find(|d| normalize_uuid(&d.info().uuid) == want)
    {
        return Ok(d);
    }
    let dev: &'static Device = Box::leak(Box::new(Device::open(uuid)?));
    devices.push(dev);
    Ok(dev)
}

/// A key's four G1 queries on the device, and its B_G2 query when G2 runs on the GPU.
struct KeyBases<'a> {
    h: G1Bases<'a>,
    l: G1Bases<'a>,
    a: G1Bases<'a>,
    b_g1: G1Bases<'a>,
    b_g2: Option<G2Bases<'a>>,
}

impl<'a> KeyBases<'a> {
    fn upload(
        arena: &'a Arena<'a>,
        key: &ProvingKey,
        with_g2: bool,
    ) -> std::result::Result<Self, MsmError> {
        let p = key.params();
        Ok(Self {
            h: G1Bases::upload(arena, &p.h)?,
            l: G1Bases::upload(arena, &p.l)?,
            a: G1Bases::upload(arena, &p.a)?,
            b_g1: G1Bases::upload(arena, &p.b_g1)?,
            b_g2: if with_g2 {
                Some(G2Bases::upload(arena, &p.b_g2)?)
            } else {
                None
            },
        })
    }
}

self_cell::self_cell!(
    /// Resident bases: the arena of the VRAM-only lease and the bases allocated in it.
    struct Resident {
        owner: Arena<'static>,
        #[covariant]
        dependent: KeyBases,
    }
);

/// Runs the GPU phase on NVIDIA GPUs through `gpud-cuda`.
pub struct CudaEngine {
    opts: CudaOptions,
    multiprocessors: u32,
    /// Memory of the smallest visible GPU (the `auto` G2 placement's bound).
    smallest_device_mem: u64,
    /// Resident bases by (key id, device UUID).
    resident: Mutex<HashMap<(u64, String), Resident>>,
    /// Page-locked bases by key id, or why the driver refused them (not asked again).
    pinned: Mutex<HashMap<u64, PinnedBases>>,
    /// One G2 MSM timed on each side ([`Engine::calibrate`]): what `auto` places B_G2 by.
    g2_speeds: Mutex<Option<G2Speeds>>,
}

/// A key's page-locked base vectors: the G1 queries, and B_G2 when G2 runs on the GPU.
struct PinnedVecs {
    g1: Vec<RegisteredVec<G1Affine>>,
    g2: Option<RegisteredVec<G2Affine>>,
}

impl PinnedVecs {
    fn bytes(&self) -> usize {
        self.g1.iter().map(|r| r.bytes()).sum::<usize>() + self.g2.as_ref().map_or(0, |r| r.bytes())
    }
}

type PinnedBases = std::result::Result<PinnedVecs, String>;

impl std::fmt::Debug for CudaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEngine")
            .field("opts", &self.opts)
            .field("multiprocessors", &self.multiprocessors)
            .field("resident_keys", &self.lock_resident().len())
            .finish()
    }
}

fn engine_error(message: impl Into<String>) -> ProverError {
    ProverError::Engine {
        engine: "cuda",
        message: message.into(),
    }
}

impl CudaEngine {
    /// An engine for this machine's GPUs. Fails without a CUDA driver or NVRTC; compiles the
    /// kernels for every visible architecture now (or reads them from the disk cache), so no
    /// lease is held while NVRTC runs.
    pub fn new(opts: CudaOptions) -> Result<Self> {
        let devices = driver::list_devices()?;
        if devices.is_empty() {
            return Err(engine_error("no CUDA device is visible"));
        }
        let mut archs: Vec<String> = devices.iter().map(|d| d.arch()).collect();
        archs.dedup();
        let mut modules = vec![&kernels::NTT, &kernels::MSM];
        if opts.g2 != G2Placement::Cpu {
            modules.push(&kernels::MSM_G2);
        }
        for arch in &archs {
            for module in &modules {
                nvrtc::load_or_compile(module, arch)?;
            }
        }
        Ok(Self {
            opts,
            multiprocessors: devices
                .iter()
                .map(|d| d.multiprocessors)
                .max()
                .unwrap_or(vram::DEFAULT_MULTIPROCESSORS),
            smallest_device_mem: devices.iter().map(|d| d.total_mem).min().unwrap_or(0),
            resident: Mutex::new(HashMap::new()),
            pinned: Mutex::new(HashMap::new()),
            g2_speeds: Mutex::new(None),
        })
    }

    /// Page-locks `key`'s four G1 base vectors (and B_G2 when G2 runs on the GPU) in place
    /// (once per key; later calls return the first answer), when the options ask for it and the bases are not resident. Returns the
    /// bytes page-locked. A refusal (e.g. the driver's limit on page-locked memory) is an error
    /// here and leaves the bases in ordinary memory; phases still run.
    pub fn pin_bases(&self, key: &ProvingKey, dev: &Device) -> Result<usize> {
        if !self.opts.pin_bases || self.opts.resident_bases {
            return Ok(0);
        }
        let mut map = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(key.id()).or_insert_with(|| {
            let p = key.params();
            let why =
                |e: gpud_cuda::Error| format!("page-locking the bases of {}: {e}", key.name());
            let g1 = [&p.h, &p.l, &p.a, &p.b_g1]
                .into_iter()
                .filter(|v| !v.is_empty())
                .map(|v| RegisteredVec::register(dev, std::sync::Arc::clone(v)))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(why)?;
            let g2 = if self.g2_on_gpu(key) && !p.b_g2.is_empty() {
                Some(RegisteredVec::register(dev, std::sync::Arc::clone(&p.b_g2)).map_err(why)?)
            } else {
                None
            };
            Ok(PinnedVecs { g1, g2 })
        });
        match entry {
            Ok(regs) => Ok(regs.bytes()),
            Err(why) => Err(engine_error(why.clone())),
        }
    }

    /// The options in effect.
    pub fn options(&self) -> CudaOptions {
        self.opts
    }

    /// Whether the G2 MSM for B of proofs with `key` runs on the GPU, inside the phase:
    /// `gpu` yes, `cpu` no, `auto` when the key's B query is not empty, the resident bases
    /// (with B_G2) plus the phase lease with the G2 step fit the smallest visible GPU's memory,
    /// and the GPU was no slower at a G2 MSM than the host's cores when
    /// [`Engine::calibrate`] timed both (else G2 stays in the CPU tail, and the phase is what
    /// it was without it). One answer per key once calibrated: the lease sizes, the resident
    /// set and the phase agree.
    pub fn g2_on_gpu(&self, key: &ProvingKey) -> bool {
        match self.opts.g2 {
            G2Placement::Cpu => false,
            G2Placement::Gpu => true,
            G2Placement::Auto => g2_on_gpu_auto(self.g2_fits(key), self.g2_speeds().as_ref()),
        }
    }

    fn g2_fits(&self, key: &ProvingKey) -> bool {
        vram::g2_fits_on_gpu(
            &key.shape(),
            self.multiprocessors,
            self.opts.resident_bases,
            self.smallest_device_mem,
        )
    }

    /// What [`Engine::calibrate`] measured, if it ran.
    pub fn g2_speeds(&self) -> Option<G2Speeds> {
        *self.g2_speeds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Times the calibration sample's G2 MSM on the GPU under `arena` and on the host's cores,
    /// one warm-up and the best of two runs each, and checks that both sides agree.
    fn measure_g2(&self, arena: &Arena<'_>) -> Result<G2Speeds> {
        let (bases, scalars) = calibration::sample();
        let best = |f: &dyn Fn() -> Result<G2Projective>| -> Result<(G2Projective, f64)> {
            let sum = f()?;
            let mut secs = f64::INFINITY;
            for _ in 0..2 {
                let t = Instant::now();
                std::hint::black_box(f()?);
                secs = secs.min(t.elapsed().as_secs_f64());
            }
            Ok((sum, secs))
        };
        let (gpu_sum, gpu_secs) = {
            let on_device = G2Bases::upload(arena, &bases)?;
            let engine = MsmEngine::<G2>::for_group(arena)?;
            best(&|| Ok(engine.msm(&on_device, &scalars)?))?
        };
        let (cpu_sum, cpu_secs) = best(&|| Ok(crate::msm::g2(&bases, &scalars)))?;
        if gpu_sum != cpu_sum {
            return Err(engine_error(
                "the G2 MSM of the calibration sample differs between the GPU and blst",
            ));
        }
        Ok(G2Speeds {
            points: bases.len(),
            gpu_secs,
            cpu_secs,
        })
    }

    fn lock_resident(&self) -> MutexGuard<'_, HashMap<(u64, String), Resident>> {
        self.resident.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key`'s bases are resident on some device.
    pub fn is_resident(&self, key: &ProvingKey) -> bool {
        self.lock_resident().keys().any(|(id, _)| *id == key.id())
    }

    fn run_phase(
        &self,
        arena: &Arena<'_>,
        key: &ProvingKey,
        input: PhaseInput<'_>,
        phase_start: Instant,
        t: &mut PhaseTimings,
    ) -> Result<(G1Sums, Option<G2Projective>)> {
        let PhaseInput {
            domain,
            a,
            b,
            c,
            scalars: s,
        } = input;
        let m = domain.size();
        let p = key.params();
        let slot = (key.id(), normalize_uuid(&arena.info().uuid));
        let g2 = self.g2_on_gpu(key);
        // Held through the phase: the resident bases cannot be evicted while it reads them (an
        // eviction waits for the phase's end, when nothing of it is on the device).
        let resident_map = self.lock_resident();
        let resident = resident_map.get(&slot).map(|r| r.borrow_dependent());
        // Once per key (a no-op after); a refusal leaves the streamed copies to the driver's
        // staged path.
        let pinned = resident.is_none() && self.pin_bases(key, arena.device()).is_ok();
        let bases_at = match resident {
            Some(_) => BasesAt::Resident,
            None => BasesAt::Host {
                pinned: pinned && self.opts.pin_bases,
            },
        };
        // Planned before anything is allocated: a lease no plan fits fails here, typed.
        let plan = self.plan_for(
            key,
            m,
            bases_at,
            arena.ledger().limit,
            arena.info().multiprocessors,
            g2,
        )?;
        t.planned_peak = plan.peak;
        t.setup = phase_start.elapsed().as_secs_f64();
        let bases = PhaseBases {
            h: ChunkBases::device_or_host(resident.map(|r| &r.h), &p.h),
            l: ChunkBases::device_or_host(resident.map(|r| &r.l), &p.l),
            a: ChunkBases::device_or_host(resident.map(|r| &r.a), &p.a),
            b_g1: ChunkBases::device_or_host(resident.map(|r| &r.b_g1), &p.b_g1),
            b_g2: g2.then(|| {
                ChunkBases::device_or_host(resident.and_then(|r| r.b_g2.as_ref()), &p.b_g2[..])
            }),
        };
        // Made on the device when the options say so, or when synthesis did not keep C.
        let c_source = if self.opts.c_on_device || c.is_empty() {
            CSource::ProductOfAB
        } else {
            CSource::Host(&c)
        };
        let scalars = PhaseScalars {
            a: &a,
            b: &b,
            c: c_source,
            aux: s.aux,
        };
        let out = phase::run(
            arena,
            &plan,
            &bases,
            scalars,
            || (s.a_query(), s.b_query()),
            t,
        );
        drop(resident_map);
        // Gigabytes at 2^27: freed off the phase's thread.
        free_in_background((a, b, c));
        let out = out?;
        free_in_background(out.queries);
        Ok((out.sums, out.b_g2))
    }

    /// The phase's plan for a lease of `budget` bytes ([`plan::plan`]).
    fn plan_for(
        &self,
        key: &ProvingKey,
        m: usize,
        bases: BasesAt,
        budget: u64,
        multiprocessors: u32,
        g2_on_gpu: bool,
    ) -> std::result::Result<PhasePlan, PlanError> {
        plan::plan(&PlanInput {
            shape: key.shape(),
            log_domain: m.trailing_zeros(),
            multiprocessors,
            g2_on_gpu,
            bases,
            budget,
        })
    }
}

impl Engine for CudaEngine {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn gpu_phase(
        &self,
        lease: &dyn Reservation,
        key: &ProvingKey,
        input: PhaseInput<'_>,
    ) -> Result<PhaseOutput> {
        let start = Instant::now();
        let token = lease
            .compute_token()
            .ok_or_else(|| engine_error("the GPU phase needs a lease holding the compute slot"))?;
        let dev = process_device(lease.device_uuid())?;
        let arena = dev.reserve(lease)?;
        let mut t = PhaseTimings::default();
        let sums = self.run_phase(&arena, key, input, start, &mut t);
        t.measured_peak = arena.ledger().peak;
        // Success or not, nothing of this phase may outlive its lease: synchronize, trim and
        // check, under the lease's compute token.
        let t0 = Instant::now();
        let closed = arena.close(&token);
        t.finish = t0.elapsed().as_secs_f64();
        let (sums, b_g2) = sums?;
        closed?;
        t.total = start.elapsed().as_secs_f64();
        Ok(PhaseOutput {
            sums,
            b_g2,
            timings: t,
        })
    }

    /// A lease for the calibration sample's bases and G2 MSM, when `auto` has a choice to
    /// make for `key` (it fits, and nothing was measured yet).
    fn calibration_vram(&self, key: &ProvingKey) -> Option<u64> {
        if self.opts.g2 != G2Placement::Auto || self.g2_speeds().is_some() || !self.g2_fits(key) {
            return None;
        }
        Some(vram::g2_msm_charge(
            calibration::SAMPLE_POINTS,
            self.multiprocessors,
        ))
    }

    fn calibrate(&self, key: &ProvingKey, lease: &dyn Reservation) -> Result<()> {
        if self.calibration_vram(key).is_none() {
            return Ok(());
        }
        let token = lease
            .compute_token()
            .ok_or_else(|| engine_error("calibrating needs a lease holding the compute slot"))?;
        let arena = process_device(lease.device_uuid())?.reserve(lease)?;
        let measured = self.measure_g2(&arena);
        let closed = arena.close(&token);
        let speeds = measured?;
        closed?;
        *self.g2_speeds.lock().unwrap_or_else(|e| e.into_inner()) = Some(speeds);
        Ok(())
    }

    fn vram(&self, key: &ProvingKey, log_domain: u32) -> VramEstimate {
        vram::estimate_with_g2(
            &key.shape(),
            log_domain,
            self.multiprocessors,
            self.g2_on_gpu(key),
        )
    }

    /// The plan's peak for [`CudaOptions::vram_budget`] (unbounded: every MSM in one chunk,
    /// the [`crate::vram`] formula); a budget no plan fits asks for the smallest that does.
    fn vram_bytes(&self, key: &ProvingKey, log_domain: u32) -> u64 {
        let bases = if self.is_resident(key) {
            BasesAt::Resident
        } else {
            BasesAt::Host {
                pinned: self.opts.pin_bases,
            }
        };
        let budget = self.opts.vram_budget.unwrap_or(u64::MAX);
        match self.plan_for(
            key,
            1usize << log_domain,
            bases,
            budget,
            self.multiprocessors,
            self.g2_on_gpu(key),
        ) {
            Ok(p) => p.peak,
            Err(PlanError::DoesNotFit { needed, .. }) => needed,
            // No H step for this domain: no lease holds the phase.
            Err(_) => u64::MAX,
        }
    }

    fn host_pinned(&self, key: &ProvingKey) -> crate::host::PinnedHost {
        let s = key.shape();
        let g2 = self.g2_on_gpu(key) && s.b_g2 > 0;
        // Bases page-locked in place (uploads without residency), each query registered whole.
        let bases = if self.opts.pin_bases && !self.opts.resident_bases {
            crate::host::bases_bytes(&s, g2)
        } else {
            0
        };
        // The scalars come from ordinary memory: each phase's MSM engines (G1, and G2 when it
        // runs there) stage them through their page-locked buffers, and the H step a, b and c
        // through its own.
        let engines = if g2 { 2 } else { 1 };
        crate::host::PinnedHost {
            bases,
            staging: engines * gpud_cuda::msm::STAGING_HOST_BYTES
                + gpud_cuda::hpoly::STAGING_HOST_BYTES,
        }
    }

    fn g2_in_tail(&self, key: &ProvingKey) -> bool {
        !self.g2_on_gpu(key)
    }

    fn needs_c(&self) -> bool {
        !self.opts.c_on_device
    }

    fn resident_bytes(&self, key: &ProvingKey) -> u64 {
        if !self.opts.resident_bases {
            return 0;
        }
        let s = key.shape();
        let g1: u64 = [s.h, s.l, s.a, s.b_g1]
            .into_iter()
            .map(vram::bases_charge)
            .sum();
        let g2 = if self.g2_on_gpu(key) && s.b_g2 > 0 {
            vram::g2_bases_charge(s.b_g2)
        } else {
            0
        };
        g1 + g2
    }

    fn load_resident(&self, key: &ProvingKey, lease: &dyn Reservation) -> Result<()> {
        if !self.opts.resident_bases {
            return Ok(());
        }
        let dev = process_device(lease.device_uuid())?;
        let slot = (key.id(), normalize_uuid(&dev.info().uuid));
        if self.lock_resident().contains_key(&slot) {
            return Err(engine_error(format!(
                "the bases of {} are already resident on {}",
                key.name(),
                dev.info().uuid
            )));
        }
        let arena = dev.reserve(lease)?;
        let with_g2 = self.g2_on_gpu(key) && key.shape().b_g2 > 0;
        let resident = Resident::try_new(arena, |arena| KeyBases::upload(arena, key, with_g2))?;
        self.lock_resident().insert(slot, resident);
        Ok(())
    }

    fn unload_resident(&self, key: &ProvingKey, compute: Option<&dyn Reservation>) -> Result<()> {
        let taken: Vec<((u64, String), Resident)> = {
            let mut map = self.lock_resident();
            let slots: Vec<_> = map
                .keys()
                .filter(|(id, _)| *id == key.id())
                .cloned()
                .collect();
            slots
                .into_iter()
                .filter_map(|s| map.remove(&s).map(|r| (s, r)))
                .collect()
        };
        let mut first_error = None;
        for ((_, uuid), resident) in taken {
            let arena = resident.into_owner();
            let token = compute
                .filter(|c| normalize_uuid(c.device_uuid()) == uuid)
                .and_then(|c| c.compute_token());
            match token {
                Some(token) => {
                    if let Err(e) = arena.close(&token) {
                        first_error.get_or_insert(e.into());
                    }
                }
                // No compute slot on that device: freed unchecked (the arena waits for the
                // main stream and destroys its pool).
                None => drop(arena),
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
