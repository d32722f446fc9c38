//! A Groth16 prover over BLS12-381 that shares GPUs through gpud leases.
//!
//! A proof runs in three steps ([`prove`]): synthesis of the circuit into constraint
//! evaluations and assignments ([`synthesis`]); the *GPU phase*, the H polynomial by seven
//! radix-2 FFTs ([`fft`]) and the G1 MSMs, on an [`Engine`]; the *CPU tail*, the G2 MSM for B
//! and the assembly. Only the GPU phase runs under a gpud lease, whose VRAM comes from
//! [`vram::estimate`]. Parameters come from bellperson's generator through a disk cache
//! ([`params`]); proofs verify with bellperson's verifier and match its `create_proof` bit for
//! bit when given the same `r`, `s`.
//!
//! ```no_run
//! use gpud_client::ExclusiveDevice;
//! use gpud_prover::{CircuitSpec, CpuEngine, ParamsCache, prove};
//! use blstrs::Scalar;
//!
//! let spec = CircuitSpec::parse("poseidon", 10)?;
//! let cache = ParamsCache::new(ParamsCache::default_dir());
//! let (key, _generated) = cache.load_or_generate(&spec, &mut rand::thread_rng())?;
//! // Without gpud (a benchmark, a single-tenant host): claim the device explicitly.
//! let device = ExclusiveDevice::assume_unshared("cpu", 0, u64::MAX);
//! let (proof, inputs) = prove::prove(&CpuEngine, &device, &key, spec.with_witness(7),
//!     Scalar::from(1u64), Scalar::from(2u64))?;
//! assert!(key.verify(&proof, &inputs)?);
//! # Ok::<(), gpud_prover::ProverError>(())
//! ```
#![deny(missing_docs)]

pub mod affinity;
pub mod circuits;
pub mod cs;
pub mod engine;
pub mod error;
pub mod fft;
pub mod host;
pub mod lease;
pub mod msm;
pub mod paramgen;
pub mod params;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod prove;
pub mod segmented;
pub mod synthesis;
pub mod vram;
pub mod warm;

pub use circuits::{CircuitKind, CircuitSpec};
pub use engine::{CpuEngine, Engine};
pub use error::{ProverError, Result};
pub use params::{ParamsCache, ProvingKey};
