//! gpud's benchmarks, kept out of the product crates: what they measure needs the daemon, the
//! prover's internals, NVML and a plotting library, none of which a prover in production wants.
//!
//! - [`proofs`]: whole proofs timed by stage, our CPU prover against bellperson's and the
//!   engines against each other (`gpud-bench vs-bellperson`, `gpud-bench engines`).
//! - [`farm`]: the sharing benchmark (`gpud-bench farm`): several prover processes
//!   sharing a GPU through gpud, against the in-process ideal, no lock and flock.
//! - [`bellperson_prover`]: bellperson's own prover (its CUDA prover with the
//!   `bellperson-gpu` feature) as the engines benchmark's baseline, and where it ran.
//! - [`baseline`]: the two ways of sharing a GPU that gpud replaces, as prover leasers.
//! - [`latency`]: what the lease latency benchmarks share (`gpud-bench-lease`,
//!   `gpud-bench-clients`): the kernel's round-trip floor and the daemon they measure.
//! - [`stats`]: latency percentiles for the lease benchmarks (`gpud-bench-lease`,
//!   `gpud-bench-clients`, `gpud-bench-scale`).
#![deny(missing_docs)]

pub mod baseline;
pub mod bellperson_prover;
pub mod farm;
pub mod latency;
pub mod proofs;
pub mod stats;
