//! Where the GPU phase of a proof runs: the H polynomial (seven FFTs), the four G1 MSMs and,
//! on the CUDA engine, the G2 MSM for B.
//!
//! A proof splits into a *GPU phase*, which a GPU engine runs under a gpud lease, and a *CPU
//! tail* (the assembly, and the G2 MSM for B when the engine left it to the host), which runs
//! on the host after the lease is released. [`Engine`] is the seam between the two:
//! [`CpuEngine`] runs the GPU phase on the host (rayon FFTs, blst Pippenger) and leaves G2 to
//! the tail; [`CudaEngine`] runs it on a GPU, with the G2 MSM inside the phase unless told
//! otherwise ([`G2Placement`]).
//!
//! The trait is shaped so that a GPU engine makes no extra copies and keeps what it can on the
//! device:
//! - [`Engine::gpu_phase`] is one call: it takes `a`, `b`, `c` by value and the G1 scalars, and
//!   returns the four G1 sums, so `h` never leaves the device between the H polynomial and the
//!   H MSM.
//! - Bases are named by query of a [`ProvingKey`], never by slice, so a GPU engine can keep a
//!   key's bases resident across proofs ([`Engine::load_resident`], under a separate,
//!   long-lived VRAM-only lease) and upload only scalars.
//! - Every call carries the lease ([`Reservation`]): the byte budget, and the compute token
//!   that device-global operations (synchronize, pool trim, mem-info) require. The engine must
//!   have synchronized and trimmed when `gpu_phase` returns: the pipeline releases the lease
//!   right after.

pub mod calibration;
mod cpu;
mod cuda;
mod simulated;

pub use cpu::CpuEngine;
pub use simulated::SimulatedResident;

/// Which engine a command runs the GPU phase on (the `--engine` of the prover and the
/// benchmarks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    /// `cuda` when a CUDA driver and a GPU are present, else `cpu`.
    Auto,
    /// H polynomial and G1 MSMs on the GPU.
    Cuda,
    /// Everything on the CPU.
    Cpu,
}

impl EngineChoice {
    /// `Auto` resolved on this machine.
    pub fn resolve(self) -> EngineChoice {
        match self {
            EngineChoice::Auto => {
                let gpu = gpud_cuda::driver::list_devices().is_ok_and(|d| !d.is_empty());
                if gpu {
                    EngineChoice::Cuda
                } else {
                    EngineChoice::Cpu
                }
            }
            e => e,
        }
    }
}
pub use cuda::{CudaEngine, CudaOptions, phase as cuda_phase, process_device};

/// Where the CUDA engine computes the G2 MSM for B (the `--g2` of the prover and the
/// benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum G2Placement {
    /// On the GPU, inside the phase and under its lease, when the phase with it fits the
    /// smallest visible GPU's memory and, once [`Engine::calibrate`] has timed one G2 MSM on
    /// each side ([`calibration`]; the pipeline does before its first proof), the GPU was no
    /// slower at it than the host's cores; else in the CPU tail.
    #[default]
    Auto,
    /// On the GPU, inside the phase: its bases join the resident set, its temporaries the
    /// phase lease.
    Gpu,
    /// In the CPU tail after the lease is released (small cards, CPU-rich hosts).
    Cpu,
}

use blstrs::{G1Projective, G2Projective, Scalar};
use gpud_client::Reservation;
use serde::Serialize;

use crate::error::Result;
use crate::fft::Domain;
use crate::params::ProvingKey;
use crate::synthesis::Density;
use crate::vram::VramEstimate;

/// The assignment the G1 MSMs need, borrowed from the synthesized witness.
#[derive(Debug, Clone, Copy)]
pub struct G1Scalars<'a> {
    /// Public inputs, `input[0] = 1`.
    pub input: &'a [Scalar],
    /// Private variables.
    pub aux: &'a [Scalar],
    /// Aux variables present in the A query (inputs are all present).
    pub a_aux_density: &'a Density,
    /// Inputs present in the B query.
    pub b_input_density: &'a Density,
    /// Aux variables present in the B query.
    pub b_aux_density: &'a Density,
}

impl G1Scalars<'_> {
    /// The scalars of the A query, in base order: every input, then the aux variables present
    /// in A (the query's bases are exactly these, back to back).
    pub fn a_query(&self) -> Vec<Scalar> {
        let mut out = Vec::with_capacity(self.input.len() + self.a_aux_density.count());
        out.extend_from_slice(self.input);
        self.a_aux_density.select_into(self.aux, &mut out);
        out
    }

    /// The scalars of the B query in G1 (and G2), in base order: the inputs present in B, then
    /// the aux variables present in B.
    pub fn b_query(&self) -> Vec<Scalar> {
        let mut out = Vec::with_capacity(self.b_input_density.count() + self.b_aux_density.count());
        self.b_input_density.select_into(self.input, &mut out);
        self.b_aux_density.select_into(self.aux, &mut out);
        out
    }
}

/// Drops `value` on a thread of its own. Freeing the gigabytes of a large partition's vectors
/// (the kernel returns their pages one by one) takes the better part of a second per 4 GiB,
/// time the GPU phase has no reason to wait for.
pub(crate) fn free_in_background<T: Send + 'static>(value: T) {
    let spawned = std::thread::Builder::new()
        .name("gpud-prover-free".into())
        .spawn(move || drop(value));
    // Without a thread (the process is out of them) the value was dropped here instead.
    drop(spawned);
}

/// The four G1 sums of a proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct G1Sums {
    /// `Σ h_i · H_i`.
    pub h: G1Projective,
    /// `Σ aux_i · L_i`.
    pub l: G1Projective,
    /// `Σ input_i · A_i + Σ_{dense} aux_i · A_i`.
    pub a: G1Projective,
    /// `Σ_{dense} input_i · B_i + Σ_{dense} aux_i · B_i` over G1.
    pub b_g1: G1Projective,
}

/// Seconds of each stage of one GPU phase, measured on the host (each stage waits for its
/// result, so device work is inside its stage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseTimings {
    /// From the phase's start to the H step's: the lease's arena, the plan, the kernels.
    pub setup: f64,
    /// H polynomial: uploads of a, b, c and the seven transforms.
    pub h: f64,
    /// The part of [`PhaseTimings::h`] until a, b and c were on the device (the last
    /// transforms run after it).
    pub h_upload: f64,
    /// Waiting, after the L MSM, for the A and B scalars the CPU selects meanwhile.
    pub scalar_wait: f64,
    /// The H MSM (`m − 1` points).
    pub msm_h: f64,
    /// The L MSM (aux variables).
    pub msm_l: f64,
    /// The A MSM (inputs and the aux variables present in A).
    pub msm_a: f64,
    /// The B MSM over G1.
    pub msm_b: f64,
    /// The B MSM over G2 when the engine ran it in the phase; 0 when it is left to the CPU
    /// tail.
    pub msm_b_g2: f64,
    /// Bytes of bases copied from host memory during the phase (an engine without resident
    /// bases streams them chunk by chunk inside each MSM, overlapped with its compute, so their
    /// time is inside the MSMs' times); 0 when the bases are resident.
    pub bases_streamed: u64,
    /// Synchronize, trim and check that the lease's memory went back.
    pub finish: f64,
    /// The whole phase.
    pub total: f64,
    /// VRAM the engine's plan charges at its peak, in bytes (0 for an engine without a plan).
    pub planned_peak: u64,
    /// The most VRAM the phase's allocations charged at once (the lease arena's high-water
    /// mark), in bytes.
    pub measured_peak: u64,
    /// Whether a and b were copied to the device while the L, A and B MSMs ran
    /// ([`crate::plan::PhaseOrder::MsmsFirst`]; then [`PhaseTimings::h_upload`] overlaps the
    /// MSMs and [`PhaseTimings::h`] is the transforms alone).
    pub overlapped: bool,
}

impl PhaseTimings {
    /// The MSMs together (the G2 one when it ran in the phase).
    pub fn msms(&self) -> f64 {
        self.msm_h + self.msm_l + self.msm_a + self.msm_b + self.msm_b_g2
    }

    /// The part of [`PhaseTimings::total`] in no timed stage (0 when the stages cover it).
    pub fn untimed(&self) -> f64 {
        (self.total - self.setup - self.h - self.msms() - self.scalar_wait - self.finish).max(0.0)
    }
}

/// What a GPU phase returns.
#[derive(Debug, Clone, Copy)]
pub struct PhaseOutput {
    /// The G1 sums.
    pub sums: G1Sums,
    /// `Σ_{dense} input_i · B_i + Σ_{dense} aux_i · B_i` over G2, when the engine computed it
    /// in the phase; `None` leaves it to the CPU tail.
    pub b_g2: Option<G2Projective>,
    /// Where the time went.
    pub timings: PhaseTimings,
}

/// The inputs of one GPU phase: the constraint evaluations (consumed) and the G1 scalars.
#[derive(Debug)]
pub struct PhaseInput<'a> {
    /// The evaluation domain (`m = 2^k` points).
    pub domain: &'a Domain,
    /// Evaluations of the A combinations (one per constraint; fewer than `m`: pad with zeros).
    pub a: Vec<Scalar>,
    /// Evaluations of the B combinations.
    pub b: Vec<Scalar>,
    /// Evaluations of the C combinations; empty when synthesis did not keep them (the engine
    /// then makes them as a · b).
    pub c: Vec<Scalar>,
    /// The assignment and densities for the G1 MSMs.
    pub scalars: G1Scalars<'a>,
}

/// The lease a GPU phase runs under, with the phase's safe points: places between its steps
/// where the engine holds nothing on the device, so the lease may be given back when gpud asks
/// for it (a yield notice: a critical request waits for the compute slot) and taken again.
pub trait PhaseLease {
    /// The lease held now (another one after a safe point that gave it back).
    fn reservation(&self) -> &dyn Reservation;
    /// A safe point after the step `after` (for the record, e.g. `"H MSM"`). If gpud asked the
    /// lease to yield, releases it and blocks until the same request is granted again on the
    /// same device; the engine continues on [`PhaseLease::reservation`].
    fn safe_point(&mut self, after: &'static str) -> Result<()>;
}

/// A [`PhaseLease`] that never gives its lease back (a run without a daemon, a benchmark).
pub struct HeldLease<'a>(pub &'a dyn Reservation);

impl PhaseLease for HeldLease<'_> {
    fn reservation(&self) -> &dyn Reservation {
        self.0
    }
    fn safe_point(&mut self, _after: &'static str) -> Result<()> {
        Ok(())
    }
}

/// Runs the GPU phase of a proof: the H polynomial and the G1 MSMs.
///
/// Engines may rely on the lengths fitting the key: [`crate::prove::gpu_phase`] only takes a
/// [`crate::prove::Synthesized`], which [`crate::prove::synthesize`] makes after
/// [`ProvingKey::check_fits`].
pub trait Engine: Send + Sync {
    /// Short name for logs and reports ("cpu", "cuda").
    fn name(&self) -> &'static str;

    /// The H polynomial `h = (a·b − c)/Z` (its `m − 1` coefficients, with bellperson's coset)
    /// and the G1 MSMs over the key's H, L, A and B_G1 queries, under `lease`: allocate within
    /// its VRAM, and synchronize, trim and check before returning (the lease is released right
    /// after).
    fn gpu_phase(
        &self,
        lease: &dyn Reservation,
        key: &ProvingKey,
        input: PhaseInput<'_>,
    ) -> Result<PhaseOutput>;

    /// [`Engine::gpu_phase`] with safe points: an engine whose steps leave nothing on the
    /// device calls [`PhaseLease::safe_point`] between them, so that a yield notice is acted on
    /// within a step rather than at the end of the phase. The default has none inside the
    /// phase (the CUDA engine keeps `h` and its arena on the device throughout): the lease goes
    /// back when the phase ends.
    fn gpu_phase_with_safe_points(
        &self,
        lease: &mut dyn PhaseLease,
        key: &ProvingKey,
        input: PhaseInput<'_>,
    ) -> Result<PhaseOutput> {
        self.gpu_phase(lease.reservation(), key, input)
    }

    /// The VRAM of the {VRAM + compute} lease [`Engine::calibrate`] measures under, when the
    /// engine has a choice about proofs with `key` to make from measured speeds; `None` (the
    /// default) when it has none.
    fn calibration_vram(&self, _key: &ProvingKey) -> Option<u64> {
        None
    }

    /// Measures, under `lease`, what the engine's measured choices about `key` need (the CUDA
    /// engine: where the B_G2 MSM runs, [`G2Placement::Auto`]). Called once, before anything
    /// else is asked about `key`, so that every answer about it agrees.
    fn calibrate(&self, _key: &ProvingKey, _lease: &dyn Reservation) -> Result<()> {
        Ok(())
    }

    /// The device memory of a proof over `2^log_domain` with this key: what stays resident
    /// and what each phase needs. See [`crate::vram`].
    fn vram(&self, key: &ProvingKey, log_domain: u32) -> VramEstimate {
        crate::vram::estimate(&key.shape(), log_domain)
    }

    /// The VRAM each partition's {VRAM + compute} lease asks for: the working memory, plus the
    /// bases when they are not resident on the device right now.
    fn vram_bytes(&self, key: &ProvingKey, log_domain: u32) -> u64 {
        self.vram(key, log_domain).phase_lease(false)
    }

    /// Page-locked host memory this engine keeps for proofs with `key`: bases it page-locks
    /// in place for the process's life (memory the key already occupies), and the staging
    /// buffers of one GPU phase (one phase runs at a time per process). The pipeline books
    /// them in the process's resident host lease, so that a phase never waits for host memory
    /// that waiting partitions hold (see [`crate::pipeline`]). Nothing for engines that lock
    /// nothing (the default).
    fn host_pinned(&self, _key: &ProvingKey) -> crate::host::PinnedHost {
        crate::host::PinnedHost::default()
    }

    /// Whether the phase reads the C evaluations (the default). An engine that makes them from
    /// A and B itself (the CUDA engine with [`CudaOptions::c_on_device`]) says no, and the
    /// pipeline synthesizes without keeping them ([`crate::synthesis::SynthesisOptions::keep_c`]).
    /// Every engine still accepts an assignment without C (it makes it as a · b).
    fn needs_c(&self) -> bool {
        true
    }

    /// Whether the CPU tail computes the G2 MSM for B (the default; the CUDA engine may run it
    /// inside the phase): the tail's host memory and CPUs depend on it.
    fn g2_in_tail(&self, _key: &ProvingKey) -> bool {
        true
    }

    /// Bytes of the VRAM-only lease under which this engine would keep `key`'s bases
    /// resident; 0 when it keeps nothing resident (the default).
    fn resident_bytes(&self, _key: &ProvingKey) -> u64 {
        0
    }

    /// Uploads `key`'s bases under `lease` (VRAM-only, [`Engine::resident_bytes`] bytes, on
    /// the device where the phases will run); they stay until [`Engine::unload_resident`].
    /// The caller keeps the lease until then.
    fn load_resident(&self, _key: &ProvingKey, _lease: &dyn Reservation) -> Result<()> {
        Ok(())
    }

    /// Frees `key`'s resident bases. `compute` is a lease holding the compute slot of their
    /// device, under which the memory is trimmed and checked; without one (an error path) the
    /// memory is freed unchecked. The resident lease may be released afterwards.
    fn unload_resident(&self, _key: &ProvingKey, _compute: Option<&dyn Reservation>) -> Result<()> {
        Ok(())
    }
}
