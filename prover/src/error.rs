//! The library's error type.

use std::path::PathBuf;

use bellperson::SynthesisError;

/// Everything that can go wrong while building, proving or verifying.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProverError {
    /// The circuit's own synthesis code failed (a missing assignment, a division by zero, …).
    #[error("circuit synthesis failed: {0}")]
    Synthesis(#[from] SynthesisError),
    /// The witness does not satisfy constraint `index` (`a · b ≠ c`).
    #[error("the witness does not satisfy constraint {index}")]
    Unsatisfied {
        /// Position of the first unsatisfied constraint, in synthesis order.
        index: usize,
    },
    /// A linear combination names a variable that was never allocated.
    #[error(
        "constraint {constraint} refers to {kind} variable {index}, but only {allocated} exist"
    )]
    UnknownVariable {
        /// Position of the offending constraint.
        constraint: usize,
        /// `"input"` or `"aux"`.
        kind: &'static str,
        /// The variable's index.
        index: usize,
        /// How many variables of that kind were allocated.
        allocated: usize,
    },
    /// A segmented circuit's segment did not keep to what it declared (see
    /// [`crate::segmented::Segmented`]).
    #[error("segment {segment} of the circuit {reason}")]
    BadSegment {
        /// The segment, in order (`usize::MAX` for the inputs' prelude).
        segment: usize,
        /// What it did wrong.
        reason: String,
    },
    /// No circuit of that name exists.
    #[error("unknown circuit {name:?} (known: {known})")]
    UnknownCircuit {
        /// The name asked for.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// The circuit cannot be built at that size.
    #[error("log size {log_size} is out of range for circuit {circuit} (supported: {min}..={max})")]
    SizeOutOfRange {
        /// Circuit name.
        circuit: String,
        /// The size asked for.
        log_size: u32,
        /// Smallest supported log size.
        min: u32,
        /// Largest supported log size.
        max: u32,
    },
    /// The evaluation domain would exceed the 2-adicity of Fr.
    #[error("the circuit has {constraints} constraints; the largest domain is 2^{max_log}")]
    DomainTooLarge {
        /// Constraints including the public-input constraints.
        constraints: usize,
        /// log2 of the largest supported domain.
        max_log: u32,
    },
    /// The parameter cache has no parameters for that circuit and size.
    #[error(
        "no parameters for {key} in {dir} (create them with `gpud-prover params --circuit … --log-size …`)"
    )]
    ParamsMissing {
        /// The cache key (circuit, log size, format version).
        key: String,
        /// The cache directory searched.
        dir: PathBuf,
    },
    /// Reading or writing a parameter file failed.
    #[error("parameter file {path}: {source}")]
    ParamsIo {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A parameter file exists but is damaged or belongs to another circuit.
    #[error("parameter file {path} is invalid: {reason}")]
    ParamsCorrupt {
        /// The file.
        path: PathBuf,
        /// What did not match.
        reason: String,
    },
    /// The parameters do not fit the synthesized circuit.
    #[error("parameters do not match the circuit: {0}")]
    ParamsMismatch(String),
    /// An engine (CPU or GPU) failed.
    #[error("{engine} engine: {message}")]
    Engine {
        /// Engine name.
        engine: &'static str,
        /// What failed.
        message: String,
    },
    /// No plan of the GPU phase fits the lease (the error names the smallest that does).
    #[error("VRAM plan: {0}")]
    VramPlan(#[from] crate::plan::PlanError),
    /// The CUDA layer failed (no driver, a device not found, an allocation past the lease,
    /// a driver call).
    #[error("CUDA: {0}")]
    Cuda(#[from] gpud_cuda::Error),
    /// A GPU multi-scalar multiplication failed.
    #[error("GPU MSM: {0}")]
    Msm(#[from] gpud_cuda::msm::MsmError),
    /// A freshly made proof did not pass bellperson's verifier.
    #[error("proof did not verify")]
    VerificationFailed,
    /// The gpud lease could not be acquired or was lost.
    #[error("lease: {0}")]
    Lease(String),
    /// Pinning a thread to the CPUs of its host lease failed.
    #[error("CPU affinity: {0}")]
    Affinity(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = ProverError> = std::result::Result<T, E>;
