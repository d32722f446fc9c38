//! The sharing benchmark ("farm"): several provers sharing one GPU through gpud,
//! against the in-process ideal, no coordination, and a per-GPU `flock`.
//!
//! The driver (`gpud-bench farm`, in the binary) starts the pieces and runs every cell; this
//! module holds what a prover process does and what the driver computes:
//!
//! - [`bundle`]: the workload on disk, written once per run by `farm-prepare`: a proving key
//!   (the G1 queries and the verifying key, from the fast parameter generator) and a few
//!   synthesized witnesses with their G2 sums, so prover processes start in about a second.
//! - [`worker`]: one prover process: `lanes` worker threads, each proving continuously until
//!   the cell's deadline: take a witness → acquire (gpud lease, in-process lock, flock, or
//!   nothing) → GPU phase (H + four G1 MSMs on the engine, with the VRAM pad allocated and
//!   touched) → release → CPU tail (assembly, bellperson's verifier, then CPU work up to the
//!   modeled tail time). Out-of-memory errors are caught, counted and the lane goes on.
//! - [`simvram`]: a simulated device memory shared by processes (a file), so the CPU-only test
//!   sees uncoordinated provers run out of memory as they would on a GPU.
//! - [`analysis`]: per-cell metrics (throughput, GPU busy, CPU busy, waits, failures), the
//!   targets, the Markdown tables; [`cpustat`]: the host's CPU busy fraction from
//!   `/proc/stat`; [`plot`]: the PNG.
//!
//! # What the benchmark models, and why
//!
//! The claim under test is about *coordination*: how much of the ideal single-process
//! pipeline's throughput several processes keep when they share a GPU through gpud, whether
//! they run out of memory, and how long a deadline-critical proof waits. The field's workload
//! (Filecoin C2 on 16 GB cards) is a GPU phase of ~1.8 s per partition, a CPU tail of ~0.5 s,
//! synthesis done ahead in parallel, and 6-12 GiB of VRAM per partition. Our prover on an
//! H200 has a different shape: at 2^22 the GPU phase is ~0.36 s but the CPU tail (the G2 MSM
//! over 2^21 points) is ~4 s on all 16 cores, and synthesis another 2 s; real proving is
//! CPU-bound ten times over and could never show whether a lock keeps the GPU busy. So every
//! mode runs the same modeled workload:
//!
//! - **Witnesses are synthesized once** per run (`--witnesses`, default 2) and reused;
//!   synthesis is not what is compared. Since the G2 sum `Σ b_i·B_i` depends only on the
//!   witness, it is computed once with the witness, and each proof's tail assembles with fresh
//!   blinding `r`, `s`: the proofs are exactly what a full prover makes, and every one is
//!   checked by bellperson's verifier. That is the default ([`G2Mode::Precomputed`]); the G2
//!   question itself (issue 15: what B_G2 on the GPU saves the host) has provers compute B_G2
//!   for every proof, inside the GPU phase or in the CPU tail ([`G2Mode`], the driver's
//!   `--g2` and its G2 stage), each sum checked against the precomputed one, with the host's
//!   CPU utilisation measured per cell ([`cpustat`]).
//! - **The GPU phase is real**: H (seven NTTs) and the four G1 MSMs on the engine, bases
//!   uploaded per phase (no residency: eight provers cannot each keep 1.3 GiB of bases on a
//!   16 GiB card), under the lease or lock of the mode.
//! - **The CPU tail is modeled** as one thread of CPU work lasting `tail` (default: 0.28 × the
//!   calibrated GPU phase, the field's 0.5 s / 1.8 s), the assembly and verification included.
//! - **VRAM like the field's**: a pad (`--vram-pad`) is allocated from the lease's budget and
//!   touched at the start of each GPU phase and freed at its end, so a partition's footprint is
//!   the formula plus the pad (the driver's `--phase-vram`, default 6 GiB) and only one or two
//!   fit on the ~16 GiB the ballast leaves. That is what makes uncoordinated provers really run
//!   out of memory.

pub mod analysis;
pub mod bundle;
pub mod cgroup;
pub mod cpustat;
pub mod plot;
pub mod simvram;
pub mod worker;

/// The locks a prover process can share the GPU with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    /// gpud leases ({VRAM + compute} around the GPU phase), the product.
    Gpud,
    /// One process, its lanes sharing one in-process lock per GPU: the ideal.
    Local,
    /// A per-GPU lock file held around the GPU phase (bellperson style).
    Flock,
    /// Nothing: uncoordinated sharing.
    None,
}

impl LockKind {
    /// The name on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Gpud => "gpud",
            LockKind::Local => "local",
            LockKind::Flock => "flock",
            LockKind::None => "none",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "gpud" => Some(LockKind::Gpud),
            "local" => Some(LockKind::Local),
            "flock" => Some(LockKind::Flock),
            "none" => Some(LockKind::None),
            _ => None,
        }
    }
}

/// Where a prover process gets each proof's B_G2 (`Σ b_i·B_i` over G2).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum G2Mode {
    /// The witness's sum, computed once with it in the bundle: no prover computes a G2 MSM
    /// (the farm as it was before; its results stay comparable).
    #[default]
    Precomputed,
    /// Inside the GPU phase, under its lease: the key carries the G2 query and the engine runs
    /// the B_G2 MSM with the G1 ones (the CUDA engine's `G2Placement::Gpu`; an engine that
    /// leaves G2 to the host, the CPU engine of the simulated runs, gets it computed on the
    /// host inside the phase). The phase lease includes the G2 bases and temporaries.
    Gpu,
    /// In the CPU tail after the release, with blstrs on the host's cores (what operators'
    /// provers do with bellperson today).
    Cpu,
}

impl G2Mode {
    /// The name on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            G2Mode::Precomputed => "precomputed",
            G2Mode::Gpu => "gpu",
            G2Mode::Cpu => "cpu",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "precomputed" => Some(G2Mode::Precomputed),
            "gpu" => Some(G2Mode::Gpu),
            "cpu" => Some(G2Mode::Cpu),
            _ => None,
        }
    }

    /// Whether the provers need the key's G2 query.
    pub fn needs_query(self) -> bool {
        self != G2Mode::Precomputed
    }
}

/// Errors of the farm's library parts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FarmError {
    /// A bundle or simulated-VRAM file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A bundle file is not what it should be.
    #[error("{path}: {reason}")]
    Format {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The prover failed (synthesis, parameters, an engine).
    #[error(transparent)]
    Prover(#[from] gpud_prover::ProverError),
    /// Drawing the plot failed.
    #[error("plot: {0}")]
    Plot(String),
    /// A results file does not parse.
    #[error("results: {0}")]
    Results(String),
}

/// Result of the farm's library parts.
pub type FarmResult<T> = std::result::Result<T, FarmError>;

pub(crate) fn io_err(path: &std::path::Path) -> impl Fn(std::io::Error) -> FarmError + '_ {
    move |source| FarmError::Io {
        path: path.to_path_buf(),
        source,
    }
}
